//! Tests of the worker's service: launches and revocations whose caller
//! hangs up, GPU shares, and launches still starting.

use super::*;

/// A registered worker of two logical GPUs in `dir`, without cgroups.
fn worker(dir: &std::path::Path) -> Arc<Shared> {
    Arc::new(Shared {
        cfg: WorkerConfig {
            workdir: dir.to_path_buf(),
            cgroup: super::super::cgroup::CgroupSetting::Off,
            ..WorkerConfig::default()
        },
        job_user: None,
        job_uids: None,
        containment: None,
        gpus: logical_gpus(2),
        address: "127.0.0.1:1".into(),
        state: Mutex::new(State {
            worker_id: Some("w".into()),
            lease_epoch: 1,
            ..State::default()
        }),
        refused: tokio::sync::watch::channel(None).0,
    })
}

fn launch(job: u64) -> LaunchRequest {
    LaunchRequest {
        launch: Some(LaunchRef {
            job_id: job,
            launch: 1,
        }),
        command: vec!["sleep".into(), "30".into()],
        gpus: vec![0, 1],
        worker_id: "w".into(),
        ..Default::default()
    }
}

fn revoke(job: u64) -> RevokeRequest {
    RevokeRequest {
        launch: Some(LaunchRef {
            job_id: job,
            launch: 1,
        }),
        grace_s: 0.0,
        kill: true,
    }
}

/// A runtime of two threads: the launch's task runs beside the test.
fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Polls `call` once, as a caller that hangs up right after sending it
/// does (a scheduler killed or restarted mid-call), then drops it.
async fn hang_up<T>(call: impl std::future::Future<Output = T>) {
    tokio::pin!(call);
    tokio::select! {
        biased;
        _ = &mut call => {}
        _ = std::future::ready(()) => {}
    }
}

/// Before, a launch call dropped while its processes started left its
/// reservation behind: the GPUs stayed "held" by a launch the worker
/// never reported, so no scheduler could stop it, and every later
/// launch onto them was refused (seen after a scheduler restart). Now
/// the launch is recorded, stopped as soon as it runs (its caller took
/// it as failed and may run the job elsewhere), and its GPUs are free
/// once its exit is collected. A revocation whose caller hangs up still
/// ends its launch.
#[test]
fn a_launch_or_revocation_whose_caller_hangs_up_still_completes() {
    let dir = tempfile::tempdir().unwrap();
    let sh = worker(dir.path());
    let rt = runtime();
    rt.block_on(async {
        let svc = Service(sh.clone());
        hang_up(svc.launch(Request::new(launch(1)))).await;
        let one = LaunchRef {
            job_id: 1,
            launch: 1,
        };
        // Starting or started, it is counted (its GPUs are held), but
        // never offered for adoption.
        {
            let st = sh.lock();
            assert_eq!(st.running(), vec![one]);
            if st.starting.contains_key(&1) {
                assert!(st.reports().is_empty());
            }
        }
        let t = Instant::now();
        while sh.lock().starting.contains_key(&1) {
            assert!(t.elapsed() < Duration::from_secs(20), "still starting");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        // Recorded, and killed as it ran: it exits (the report loop
        // then reports the exit and frees its GPUs, as here).
        let t = Instant::now();
        while sh.lock().launches[&1].run.exit().is_none() {
            assert!(t.elapsed() < Duration::from_secs(20), "it runs on");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        {
            let mut st = sh.lock();
            let l = st.take_launch(1).unwrap();
            st.sweep(l.uid, false);
        }
        // A launch whose call is answered runs on; a revocation whose
        // caller hangs up still ends it, and its GPUs take the next.
        svc.launch(Request::new(launch(2))).await.unwrap();
        hang_up(svc.revoke(Request::new(revoke(2)))).await;
        assert!(sh.lock().launches.is_empty());
        let t = Instant::now();
        loop {
            match svc.launch(Request::new(launch(3))).await {
                Ok(_) => break,
                // The revoked launch's uid or leftovers may still drain.
                Err(e) if t.elapsed() < Duration::from_secs(20) => {
                    assert_ne!(e.code(), Code::InvalidArgument, "{}", e.message());
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => panic!("the freed GPUs refuse a launch: {}", e.message()),
            }
        }
        assert!(sh.lock().launches[&3].run.exit().is_none(), "it runs");
        svc.revoke(Request::new(revoke(3))).await.unwrap();
        assert!(sh.lock().launches.is_empty() && sh.lock().starting.is_empty());
    });
}

/// Launches share a GPU while their thousandths add up to 1000 at most,
/// never beside a launch holding it whole; each is told its share.
#[test]
fn launches_share_a_gpu_up_to_a_thousand_thousandths() {
    let dir = tempfile::tempdir().unwrap();
    let sh = worker(dir.path());
    let rt = runtime();
    rt.block_on(async {
        let svc = Service(sh.clone());
        let on = |job: u64, gpu: u32, milli: Option<u32>| LaunchRequest {
            gpus: vec![gpu],
            gpu_milli: milli,
            ..launch(job)
        };
        svc.launch(Request::new(on(1, 0, Some(600)))).await.unwrap();
        svc.launch(Request::new(on(2, 0, Some(400)))).await.unwrap();
        let e = svc
            .launch(Request::new(on(3, 0, Some(1))))
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::ResourceExhausted, "{}", e.message());
        assert!(
            e.message()
                .contains("1000 thousandths are shared out already"),
            "{}",
            e.message()
        );
        let e = svc.launch(Request::new(on(4, 0, None))).await.unwrap_err();
        assert_eq!(e.code(), Code::ResourceExhausted, "{}", e.message());
        svc.launch(Request::new(on(5, 1, None))).await.unwrap();
        let e = svc
            .launch(Request::new(on(6, 1, Some(100))))
            .await
            .unwrap_err();
        assert!(e.message().contains("held by job 5"), "{}", e.message());
        // A share of two GPUs, or of none of a GPU: refused outright.
        let two = LaunchRequest {
            gpu_milli: Some(500),
            ..launch(7)
        };
        let e = svc.launch(Request::new(two)).await.unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{}", e.message());
        let e = svc
            .launch(Request::new(on(8, 1, Some(0))))
            .await
            .unwrap_err();
        assert_eq!(e.code(), Code::InvalidArgument, "{}", e.message());
        // What a restarted scheduler is told: both sharers, with shares.
        let reports = sh.lock().reports();
        let milli: Vec<Option<u32>> = reports.iter().map(|r| r.gpu_milli).collect();
        assert_eq!(milli, [Some(600), Some(400), None]);
        for job in [1, 2, 5] {
            svc.revoke(Request::new(revoke(job))).await.unwrap();
        }
    });
}

/// A launch being revoked is still reported as running until its
/// processes exited (its grace, saving its last checkpoint): the
/// scheduler must neither relaunch its job nor have its shared
/// directories taken back meanwhile.
#[test]
fn a_launch_is_reported_running_until_its_revocation_ends() {
    let dir = tempfile::tempdir().unwrap();
    let sh = worker(dir.path());
    let rt = runtime();
    rt.block_on(async {
        let svc = Service(sh.clone());
        // `sleep` ignores the revocation: it is killed after its grace.
        svc.launch(Request::new(launch(5))).await.unwrap();
        let five = LaunchRef {
            job_id: 5,
            launch: 1,
        };
        let mut r = revoke(5);
        r.kill = false;
        r.grace_s = 1.0;
        let call = tokio::spawn({
            let svc = Service(sh.clone());
            async move { svc.revoke(Request::new(r)).await }
        });
        let t = Instant::now();
        while sh.lock().launches.contains_key(&5) {
            assert!(t.elapsed() < Duration::from_secs(5), "not taken");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(sh.lock().running(), vec![five], "during its grace");
        call.await.unwrap().unwrap();
        assert!(t.elapsed() >= Duration::from_millis(900));
        let st = sh.lock();
        assert!(st.running().is_empty() && st.stopping.is_empty());
    });
}

/// A launch that fails to start after its caller hung up is reported
/// ended (a scheduler that restarted meanwhile may have adopted it), and
/// leaves nothing held.
#[test]
fn a_launch_that_fails_to_start_unheard_is_reported_ended() {
    let dir = tempfile::tempdir().unwrap();
    let sh = worker(dir.path());
    let rt = runtime();
    rt.block_on(async {
        let svc = Service(sh.clone());
        let mut r = launch(4);
        r.command = vec!["/nonexistent/blox-job".into()];
        hang_up(svc.launch(Request::new(r))).await;
        let t = Instant::now();
        while !sh.lock().starting.is_empty() {
            assert!(t.elapsed() < Duration::from_secs(20), "still starting");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    });
    let st = sh.lock();
    assert!(st.launches.is_empty() && st.running().is_empty());
    let (e, _) = st.exits.last().expect("its end is reported");
    assert_eq!(e.launch.map(|l| l.job_id), Some(4));
    assert!(!e.finished && e.reason.contains("nonexistent"), "{e:?}");
}

/// A launch still starting is reported, with its GPUs and ranks, and a
/// scheduler's stop marks it to stop as soon as it runs.
#[test]
fn a_starting_launch_is_reported_and_can_be_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let sh = worker(dir.path());
    let mut r = launch(3);
    r.process_per_gpu = true;
    r.world_size = 4;
    r.first_rank = 2;
    let spec = check_and_reserve(&sh, &mut sh.lock(), &r, r.launch.unwrap()).unwrap();
    drop(spec);
    let reports = sh.lock().reports();
    assert_eq!(reports.len(), 1);
    let rep = &reports[0];
    assert_eq!(
        (rep.gpus.clone(), rep.first_rank, rep.ranks, rep.world_size),
        (vec![0, 1], 2, 2, 4)
    );
    assert_eq!(sh.lock().running(), vec![r.launch.unwrap()]);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // Another launch number of the job is not this one.
    let other = LaunchRef {
        job_id: 3,
        launch: 2,
    };
    rt.block_on(super::super::stop_launch_within(&sh, other, Duration::ZERO));
    assert!(!sh.lock().starting[&3].revoked);
    rt.block_on(super::super::stop_launch_within(
        &sh,
        r.launch.unwrap(),
        Duration::ZERO,
    ));
    assert!(sh.lock().starting[&3].revoked);
    // Revoked, it is killed as it runs: not one to adopt.
    assert!(sh.lock().reports().is_empty());
    assert_eq!(sh.lock().running().len(), 1);
}
