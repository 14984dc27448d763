//! Tokens and TLS: who may call what, and a refused worker.

use super::*;

/// The test cluster's config with a users' token (`s3cret-token`) and a
/// workers' token (`w0rker-token`), each in a 0600 file in `dir`.
pub(super) fn with_tokens(dir: &Path) -> RuntimeConfig {
    let token_file = dir.join("token");
    blox_runtime::net::write_private(&token_file, "s3cret-token\n").unwrap();
    let worker_token_file = dir.join("worker-token");
    blox_runtime::net::write_private(&worker_token_file, "w0rker-token\n").unwrap();
    let mut cfg = runtime_config(dir);
    cfg.token_file = Some(token_file);
    cfg.worker_token_file = Some(worker_token_file);
    cfg
}

/// A worker the scheduler refuses for good (the users' token, a wrong one,
/// none) stops trying and says why; an unreachable scheduler is retried.
#[test]
fn a_refused_worker_stops_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = with_tokens(dir.path());
    let c = Cluster::start(dir.path(), cfg, "fifo", 1);
    let users = c.security.clone();
    let wrong = Security {
        token: Some(Arc::from("wrong")),
        tls: None,
    };
    let none = Security {
        token: None,
        tls: None,
    };
    for (i, sec) in [users, wrong, none].into_iter().enumerate() {
        let w =
            c.rt.block_on(blox_runtime::worker::start(WorkerConfig {
                scheduler: c.addr(),
                listen: "127.0.0.1:0".parse().unwrap(),
                advertise: None,
                name: format!("refused-{i}"),
                logical_gpus: Some(1),
                workdir: dir.path().join(format!("refused-{i}")),
                security: sec,
                labels: Default::default(),
                job_user: None,
                allow_root_jobs: true,
                job_uids: None,
                gpu_slowdown: Vec::new(),
                speed_probe: None,
                ..WorkerConfig::default()
            }))
            .unwrap();
        let why = c
            .rt
            .block_on(async { tokio::time::timeout(Duration::from_secs(10), w.refused()).await })
            .expect("refused within 10 s");
        assert!(why.contains("Unauthenticated"), "{why}");
        assert!(why.contains("workers' token"), "{why}");
        assert!(w.worker_id().is_none());
    }
    // The scheduler still has its one worker.
    let s = c.ctl().status(&[]).unwrap();
    assert_eq!(s.workers.iter().filter(|w| w.alive).count(), 1);
    // Nothing listens here: the worker keeps trying and is not refused.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let w =
        c.rt.block_on(blox_runtime::worker::start(WorkerConfig {
            scheduler: format!("127.0.0.1:{port}"),
            listen: "127.0.0.1:0".parse().unwrap(),
            advertise: None,
            name: "patient".into(),
            logical_gpus: Some(1),
            workdir: dir.path().join("patient"),
            security: c.worker_security.clone(),
            labels: Default::default(),
            job_user: None,
            allow_root_jobs: true,
            job_uids: None,
            gpu_slowdown: Vec::new(),
            speed_probe: None,
            ..WorkerConfig::default()
        }))
        .unwrap();
    let waited =
        c.rt.block_on(async { tokio::time::timeout(Duration::from_secs(2), w.refused()).await });
    assert!(waited.is_err(), "a network error is retried, not refused");
}

/// A test CA and a certificate for 127.0.0.1/localhost it signed, made in
/// process with rcgen (test-only keys), as PEM files in `dir`.
pub(super) fn tls_files(dir: &Path) -> (TlsFiles, TlsFiles) {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair};
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.distinguished_name
        .push(DnType::CommonName, "blox test CA");
    let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().unwrap()).unwrap();
    let key = KeyPair::generate().unwrap();
    let mut node =
        CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()]).unwrap();
    node.distinguished_name
        .push(DnType::CommonName, "localhost");
    let node = node.signed_by(&key, &ca).unwrap();
    std::fs::write(dir.join("ca.pem"), ca.pem()).unwrap();
    std::fs::write(dir.join("node.pem"), node.pem()).unwrap();
    std::fs::write(dir.join("node.key"), key.serialize_pem()).unwrap();
    let server = TlsFiles {
        cert: Some(dir.join("node.pem")),
        key: Some(dir.join("node.key")),
        ca: Some(dir.join("ca.pem")),
        domain: Some("localhost".into()),
        client_auth: None,
    };
    let client = TlsFiles {
        cert: None,
        key: None,
        ca: Some(dir.join("ca.pem")),
        domain: Some("localhost".into()),
        client_auth: None,
    };
    (server, client)
}

#[test]
fn tls_by_config_runs_jobs_and_refuses_plain_text() {
    let dir = tempfile::tempdir().unwrap();
    let (server, client) = tls_files(dir.path());
    let mut cfg = runtime_config(dir.path());
    cfg.tls_cert = server.cert.clone();
    cfg.tls_key = server.key.clone();
    cfg.tls_ca = server.ca.clone();
    cfg.metrics_listen = Some("127.0.0.1:0".into());
    let ca = server.ca.clone().unwrap();
    let mut c = Cluster::start(dir.path(), cfg, "fifo", 0);
    // Workers serve TLS too and trust the same CA.
    c.worker_security = Security {
        token: None,
        tls: Some(server),
    };
    c.add_worker(dir.path(), "w0");
    c.wait_for_gpus(2);
    c.security.tls = Some(client);
    let mut ctl = c.ctl();
    let id = ctl.submit(job("secure", 1, toy(0.5, &[]), None)).unwrap();
    let r = c.wait_all(&[id], Duration::from_secs(20));
    assert_eq!(r[&id].status, "finished", "{}", r[&id].reason);
    // Plain text to a TLS endpoint fails.
    let mut plain = Ctl::connect(&format!("http://{}", c.addr()), &Security::default()).unwrap();
    let e = plain.status(&[]).unwrap_err().to_string();
    assert!(!e.is_empty() && !e.contains("Unauthenticated"), "{e}");
    // The HTTP endpoints serve TLS with the same certificate (they once
    // stayed plain HTTP), and answer nothing in plain text.
    let m = c.sched.as_ref().unwrap().metrics_address.unwrap();
    #[cfg(feature = "tls")]
    {
        let got = https_get(m, &ca, "/metrics");
        assert!(got.starts_with("HTTP/1.1 200"), "{got}");
        assert!(got.contains("blox_rounds_total"), "{got}");
    }
    let _ = &ca;
    let plain = {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(m).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let _ = write!(s, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        String::from_utf8_lossy(&out).into_owned()
    };
    assert!(!plain.contains("blox_rounds_total"), "{plain}");
}

/// One HTTPS GET of `path` on `addr`, trusting the CA in `ca` (PEM); the
/// whole answer.
#[cfg(feature = "tls")]
fn https_get(addr: std::net::SocketAddr, ca: &Path, path: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio_rustls::rustls::pki_types::pem::PemObject;
    use tokio_rustls::rustls::pki_types::{CertificateDer, ServerName};
    use tokio_rustls::rustls::{ClientConfig, RootCertStore};
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let mut roots = RootCertStore::empty();
        for c in CertificateDer::pem_file_iter(ca).unwrap() {
            roots.add(c.unwrap()).unwrap();
        }
        let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
        let cfg = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut s = tokio_rustls::TlsConnector::from(Arc::new(cfg))
            .connect(ServerName::try_from("localhost").unwrap(), tcp)
            .await
            .unwrap();
        s.write_all(format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n").as_bytes())
            .await
            .unwrap();
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out).await;
        String::from_utf8_lossy(&out).into_owned()
    })
}

/// A job that stole the workers' token forges nothing. Without a
/// worker's own credential it is UNAUTHENTICATED; as a worker it
/// registered itself, it cannot speak for another worker (PERMISSION_DENIED)
/// nor end, advance or crash a launch it does not hold (ignored).
#[test]
fn the_workers_token_alone_forges_no_report() {
    use blox_runtime::net::with_credential;
    let dir = tempfile::tempdir().unwrap();
    let cfg = with_tokens(dir.path());
    let c = Cluster::start(dir.path(), cfg, "fifo", 1);
    let mut ctl = c.ctl();
    let victim = ctl.submit(job("victim", 1, toy(60.0, &[]), None)).unwrap();
    wait_started(&c, &[victim]);
    let holder = c.workers[0].worker_id().unwrap();
    let running = ctl.status(&[victim]).unwrap().jobs[0].clone();
    let launch = LaunchRef {
        job_id: victim,
        launch: running.launches,
    };
    let finish = |worker_id: &str| ExitReport {
        worker_id: worker_id.into(),
        launch: Some(launch),
        code: Some(0),
        finished: true,
        ..Default::default()
    };
    let progress = |worker_id: &str| MetricBatch {
        worker_id: worker_id.into(),
        samples: vec![MetricSample {
            launch: Some(launch),
            key: "progress".into(),
            value: 0.99,
        }],
    };
    let mut thief = Ctl::connect(&c.addr(), &c.worker_security).unwrap();
    let (rt, client) = thief.parts();
    // The token alone, naming the worker that holds the launch.
    let e = rt
        .block_on(client.report_exit(finish(&holder)))
        .unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated, "{}", e.message());
    let e = rt
        .block_on(client.push_metrics(progress(&holder)))
        .unwrap_err();
    assert_eq!(e.code(), Code::Unauthenticated, "{}", e.message());
    // A worker of its own: another worker's name is refused, its own
    // reports of a launch it does not hold change nothing.
    let rogue = rt
        .block_on(client.register(RegisterRequest {
            name: "rogue".into(),
            address: "127.0.0.1:1".into(),
            gpus: vec![GpuDevice {
                index: 0,
                name: "fake".into(),
                ..Default::default()
            }],
            ..Default::default()
        }))
        .unwrap()
        .into_inner();
    let e = rt
        .block_on(client.report_exit(with_credential(finish(&holder), &rogue.worker_secret)))
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{}", e.message());
    let e = rt
        .block_on(client.push_metrics(with_credential(progress(&holder), &rogue.worker_secret)))
        .unwrap_err();
    assert_eq!(e.code(), Code::PermissionDenied, "{}", e.message());
    rt.block_on(client.report_exit(with_credential(finish(""), &rogue.worker_secret)))
        .unwrap();
    let crash = ExitReport {
        code: Some(1),
        finished: false,
        ..finish("")
    };
    rt.block_on(client.report_exit(with_credential(crash, &rogue.worker_secret)))
        .unwrap();
    rt.block_on(client.push_metrics(with_credential(progress(""), &rogue.worker_secret)))
        .unwrap();
    // Rounds later the victim still runs its launch, uncrashed, and its
    // progress is its own.
    c.wait_rounds(2);
    let now = ctl.status(&[victim]).unwrap().jobs[0].clone();
    assert_eq!(now.phase(), JobPhase::Running, "{now:?}");
    assert_eq!(now.launches, running.launches, "{now:?}");
    assert!(now.progress < 0.5, "{now:?}");
    assert!(now.reason.is_empty(), "{now:?}");
    ctl.cancel(victim).unwrap();
}

/// A job run as an unprivileged account (`--job-user`) finds no
/// credential: the token files, the worker's `/proc` environment and
/// memory are closed to it (its command line names no token file: the
/// worker here is in-process, as `blox worker` with BLOX_TOKEN_FILE is). Runs where the tests run as root and the system has `nobody`.
#[cfg(target_os = "linux")]
#[test]
fn a_job_run_as_its_own_account_reads_no_credential() {
    use std::os::unix::fs::PermissionsExt;
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: needs root to run jobs as another account");
        return;
    }
    if blox_runtime::process::JobUser::lookup("nobody").is_err() {
        eprintln!("skipped: no `nobody` account");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // The job's account walks to its own directories only.
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let cfg = with_tokens(dir.path());
    let token_file = cfg.token_file.clone().unwrap();
    let worker_token_file = cfg.worker_token_file.clone().unwrap();
    let mut c = Cluster::start(dir.path(), cfg, "fifo", 0);
    let w =
        c.rt.block_on(blox_runtime::worker::start(WorkerConfig {
            scheduler: c.addr(),
            listen: "127.0.0.1:0".parse().unwrap(),
            advertise: None,
            name: "unprivileged".into(),
            logical_gpus: Some(1),
            workdir: dir.path().join("w"),
            security: c.worker_security.clone(),
            labels: Default::default(),
            job_user: Some("nobody".into()),
            allow_root_jobs: false,
            job_uids: None,
            gpu_slowdown: Vec::new(),
            speed_probe: None,
            ..WorkerConfig::default()
        }))
        .unwrap();
    c.workers.push(w);
    c.wait_for_gpus(1);
    let tf = worker_token_file.display().to_string();
    let script = format!(
        "id -u; env; \
         cat {tf} 2>&1; cat {} 2>&1; \
         cat /proc/$PPID/environ 2>&1; \
         head -c 4096 /proc/$PPID/mem 2>&1; \
         cat /proc/$PPID/cmdline 2>&1; echo; echo END",
        token_file.display()
    );
    let mut ctl = c.ctl();
    let id = ctl
        .submit(job(
            "thief",
            1,
            vec!["/bin/sh".into(), "-c".into(), script],
            None,
        ))
        .unwrap();
    let text = first_output(&dir.path().join("w"), id, &mut ctl);
    let _ = ctl.cancel(id);
    let uid = text.lines().next().unwrap().trim().to_string();
    assert_ne!(uid, "0", "the job ran as root: {text}");
    for secret in ["s3cret-token", "w0rker-token", "BLOX_TOKEN_FILE"] {
        assert!(!text.contains(secret), "the job read `{secret}`:\n{text}");
    }
    assert!(text.contains("Permission denied"), "{text}");
}

/// A worker running as root refuses to start jobs as root unless told to,
/// and a token file others may read is refused, naming the file and the fix.
#[cfg(unix)]
#[test]
fn a_root_worker_without_a_job_user_and_an_open_token_file_are_refused() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let open = dir.path().join("open-token");
    std::fs::write(&open, "tok\n").unwrap();
    std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o644)).unwrap();
    let e = Security::token_from_file(&open).unwrap_err().to_string();
    assert!(
        e.contains("open-token") && e.contains("0644") && e.contains("chmod 600"),
        "{e}"
    );
    if unsafe { libc::geteuid() } != 0 {
        return;
    }
    let rt = tokio::runtime::Runtime::new().unwrap();
    let start = |job_user: Option<&str>| {
        rt.block_on(blox_runtime::worker::start(WorkerConfig {
            scheduler: "127.0.0.1:1".into(),
            listen: "127.0.0.1:0".parse().unwrap(),
            advertise: None,
            name: "root".into(),
            logical_gpus: Some(1),
            workdir: dir.path().join("w"),
            security: Security::default(),
            labels: Default::default(),
            job_user: job_user.map(str::to_string),
            allow_root_jobs: false,
            job_uids: None,
            gpu_slowdown: Vec::new(),
            speed_probe: None,
            ..WorkerConfig::default()
        }))
    };
    let e = start(None).err().expect("refused").to_string();
    assert!(
        e.contains("--job-user") && e.contains("--allow-root-jobs"),
        "{e}"
    );
    let e = start(Some("no-such-account-here"))
        .err()
        .expect("refused")
        .to_string();
    assert!(e.contains("no such account"), "{e}");
    let e = start(Some("root")).err().expect("refused").to_string();
    assert!(e.contains("is root"), "{e}");
}

/// Users are tenants. With a tokens file, a job's user is its
/// token's; a user sees and cancels only their own jobs (another's is
/// NOT_FOUND), an admin every job, a reader only the HTTP endpoints; keys
/// are each user's own.
#[test]
fn tenants_see_and_cancel_only_their_own_jobs() {
    let dir = tempfile::tempdir().unwrap();
    let hash = |t: &str| {
        use sha2::Digest;
        let d = sha2::Sha256::digest(t.as_bytes());
        d.iter().map(|b| format!("{b:02x}")).collect::<String>()
    };
    let tokens = dir.path().join("tokens");
    std::fs::write(
        &tokens,
        format!(
            "# user role hash\nann user sha256:{}\nbob user sha256:{}\nops admin sha256:{}\nprom reader sha256:{}\n",
            hash("ann-token"),
            hash("bob-token"),
            hash("ops-token"),
            hash("prom-token")
        ),
    )
    .unwrap();
    let worker_token_file = dir.path().join("worker-token");
    blox_runtime::net::write_private(&worker_token_file, "w0rker-token\n").unwrap();
    let mut cfg = runtime_config(dir.path());
    cfg.tokens_file = Some(tokens.clone());
    cfg.worker_token_file = Some(worker_token_file);
    cfg.metrics_listen = Some("127.0.0.1:0".into());
    cfg.dashboard_listen = Some("127.0.0.1:0".into());
    let as_ = |t: &str| Security {
        token: Some(Arc::from(t)),
        tls: None,
    };
    let c = Cluster::start_as(
        dir.path(),
        cfg.clone(),
        policies("fifo"),
        1,
        Default::default(),
        as_("ops-token"),
    );
    let ctl = |t: &str| Ctl::connect(&c.addr(), &as_(t)).unwrap();
    let (mut ann, mut bob, mut ops, mut prom) = (
        ctl("ann-token"),
        ctl("bob-token"),
        ctl("ops-token"),
        ctl("prom-token"),
    );
    let keyed = |name: &str| {
        let mut j = job(name, 1, toy(60.0, &[]), None);
        j.idempotency_key = "same-key".into();
        j
    };
    let a = ann.submit(keyed("a")).unwrap();
    // The same key is another key for another user.
    let b = bob.submit(keyed("b")).unwrap();
    assert_ne!(a, b);
    // Nobody submits as someone else, but an admin.
    let mut forged = job("forged", 1, toy(1.0, &[]), None);
    forged.user = Some("bob".into());
    let e = ann.submit(forged.clone()).unwrap_err();
    assert_eq!(e.code(), Some(Code::PermissionDenied), "{e}");
    let o = ops.submit(forged).unwrap();
    // Each user sees their own; the admin all.
    let seen =
        |c: &mut Ctl| -> Vec<u64> { c.status(&[]).unwrap().jobs.iter().map(|j| j.id).collect() };
    assert_eq!(seen(&mut ann), vec![a]);
    assert_eq!(seen(&mut bob), vec![b, o]);
    assert_eq!(seen(&mut ops), vec![a, b, o]);
    let e = bob.status(&[a]).unwrap_err();
    assert_eq!(e.code(), Some(Code::NotFound), "{e}");
    let e = bob.cancel(a).unwrap_err();
    assert_eq!(e.code(), Some(Code::NotFound), "{e}");
    // A reader reads the HTTP endpoints only; a user not those.
    let e = prom.status(&[]).unwrap_err();
    assert_eq!(e.code(), Some(Code::PermissionDenied), "{e}");
    assert!(prom.submit(job("p", 1, toy(1.0, &[]), None)).is_err());
    let m = c.sched.as_ref().unwrap().metrics_address.unwrap();
    assert!(http_get(m, "/metrics", Some("prom-token"))
        .0
        .contains("200"));
    assert!(http_get(m, "/metrics", Some("ann-token")).0.contains("401"));
    assert!(http_get(m, "/metrics", None).0.contains("401"));
    // No token, or one nobody has: refused before anything is read.
    for sec in [Security::default(), as_("nobody's")] {
        let e = Ctl::connect(&c.addr(), &sec)
            .unwrap()
            .status(&[])
            .unwrap_err();
        assert_eq!(e.code(), Some(Code::Unauthenticated), "{e}");
    }
    // The dashboard's API as Status: a user sees their own jobs (another
    // tenant's job on a GPU is an id without a name); the admin all.
    let d = c.sched.as_ref().unwrap().dashboard_address.unwrap();
    let api = |path: &str, t: &str| -> serde_json::Value {
        let (head, body) = http_get(d, path, Some(t));
        assert!(head.contains("200"), "{path} as {t}: {head} {body}");
        serde_json::from_str(&body).unwrap()
    };
    let ids = |v: &serde_json::Value| -> Vec<u64> {
        v["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .map(|j| j["id"].as_u64().unwrap())
            .collect()
    };
    assert_eq!(ids(&api("/api/status", "ann-token")), vec![a]);
    assert_eq!(ids(&api("/api/status", "ops-token")), vec![a, b, o]);
    let t = Instant::now();
    loop {
        // (The cluster view follows the rounds.)
        let cluster = api("/api/cluster", "ann-token").to_string();
        if cluster.contains(&format!("\"id\":{b}")) {
            assert!(
                !cluster.contains("\"b\"") && !cluster.contains("bob"),
                "{cluster}"
            );
            break;
        }
        assert!(t.elapsed() < Duration::from_secs(10), "{cluster}");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(http_get(d, "/api/status", Some("nobody's"))
        .0
        .contains("401"));
    // The tokens file is read again when it changes: a new tenant comes
    // in, a removed one goes, and a broken file changes nothing.
    let text = std::fs::read_to_string(&tokens).unwrap();
    let without_ann: String = text
        .lines()
        .filter(|l| !l.starts_with("ann "))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(
        &tokens,
        format!("{without_ann}cat user sha256:{}\n", hash("cat-token")),
    )
    .unwrap();
    let t = Instant::now();
    while ctl("cat-token").status(&[]).is_err() {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "the new tenant was not let in"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let e = ann.status(&[]).unwrap_err();
    assert_eq!(e.code(), Some(Code::Unauthenticated), "{e}");
    std::fs::write(&tokens, "cat user hunter2\n").unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    assert!(
        ctl("cat-token").status(&[]).is_ok(),
        "a broken file took the tenants away"
    );
    std::fs::write(&tokens, &text).unwrap();
    let t = Instant::now();
    while ann.status(&[]).is_err() {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "ann did not come back"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // Owners and admins cancel.
    ann.cancel(a).unwrap();
    ops.cancel(b).unwrap();
    ops.cancel(o).unwrap();
    // A tokens file with a token in plain text, and one beside token_file,
    // are refused naming the file and line.
    std::fs::write(&tokens, "ann user ann-token\n").unwrap();
    let e = cfg.access().unwrap_err().to_string();
    assert!(e.contains("tokens:1") && e.contains("plain-text"), "{e}");
}

/// `--job-uids`: each job runs as a uid of its own, so a job cannot write
/// into another's control directory (forge its `done`, its metrics) or read
/// it; its directories go back to the worker when it ends.
#[cfg(unix)]
#[test]
fn jobs_with_a_uid_each_cannot_touch_each_others_directories() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: needs root to run jobs as other uids");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    // Where the jobs leave notes for each other (anyone may write).
    let notes = dir.path().join("notes");
    std::fs::create_dir(&notes).unwrap();
    std::fs::set_permissions(&notes, std::fs::Permissions::from_mode(0o777)).unwrap();
    let range = (1_900_000_000, 1_900_000_009);
    let mut cfg = runtime_config(dir.path());
    cfg.job_uid_range = Some(range);
    let mut c = Cluster::start(dir.path(), cfg, "fifo", 0);
    let w =
        c.rt.block_on(blox_runtime::worker::start(WorkerConfig {
            scheduler: c.addr(),
            listen: "127.0.0.1:0".parse().unwrap(),
            advertise: None,
            name: "uids".into(),
            logical_gpus: Some(2),
            workdir: dir.path().join("w"),
            security: c.worker_security.clone(),
            labels: Default::default(),
            job_user: None,
            allow_root_jobs: false,
            job_uids: Some(range),
            gpu_slowdown: Vec::new(),
            speed_probe: None,
            ..WorkerConfig::default()
        }))
        .unwrap();
    c.workers.push(w);
    c.wait_for_gpus(2);
    let n = notes.display();
    // `a` also leaves a process in a session of its own (out of its
    // process group), which must die with its launch all the same.
    let a = format!(
        "setsid sleep 3600 </dev/null >/dev/null 2>&1 & \
         echo $(id -u) $(pwd) > {n}/a.tmp; mv {n}/a.tmp {n}/a; sleep 3"
    );
    let b = format!(
        "while [ ! -f {n}/a ]; do sleep 0.05; done; read u d < {n}/a; \
         echo uid $(id -u) other $u; touch $d/done 2>&1; ls $d 2>&1; echo END"
    );
    let mut ctl = c.ctl();
    let ja = ctl
        .submit(job("a", 1, vec!["/bin/sh".into(), "-c".into(), a], None))
        .unwrap();
    let jb = ctl
        .submit(job("b", 1, vec!["/bin/sh".into(), "-c".into(), b], None))
        .unwrap();
    let text = first_output(&dir.path().join("w"), jb, &mut ctl);
    // The scheduler's uids: one each, from the cluster's range.
    let line = text.lines().find(|l| l.starts_with("uid ")).unwrap_or("");
    let (ub, ua): (u32, u32) = match line.split_whitespace().collect::<Vec<_>>()[..] {
        ["uid", b, "other", a] => (b.parse().unwrap(), a.parse().unwrap()),
        _ => panic!("no uid line: {text}"),
    };
    assert!(
        ua != ub && [ua, ub].iter().all(|u| (range.0..=range.1).contains(u)),
        "each job runs as its own uid of the cluster's range: {text}"
    );
    assert_eq!(
        text.matches("Permission denied").count(),
        2,
        "b neither writes nor lists a's directory: {text}"
    );
    let a_dir = job_dir(&dir.path().join("w"), ja).join("launch-1/job");
    assert!(!a_dir.join("done").exists());
    // Once a's launch has ended, its directories are the worker's again.
    // (The shell scripts end without saying they finished: each is
    // launched again until it fails for good.)
    let _ = ctl.cancel(ja);
    let _ = ctl.cancel(jb);
    let t = std::time::Instant::now();
    while std::fs::metadata(&a_dir).unwrap().uid() != 0 {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "a's directory is still its uid's after it ended"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // And nothing runs as its uid any more, its `setsid` sleep included.
    let t = std::time::Instant::now();
    while let Some(pid) = runs_as(ua) {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "process {pid} still runs as a's uid {ua} after a ended"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A process whose real uid is `uid`, if any.
#[cfg(unix)]
fn runs_as(uid: u32) -> Option<u32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_str()?.parse().ok()?;
        let status = std::fs::read_to_string(e.path().join("status")).ok()?;
        let real = status.lines().find_map(|l| l.strip_prefix("Uid:"))?;
        (real.split_whitespace().next()?.parse::<u32>().ok()? == uid).then_some(pid)
    })
}

/// What job `id`'s first launch on the worker in `worker_dir` printed, once
/// it printed `END` (within 20 s).
fn first_output(worker_dir: &Path, id: u64, ctl: &mut Ctl) -> String {
    let t = std::time::Instant::now();
    loop {
        // (The job's directory appears with its first launch.)
        let out = job_dir(worker_dir, id).join("launch-1/stdout");
        let text = std::fs::read_to_string(&out).unwrap_or_default();
        // A line of its own: an environment variable may contain the word
        // (CI's has DEBIAN_FRONTEND), and `env` prints before the reads.
        if text.lines().any(|l| l.trim() == "END") {
            return text;
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "{text} {:?}",
            ctl.status(&[id]).unwrap().jobs
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}
