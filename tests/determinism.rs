//! A simulation is a function of its inputs: no wall-clock limit, thread
//! count or machine load may change a decision. Each test runs
//! the same config under conditions that would change a time- or
//! thread-dependent result, and asserts byte-identical `jobs.csv`.

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

fn out_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("blox-det-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// `blox sim ARGS --out DIR --quiet` with `env` set; returns jobs.csv and
/// rounds.csv.
fn sim(tag: &str, args: &[&str], env: &[(&str, &str)]) -> (String, String) {
    let dir = out_dir(tag);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_blox"));
    cmd.current_dir(env!("CARGO_MANIFEST_DIR"))
        .arg("sim")
        .args(args)
        .arg("--out")
        .arg(&dir)
        .arg("--quiet");
    for (k, v) in env {
        cmd.env(k, v);
    }
    let o = cmd.output().unwrap();
    assert!(
        o.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).unwrap();
    let r = (read("jobs.csv"), read("rounds.csv"));
    let _ = std::fs::remove_dir_all(&dir);
    r
}

/// Two threads spinning on every core while `f` runs.
fn beside_a_cpu_hog<T>(f: impl FnOnce() -> T) -> T {
    let stop = Arc::new(AtomicBool::new(false));
    let hogs: Vec<_> = (0..2)
        .map(|_| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut x = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
                    std::hint::black_box(x);
                }
            })
        })
        .collect();
    let r = f();
    stop.store(true, Ordering::Relaxed);
    for h in hogs {
        h.join().unwrap();
    }
    r
}

fn first_diff(a: &str, b: &str) -> String {
    for (i, (x, y)) in a.lines().zip(b.lines()).enumerate() {
        if x != y {
            return format!("line {}: {x:?} vs {y:?}", i + 1);
        }
    }
    format!("{} vs {} lines", a.lines().count(), b.lines().count())
}

const SIA: [&str; 7] = [
    "examples/configs/sia/sia.toml",
    "--workload",
    "data/sia/workloads/saturn/workload-7.csv",
    "--set",
    "run.max_time_s=5400",
    "--set",
    "run.allow_unfinished=true",
];

/// The case: Sia's wall-clock limit made small enough to bind on
/// any machine (1 µs), with CPU hogs beside the run, gives the same
/// jobs.csv as an unbounded limit on an idle machine: a simulation never
/// reads the clock (`RoundInfo::wall_clock` is false), only its node budget.
#[test]
fn sia_does_not_read_the_clock_in_a_simulation() {
    let mut idle = SIA.to_vec();
    idle.extend(["--set", "scheduling.solver_time_limit_s=3600"]);
    let (want, _) = sim("sia-idle", &idle, &[]);
    let mut hurried = SIA.to_vec();
    hurried.extend(["--set", "scheduling.solver_time_limit_s=0.000001"]);
    let (got, _) = beside_a_cpu_hog(|| sim("sia-hurried", &hurried, &[]));
    assert!(want == got, "jobs.csv differs: {}", first_diff(&want, &got));
    assert!(want.lines().count() > 20, "too few jobs to show anything");
}

/// A node budget small enough to stop most searches is deterministic too:
/// the same decisions with or without load, and every round whose search
/// it stopped too far from the bound says so in rounds.csv.
#[test]
fn sias_node_budget_is_deterministic_and_reported() {
    let mut tight = SIA.to_vec();
    tight.extend([
        "--set",
        "scheduling.solver_max_nodes=1",
        "--set",
        "scheduling.solver_accept_gap=0",
    ]);
    let (a, rounds) = sim("sia-tight-a", &tight, &[]);
    let (b, _) = beside_a_cpu_hog(|| sim("sia-tight-b", &tight, &[]));
    assert!(a == b, "jobs.csv differs: {}", first_diff(&a, &b));
    let header = rounds.lines().next().unwrap();
    assert!(header.ends_with(",note"), "{header}");
    let noted = rounds
        .lines()
        .filter(|l| l.contains("solver_max_nodes = 1"))
        .count();
    assert!(noted > 0, "no round reports the node budget:\n{rounds}");
    assert!(rounds.contains("every job keeps its allocation"));
}

/// Pollux's genetic algorithm evaluates offspring on rayon's threads; its
/// draws are seeded per offspring, so one thread or several give the same
/// allocations.
#[test]
fn pollux_is_the_same_on_one_thread_and_on_several() {
    let args = [
        "examples/configs/pollux-workloads/pollux.toml",
        "--set",
        "run.max_time_s=1800",
        "--set",
        "run.allow_unfinished=true",
    ];
    let (one, _) = sim("pollux-1", &args, &[("RAYON_NUM_THREADS", "1")]);
    let (many, _) = beside_a_cpu_hog(|| sim("pollux-4", &args, &[("RAYON_NUM_THREADS", "4")]));
    assert!(one == many, "jobs.csv differs: {}", first_diff(&one, &many));
}

/// Policy synthesis runs its forks on rayon's threads and picks the best
/// score: the choice, and so the run, does not depend on their number.
#[test]
fn synthesis_is_the_same_on_one_thread_and_on_several() {
    let args = [
        "examples/configs/synth-philly.toml",
        "--set",
        "run.max_time_s=43200",
        "--set",
        "run.allow_unfinished=true",
    ];
    let (one, r1) = sim("synth-1", &args, &[("RAYON_NUM_THREADS", "1")]);
    let (many, r4) = beside_a_cpu_hog(|| sim("synth-4", &args, &[("RAYON_NUM_THREADS", "4")]));
    assert!(one == many, "jobs.csv differs: {}", first_diff(&one, &many));
    let policies = |r: &str| -> Vec<String> {
        r.lines()
            .map(|l| l.split(',').nth(6).unwrap_or("").to_string())
            .collect()
    };
    assert_eq!(policies(&r1), policies(&r4));
}

/// FNV-1a, 64 bits: a fingerprint of an output file.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The loop is made faster without changing a decision. The
/// fingerprints of `jobs.csv`, `rounds.csv` and `events.jsonl` (every launch
/// with its GPUs, every preemption and wait reason) of FIFO, LAS, SRTF and
/// Tiresias under two placements, on an overloaded slice of the scale
/// benchmark (5,000 Philly-drawn jobs, 256 GPUs; LAS preempts 14,200 times),
/// were recorded with the loop of 30e9709, before the speed work
/// (`blox sim examples/configs/scale-1m.toml --set scheduling.policy=P
/// --set placement.policy='"PL"' --set workload.num_jobs=5000 --set
/// cluster.nodes=64 --set workload.jobs_per_hour=60 --out DIR`). The
/// `events.jsonl` fingerprints of FIFO, LAS and SRTF were recorded again
/// when wait reasons came to name the job a blocked one waits behind
///: with those reasons worded as before, the new logs give the
/// old fingerprints byte for byte.
#[test]
fn the_scale_benchmarks_decisions_are_those_recorded_before_the_speed_work() {
    // (policy, placement, jobs.csv, rounds.csv, events.jsonl)
    const RECORDED: [(&str, &str, u64, u64, u64); 8] = [
        (
            "fifo",
            "consolidated",
            0xf1e7a4b41f27daf0,
            0x02788f384d3dc513,
            0xaa3cd15909b52076,
        ),
        (
            "fifo",
            "first-free",
            0xf1e7a4b41f27daf0,
            0x9c19fe0e3594f7f0,
            0xa58c00b2c5234917,
        ),
        (
            "las",
            "consolidated",
            0xe9a3c5b85d1e767e,
            0x5f018db1277cf49d,
            0xcc6f49a8ff32d6cf,
        ),
        (
            "las",
            "first-free",
            0xe9a3c5b85d1e767e,
            0xd8be8ef2bf73e88b,
            0x23f6dc104bd1f174,
        ),
        (
            "srtf",
            "consolidated",
            0xdd07ac2852a194ca,
            0x249c4931762f3a45,
            0xa699f0f0fae06113,
        ),
        (
            "srtf",
            "first-free",
            0xdd07ac2852a194ca,
            0xdf6c77cff5f9d378,
            0x47df6ef9640ed9e4,
        ),
        (
            "tiresias",
            "consolidated",
            0x3be520ca7e45907b,
            0xc0819df7b31762ed,
            0x30b13db4e4ee30de,
        ),
        (
            "tiresias",
            "first-free",
            0x3be520ca7e45907b,
            0x34426e5360e525ba,
            0x76cc59f9a90c06fc,
        ),
    ];
    let mut wrong = Vec::new();
    for (policy, placement, jobs, rounds, events) in RECORDED {
        let dir = out_dir(&format!("scale-{policy}-{placement}"));
        let o = Command::new(env!("CARGO_BIN_EXE_blox"))
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .args(["sim", "examples/configs/scale-1m.toml", "--quiet", "--out"])
            .arg(&dir)
            .args(["--set", &format!("scheduling.policy={policy}")])
            .args(["--set", &format!("placement.policy=\"{placement}\"")])
            .args([
                "--set",
                "workload.num_jobs=5000",
                "--set",
                "cluster.nodes=64",
            ])
            .args(["--set", "workload.jobs_per_hour=60"])
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        for (file, want) in [
            ("jobs.csv", jobs),
            ("rounds.csv", rounds),
            ("events.jsonl", events),
        ] {
            let got = fnv1a(&std::fs::read(dir.join(file)).unwrap());
            if got != want {
                wrong.push(format!(
                    "{policy}/{placement} {file}: {got:#018x}, recorded {want:#018x}"
                ));
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
    assert!(wrong.is_empty(), "outputs changed:\n{}", wrong.join("\n"));
}
