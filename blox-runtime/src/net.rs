//! What every gRPC endpoint of the runtime shares: the cluster's shared token
//! and TLS settings, client connections and the servers' token check.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use tonic::metadata::MetadataValue;
use tonic::service::Interceptor;
use tonic::transport::{Channel, Endpoint, Server};
use tonic::{Request, Status};

/// Errors of setting up an endpoint (files, addresses); each names what it read.
#[derive(Debug, thiserror::Error)]
pub enum NetError {
    #[error("{path}: {message}")]
    File { path: String, message: String },
    #[error("bad address `{addr}`: {message}")]
    Address { addr: String, message: String },
    #[error("{0}")]
    Tls(String),
    #[error("cannot listen on {addr}: {message}")]
    Listen { addr: String, message: String },
}

/// How long [`listen`] waits for an address in use to come free.
pub const LISTEN_RETRY_S: f64 = 5.0;

/// Binds `addr` to listen on. An address in use is tried again every 50 ms
/// for up to [`LISTEN_RETRY_S`] seconds before giving up: a process
/// restarted on its port (a worker after a crash, under systemd or a
/// supervisor) can find it held for a moment by what the last one left, and
/// on a busy host the soak's workers met a port taken for a few
/// milliseconds between its reservation's release and their bind (issue
/// 36). Any other error, or one still there after the wait, is returned
/// naming the address.
/// The connections `listener` accepts, each with Nagle's algorithm off.
/// A server fed its own listener does not apply its builder's
/// `tcp_nodelay`: without this, a reply that leaves in several writes (a
/// `Status` page: headers, data, trailers) waited on the client's delayed
/// acknowledgement, about 40 ms a call on Linux.
pub fn incoming(
    listener: tokio::net::TcpListener,
) -> impl tokio_stream::Stream<Item = std::io::Result<tokio::net::TcpStream>> {
    use tokio_stream::StreamExt;
    tokio_stream::wrappers::TcpListenerStream::new(listener).map(|conn| {
        let conn = conn?;
        conn.set_nodelay(true)?;
        Ok(conn)
    })
}

pub async fn listen(addr: std::net::SocketAddr) -> Result<tokio::net::TcpListener, NetError> {
    let start = std::time::Instant::now();
    let mut warned = false;
    loop {
        match tokio::net::TcpListener::bind(addr).await {
            Ok(l) => {
                if warned {
                    tracing::info!(
                        %addr,
                        waited_s = start.elapsed().as_secs_f64(),
                        "the address came free"
                    );
                }
                return Ok(l);
            }
            Err(e)
                if e.kind() == std::io::ErrorKind::AddrInUse
                    && start.elapsed().as_secs_f64() < LISTEN_RETRY_S =>
            {
                if !warned {
                    tracing::warn!(
                        %addr,
                        "address in use; trying again for up to {LISTEN_RETRY_S} s"
                    );
                    warned = true;
                }
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            Err(e) => {
                return Err(NetError::Listen {
                    addr: addr.to_string(),
                    message: e.to_string(),
                })
            }
        }
    }
}

/// TLS files, PEM encoded.
#[derive(Clone, Debug, Default)]
pub struct TlsFiles {
    /// This endpoint's certificate and key (servers).
    pub cert: Option<PathBuf>,
    pub key: Option<PathBuf>,
    /// The authority that signed the peers' certificates (clients).
    pub ca: Option<PathBuf>,
    /// Name to expect in the peer's certificate; the address's host if unset.
    pub domain: Option<String>,
    /// Servers: ask callers for a certificate signed by this authority
    /// (mutual TLS). A client with `cert` and `key` presents them.
    pub client_auth: Option<ClientAuth>,
}

/// Client certificates a server asks for (mutual TLS).
#[derive(Clone, Debug)]
pub struct ClientAuth {
    /// The authority that signed the callers' certificates (PEM).
    pub ca: PathBuf,
    /// Callers without a certificate may connect (the scheduler: users'
    /// clients have none; its worker calls then require one); otherwise
    /// the handshake fails without one (a worker: only the scheduler calls).
    pub optional: bool,
}

/// How endpoints authenticate: a shared token (workers, clients and the
/// scheduler all hold it) and, optionally, TLS.
#[derive(Clone, Debug, Default)]
pub struct Security {
    pub token: Option<Arc<str>>,
    pub tls: Option<TlsFiles>,
}

/// Refuses a secret's file that others than its owner may read or write
/// (as ssh refuses such a key): on a shared node any job could read it.
pub fn check_private(path: &Path) -> Result<(), NetError> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let meta = std::fs::metadata(path).map_err(|e| NetError::File {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
        let mode = meta.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(NetError::File {
                path: path.display().to_string(),
                message: format!(
                    "a token file must be readable by its owner only, but its mode is {mode:04o}: run `chmod 600 {}`",
                    path.display()
                ),
            });
        }
    }
    Ok(())
}

/// Writes a secret's file readable and writable by its owner only (0600),
/// as [`check_private`] requires of a token file.
pub fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut o = std::fs::OpenOptions::new();
    o.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.mode(0o600);
    }
    let mut f = o.open(path)?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    }
    f.write_all(text.as_bytes())
}

fn read(path: &Path) -> Result<Vec<u8>, NetError> {
    std::fs::read(path).map_err(|e| NetError::File {
        path: path.display().to_string(),
        message: e.to_string(),
    })
}

impl Security {
    /// Reads the shared token from a file (its first line; surrounding
    /// whitespace ignored). An empty file is an error.
    pub fn token_from_file(path: &Path) -> Result<Arc<str>, NetError> {
        check_private(path)?;
        let text = String::from_utf8(read(path)?).map_err(|_| NetError::File {
            path: path.display().to_string(),
            message: "the token file is not UTF-8 text".into(),
        })?;
        let t = text.lines().next().unwrap_or("").trim();
        if t.is_empty() {
            return Err(NetError::File {
                path: path.display().to_string(),
                message: "the token file is empty".into(),
            });
        }
        // It travels in a request header.
        if !t.bytes().all(|b| (0x21..0x7f).contains(&b)) {
            return Err(NetError::File {
                path: path.display().to_string(),
                message: "a token must be printable ASCII without spaces".into(),
            });
        }
        Ok(Arc::from(t))
    }

    /// `http://` or `https://` (with TLS) in front of `host:port`, unless the
    /// address already has a scheme.
    pub fn url(&self, addr: &str) -> String {
        if addr.contains("://") {
            addr.to_string()
        } else if self.tls.is_some() {
            format!("https://{addr}")
        } else {
            format!("http://{addr}")
        }
    }

    /// A lazily connecting channel to `addr` (reconnects on its own).
    pub fn channel(&self, addr: &str) -> Result<Channel, NetError> {
        let url = self.url(addr);
        let ep = Endpoint::from_shared(url.clone()).map_err(|e| NetError::Address {
            addr: addr.to_string(),
            message: e.to_string(),
        })?;
        let ep = ep
            .connect_timeout(std::time::Duration::from_secs(5))
            .tcp_nodelay(true);
        let ep = self.client_tls(ep, &url)?;
        Ok(ep.connect_lazy())
    }

    #[cfg(feature = "tls")]
    fn client_tls(&self, ep: Endpoint, url: &str) -> Result<Endpoint, NetError> {
        use tonic::transport::{Certificate, ClientTlsConfig};
        let Some(tls) = &self.tls else {
            return Ok(ep);
        };
        let mut cfg = ClientTlsConfig::new();
        if let Some(ca) = &tls.ca {
            cfg = cfg.ca_certificate(Certificate::from_pem(read(ca)?));
        }
        if let Some(d) = &tls.domain {
            cfg = cfg.domain_name(d.clone());
        }
        // Its own certificate, for servers that ask for one (mutual TLS).
        if let (Some(c), Some(k)) = (&tls.cert, &tls.key) {
            cfg = cfg.identity(tonic::transport::Identity::from_pem(read(c)?, read(k)?));
        }
        let _ = url;
        ep.tls_config(cfg).map_err(|e| NetError::Tls(e.to_string()))
    }

    #[cfg(not(feature = "tls"))]
    fn client_tls(&self, ep: Endpoint, _url: &str) -> Result<Endpoint, NetError> {
        match &self.tls {
            None => Ok(ep),
            Some(_) => Err(NetError::Tls(
                "this build has no TLS (build blox-runtime with the `tls` feature)".into(),
            )),
        }
    }

    /// A server builder with this endpoint's TLS identity, if it has one.
    pub fn server(&self) -> Result<Server, NetError> {
        // A connection that stops answering is closed (conn.rs).
        let b = Server::builder()
            .tcp_nodelay(true)
            .http2_keepalive_interval(Some(crate::conn::KEEPALIVE_INTERVAL))
            .http2_keepalive_timeout(Some(crate::conn::KEEPALIVE_TIMEOUT));
        self.server_tls(b)
    }

    #[cfg(feature = "tls")]
    fn server_tls(&self, mut b: Server) -> Result<Server, NetError> {
        use tonic::transport::{Certificate, Identity, ServerTlsConfig};
        let Some(tls) = &self.tls else {
            return Ok(b);
        };
        match (&tls.cert, &tls.key) {
            (Some(c), Some(k)) => {
                let id = Identity::from_pem(read(c)?, read(k)?);
                let mut cfg = ServerTlsConfig::new().identity(id);
                if let Some(auth) = &tls.client_auth {
                    cfg = cfg
                        .client_ca_root(Certificate::from_pem(read(&auth.ca)?))
                        .client_auth_optional(auth.optional);
                }
                b = b
                    .tls_config(cfg)
                    .map_err(|e| NetError::Tls(e.to_string()))?;
                Ok(b)
            }
            (None, None) if tls.client_auth.is_some() => Err(NetError::Tls(
                "client certificates need the server's own TLS certificate and key".into(),
            )),
            (None, None) => Ok(b),
            _ => Err(NetError::Tls(
                "TLS needs both a certificate and its key".into(),
            )),
        }
    }

    #[cfg(not(feature = "tls"))]
    fn server_tls(&self, b: Server) -> Result<Server, NetError> {
        match &self.tls {
            Some(t) if t.cert.is_some() || t.key.is_some() || t.client_auth.is_some() => {
                Err(NetError::Tls(
                    "this build has no TLS (build blox-runtime with the `tls` feature)".into(),
                ))
            }
            _ => Ok(b),
        }
    }

    /// The client-side interceptor that attaches the token.
    pub fn attach(&self) -> AttachToken {
        AttachToken {
            token: self.token.as_ref().map(|t| {
                MetadataValue::try_from(format!("Bearer {t}")).expect("a token is printable ASCII")
            }),
            credential: None,
        }
    }

    /// The server-side interceptor that checks it.
    pub fn check(&self) -> CheckToken {
        CheckToken(self.token.clone())
    }
}

/// True when the caller presented a client certificate the server's
/// authority verified (mutual TLS; never without the `tls` feature).
pub fn has_client_cert<T>(req: &Request<T>) -> bool {
    #[cfg(feature = "tls")]
    {
        req.peer_certs().is_some_and(|c| !c.is_empty())
    }
    #[cfg(not(feature = "tls"))]
    {
        let _ = req;
        false
    }
}

/// The header that carries a worker's own credential
/// (`RegisterReply.worker_secret`), both ways.
pub const WORKER_CREDENTIAL: &str = "x-blox-worker-credential";

/// Adds `authorization: Bearer <token>` to every call (and, on the
/// scheduler's calls to a worker, that worker's credential).
#[derive(Clone)]
pub struct AttachToken {
    token: Option<MetadataValue<tonic::metadata::Ascii>>,
    credential: Option<MetadataValue<tonic::metadata::Ascii>>,
}

impl Interceptor for AttachToken {
    fn call(&mut self, mut req: Request<()>) -> Result<Request<()>, Status> {
        if let Some(v) = &self.token {
            req.metadata_mut().insert("authorization", v.clone());
        }
        if let Some(v) = &self.credential {
            req.metadata_mut().insert(WORKER_CREDENTIAL, v.clone());
        }
        Ok(req)
    }
}

/// Puts a worker's credential on one request.
pub fn with_credential<T>(msg: T, credential: &str) -> Request<T> {
    let mut req = Request::new(msg);
    if let Ok(v) = MetadataValue::try_from(credential) {
        req.metadata_mut().insert(WORKER_CREDENTIAL, v);
    }
    req
}

/// The worker credential a call carries, if any.
pub fn credential_of(md: &tonic::metadata::MetadataMap) -> Option<&str> {
    md.get(WORKER_CREDENTIAL).and_then(|v| v.to_str().ok())
}

/// Refuses calls without the shared token (when the cluster has one).
#[derive(Clone)]
pub struct CheckToken(Option<Arc<str>>);

impl CheckToken {
    /// Checks a call's `authorization` header; `role` names the credential
    /// in the error ("the user token", "the worker token").
    pub fn verify(&self, md: &tonic::metadata::MetadataMap, role: &str) -> Result<(), Status> {
        let Some(want) = &self.0 else {
            return Ok(());
        };
        let got = md
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "));
        match got {
            Some(t) if constant_time_eq(t.as_bytes(), want.as_bytes()) => Ok(()),
            Some(_) => Err(Status::unauthenticated(format!(
                "wrong token: this call needs {role}"
            ))),
            None => Err(Status::unauthenticated(format!(
                "this cluster needs a token (`authorization: Bearer <token>`): this call needs {role}"
            ))),
        }
    }
}

impl Interceptor for CheckToken {
    fn call(&mut self, req: Request<()>) -> Result<Request<()>, Status> {
        self.verify(req.metadata(), "the cluster's token")?;
        Ok(req)
    }
}

/// `n` bytes from the operating system's random source.
fn random_bytes(n: usize) -> std::io::Result<Vec<u8>> {
    use std::io::Read;
    let mut b = vec![0u8; n];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut b)?;
    Ok(b)
}

/// A random 64-bit number (identities).
pub(crate) fn random_u64() -> std::io::Result<u64> {
    let b = random_bytes(8)?;
    Ok(u64::from_le_bytes(b.try_into().expect("8 bytes")))
}

/// A fresh secret: 32 random bytes as 64 hex digits (credentials).
pub(crate) fn random_secret() -> std::io::Result<String> {
    Ok(random_bytes(32)?
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

pub(crate) fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

pub type SchedulerClient = crate::proto::scheduler_client::SchedulerClient<
    tonic::service::interceptor::InterceptedService<Channel, AttachToken>,
>;
pub type WorkerClient = crate::proto::worker_client::WorkerClient<
    tonic::service::interceptor::InterceptedService<Channel, AttachToken>,
>;

impl Security {
    pub fn scheduler_client(&self, addr: &str) -> Result<SchedulerClient, NetError> {
        Ok(
            crate::proto::scheduler_client::SchedulerClient::with_interceptor(
                self.channel(addr)?,
                self.attach(),
            ),
        )
    }

    pub fn worker_client(&self, addr: &str) -> Result<WorkerClient, NetError> {
        Ok(crate::proto::worker_client::WorkerClient::with_interceptor(
            self.channel(addr)?,
            self.attach(),
        ))
    }

    /// A client of one worker that proves, on every call, that it is the
    /// scheduler this worker registered with (its credential).
    pub fn worker_client_as_scheduler(
        &self,
        addr: &str,
        credential: &str,
    ) -> Result<WorkerClient, NetError> {
        let mut attach = self.attach();
        attach.credential =
            Some(MetadataValue::try_from(credential).map_err(|_| {
                NetError::Tls("a worker credential must be printable ASCII".into())
            })?);
        Ok(crate::proto::worker_client::WorkerClient::with_interceptor(
            self.channel(addr)?,
            attach,
        ))
    }
}

#[cfg(test)]
mod incoming_tests {
    /// Connections a server accepts through [`super::incoming`] have
    /// Nagle's algorithm off (a small reply in several writes otherwise
    /// waits for the peer's delayed acknowledgement).
    #[tokio::test]
    async fn accepted_connections_have_nodelay() {
        use tokio_stream::StreamExt;
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let mut incoming = Box::pin(super::incoming(l));
        let _client = tokio::net::TcpStream::connect(addr).await.unwrap();
        let conn = incoming.next().await.unwrap().unwrap();
        assert!(conn.nodelay().unwrap());
    }
}
