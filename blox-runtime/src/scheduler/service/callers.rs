//! Which worker a call comes from: the workers' token, the client
//! certificate mutual TLS asks for, and the credential each worker was
//! issued at registration.

use super::super::{Hub, WorkerEntry};
use super::Service;
use tonic::{Request, Status};

pub(super) const WORKER: &str = "the workers' token";

impl Service {
    /// Mutual TLS (`tls_client_ca`): a worker call without a client
    /// certificate the authority verified is UNAUTHENTICATED.
    pub(super) fn worker_cert<T>(&self, req: &Request<T>) -> Result<(), Status> {
        if self.cfg.tls_client_ca.is_some() && !crate::net::has_client_cert(req) {
            return Err(Status::unauthenticated(
                "this scheduler requires workers to present a client certificate signed by its `tls_client_ca` (blox worker --tls-cert/--tls-key)",
            ));
        }
        Ok(())
    }
}

pub(super) fn worker_known<'a>(h: &'a mut Hub, id: &str) -> Result<&'a mut WorkerEntry, Status> {
    match h.workers.get_mut(id) {
        Some(w) if w.alive => Ok(w),
        _ => Err(Status::not_found(format!(
            "worker `{id}` is not registered with this scheduler; register again"
        ))),
    }
}

/// The worker a call comes from: the one its credential
/// (`x-blox-worker-credential`) was issued to, never the request's
/// `worker_id` field, which must name the same worker or be empty. A
/// credential this scheduler does not know (it restarted, or declared the
/// worker gone) is NOT_FOUND: the worker registers again.
pub(super) fn caller(
    h: &Hub,
    md: &tonic::metadata::MetadataMap,
    claimed: &str,
) -> Result<String, Status> {
    let Some(c) = crate::net::credential_of(md) else {
        return Err(Status::unauthenticated(format!(
            "this call needs the worker's own credential (`{}`, from RegisterReply.worker_secret)",
            crate::net::WORKER_CREDENTIAL
        )));
    };
    let Some(id) = h.credentials.get(c) else {
        return Err(Status::not_found(
            "this worker credential is not registered with this scheduler; register again",
        ));
    };
    if !claimed.is_empty() && claimed != id {
        tracing::warn!(credential_of = %id, claimed = %claimed, "a worker reported under another worker's id: refused");
        return Err(Status::permission_denied(format!(
            "worker_id: the credential is worker `{id}`'s, not `{claimed}`'s"
        )));
    }
    Ok(id.clone())
}
