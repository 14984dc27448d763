//! `[runtime]`: how the scheduler serves and supervises the cluster.

use crate::net::{NetError, Security};
use blox_config::Config;
use blox_core::{ConfigError, Profile};
use serde::Deserialize;
use std::path::PathBuf;

/// `[runtime]`: how the scheduler serves and supervises the cluster.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuntimeConfig {
    /// Address the scheduler listens on.
    #[serde(default = "default_listen")]
    pub listen: String,
    /// The persistent job table (a redb file).
    #[serde(default = "default_state")]
    pub state: PathBuf,
    /// Checkpoints of job N go to `checkpoint_dir/N`; on a real cluster a
    /// directory every node mounts. Unset: each worker keeps checkpoints in
    /// its own workdir (a job resumes only on the node that wrote them).
    pub checkpoint_dir: Option<PathBuf>,
    /// Seconds a revoked job may take to checkpoint and exit before it is killed.
    #[serde(default = "default_grace")]
    pub grace_s: f64,
    /// Times a crashed job is restarted before it fails.
    #[serde(default = "default_retries")]
    pub max_retries: u32,
    /// How often workers beat.
    #[serde(default = "default_heartbeat")]
    pub heartbeat_s: f64,
    /// A worker silent this long is declared dead and its jobs requeued.
    #[serde(default = "default_timeout")]
    pub worker_timeout_s: f64,
    /// Fencing: a job whose lease its worker has not renewed for this long
    /// (counted from the last heartbeat the scheduler acknowledged) stops
    /// itself, and its worker revokes it; unset: half of
    /// `worker_timeout_s`.
    pub lease_s: Option<f64>,
    /// … and after this much more it is killed (its watchdog, or its
    /// worker); unset: 0.3 × `worker_timeout_s`. `lease_s` +
    /// `fence_grace_s` must be under `worker_timeout_s`: the scheduler
    /// relaunches a job elsewhere only once its old launch has stopped.
    pub fence_grace_s: Option<f64>,
    /// Ended jobs are forgotten (job table, `Status`, idempotency keys) this
    /// long after they ended, or sooner when more than `retention_jobs`
    /// have ended: memory and the table stay bounded on a scheduler that
    /// runs for months.
    #[serde(default = "default_retention")]
    pub retention_s: f64,
    #[serde(default = "default_retention_jobs")]
    pub retention_jobs: usize,
    /// Jobs accepted and not running (submitted or queued) the scheduler
    /// holds at most, in all and per `user`: a submission beyond either is
    /// RESOURCE_EXHAUSTED, naming the limit (memory and rounds stay
    /// bounded whatever clients send).
    #[serde(default = "default_max_waiting")]
    pub max_waiting_jobs: usize,
    #[serde(default = "default_max_waiting_per_user")]
    pub max_waiting_per_user: usize,
    /// The most bytes one submission may hold (its command, name, user,
    /// model, team, idempotency key and metrics, as encoded on the wire).
    #[serde(default = "default_max_job_bytes")]
    pub max_job_bytes: usize,
    /// The most bytes of submissions waiting (submitted or queued), per
    /// user (with tenants, per token) and in all: memory and the job table
    /// stay bounded whatever clients send.
    #[serde(default = "default_max_waiting_bytes_per_user")]
    pub max_waiting_bytes_per_user: usize,
    #[serde(default = "default_max_waiting_bytes")]
    pub max_waiting_bytes: usize,
    /// Ended jobs' records kept, in bytes (beside `retention_jobs` and
    /// `retention_s`): the oldest are forgotten first.
    #[serde(default = "default_retention_bytes")]
    pub retention_bytes: usize,
    /// Connections the gRPC endpoint holds at once, and how long a new one
    /// may take to say its first bytes (conn.rs): clients that connect and
    /// never speak cannot starve the workers' heartbeats.
    #[serde(default = "default_max_connections")]
    pub max_connections: usize,
    #[serde(default = "default_handshake_timeout")]
    pub handshake_timeout_s: f64,
    /// A worker declared gone is listed by `Status` this long, then
    /// forgotten (each restart of a worker registers a new one).
    #[serde(default = "default_forget_workers")]
    pub forget_workers_after_s: f64,
    /// One process per GPU instead of one per node.
    #[serde(default)]
    pub process_per_gpu: bool,
    /// The cluster's job uids, `"FIRST-LAST"`: every launch runs as a uid of
    /// it no launch that may still run shares (docs/RUNTIME.md, Security).
    /// Workers run with `--job-uids` holding this range. Unset: jobs run as
    /// each worker's `--job-user` (or its own account).
    pub job_uids: Option<String>,
    /// `job_uids`, read.
    #[serde(skip)]
    pub job_uid_range: Option<(u32, u32)>,
    /// The users' token (first line of the file): `Submit`, `Status`,
    /// `Cancel`. Unset: no authentication.
    pub token_file: Option<PathBuf>,
    /// Per-user tokens instead of `token_file`: one line per user, `USER
    /// ROLE sha256:HEX` (roles `user`, `admin`, `reader`; see
    /// [`crate::auth`]). A submission's `user` is then its token's.
    pub tokens_file: Option<PathBuf>,
    /// The workers' token: `Register`, `Heartbeat`, `ReportExit`,
    /// `PushMetrics`, and the scheduler's calls to workers. Unset: workers
    /// use `token_file`'s token (anyone holding it can register a worker
    /// and be handed jobs; the scheduler warns at start).
    pub worker_token_file: Option<PathBuf>,
    /// TLS: the scheduler's certificate and key, and the authority that
    /// signed the workers' certificates.
    pub tls_cert: Option<PathBuf>,
    pub tls_key: Option<PathBuf>,
    pub tls_ca: Option<PathBuf>,
    /// Mutual TLS for workers: their calls (`Register`, `Heartbeat`,
    /// `ReportExit`, `PushMetrics`) must present a client certificate this
    /// authority signed (`blox worker --tls-cert/--tls-key`); users'
    /// clients connect without one. Needs `tls_cert`/`tls_key`.
    pub tls_client_ca: Option<PathBuf>,
    /// Where Prometheus scrapes `GET /metrics` (`host:port`; unset: no
    /// metrics endpoint). With `token_file`, scrapes need the users' token.
    pub metrics_listen: Option<String>,
    /// Where the read-only web dashboard and its JSON API are served
    /// (`host:port`; unset: off). With `token_file`, the API needs the
    /// users' token.
    pub dashboard_listen: Option<String>,
    /// The event log: every decision the round loop carries out, as JSON
    /// lines (`blox events` prints it). Unset: `events.jsonl` beside `state`.
    pub events: Option<PathBuf>,
    /// The event log moves to `EVENTS.1` past this many MiB …
    #[serde(default = "default_events_max_mb")]
    pub events_max_mb: f64,
    /// … and this many rotated files are kept (`EVENTS.1` … `EVENTS.N`).
    #[serde(default = "default_events_keep")]
    pub events_keep: u32,
    /// The loop's profile: start-up rules from `[run]` (`min_run_s`,
    /// `min_run_startup_factor`, `startup_warn_after`, `max_startup_s`) and
    /// the plugins of `[protection]`, `[checkpointing]` and `[recovery]`; unset: the
    /// default profile for the round length.
    #[serde(skip)]
    pub profile: Option<Profile>,
    /// The config's `[cluster.topology]` levels: workers place themselves
    /// in it with `blox worker --labels`.
    #[serde(skip)]
    pub topology: Option<Vec<blox_core::topology::Level>>,
    /// `[cluster] spares` and `[cluster.quarantine]`: workers kept back for
    /// jobs a failure stops, and workers that keep failing kept out
    /// (`blox_core::health`).
    #[serde(skip)]
    pub spares: u32,
    #[serde(skip)]
    pub quarantine: Option<blox_core::health::QuarantineRule>,
}

fn default_listen() -> String {
    "127.0.0.1:50051".into()
}
fn default_state() -> PathBuf {
    "blox-state.redb".into()
}
fn default_grace() -> f64 {
    10.0
}
fn default_retries() -> u32 {
    2
}
fn default_heartbeat() -> f64 {
    1.0
}
fn default_timeout() -> f64 {
    5.0
}
fn default_events_max_mb() -> f64 {
    64.0
}
fn default_events_keep() -> u32 {
    4
}
fn default_retention() -> f64 {
    7.0 * 86_400.0
}
fn default_forget_workers() -> f64 {
    3600.0
}
fn default_max_waiting() -> usize {
    100_000
}
fn default_max_waiting_per_user() -> usize {
    10_000
}
fn default_retention_jobs() -> usize {
    100_000
}
fn default_max_job_bytes() -> usize {
    16 * 1024
}
fn default_max_waiting_bytes_per_user() -> usize {
    16 << 20
}
fn default_max_waiting_bytes() -> usize {
    64 << 20
}
fn default_retention_bytes() -> usize {
    64 << 20
}
fn default_max_connections() -> usize {
    4096
}
fn default_handshake_timeout() -> f64 {
    10.0
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        toml::Value::Table(Default::default())
            .try_into()
            .expect("every field has a default")
    }
}

impl RuntimeConfig {
    /// Reads `[runtime]` of a blox config (paths relative to the config file).
    pub fn from_config(cfg: &Config) -> Result<Self, ConfigError> {
        let s = cfg.section("runtime");
        let mut r: RuntimeConfig = s.parse()?;
        r.profile = Some(cfg.profile()?);
        r.topology = cfg.topology_levels()?;
        let (spares, quarantine) = cfg.health_rules()?;
        r.spares = spares.unwrap_or(0);
        r.quarantine = quarantine;
        for (key, v) in [
            ("grace_s", r.grace_s),
            ("heartbeat_s", r.heartbeat_s),
            ("worker_timeout_s", r.worker_timeout_s),
            ("forget_workers_after_s", r.forget_workers_after_s),
        ] {
            // Bounded, so every duration made of them is representable.
            if !(v > 0.0 && v <= 86_400.0) {
                return Err(s.error_at(
                    key,
                    format!("`{key}` must be a positive number of seconds, at most 86400"),
                ));
            }
        }
        if !(r.retention_s > 0.0 && r.retention_s <= 3650.0 * 86_400.0) {
            return Err(s.error_at(
                "retention_s",
                "`retention_s` must be a positive number of seconds, at most ten years",
            ));
        }
        for (key, v) in [
            ("max_waiting_jobs", r.max_waiting_jobs),
            ("max_waiting_per_user", r.max_waiting_per_user),
            ("max_job_bytes", r.max_job_bytes),
            ("max_waiting_bytes_per_user", r.max_waiting_bytes_per_user),
            ("max_waiting_bytes", r.max_waiting_bytes),
            ("retention_bytes", r.retention_bytes),
            ("max_connections", r.max_connections),
        ] {
            if v == 0 {
                return Err(s.error_at(key, format!("`{key}` must be at least 1")));
            }
        }
        if r.max_job_bytes > r.max_waiting_bytes_per_user {
            return Err(s.error_at(
                "max_job_bytes",
                format!(
                    "`max_job_bytes` ({}) is more than `max_waiting_bytes_per_user` ({}): no such job could ever wait",
                    r.max_job_bytes, r.max_waiting_bytes_per_user
                ),
            ));
        }
        if !(r.handshake_timeout_s > 0.0 && r.handshake_timeout_s <= 3600.0) {
            return Err(s.error_at(
                "handshake_timeout_s",
                "`handshake_timeout_s` must be a positive number of seconds, at most 3600",
            ));
        }
        if r.retention_jobs == 0 {
            return Err(s.error_at("retention_jobs", "`retention_jobs` must be at least 1"));
        }
        if r.worker_timeout_s <= r.heartbeat_s {
            return Err(s.error_at(
                "worker_timeout_s",
                "`worker_timeout_s` must be longer than `heartbeat_s`",
            ));
        }
        let (lease, grace) = r.lease();
        for (key, v) in [("lease_s", lease), ("fence_grace_s", grace)] {
            if !(v > 0.0 && v <= 86_400.0) {
                return Err(s.error_at(
                    key,
                    format!("`{key}` must be a positive number of seconds, at most 86400"),
                ));
            }
        }
        if lease + grace >= r.worker_timeout_s {
            let key = if r.fence_grace_s.is_some() && r.lease_s.is_none() {
                "fence_grace_s"
            } else {
                "lease_s"
            };
            return Err(s.error_at(
                key,
                format!(
                    "`lease_s` + `fence_grace_s` ({lease} + {grace} s) must be under `worker_timeout_s` ({} s): otherwise a job cut off with its worker may still run when the scheduler relaunches it elsewhere",
                    r.worker_timeout_s
                ),
            ));
        }
        if !(r.events_max_mb > 0.0 && r.events_max_mb <= 1_048_576.0) {
            return Err(s.error_at(
                "events_max_mb",
                "`events_max_mb` must be a positive number of MiB, at most 1048576",
            ));
        }
        if r.events_keep > 1000 {
            return Err(s.error_at("events_keep", "`events_keep` must be at most 1000"));
        }
        r.job_uid_range = match &r.job_uids {
            Some(v) => Some(
                super::uids::parse_range(v)
                    .map_err(|e| s.error_at("job_uids", format!("`job_uids`: {e}")))?,
            ),
            None => None,
        };
        r.state = s.resolve_path(&r.state);
        r.events = r.events.map(|p| s.resolve_path(&p));
        // Absolute: workers run jobs in their own working directories, and a
        // relative path there names another directory (jobs resumed from
        // older checkpoints than their last launch reached).
        r.checkpoint_dir = match r.checkpoint_dir.map(|p| s.resolve_path(&p)) {
            Some(p) => Some(
                std::path::absolute(&p)
                    .map_err(|e| s.error_at("checkpoint_dir", format!("`{}`: {e}", p.display())))?,
            ),
            None => None,
        };
        if r.tokens_file.is_some() && r.worker_token_file.is_none() {
            return Err(s.error_at(
                "tokens_file",
                "`tokens_file` needs `worker_token_file` too: workers authenticate with a token of their own",
            ));
        }
        if r.tls_client_ca.is_some() && (r.tls_cert.is_none() || r.tls_key.is_none()) {
            return Err(s.error_at(
                "tls_client_ca",
                "`tls_client_ca` (workers' client certificates) needs the scheduler's own `tls_cert` and `tls_key`",
            ));
        }
        if r.token_file.is_some() && r.tokens_file.is_some() {
            return Err(s.error_at(
                "tokens_file",
                "`tokens_file` (a token per user) replaces `token_file` (one shared users' token): set one of them",
            ));
        }
        for p in [
            &mut r.token_file,
            &mut r.tokens_file,
            &mut r.worker_token_file,
            &mut r.tls_cert,
            &mut r.tls_key,
            &mut r.tls_ca,
            &mut r.tls_client_ca,
        ]
        .into_iter()
        .flatten()
        {
            *p = s.resolve_path(p);
        }
        Ok(r)
    }

    /// The connection budgets of the gRPC endpoint.
    pub fn conn_limits(&self) -> crate::conn::ConnLimits {
        crate::conn::ConnLimits {
            max_open: self.max_connections,
            max_pending: (self.max_connections / 8).clamp(16, 1024),
            handshake: std::time::Duration::from_secs_f64(self.handshake_timeout_s),
        }
    }

    /// The lease a worker holds and the grace its jobs get when it runs
    /// out, in seconds (`lease_s`, `fence_grace_s`, or their defaults).
    pub fn lease(&self) -> (f64, f64) {
        (
            self.lease_s.unwrap_or(self.worker_timeout_s * 0.5),
            self.fence_grace_s.unwrap_or(self.worker_timeout_s * 0.3),
        )
    }

    /// Where the event log goes: `events`, or `events.jsonl` beside `state`.
    pub fn events_path(&self) -> PathBuf {
        match &self.events {
            Some(p) => p.clone(),
            None => self.state.with_file_name("events.jsonl"),
        }
    }

    /// The users' token and the TLS settings it names.
    pub fn security(&self) -> Result<Security, NetError> {
        let token = self
            .token_file
            .as_deref()
            .map(Security::token_from_file)
            .transpose()?;
        let tls = (self.tls_cert.is_some() || self.tls_key.is_some() || self.tls_ca.is_some())
            .then(|| crate::net::TlsFiles {
                cert: self.tls_cert.clone(),
                key: self.tls_key.clone(),
                ca: self.tls_ca.clone(),
                domain: None,
                client_auth: self
                    .tls_client_ca
                    .clone()
                    .map(|ca| crate::net::ClientAuth { ca, optional: true }),
            });
        Ok(Security { token, tls })
    }

    /// Who may call the user API and read the HTTP endpoints: tenants of
    /// `tokens_file`, holders of `token_file`'s token, or anyone.
    pub fn access(&self) -> Result<crate::auth::Access, NetError> {
        use crate::auth::{Access, TenantsFile};
        if let Some(p) = &self.tokens_file {
            let workers = self
                .worker_token_file
                .as_deref()
                .map(Security::token_from_file)
                .transpose()?;
            let tenants = TenantsFile::open(p, workers.as_deref())?;
            return Ok(Access::Tenants(std::sync::Arc::new(tenants)));
        }
        Ok(match self.security()?.token {
            Some(t) => Access::Shared(t),
            None => Access::Open,
        })
    }

    /// What workers present and the scheduler presents to them: the
    /// workers' token (the users' token when none is set).
    pub fn worker_security(&self) -> Result<Security, NetError> {
        let mut s = self.security()?;
        if let Some(p) = &self.worker_token_file {
            let t = Security::token_from_file(p)?;
            if s.token.as_deref() == Some(&*t) {
                return Err(NetError::File {
                    path: p.display().to_string(),
                    message: "the workers' token is the users' token: give workers a token of their own (or leave worker_token_file unset)".into(),
                });
            }
            s.token = Some(t);
        }
        Ok(s)
    }
}
