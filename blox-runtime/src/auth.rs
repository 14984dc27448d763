//! Who calls the scheduler's user API and its HTTP endpoints: nobody in
//! particular (no credential), the holders of one shared users' token, or
//! tenants, each with a token of their own and a role, from a tokens file
//! (`[runtime] tokens_file`).
//!
//! A tokens file has one line per user: `USER ROLE sha256:HEX`, the hex
//! being the SHA-256 of the user's token (`printf %s "$TOKEN" | sha256sum`).
//! The file holds no secret, only hashes. Roles:
//! - `user`: submits jobs as themselves, sees and cancels only their own;
//! - `admin`: sees and cancels every job, may submit as any user;
//! - `reader`: reads `/metrics` and the dashboard (as `admin` may); no
//!   gRPC call.
//!
//! Blank lines and lines starting with `#` are skipped. A malformed line,
//! an unknown role, a token in plain text where its hash belongs, a user or
//! a hash given twice: refused when the scheduler starts, with the file and
//! line. The file is read again when it changes (checked at most once a
//! second, on a call): an operator adds or removes a tenant without a
//! restart. A changed file that is refused (the same checks) leaves the
//! tenants as they were, and the log says why, with the line.

use crate::net::NetError;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

/// What a caller may do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// Its own jobs only.
    User,
    /// Every job.
    Admin,
    /// The HTTP endpoints only (`/metrics`, the dashboard).
    Reader,
}

impl Role {
    fn parse(s: &str) -> Option<Role> {
        match s {
            "user" => Some(Role::User),
            "admin" => Some(Role::Admin),
            "reader" => Some(Role::Reader),
            _ => None,
        }
    }

    /// May read every job and the cluster (HTTP endpoints, all of Status).
    pub fn sees_all(self) -> bool {
        matches!(self, Role::Admin | Role::Reader)
    }
}

/// An authenticated caller of the user API.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Principal {
    /// The tenant's name; `None` without tenants (no credential, or one
    /// shared token): then a submission's `user` is what it says.
    pub user: Option<String>,
    pub role: Role,
}

impl Principal {
    /// Anyone, where the cluster has no per-user tokens.
    pub fn anyone() -> Principal {
        Principal {
            user: None,
            role: Role::Admin,
        }
    }

    /// True when this caller may see and cancel a job submitted as
    /// `owner`.
    pub fn may_touch(&self, owner: Option<&str>) -> bool {
        match (&self.user, self.role) {
            (_, Role::Admin) => true,
            (Some(me), Role::User) => owner == Some(me.as_str()),
            _ => false,
        }
    }
}

/// The tenants of a tokens file, by the hash of their token.
#[derive(Debug, Default)]
pub struct Tenants {
    by_hash: HashMap<[u8; 32], Principal>,
}

fn sha256(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

fn hex32(s: &str) -> Option<[u8; 32]> {
    if s.len() != 64 {
        return None;
    }
    let mut out = [0u8; 32];
    for (i, b) in out.iter_mut().enumerate() {
        *b = u8::from_str_radix(s.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(out)
}

impl Tenants {
    /// Reads a tokens file (see the module docs); errors name the file and
    /// line.
    pub fn load(path: &Path) -> Result<Tenants, NetError> {
        let text = std::fs::read_to_string(path).map_err(|e| NetError::File {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
        Tenants::parse(&text, &path.display().to_string())
    }

    /// [`Tenants::load`] of `text`, read from `name`.
    pub fn parse(text: &str, name: &str) -> Result<Tenants, NetError> {
        let bad = |line: usize, message: String| NetError::File {
            path: format!("{name}:{line}"),
            message,
        };
        let mut by_hash = HashMap::new();
        let mut users: HashMap<String, usize> = HashMap::new();
        let mut hashes: HashMap<[u8; 32], usize> = HashMap::new();
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            let l = raw.trim();
            if l.is_empty() || l.starts_with('#') {
                continue;
            }
            let fields: Vec<&str> = l.split_whitespace().collect();
            let [user, role, hash] = fields[..] else {
                return Err(bad(
                    line,
                    format!(
                        "expected `USER ROLE sha256:HEX`, got {} fields",
                        fields.len()
                    ),
                ));
            };
            let Some(role) = Role::parse(role) else {
                return Err(bad(
                    line,
                    format!("role `{role}`: expected user, admin or reader"),
                ));
            };
            let Some(digest) = hash.strip_prefix("sha256:").and_then(hex32) else {
                return Err(bad(
                    line,
                    format!(
                        "user `{user}`: `sha256:` and 64 hex digits expected (the SHA-256 of the token, never the token itself: `printf %s \"$TOKEN\" | sha256sum`){}",
                        if hash.starts_with("sha256:") { "" } else { "; this looks like a plain-text token" }
                    ),
                ));
            };
            if let Some(first) = users.insert(user.to_string(), line) {
                return Err(bad(
                    line,
                    format!("user `{user}` is given twice (first on line {first})"),
                ));
            }
            if let Some(first) = hashes.insert(digest, line) {
                return Err(bad(
                    line,
                    format!("user `{user}` has the token of line {first}: every user needs a token of their own"),
                ));
            }
            by_hash.insert(
                digest,
                Principal {
                    user: Some(user.to_string()),
                    role,
                },
            );
        }
        if by_hash.is_empty() {
            return Err(bad(0, "the tokens file names no user".into()));
        }
        Ok(Tenants { by_hash })
    }

    /// The tenant whose token this is.
    pub fn who(&self, token: &str) -> Option<&Principal> {
        self.by_hash.get(&sha256(token))
    }

    pub fn len(&self) -> usize {
        self.by_hash.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_hash.is_empty()
    }
}

/// A tokens file and its tenants, read again when it changes.
#[derive(Debug)]
pub struct TenantsFile {
    path: std::path::PathBuf,
    current: std::sync::RwLock<Arc<Tenants>>,
    /// The file's (modification time, length, inode) when last read, and
    /// when it was last looked at.
    seen: std::sync::Mutex<(Option<Stamp>, std::time::Instant)>,
    /// The workers' token's hash: a tenant may not hold it.
    workers: Option<[u8; 32]>,
}

/// A file's (modification time, length, inode).
type Stamp = (std::time::SystemTime, u64, u64);

fn stamp(path: &Path) -> Option<Stamp> {
    let m = std::fs::metadata(path).ok()?;
    #[cfg(unix)]
    let ino = std::os::unix::fs::MetadataExt::ino(&m);
    #[cfg(not(unix))]
    let ino = 0;
    Some((m.modified().ok()?, m.len(), ino))
}

impl TenantsFile {
    /// Reads `path` (errors name the file and line); `workers_token`: the
    /// workers' token, which no tenant may hold.
    pub fn open(path: &Path, workers_token: Option<&str>) -> Result<TenantsFile, NetError> {
        let before = stamp(path);
        let t = Tenants::load(path)?;
        let workers = workers_token.map(sha256);
        if let Some(w) = workers {
            if let Some(p) = t.by_hash.get(&w) {
                return Err(NetError::File {
                    path: path.display().to_string(),
                    message: format!(
                        "the workers' token is also user `{}`'s: give workers a token of their own",
                        p.user.as_deref().unwrap_or("")
                    ),
                });
            }
        }
        Ok(TenantsFile {
            path: path.to_path_buf(),
            current: std::sync::RwLock::new(Arc::new(t)),
            seen: std::sync::Mutex::new((before, std::time::Instant::now())),
            workers,
        })
    }

    /// The tenants, read again first when the file changed (looked at no
    /// more than once a second).
    pub fn tenants(&self) -> Arc<Tenants> {
        self.reload_if_changed(std::time::Duration::from_secs(1));
        self.current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Reads the file again if it changed and `every` passed since the last
    /// look; returns whether the tenants changed.
    pub fn reload_if_changed(&self, every: std::time::Duration) -> bool {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        if seen.1.elapsed() < every {
            return false;
        }
        seen.1 = std::time::Instant::now();
        let now = stamp(&self.path);
        if now == seen.0 {
            return false;
        }
        seen.0 = now;
        let refused = |why: String| {
            tracing::error!("{why}: the tenants stay as they were until the file is fixed");
            false
        };
        match Tenants::load(&self.path) {
            Ok(t) => {
                if let Some(p) = self.workers.and_then(|w| t.by_hash.get(&w)) {
                    return refused(format!(
                        "{}: the workers' token is also user `{}`'s",
                        self.path.display(),
                        p.user.as_deref().unwrap_or("")
                    ));
                }
                tracing::info!(
                    file = %self.path.display(),
                    tenants = t.len(),
                    "tokens file changed: tenants read again"
                );
                *self.current.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(t);
                true
            }
            Err(e) => refused(e.to_string()),
        }
    }
}

/// How the scheduler's user API and HTTP endpoints authenticate.
#[derive(Clone, Debug, Default)]
pub enum Access {
    /// No credential: every caller is an admin (a single-user machine).
    #[default]
    Open,
    /// One shared users' token (`token_file`): its holders are admins.
    Shared(Arc<str>),
    /// Per-user tokens (`tokens_file`), read again when the file changes.
    Tenants(Arc<TenantsFile>),
}

impl Access {
    /// Who presents `bearer` (the token after `Bearer `), if anyone the
    /// API knows.
    pub fn who(&self, bearer: Option<&str>) -> Option<Principal> {
        match self {
            Access::Open => Some(Principal::anyone()),
            Access::Shared(t) => bearer
                .filter(|b| crate::net::constant_time_eq(b.as_bytes(), t.as_bytes()))
                .map(|_| Principal::anyone()),
            Access::Tenants(t) => bearer.and_then(|b| t.tenants().who(b).cloned()),
        }
    }

    /// May `bearer` read `/metrics` (the whole cluster's figures)?
    /// Tenants: readers and admins.
    pub fn may_read_http(&self, bearer: Option<&str>) -> bool {
        self.who(bearer).is_some_and(|p| p.role.sees_all())
    }

    /// True when calls need a credential.
    pub fn needs_token(&self) -> bool {
        !matches!(self, Access::Open)
    }
}

/// The token of an `authorization: Bearer <token>` value.
pub fn bearer(value: Option<&str>) -> Option<&str> {
    value.and_then(|v| v.strip_prefix("Bearer ")).map(str::trim)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(user: &str, role: &str, token: &str) -> String {
        let h: String = sha256(token).iter().map(|b| format!("{b:02x}")).collect();
        format!("{user} {role} sha256:{h}\n")
    }

    #[test]
    fn tenants_are_found_by_their_token_and_nothing_else() {
        let text = format!(
            "# who may call\n\n{}{}{}",
            line("ann", "user", "ann-secret"),
            line("ops", "admin", "ops-secret"),
            line("prom", "reader", "prom-secret")
        );
        let t = Tenants::parse(&text, "tokens").unwrap();
        assert_eq!(t.len(), 3);
        let ann = t.who("ann-secret").unwrap();
        assert_eq!((ann.user.as_deref(), ann.role), (Some("ann"), Role::User));
        assert!(ann.may_touch(Some("ann")) && !ann.may_touch(Some("bob")));
        assert!(!ann.may_touch(None));
        assert_eq!(t.who("ops-secret").unwrap().role, Role::Admin);
        assert!(t.who("ann-secret ").is_none() && t.who("").is_none());
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), &text).unwrap();
        let access = Access::Tenants(Arc::new(TenantsFile::open(file.path(), None).unwrap()));
        assert!(access.may_read_http(Some("prom-secret")));
        assert!(access.may_read_http(Some("ops-secret")));
        assert!(!access.may_read_http(Some("ann-secret")));
        assert!(!access.may_read_http(None));
        let shared = Access::Shared(Arc::from("s"));
        assert_eq!(shared.who(Some("s")), Some(Principal::anyone()));
        assert_eq!(shared.who(Some("t")), None);
        assert_eq!(Access::Open.who(None), Some(Principal::anyone()));
    }

    #[test]
    fn a_bad_tokens_file_is_refused_with_its_line() {
        let ann = line("ann", "user", "a");
        let cases = [
            (format!("{ann}bob user\n"), "tokens:2", "fields"),
            (
                format!("{ann}bob boss sha256:00\n"),
                "tokens:2",
                "role `boss`",
            ),
            (
                format!("{ann}bob user hunter2\n"),
                "tokens:2",
                "plain-text token",
            ),
            (
                format!("{ann}bob user sha256:1234\n"),
                "tokens:2",
                "64 hex digits",
            ),
            (
                format!("{ann}{}", line("ann", "admin", "b")),
                "tokens:2",
                "given twice",
            ),
            (
                format!("{ann}{}", line("bob", "user", "a")),
                "tokens:2",
                "token of line 1",
            ),
            ("# nobody\n".to_string(), "tokens:0", "names no user"),
        ];
        for (text, at, what) in cases {
            let e = Tenants::parse(&text, "tokens").unwrap_err().to_string();
            assert!(e.contains(at) && e.contains(what), "{e}");
        }
    }
}

/// The scheduler's gate, before a request's body is decoded: a caller the
/// user API knows gets its [`Principal`] in the request's extensions; a
/// holder of the workers' token passes to the worker calls (which check
/// it again, and their own credential); anyone else is `UNAUTHENTICATED`.
#[derive(Clone)]
pub struct SchedulerGate {
    pub access: Access,
    pub workers: crate::net::CheckToken,
    /// Mutual TLS for workers (`tls_client_ca`): a holder of the workers'
    /// token passes only with a verified client certificate.
    pub worker_certs: bool,
}

impl tonic::service::Interceptor for SchedulerGate {
    fn call(&mut self, mut req: tonic::Request<()>) -> Result<tonic::Request<()>, tonic::Status> {
        let header = req
            .metadata()
            .get("authorization")
            .and_then(|v| v.to_str().ok());
        let who = self.access.who(bearer(header));
        match who {
            Some(p) => {
                req.extensions_mut().insert(p);
                crate::conn::authenticated(&req);
                Ok(req)
            }
            None if self.workers.verify(req.metadata(), "").is_ok() => {
                if self.worker_certs && !crate::net::has_client_cert(&req) {
                    return Err(tonic::Status::unauthenticated(
                        "this scheduler requires workers to present a client certificate signed by its `tls_client_ca`",
                    ));
                }
                crate::conn::authenticated(&req);
                Ok(req)
            }
            None => Err(tonic::Status::unauthenticated(if header.is_some() {
                "wrong token: this call needs a user's token or the workers' token"
            } else {
                "this cluster needs a token (`authorization: Bearer <token>`): a user's token or the workers' token"
            })),
        }
    }
}

/// The caller of a user-API call, as the gate found it.
pub fn principal<T>(req: &tonic::Request<T>) -> Result<Principal, tonic::Status> {
    req.extensions().get::<Principal>().cloned().ok_or_else(|| {
        tonic::Status::unauthenticated(
            "this call needs a user's token (the users' token, or one of the tokens file's), not the workers' token",
        )
    })
}
