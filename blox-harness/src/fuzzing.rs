//! The bodies of the fuzz targets in `fuzz/` (`cargo +nightly fuzz run
//! TARGET`), here so the inputs the fuzzer found run as ordinary tests on
//! stable Rust too (`tests/fuzz_regressions.rs`). Each takes any bytes and
//! must return, never panic or hang: every bad input is an error value.

use std::path::{Path, PathBuf};

// The config target builds policies by name: the built-in ones are linked.
use blox_policies as _;

/// A config file and `--set` overrides: the text before a line `#--set`
/// is the config; each later `key=value` line is an override. The config
/// is parsed and every section a command reads is checked (policies by
/// name, cluster, runtime, workload settings), and a small workload is
/// loaded (its jobs generated), without running anything.
pub fn config(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let (source, sets) = text.split_once("\n#--set\n").unwrap_or((&text, ""));
    let overrides: Vec<(String, String)> = sets
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let Ok(cfg) = blox_config::Config::parse(source, "fuzz.toml", Path::new("."), &overrides)
    else {
        return;
    };
    let _ = blox_core::registry::build_policies(&cfg.admission, &cfg.scheduling, &cfg.placement);
    let _ = cfg.cluster_state();
    let _ = blox_runtime::scheduler::RuntimeConfig::from_config(&cfg);
    let _ = blox_sim::SimConfig::from_section(&cfg.section("sim"));
    let section = cfg.section("workload");
    let Ok(w) = blox_sim::workload::WorkloadConfig::from_section(&section) else {
        return;
    };
    // The workload too, as `blox sim` loads it (bursts, re-timing, sampling),
    // where one input stays cheap: a regular file of at most 1 MiB and at
    // most 500 jobs asked for.
    let small = std::fs::metadata(&w.path).is_ok_and(|m| m.is_file() && m.len() <= 1 << 20);
    if small && w.common.num_jobs.is_some_and(|n| n <= 500) {
        let _ = blox_sim::workload::load(&section, cfg.run.seed);
    }
}

/// This process's scratch directory (the `workload` target's files).
fn scratch_dir() -> PathBuf {
    std::env::temp_dir().join(format!("blox-fuzz-{}", std::process::id()))
}

/// Removes this process's scratch directory; a later input makes it again.
/// Call it when a run of inputs is over (`tests/fuzz_regressions.rs` does).
pub fn remove_scratch() {
    let _ = std::fs::remove_dir_all(scratch_dir());
}

/// A file for this process's fuzzing, rewritten on every input.
fn scratch(name: &str, data: &[u8]) -> Option<PathBuf> {
    let dir = scratch_dir();
    std::fs::create_dir_all(&dir).ok()?;
    let p = dir.join(name);
    std::fs::write(&p, data).ok()?;
    Some(p)
}

/// A workload file, as `--workload FILE` reads it: its format recognised
/// from its header (generic, Blox or Philly trace, Pollux workload), then
/// every row read.
pub fn workload(data: &[u8]) {
    let Some(file) = scratch("workload.csv", data) else {
        return;
    };
    let Some(cfg_file) = scratch("config.toml", b"[run]\nround_s = 60\n") else {
        return;
    };
    let cfg = blox_sim::ConfigRequest::new(&cfg_file)
        .workload(Some(file), "--workload")
        .load();
    if let Ok(cfg) = cfg {
        let _ = blox_sim::workload::load(&cfg.section("workload"), 1);
    }
}

/// The jobs file of `blox local`.
pub fn jobs_file(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let _ = blox_runtime::local::parse_jobs(&text, Path::new("jobs.toml"));
}

/// An RPC request: the first byte picks the call (`validate::RPCS`), the
/// rest is its protobuf body, decoded and checked as the services do.
pub fn rpc(data: &[u8]) {
    let Some((which, body)) = data.split_first() else {
        return;
    };
    if let Err(e) = blox_runtime::validate::check_rpc(*which, body) {
        // Every refusal is the sender's fault, and says which field.
        assert_eq!(e.code(), tonic::Code::InvalidArgument, "{e:?}");
    }
}
