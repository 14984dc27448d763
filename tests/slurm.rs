//! `examples/slurm/sweep.sbatch` on a real Slurm: a sweep split into a job
//! array of 2 shards, merged by a dependent job, equals the unsharded sweep.
//!
//! It needs a Slurm. It uses the one `sinfo` reaches; with
//! `BLOX_TEST_SLURM=start` and Debian's `slurm-wlm` installed (and `munged`
//! running, as root) it starts a private one-node Slurm from
//! `examples/slurm/slurm.conf.single-node` and stops it afterwards.
//! It is an ignored test, counted as such by a plain `cargo test`; run it
//! with `-- --ignored`, and without a Slurm it fails saying why.

mod shared;

use shared::sweep_table;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn run(cmd: &mut Command) -> Option<Output> {
    cmd.stdin(Stdio::null()).output().ok()
}

fn ok(o: &Option<Output>) -> bool {
    o.as_ref().is_some_and(|o| o.status.success())
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

fn on_path(bin: &str) -> bool {
    ok(&run(
        Command::new("sh").args(["-c", &format!("command -v {bin}")])
    ))
}

/// A Slurm to submit to: `SLURM_CONF` for the clients, and the daemons if
/// this test started them.
struct Slurm {
    conf: Option<PathBuf>,
    daemons: Vec<Child>,
}

impl Slurm {
    fn command(&self, bin: &str) -> Command {
        let mut c = Command::new(bin);
        if let Some(conf) = &self.conf {
            c.env("SLURM_CONF", conf);
        }
        c
    }

    /// The reachable Slurm, a private one, or why there is none.
    fn find_or_start(dir: &Path) -> Result<Slurm, String> {
        if !on_path("sbatch") {
            return Err("no `sbatch` on PATH (install slurm-wlm)".into());
        }
        let existing = Slurm {
            conf: None,
            daemons: Vec::new(),
        };
        let probe = run(existing.command("sinfo").arg("-h"));
        if ok(&probe) {
            return Ok(existing);
        }
        // What `sinfo` said, for the message (a Slurm present but down).
        let said = probe.as_ref().map_or("it did not run".to_string(), |o| {
            format!(
                "{} {}",
                String::from_utf8_lossy(&o.stdout).trim(),
                String::from_utf8_lossy(&o.stderr).trim()
            )
        });
        if std::env::var("BLOX_TEST_SLURM").as_deref() != Ok("start") {
            return Err(format!(
                "no Slurm answers `sinfo` (it said: {said}); set BLOX_TEST_SLURM=start to start a private one-node Slurm"
            ));
        }
        for bin in ["slurmctld", "slurmd", "munge"] {
            if !on_path(bin) {
                return Err(format!(
                    "BLOX_TEST_SLURM=start needs `{bin}` (slurm-wlm, munge)"
                ));
            }
        }
        if !ok(&run(Command::new("sh").args(["-c", "munge -n | unmunge"]))) {
            return Err("munge does not work: start `munged` (as root) first".into());
        }
        let host = run(Command::new("hostname").arg("-s"))
            .map(|o| stdout(&o))
            .unwrap_or_default();
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        let template =
            std::fs::read_to_string(repo().join("examples/slurm/slurm.conf.single-node"))
                .map_err(|e| e.to_string())?;
        let state = dir.join("slurm");
        let conf: String = template
            .lines()
            .map(|l| {
                if l.starts_with("SlurmctldHost=") {
                    format!("SlurmctldHost={host}")
                } else if l.starts_with("NodeName=") {
                    format!("NodeName={host} CPUs={cpus} RealMemory=1000 State=UNKNOWN")
                } else if l.starts_with("PartitionName=") {
                    format!(
                        "PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP"
                    )
                } else {
                    l.replace("/tmp/slurm", &state.display().to_string())
                }
            })
            .collect::<Vec<_>>()
            .join("\n");
        for sub in ["state", "spool", "log"] {
            std::fs::create_dir_all(state.join(sub)).map_err(|e| e.to_string())?;
        }
        let conf_path = dir.join("slurm.conf");
        std::fs::write(&conf_path, conf + "\n").map_err(|e| e.to_string())?;
        let mut slurm = Slurm {
            conf: Some(conf_path.clone()),
            daemons: Vec::new(),
        };
        for (bin, extra) in [("slurmctld", vec!["-D", "-i"]), ("slurmd", vec!["-D"])] {
            let child = slurm
                .command(bin)
                .args(["-f", conf_path.to_str().unwrap()])
                .args(extra)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .map_err(|e| format!("starting {bin}: {e}"))?;
            slurm.daemons.push(child);
        }
        let t = Instant::now();
        loop {
            let o = run(slurm.command("sinfo").args(["-h", "-o", "%T"]));
            if o.as_ref().is_some_and(|o| stdout(o).starts_with("idle")) {
                return Ok(slurm);
            }
            if t.elapsed() > Duration::from_secs(60) {
                let log =
                    std::fs::read_to_string(state.join("log/slurmctld.log")).unwrap_or_default();
                let tail: Vec<&str> = log.lines().rev().take(5).collect();
                return Err(format!(
                    "the private Slurm did not come up in 60 s: `sinfo -h -o %T` said {:?}; slurmctld's log ends {:?} (logs in {})",
                    o.as_ref().map(|o| format!("{} {}", stdout(o), String::from_utf8_lossy(&o.stderr).trim())),
                    tail,
                    state.join("log").display()
                ));
            }
            std::thread::sleep(Duration::from_millis(500));
        }
    }
}

impl Drop for Slurm {
    fn drop(&mut self) {
        for d in &mut self.daemons {
            let _ = d.kill();
            let _ = d.wait();
        }
    }
}

const SWEEP: &str = r#"
[cluster]
nodes = 2
gpus_per_node = 4

[run]
round_s = 60

[workload]
path = "trace.csv"

[scheduling]
policy = "fifo"

[sweep]
scheduling = ["fifo", "las", "srtf"]
seeds = [1, 2]
"#;

#[test]
#[ignore = "needs a Slurm (sinfo), or BLOX_TEST_SLURM=start with slurm-wlm and munged: cargo test --test slurm -- --ignored"]
fn a_sweep_runs_as_a_slurm_job_array_and_its_merge_equals_the_unsharded_sweep() {
    let dir = std::env::temp_dir().join(format!("blox-slurm-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let slurm = match Slurm::find_or_start(&dir) {
        Ok(s) => s,
        Err(why) => panic!("no Slurm to run on: {why}"),
    };
    std::fs::write(
        dir.join("trace.csv"),
        "job_id,arrival_s,num_gpus,duration_s\n0,0,4,600\n1,0,1,60\n2,30,2,300\n3,90,8,120\n",
    )
    .unwrap();
    std::fs::write(dir.join("sweep.toml"), SWEEP).unwrap();
    let blox = PathBuf::from(env!("CARGO_BIN_EXE_blox"));
    let path = format!(
        "{}:{}",
        blox.parent().unwrap().display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let out = dir.join("out");
    let submit = |args: &[&str]| -> String {
        let o = run(slurm
            .command("sbatch")
            .arg("--parsable")
            .arg(format!("--chdir={}", dir.display()))
            .arg(format!("--output={}/slurm-%A_%a.out", dir.display()))
            .arg("--cpus-per-task=1")
            .env("PATH", &path)
            .env("SWEEP", dir.join("sweep.toml"))
            .env("OUT", &out)
            .env("SHARDS", "2")
            .args(args))
        .expect("sbatch runs");
        assert!(
            o.status.success(),
            "sbatch {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        stdout(&o).split(';').next().unwrap().to_string()
    };
    let array = submit(&[
        "--export=ALL",
        "--array=0-1",
        repo().join("examples/slurm/sweep.sbatch").to_str().unwrap(),
    ]);
    let merge = submit(&[
        "--export=ALL",
        &format!("--dependency=afterok:{array}"),
        "--wrap",
        &format!(
            "blox sweep merge {o}/shard-0 {o}/shard-1 --out {o}/merged",
            o = out.display()
        ),
    ]);
    // Wait for both jobs to leave the queue.
    let t = Instant::now();
    loop {
        let o = run(slurm
            .command("squeue")
            .args(["-h", "-j", &format!("{array},{merge}")]))
        .expect("squeue runs");
        if stdout(&o).is_empty() {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(300),
            "the jobs did not finish in 300 s: {}",
            stdout(&o)
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    let logs = || {
        std::fs::read_dir(&dir)
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().starts_with("slurm-"))
            .map(|e| std::fs::read_to_string(e.path()).unwrap_or_default())
            .collect::<Vec<_>>()
            .join("\n")
    };
    assert!(
        out.join("merged/sweep.csv").is_file(),
        "no merged table; job logs:\n{}",
        logs()
    );
    // The same sweep file, unsharded, on this machine (a cell's hash covers
    // the config's path, so it is named the same way).
    let whole = dir.join("whole");
    let o = Command::new(&blox)
        .args(["sweep", dir.join("sweep.toml").to_str().unwrap()])
        .args(["--out", whole.to_str().unwrap()])
        .current_dir(&dir)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(sweep_table(&whole), sweep_table(&out.join("merged")));
    assert_eq!(sweep_table(&whole).len(), 6);
    let _ = std::fs::remove_dir_all(&dir);
}
