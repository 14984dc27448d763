//! Tokens and TLS: who may call what, and a refused worker.

use super::*;

/// A worker the scheduler refuses for good (the users' token, a wrong one,
/// none) stops trying and says why; an unreachable scheduler is retried.
#[test]
fn a_refused_worker_stops_with_the_reason() {
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, "s3cret-token\n").unwrap();
    let worker_token_file = dir.path().join("worker-token");
    std::fs::write(&worker_token_file, "w0rker-token\n").unwrap();
    let mut cfg = runtime_config(dir.path());
    cfg.token_file = Some(token_file);
    cfg.worker_token_file = Some(worker_token_file);
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
        }))
        .unwrap();
    let waited =
        c.rt.block_on(async { tokio::time::timeout(Duration::from_secs(2), w.refused()).await });
    assert!(waited.is_err(), "a network error is retried, not refused");
}

/// A test CA and a certificate for 127.0.0.1/localhost it signed, made in
/// process with rcgen (test-only keys), as PEM files in `dir`.
fn tls_files(dir: &Path) -> (TlsFiles, TlsFiles) {
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
    };
    let client = TlsFiles {
        cert: None,
        key: None,
        ca: Some(dir.join("ca.pem")),
        domain: Some("localhost".into()),
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
}
