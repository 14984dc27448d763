//! Mutual TLS for workers: client certificates on both sides of
//! the scheduler–worker link, beside the tokens and per-worker credentials.

use super::security::{tls_files, with_tokens};
use super::*;
use blox_runtime::net::ClientAuth;

/// With `tls_client_ca`, a worker holding the workers' token is refused
/// unless it presents a certificate that authority signed, while users'
/// clients need none; a worker with `--tls-client-ca` takes launches only
/// over a connection that presents one (the scheduler's), even from a
/// caller holding the workers' token and that worker's own credential.
#[test]
fn workers_need_a_client_certificate_when_the_scheduler_asks_for_one() {
    let dir = tempfile::tempdir().unwrap();
    let (server, client) = tls_files(dir.path());
    let other_dir = dir.path().join("other");
    std::fs::create_dir_all(&other_dir).unwrap();
    let (other, _) = tls_files(&other_dir);
    let ca = server.ca.clone().unwrap();
    let mut cfg = with_tokens(dir.path());
    cfg.tls_cert = server.cert.clone();
    cfg.tls_key = server.key.clone();
    cfg.tls_ca = server.ca.clone();
    cfg.tls_client_ca = Some(ca.clone());
    let mut c = Cluster::start(dir.path(), cfg, "fifo", 0);
    let worker_token = c.worker_security.token.clone();
    // The worker presents its certificate, and asks the scheduler for one.
    let mut good = server.clone();
    good.client_auth = Some(ClientAuth {
        ca: ca.clone(),
        optional: false,
    });
    c.worker_security = Security {
        token: worker_token.clone(),
        tls: Some(good),
    };
    c.add_worker(dir.path(), "w0");
    c.wait_for_gpus(2);
    // Users connect without a certificate and their job runs on it.
    c.security.tls = Some(client.clone());
    let mut ctl = c.ctl();
    let id = ctl.submit(job("mutual", 1, toy(0.5, &[]), None)).unwrap();
    let r = c.wait_all(&[id], Duration::from_secs(20));
    assert_eq!(r[&id].status, "finished", "{}", r[&id].reason);

    let start = |name: &str, tls: TlsFiles| {
        c.rt.block_on(blox_runtime::worker::start(WorkerConfig {
            scheduler: c.addr(),
            listen: "127.0.0.1:0".parse().unwrap(),
            advertise: None,
            name: name.into(),
            logical_gpus: Some(1),
            workdir: dir.path().join(name),
            security: Security {
                token: worker_token.clone(),
                tls: Some(tls),
            },
            labels: Default::default(),
            job_user: None,
            allow_root_jobs: true,
            job_uids: None,
            gpu_slowdown: Vec::new(),
            speed_probe: None,
            ..WorkerConfig::default()
        }))
        .unwrap()
    };
    // The workers' token (stolen, say) without a certificate: refused for
    // good, and said why.
    let bare = start("bare", client.clone());
    let why = c
        .rt
        .block_on(async { tokio::time::timeout(Duration::from_secs(10), bare.refused()).await })
        .expect("refused within 10 s");
    assert!(why.contains("client certificate"), "{why}");
    assert!(bare.worker_id().is_none());
    // A certificate another authority signed fails the handshake: never
    // registered.
    let mut forged = other.clone();
    forged.ca = Some(ca.clone());
    let stranger = start("stranger", forged);
    std::thread::sleep(Duration::from_secs(3));
    assert!(stranger.worker_id().is_none());
    let s = ctl.status(&[]).unwrap();
    let alive = s.workers.iter().filter(|w| w.alive).count();
    assert_eq!(alive, 1, "{:?}", s.workers);

    // The worker's own service: without a certificate, even the workers'
    // token and this worker's credential launch nothing.
    let w = &c.workers[0];
    let credential = w.credential().expect("registered");
    let caller = Security {
        token: worker_token.clone(),
        tls: Some(client),
    };
    let e = c.rt.block_on(async {
        let mut wc = caller
            .worker_client_as_scheduler(&w.address, &credential)
            .unwrap();
        wc.launch(LaunchRequest {
            launch: Some(LaunchRef {
                job_id: 999,
                launch: 1,
            }),
            command: vec!["/bin/true".into()],
            worker_id: w.worker_id().unwrap(),
            ..Default::default()
        })
        .await
        .unwrap_err()
    });
    assert_ne!(e.code(), Code::Ok);
    assert!(
        !matches!(
            e.code(),
            Code::AlreadyExists | Code::FailedPrecondition | Code::Aborted
        ),
        "the launch reached the worker's handler: {e}"
    );
    // And the scheduler, which presents its certificate, still launches.
    let id = ctl.submit(job("again", 1, toy(0.3, &[]), None)).unwrap();
    let r = c.wait_all(&[id], Duration::from_secs(20));
    assert_eq!(r[&id].status, "finished", "{}", r[&id].reason);
}

/// `tls_client_ca` without the scheduler's own certificate is refused at
/// its line: client certificates are asked for inside a TLS handshake.
#[test]
fn client_certificates_without_the_schedulers_own_are_refused_at_their_line() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("mtls.toml");
    std::fs::write(
        &bad,
        "[run]\nround_s = 1\n[runtime]\nlisten = \"127.0.0.1:0\"\ntls_client_ca = \"ca.pem\"\n",
    )
    .unwrap();
    let cfg = blox_sim::load_config(&bad, None, &[]).unwrap();
    let e = RuntimeConfig::from_config(&cfg).unwrap_err().to_string();
    assert!(
        e.contains("mtls.toml:5") && e.contains("tls_client_ca") && e.contains("tls_cert"),
        "{e}"
    );
}
