//! The soak's attacker job: `blox-toy-job --attack VICTIM`
//! first tries, as a job on a shared cluster could, to get hold of a
//! cluster credential and to act for another job, then trains as usual.
//!
//! What it reads: its own environment, the environment and command line of
//! its ancestors (the launch's guardian, the worker) and the files their
//! `--token-file` and `BLOX_TOKEN_FILE` name, and the token files a soak
//! keeps beside its journal (an attacker who knows the layout).
//!
//! What it tries, with every secret it found and with none: to report the
//! victim job finished and push it 99 % progress (as a worker), to cancel
//! it (as a user), to register a worker and report the victim's exit with
//! the credential that registration issues, and to have its own worker
//! launch a command (as the scheduler).
//!
//! It appends what it found to a file the soak reads (`attacks` beside the
//! journal), one line each:
//!
//! ```text
//! read JOB SOURCE SHA256     a secret read, by the SHA-256 of its text
//! call JOB KIND OUTCOME      a forged call: `ok`, or the gRPC code
//! try JOB KIND OUTCOME       an attack on its node (super::node_attack)
//! budget JOB WHAT GOT LIMIT  how far a fork bomb or a memory hog got
//! ```
//!
//! The soak counts a secret whose hash is a token's as stolen, an `ok` as
//! an accepted forgery, and a budget line past its limit as exceeded; all
//! must be 0 ([`check`]), as must the decoys changed and the processes
//! that outlived their launches (counted by the soak itself).

use crate::net::{with_credential, Security};
use crate::proto::*;
use sha2::{Digest, Sha256};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// What the attacker jobs of a soak achieved (`blox-harness`'s soak; [`check`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AttackReport {
    /// Attacker launches that wrote their lines.
    pub attempts: usize,
    /// Secrets read whose hash is one of `tokens`'.
    pub stolen: usize,
    /// Forged calls answered `ok`, and forged launches that ran.
    pub accepted: usize,
    /// Forged calls in all.
    pub calls: usize,
    /// Attacks on the node tried (links, escapes: [`super::node_attack`]).
    pub node_attacks: usize,
    /// Fork bombs and memory hogs that got past their launch's limit, and
    /// huge submissions accepted.
    pub budgets_exceeded: usize,
    /// Root-owned decoys whose content, owner or mode changed.
    pub decoys_changed: usize,
    /// Processes of a job uid still alive after every worker was killed
    /// and started again (it kills what its launches left).
    pub escaped: usize,
}

/// The file beside the journal the attacker writes to.
pub const ATTACKS_FILE: &str = "attacks";

/// Names of the files whose existence proves a forged launch ran.
pub const FORGED_LAUNCH_PREFIX: &str = "forged-launch-";

/// One secret found: where, and its text.
#[derive(Clone, Debug)]
pub struct Found {
    pub source: String,
    pub secret: String,
}

fn sha256_hex(s: &str) -> String {
    Sha256::digest(s.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A variable that may hold a secret by its name.
fn secret_name(name: &str) -> bool {
    let n = name.to_ascii_uppercase();
    ["TOKEN", "SECRET", "CREDENTIAL", "PASSWORD"]
        .iter()
        .any(|w| n.contains(w))
}

/// The parent of `pid` (`/proc/PID/stat`'s fourth field).
fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The name in parentheses may hold spaces: fields start after the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// The trimmed text of the file at `path`, as a secret found at `source`.
fn read_secret(found: &mut Vec<Found>, source: String, path: &str) {
    if let Ok(text) = std::fs::read_to_string(path) {
        let t = text.trim();
        if !t.is_empty() {
            found.push(Found {
                source,
                secret: t.to_string(),
            });
        }
    }
}

/// Secrets in an environment: variables named like one, and the files
/// `*TOKEN_FILE` variables name.
fn env_secrets(found: &mut Vec<Found>, who: &str, pairs: Vec<(String, String)>) {
    for (k, v) in pairs {
        if k.ends_with("TOKEN_FILE") {
            read_secret(found, format!("{who}:{k}"), &v);
        } else if secret_name(&k) && !v.is_empty() {
            found.push(Found {
                source: format!("{who}:{k}"),
                secret: v,
            });
        }
    }
}

/// Every secret the job can read, and the scheduler's address if the
/// worker's command line shows it.
pub fn gather(journal: &Path) -> (Vec<Found>, Option<String>) {
    let mut found = Vec::new();
    let mut scheduler = None;
    env_secrets(&mut found, "env", std::env::vars().collect());
    let mut pid = std::os::unix::process::parent_id();
    for level in 0..3 {
        if pid <= 1 {
            break;
        }
        let who = format!("ancestor{level}");
        if let Ok(bytes) = std::fs::read(format!("/proc/{pid}/environ")) {
            let pairs = bytes
                .split(|b| *b == 0)
                .filter_map(|kv| {
                    let kv = String::from_utf8_lossy(kv);
                    let (k, v) = kv.split_once('=')?;
                    Some((k.to_string(), v.to_string()))
                })
                .collect();
            env_secrets(&mut found, &who, pairs);
        }
        if let Ok(bytes) = std::fs::read(format!("/proc/{pid}/cmdline")) {
            let args: Vec<String> = bytes
                .split(|b| *b == 0)
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect();
            for w in args.windows(2) {
                match w[0].as_str() {
                    "--token-file" => read_secret(&mut found, format!("{who}:--token-file"), &w[1]),
                    "--scheduler" if scheduler.is_none() => scheduler = Some(w[1].clone()),
                    _ => {}
                }
            }
        }
        match parent_of(pid) {
            Some(p) => pid = p,
            None => break,
        }
    }
    if let Some(dir) = journal.parent() {
        for name in ["worker-token", "user-token"] {
            let p = dir.join(name).display().to_string();
            read_secret(&mut found, format!("file:{name}"), &p);
        }
    }
    (found, scheduler)
}

/// Where the results go, and which job is attacked.
pub struct Attack {
    pub job: u64,
    pub victim: u64,
    pub journal: PathBuf,
    pub worker_addr: Option<String>,
}

impl Attack {
    fn dir(&self) -> PathBuf {
        self.journal
            .parent()
            .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
    }

    /// Gathers, tries every forgery, and appends the lines (module docs).
    pub fn run(&self) -> std::io::Result<()> {
        // Counted as an attacker from here, whatever stops it later (a
        // revocation past its grace, a worker killed under it).
        append(&self.dir(), &[format!("try {} begin ok\n", self.job)])?;
        let (found, scheduler) = gather(&self.journal);
        let mut lines = Vec::new();
        let mut secrets = BTreeSet::new();
        for f in &found {
            lines.push(format!(
                "read {} {} {}\n",
                self.job,
                f.source,
                sha256_hex(&f.secret)
            ));
            secrets.insert(f.secret.clone());
        }
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let mut credentials: Vec<Option<String>> = vec![None];
        credentials.extend(secrets.into_iter().map(Some));
        for c in &credentials {
            for (kind, outcome) in rt.block_on(self.forge(c.as_deref(), scheduler.as_deref())) {
                lines.push(format!("call {} {kind} {outcome}\n", self.job));
            }
        }
        append(&self.dir(), &lines)?;
        // Then its node; the last of these ends its launch (a link where
        // the worker reads), so each writes its line as it goes.
        super::node_attack::run(self.job, &self.dir(), &mut |line| {
            let _ = append(&self.dir(), &[line]);
        });
        Ok(())
    }

    /// The forged calls with `credential` (as token and as worker
    /// credential): (kind, outcome).
    async fn forge(
        &self,
        credential: Option<&str>,
        scheduler: Option<&str>,
    ) -> Vec<(&'static str, String)> {
        let sec = Security {
            token: credential.map(Into::into),
            tls: None,
        };
        fn wrap<T>(m: T, credential: Option<&str>) -> tonic::Request<T> {
            match credential {
                Some(c) => with_credential(m, c),
                None => tonic::Request::new(m),
            }
        }
        let victim = LaunchRef {
            job_id: self.victim,
            launch: 1,
        };
        let mut out = Vec::new();
        let outcome = |r: Result<(), tonic::Status>| match r {
            Ok(()) => "ok".to_string(),
            Err(e) => format!("{:?}", e.code()),
        };
        let t = Duration::from_secs(3);
        async fn within<T>(
            t: Duration,
            f: impl std::future::Future<Output = Result<tonic::Response<T>, tonic::Status>>,
        ) -> Result<T, tonic::Status> {
            match tokio::time::timeout(t, f).await {
                Ok(r) => r.map(tonic::Response::into_inner),
                Err(_) => Err(tonic::Status::deadline_exceeded("no reply")),
            }
        }
        if let Some(addr) = scheduler {
            match sec.scheduler_client(addr) {
                Ok(mut s) => {
                    let exit = ExitReport {
                        worker_id: "w0".into(),
                        launch: Some(victim),
                        code: Some(0),
                        finished: true,
                        ..Default::default()
                    };
                    let r = within(t, s.report_exit(wrap(exit.clone(), credential))).await;
                    out.push(("report-exit", outcome(r.map(|_| ()))));
                    let metrics = MetricBatch {
                        worker_id: "w0".into(),
                        samples: vec![MetricSample {
                            launch: Some(victim),
                            key: "progress".into(),
                            value: 0.99,
                        }],
                    };
                    let r = within(t, s.push_metrics(wrap(metrics, credential))).await;
                    out.push(("push-metrics", outcome(r.map(|_| ()))));
                    let r = within(
                        t,
                        s.cancel(CancelRequest {
                            job_id: self.victim,
                        }),
                    )
                    .await;
                    out.push(("cancel", outcome(r.map(|_| ()))));
                    let reg = RegisterRequest {
                        name: format!("attacker-{}", self.job),
                        address: "http://127.0.0.1:9".into(),
                        gpus: vec![GpuDevice {
                            index: 0,
                            name: "forged".into(),
                            ..Default::default()
                        }],
                        ..Default::default()
                    };
                    let r = within(t, s.register(reg)).await;
                    out.push((
                        "register",
                        outcome(r.as_ref().map(|_| ()).map_err(Clone::clone)),
                    ));
                    if let Ok(reply) = r {
                        let exit = ExitReport {
                            worker_id: reply.worker_id.clone(),
                            ..exit
                        };
                        let r = within(
                            t,
                            s.report_exit(with_credential(exit, &reply.worker_secret)),
                        )
                        .await;
                        out.push(("report-exit-registered", outcome(r.map(|_| ()))));
                    }
                }
                Err(_) => out.push(("scheduler", "unreachable".into())),
            }
        } else {
            out.push(("scheduler", "unknown".into()));
        }
        if let Some(addr) = &self.worker_addr {
            match sec.worker_client(addr) {
                Ok(mut w) => {
                    let marker = self
                        .dir()
                        .join(format!("{FORGED_LAUNCH_PREFIX}{}", self.job));
                    let launch = LaunchRequest {
                        launch: Some(LaunchRef {
                            job_id: 1_000_000_000 + self.job,
                            launch: 1,
                        }),
                        command: vec![
                            "/bin/sh".into(),
                            "-c".into(),
                            format!("touch '{}'", marker.display()),
                        ],
                        ..Default::default()
                    };
                    let r = within(t, w.launch(wrap(launch, credential))).await;
                    out.push(("worker-launch", outcome(r.map(|_| ()))));
                }
                Err(_) => out.push(("worker", "unreachable".into())),
            }
        }
        out
    }
}

/// Appends `lines` to the attacks file in `dir` in one write (`O_APPEND`
/// keeps it whole beside other attackers').
fn append(dir: &Path, lines: &[String]) -> std::io::Result<()> {
    use std::io::Write;
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(ATTACKS_FILE))?
        .write_all(lines.concat().as_bytes())
}

/// Reads the attackers' lines in `dir` against the cluster's `tokens`.
pub fn check(dir: &Path, tokens: &[String]) -> AttackReport {
    let hashes: BTreeSet<String> = tokens.iter().map(|t| sha256_hex(t.trim())).collect();
    let text = std::fs::read_to_string(dir.join(ATTACKS_FILE)).unwrap_or_default();
    let mut r = AttackReport::default();
    let mut jobs = BTreeSet::new();
    for line in text.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        match f.as_slice() {
            ["read", job, _, hash] => {
                jobs.insert(job.to_string());
                r.stolen += hashes.contains(*hash) as usize;
            }
            ["call", job, _, outcome] => {
                jobs.insert(job.to_string());
                r.calls += 1;
                r.accepted += (*outcome == "ok") as usize;
            }
            ["try", job, "begin", ..] => {
                jobs.insert(job.to_string());
            }
            ["try", job, ..] => {
                jobs.insert(job.to_string());
                r.node_attacks += 1;
            }
            ["budget", job, _, got, limit] => {
                jobs.insert(job.to_string());
                let (got, limit) = (got.parse::<u64>(), limit.parse::<u64>());
                r.budgets_exceeded += matches!((got, limit), (Ok(g), Ok(l)) if g > l) as usize;
            }
            _ => {}
        }
    }
    r.attempts = jobs.len();
    if let Ok(entries) = std::fs::read_dir(dir) {
        r.accepted += entries
            .flatten()
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with(FORGED_LAUNCH_PREFIX)
            })
            .count();
    }
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The attacker is not toothless: a token file it may read, beside
    /// the journal or named by a variable, is found.
    #[test]
    fn a_readable_token_is_found_and_counted_stolen() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("worker-token"), "w-secret\n").unwrap();
        let (found, _) = gather(&dir.path().join("journal"));
        let f = found
            .iter()
            .find(|f| f.source == "file:worker-token")
            .unwrap_or_else(|| panic!("{found:?}"));
        assert_eq!(f.secret, "w-secret");
        let mut pairs = vec![(
            "SOME_TOKEN_FILE".to_string(),
            dir.path().join("worker-token").display().to_string(),
        )];
        pairs.push(("API_SECRET".into(), "s2".into()));
        pairs.push(("PATH".into(), "/bin".into()));
        let mut found = Vec::new();
        env_secrets(&mut found, "env", pairs);
        let secrets: Vec<&str> = found.iter().map(|f| f.secret.as_str()).collect();
        assert_eq!(secrets, ["w-secret", "s2"]);
    }

    #[test]
    fn stolen_secrets_and_accepted_calls_are_counted_by_hash_and_outcome() {
        let dir = tempfile::tempdir().unwrap();
        let text = format!(
            "read 7 file:worker-token {}\nread 7 env:FOO_TOKEN {}\ncall 7 cancel Unauthenticated\ncall 7 register ok\ncall 9 cancel NotFound\ngarbage\ntry 9 escape sleep-started worker-none\nbudget 9 processes 128 128\nbudget 9 memory 300 256\n",
            sha256_hex("w-secret"),
            sha256_hex("harmless")
        );
        std::fs::write(dir.path().join(ATTACKS_FILE), text).unwrap();
        let r = check(dir.path(), &["w-secret\n".to_string()]);
        assert_eq!(
            r,
            AttackReport {
                attempts: 2,
                stolen: 1,
                accepted: 1,
                calls: 3,
                node_attacks: 1,
                budgets_exceeded: 1,
                ..Default::default()
            }
        );
        std::fs::write(dir.path().join(format!("{FORGED_LAUNCH_PREFIX}7")), "").unwrap();
        assert_eq!(check(dir.path(), &[]).accepted, 2);
    }
}
