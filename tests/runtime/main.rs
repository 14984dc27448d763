//! End to end on loopback, with real processes: `blox scheduler`, two
//! `blox worker`s × 2 logical GPUs and jobs from `blox submit`. Jobs are
//! preempted and resume; a worker is killed mid-job; the scheduler is killed
//! and restarted on its job table; every job finishes and none is lost.
//! Every process started here is killed when the test ends, pass or fail.

mod answers;
#[path = "../common/mod.rs"]
mod common;
mod faults;
#[path = "../shared/mod.rs"]
mod shared;

use blox_runtime::ctl::Ctl;
use blox_runtime::net::Security;
use blox_runtime::proto::JobInfo;
use common::*;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Children killed (SIGKILL) and reaped on drop.
#[derive(Default)]
struct Procs(Vec<(String, Child)>);

impl Procs {
    /// Starts `blox ARGS`, waits for its "listening on ADDR" line, returns ADDR.
    fn start(&mut self, name: &str, args: &[&str], log: &Path) -> String {
        let mut child = Command::new(BLOX)
            .args(args)
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(log).unwrap())
            .env("RUST_LOG", "info")
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        self.0.push((name.into(), child));
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if let Some(rest) = line.split("listening on ").nth(1) {
                    let addr = rest.split_whitespace().next().unwrap_or("").to_string();
                    let _ = tx.send(addr);
                }
            }
        });
        match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(a) => a,
            Err(_) => panic!(
                "{name} did not start: {}",
                std::fs::read_to_string(log).unwrap_or_default()
            ),
        }
    }

    /// Writes `config` to `cfg` and starts `blox scheduler --config CFG`
    /// (logging to scheduler.log beside it); returns its address.
    fn scheduler(&mut self, cfg: &Path, config: &str) -> String {
        std::fs::write(cfg, config).unwrap();
        self.start(
            "scheduler",
            &["scheduler", "--config", cfg.to_str().unwrap()],
            &cfg.with_file_name("scheduler.log"),
        )
    }

    /// Starts `blox worker` `name` of `gpus` GPUs for the scheduler at
    /// `addr`, working in (and logging beside) DIR/NAME, with `extra` args.
    fn worker(&mut self, addr: &str, d: &Path, name: &str, gpus: u32, extra: &[&str]) {
        let workdir = d.join(name);
        let gpus = gpus.to_string();
        let mut args = vec![
            "worker",
            "--scheduler",
            addr,
            "--gpus",
            &gpus,
            "--name",
            name,
            "--workdir",
            workdir.to_str().unwrap(),
            "--allow-root-jobs",
        ];
        args.extend(extra);
        self.start(name, &args, &d.join(format!("{name}.log")));
    }

    fn pid(&self, name: &str) -> u32 {
        self.0.iter().find(|(n, _)| n == name).unwrap().1.id()
    }

    /// True while process `name` runs.
    fn alive(&mut self, name: &str) -> bool {
        let (_, c) = self.0.iter_mut().find(|(n, _)| n == name).unwrap();
        matches!(c.try_wait(), Ok(None))
    }

    /// Sends `signal` (a `kill` name: STOP, CONT, …) to process `name`.
    fn signal(&self, name: &str, signal: &str) {
        let (_, c) = self.0.iter().find(|(n, _)| n == name).unwrap();
        let ok = Command::new("kill")
            .args([&format!("-{signal}"), &c.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill -{signal} {name}");
    }

    fn kill(&mut self, name: &str) {
        let i = self.0.iter().position(|(n, _)| n == name).unwrap();
        let (_, mut c) = self.0.remove(i);
        c.kill().unwrap();
        c.wait().unwrap();
    }
}

impl Drop for Procs {
    fn drop(&mut self) {
        for (_, c) in &mut self.0 {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Processes (of this user) whose environment names a control directory
/// under `dir`: job processes still alive.
fn job_processes_under(dir: &Path) -> Vec<u32> {
    let needle = format!("BLOX_CONTROL_DIR={}", dir.display());
    let mut out = Vec::new();
    for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if let Ok(env) = std::fs::read(e.path().join("environ")) {
            if env
                .split(|b| *b == 0)
                .any(|v| v.starts_with(needle.as_bytes()))
            {
                // A zombie has an empty environ; this one is running.
                out.push(pid);
            }
        }
    }
    out
}

/// The command lines (arguments joined by spaces) of the job processes
/// under `dir`, as [`job_processes_under`] finds them.
fn job_commands_under(dir: &Path) -> Vec<String> {
    job_processes_under(dir)
        .into_iter()
        .filter_map(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).ok())
        .map(|c| {
            c.split(|b| *b == 0)
                .filter(|a| !a.is_empty())
                .map(|a| String::from_utf8_lossy(a).into_owned())
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect()
}

fn status(addr: &str, sec: &Security) -> Vec<JobInfo> {
    // The scheduler may be restarting: retry.
    for _ in 0..100 {
        if let Ok(mut c) = Ctl::connect(addr, sec) {
            if let Ok(s) = c.status(&[]) {
                return s.jobs;
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("the scheduler at {addr} does not answer");
}

/// Waits until `n` workers are alive at the scheduler.
fn wait_for_workers(addr: &str, sec: &Security, n: usize) {
    wait_until("the workers registered", Duration::from_secs(30), || {
        Ctl::connect(addr, sec)
            .ok()
            .and_then(|mut c| c.status(&[]).ok())
            .is_some_and(|s| s.workers.iter().filter(|w| w.alive).count() >= n)
    });
}

/// A 1-GPU toy job of `secs` seconds (iterations of 20 ms).
fn toy_submission(
    toy: &Path,
    name: &str,
    secs: f64,
    estimate: Option<f64>,
) -> blox_runtime::proto::JobSubmission {
    blox_runtime::proto::JobSubmission {
        name: name.into(),
        gpus: 1,
        duration_s: estimate,
        command: vec![
            toy.display().to_string(),
            "--duration-s".into(),
            secs.to_string(),
            "--iteration-s".into(),
            "0.02".into(),
        ],
        ..Default::default()
    }
}

fn wait_until(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(t.elapsed() < limit, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Job `job`'s directory under `base` (a worker's `jobs/` or the shared
/// checkpoint directory), under the job table's identity `c<16 hex>`.
fn keyed_dir(base: &Path, job: u64) -> PathBuf {
    let keyed = std::fs::read_dir(base)
        .into_iter()
        .flatten()
        .flatten()
        .find(|e| {
            let n = e.file_name().to_string_lossy().to_string();
            n.len() == 17 && n.starts_with('c')
        });
    keyed
        .map_or(base.to_path_buf(), |e| e.path())
        .join(job.to_string())
}

#[test]
fn jobs_survive_preemption_a_killed_worker_and_a_scheduler_restart() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let toy = toy_job();
    blox_runtime::net::write_private(&d.join("token"), "e2e-token\n").unwrap();
    let cfg = d.join("scheduler.toml");
    std::fs::write(
        &cfg,
        "[run]\nround_s = 0.5\n[scheduling]\npolicy = \"las\"\n[placement]\npolicy = \"consolidated\"\n\
         [runtime]\nstate = \"state.redb\"\ncheckpoint_dir = \"checkpoints\"\ntoken_file = \"token\"\n\
         heartbeat_s = 0.2\nworker_timeout_s = 2.0\ngrace_s = 5\n",
    )
    .unwrap();
    let token = d.join("token");
    let sec = Security {
        token: Some(Security::token_from_file(&token).unwrap()),
        tls: None,
    };
    let mut procs = Procs::default();
    let cfg_s = cfg.to_str().unwrap();
    let token_s = token.to_str().unwrap();
    // The first start picks a free port; the restart listens on the same one,
    // where the workers look.
    let addr = procs.start(
        "scheduler",
        &["scheduler", "--config", cfg_s, "--listen", "127.0.0.1:0"],
        &d.join("scheduler.log"),
    );
    for w in ["w0", "w1"] {
        procs.worker(&addr, d, w, 2, &["--token-file", token_s]);
    }
    // Both workers are in the cluster once a 4-GPU submission is accepted.
    let submit = |name: &str, gpus: u32, secs: f64| -> u64 {
        let o = Command::new(BLOX)
            .args([
                "submit",
                "--scheduler",
                &addr,
                "--token-file",
                token_s,
                "--name",
                name,
                "--gpus",
                &gpus.to_string(),
                "--duration-s",
                &secs.to_string(),
                "--",
                toy.to_str().unwrap(),
                "--duration-s",
                &secs.to_string(),
                "--iteration-s",
                "0.02",
            ])
            .output()
            .unwrap();
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success(),
            "{out}{}",
            String::from_utf8_lossy(&o.stderr)
        );
        out.trim().rsplit(' ').next().unwrap().parse().unwrap()
    };
    wait_for_workers(&addr, &sec, 2);
    // Work for 4 GPUs and more: LAS preempts the long jobs for new ones.
    let mut ids = vec![
        submit("long-a", 2, 6.0),
        submit("long-b", 2, 6.0),
        submit("mid-a", 1, 3.0),
    ];
    // More work arrives once the first jobs are under way.
    wait_until(
        "the first jobs make progress",
        Duration::from_secs(30),
        || {
            status(&addr, &sec)
                .iter()
                .filter(|j| j.status == "running" && j.progress > 0.0)
                .count()
                >= 2
        },
    );
    ids.push(submit("mid-b", 1, 3.0));
    ids.push(submit("short", 2, 1.5));

    // Kill w1 while it runs a job that has made progress.
    let mut victim = None;
    wait_until("a job runs on w1", Duration::from_secs(30), || {
        victim = status(&addr, &sec).into_iter().find(|j| {
            j.status == "running" && j.gpus.iter().any(|g| g.starts_with("w1-")) && j.progress > 0.0
        });
        victim.is_some()
    });
    let victim = victim.unwrap();
    // It has checkpointed (the toy job saves every few iterations) before
    // its worker dies.
    let checkpoint = keyed_dir(&d.join("checkpoints"), victim.id).join("iteration");
    wait_until(
        "the job on w1 checkpointed",
        Duration::from_secs(30),
        || {
            blox_client::latest_checkpoint(&checkpoint)
                .and_then(|p| std::fs::read_to_string(p).ok())
                .and_then(|s| s.trim().parse::<u64>().ok())
                .is_some_and(|i| i > 0)
        },
    );
    procs.kill("w1");
    // Its job processes died with it.
    wait_until(
        "w1's job processes are gone",
        Duration::from_secs(5),
        || job_processes_under(&d.join("w1")).is_empty(),
    );
    // After the heartbeat timeout its job is requeued, and runs again.
    wait_until(
        "the killed worker's job runs again",
        Duration::from_secs(30),
        || {
            status(&addr, &sec)
                .iter()
                .find(|j| j.id == victim.id)
                .is_some_and(|j| j.launches > victim.launches || j.status == "finished")
        },
    );

    // Kill the scheduler mid-run and start it again on the same job table.
    procs.kill("scheduler");
    let addr2 = procs.start(
        "scheduler",
        &["scheduler", "--config", cfg_s, "--listen", &addr],
        &d.join("scheduler2.log"),
    );
    assert_eq!(addr2, addr);
    // A fresh worker takes w1's place.
    procs.worker(&addr, d, "w2", 2, &["--token-file", token_s]);
    let after = status(&addr, &sec);
    assert_eq!(
        after.len(),
        ids.len(),
        "the job table kept every job: {after:?}"
    );
    // Until a worker has registered again the restarted scheduler has no
    // GPUs and refuses submissions (FAILED_PRECONDITION).
    wait_for_workers(&addr, &sec, 1);
    ids.push(submit("after-restart", 1, 1.0));

    // Every job ends; where one does not, the jobs and the restarted
    // scheduler's log say why.
    let mut last = Vec::new();
    let t = Instant::now();
    while !(last.len() == ids.len()
        && last
            .iter()
            .all(|j: &JobInfo| matches!(j.status.as_str(), "finished" | "failed" | "rejected")))
    {
        if t.elapsed() > Duration::from_secs(120) {
            let log = std::fs::read_to_string(d.join("scheduler2.log")).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(60).collect();
            let jobs: Vec<String> = last
                .iter()
                .map(|j| {
                    format!(
                        "{} {} {} launches={} gpus={:?} reason={:?} wait={:?}",
                        j.id, j.name, j.status, j.launches, j.gpus, j.reason, j.wait
                    )
                })
                .collect();
            panic!(
                "timed out waiting until every job ended:\n{}\nthe restarted scheduler's log, last lines first:\n{}",
                jobs.join("\n"),
                tail.join("\n")
            );
        }
        std::thread::sleep(Duration::from_millis(50));
        last = status(&addr, &sec);
    }
    for j in &last {
        assert_eq!(j.status, "finished", "{j:?}");
        assert!(ids.contains(&j.id));
    }
    // Someone was preempted by LAS and resumed.
    assert!(last.iter().any(|j| j.preemptions > 0), "{last:?}");
    // The killed worker's job resumed from a checkpoint, not from scratch.
    let ck: u64 = std::fs::read_to_string(
        blox_client::latest_checkpoint(
            &keyed_dir(&d.join("checkpoints"), victim.id).join("iteration"),
        )
        .unwrap(),
    )
    .unwrap()
    .trim()
    .parse()
    .unwrap();
    assert!(ck > 0);
    let resumed = ["w0", "w2"].iter().any(|w| {
        let jd = keyed_dir(&d.join(w).join("jobs"), victim.id);
        std::fs::read_dir(&jd)
            .into_iter()
            .flatten()
            .flatten()
            .any(|e| {
                std::fs::read_to_string(e.path().join("stderr"))
                    .unwrap_or_default()
                    .contains("resumed at iteration")
                    && !std::fs::read_to_string(e.path().join("stderr"))
                        .unwrap_or_default()
                        .contains("resumed at iteration 0\n")
            })
    });
    assert!(
        resumed,
        "job {} did not resume from its checkpoint",
        victim.id
    );
    drop(procs);
    assert!(
        job_processes_under(d).is_empty(),
        "job processes outlived the test"
    );
}

#[test]
fn clients_and_workers_explain_what_is_wrong() {
    // No scheduler at that address (port 1 is reserved; nothing listens).
    let port = 1;
    let o = Command::new(BLOX)
        .args(["status", "--scheduler", &format!("127.0.0.1:{port}")])
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("unavailable"), "{err}");
    // A submission without a command.
    let o = Command::new(BLOX)
        .args(["submit", "--gpus", "1"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("no command"), "{err}");
    // A bad job file names the file and the field.
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("job.toml");
    std::fs::write(&f, "gpus = 1\ncommand = [\"x\"]\ngpu = 2\n").unwrap();
    let o = Command::new(BLOX)
        .args(["submit", "--file", f.to_str().unwrap()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("job.toml") && err.contains("gpu"), "{err}");
    // A worker with --gpus 0 refuses to start.
    let o = Command::new(BLOX)
        .args([
            "worker",
            "--gpus",
            "0",
            "--allow-root-jobs",
            "--scheduler",
            &format!("127.0.0.1:{port}"),
        ])
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("--gpus"), "{err}");
    // As root, a worker that would run jobs as root says how not to.
    let me = Command::new("id").arg("-u").output().unwrap();
    if String::from_utf8_lossy(&me.stdout).trim() == "0" {
        let o = Command::new(BLOX)
            .args([
                "worker",
                "--gpus",
                "1",
                "--scheduler",
                &format!("127.0.0.1:{port}"),
            ])
            .output()
            .unwrap();
        assert!(!o.status.success());
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains("--job-user") && err.contains("--allow-root-jobs"),
            "{err}"
        );
    }
}

#[test]
fn a_worker_stopped_with_sigterm_lets_its_jobs_checkpoint_and_they_resume_elsewhere() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let toy = toy_job();
    let mut procs = Procs::default();
    let addr = procs.scheduler(
        &d.join("scheduler.toml"),
        "[run]\nround_s = 0.5\n[runtime]\nlisten = \"127.0.0.1:0\"\nstate = \"state.redb\"\n\
         checkpoint_dir = \"checkpoints\"\nheartbeat_s = 0.2\nworker_timeout_s = 1.5\n",
    );
    let worker = |procs: &mut Procs, name: &str| procs.worker(&addr, d, name, 1, &[]);
    worker(&mut procs, "a");
    let sec = Security::default();
    wait_for_workers(&addr, &sec, 1);
    let mut ctl = Ctl::connect(&addr, &sec).unwrap();
    let id = ctl.submit(toy_submission(&toy, "long", 4.0, None)).unwrap();
    wait_until("the job made progress", Duration::from_secs(30), || {
        status(&addr, &sec)
            .iter()
            .any(|j| j.id == id && j.progress >= 0.2)
    });
    // SIGTERM: the worker revokes its job, which checkpoints and exits 0.
    let pid = procs.0.iter().find(|(n, _)| n == "a").unwrap().1.id();
    assert!(Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .unwrap()
        .success());
    let i = procs.0.iter().position(|(n, _)| n == "a").unwrap();
    let (_, mut child) = procs.0.remove(i);
    let t = Instant::now();
    let code = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "the worker did not stop"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(code.success(), "{code:?}");
    let err =
        std::fs::read_to_string(keyed_dir(&d.join("a/jobs"), id).join("launch-1/stderr")).unwrap();
    let at: u64 = std::fs::read_to_string(
        blox_client::latest_checkpoint(&keyed_dir(&d.join("checkpoints"), id).join("iteration"))
            .unwrap(),
    )
    .unwrap()
    .trim()
    .parse()
    .unwrap();
    assert!(
        at > 0 && err.contains(&format!("checkpointed at iteration {at}")),
        "{err} / {at}"
    );
    // Another worker takes over; the job resumes there from that iteration.
    worker(&mut procs, "b");
    let mut last = Vec::new();
    wait_until("the job finished", Duration::from_secs(60), || {
        last = status(&addr, &sec);
        last.iter().any(|j| j.id == id && j.status == "finished")
    });
    let err =
        std::fs::read_to_string(keyed_dir(&d.join("b/jobs"), id).join("launch-2/stderr")).unwrap();
    assert!(err.contains(&format!("resumed at iteration {at}")), "{err}");
}

#[test]
fn policy_synthesis_runs_on_the_real_scheduler() {
    // Blox §5.2 on a live cluster: FIFO to start; short jobs queued behind a
    // long one make the synthesizer's forks prefer SRTF, and it switches.
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let toy = toy_job();
    let mut port = blox_harness::soak::ports::reserve_port().unwrap();
    let dashboard = port.release();
    let mut procs = Procs::default();
    let log = d.join("scheduler.log");
    let addr = procs.scheduler(
        &d.join("scheduler.toml"),
        &format!("[run]\nround_s = 0.5\n[scheduling]\npolicy = \"fifo\"\n\
         [runtime]\nlisten = \"127.0.0.1:0\"\nstate = \"state.redb\"\nheartbeat_s = 0.2\nworker_timeout_s = 1.5\n\
         dashboard_listen = \"{dashboard}\"\n\
         [synthesizer]\nevery_rounds = 1\nhorizon_s = 600\nscheduling = [{{ policy = \"fifo\" }}, {{ policy = \"srtf\" }}]\n"),
    );
    procs.worker(&addr, d, "w", 1, &[]);
    let sec = Security::default();
    wait_for_workers(&addr, &sec, 1);
    let mut ctl = Ctl::connect(&addr, &sec).unwrap();
    let sub = |name: &str, secs: f64| toy_submission(&toy, name, secs, Some(secs));
    let mut ids = vec![ctl.submit(sub("long", 6.0)).unwrap()];
    wait_until("the long job runs", Duration::from_secs(30), || {
        status(&addr, &sec).iter().any(|j| j.status == "running")
    });
    for i in 0..3 {
        ids.push(ctl.submit(sub(&format!("short-{i}"), 0.4)).unwrap());
    }
    let mut policies = std::collections::BTreeSet::new();
    wait_until("every job finished", Duration::from_secs(60), || {
        let s = Ctl::connect(&addr, &sec).unwrap().status(&[]).unwrap();
        policies.insert(s.policy.clone());
        s.jobs.iter().all(|j| j.status == "finished")
    });
    assert!(
        policies.iter().any(|p| p.contains("srtf")),
        "the synthesizer never switched: {policies:?}"
    );
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("policies switched"), "{text}");
    // The event log and the dashboard's policy timeline show the switch.
    let events = d.join("events.jsonl");
    let printed = shared::blox_ok(&[Path::new("events"), &events]);
    assert!(
        printed.contains(
            "policies switched: accept-all/fifo/first-free -> accept-all/srtf/first-free"
        ),
        "{printed}"
    );
    let mut conn = std::net::TcpStream::connect(dashboard).unwrap();
    std::io::Write::write_all(&mut conn, b"GET /api/series HTTP/1.1\r\nHost: b\r\n\r\n").unwrap();
    let mut reply = String::new();
    std::io::Read::read_to_string(&mut conn, &mut reply).unwrap();
    let body = reply.split_once("\r\n\r\n").unwrap().1;
    let series: serde_json::Value = serde_json::from_str(body).unwrap();
    let timeline: Vec<&str> = series["policies"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["policy"].as_str().unwrap())
        .collect();
    assert!(timeline.len() >= 2, "{timeline:?}");
    assert_eq!(timeline[0], "accept-all/fifo/first-free");
    assert!(
        timeline.contains(&"accept-all/srtf/first-free"),
        "{timeline:?}"
    );
}
