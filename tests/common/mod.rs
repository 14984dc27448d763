//! What the end-to-end tests of the `blox` binary share.

use std::path::{Path, PathBuf};
use std::process::Command;

pub const BLOX: &str = env!("CARGO_BIN_EXE_blox");

/// The example job, built next to `blox` (by `cargo test --workspace`, or here).
pub fn toy_job() -> PathBuf {
    let p = Path::new(BLOX).with_file_name("blox-toy-job");
    if !p.exists() {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let ok = Command::new(cargo)
            .args(["build", "-p", "blox-runtime", "--bin", "blox-toy-job"])
            .status()
            .unwrap()
            .success();
        assert!(ok, "building blox-toy-job failed");
    }
    p
}
