//! Helpers the simulator's end-to-end tests share (`mod shared;`); each test
//! crate uses some of them.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn output<S: AsRef<std::ffi::OsStr>>(bin: &Path, dir: &Path, args: &[S]) -> Output {
    Command::new(bin)
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap()
}

/// Runs `BIN ARGS` in `dir`; panics with its output unless it succeeds;
/// returns stdout and stderr together.
pub fn run_ok<S: AsRef<std::ffi::OsStr> + std::fmt::Debug>(
    bin: &Path,
    dir: &Path,
    args: &[S],
) -> String {
    let o = output(bin, dir, args);
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(o.status.success(), "{} {args:?}: {text}", bin.display());
    text
}

/// Runs `blox ARGS` in the repository root; panics with its output unless
/// it succeeds; returns stdout and stderr together.
pub fn blox_ok<S: AsRef<std::ffi::OsStr> + std::fmt::Debug>(args: &[S]) -> String {
    run_ok(BLOX.as_ref(), ROOT.as_ref(), args)
}

/// Runs `blox ARGS` in the repository root; panics unless it fails;
/// returns its standard error.
pub fn blox_err<S: AsRef<std::ffi::OsStr> + std::fmt::Debug>(args: &[S]) -> String {
    let o = output(BLOX.as_ref(), ROOT.as_ref(), args);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(!o.status.success(), "{args:?} succeeded: {err}");
    err
}

const BLOX: &str = env!("CARGO_BIN_EXE_blox");
const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// `DIR/sweep.csv` without its wall-time column (the only one that differs
/// between runs of the same cells).
pub fn sweep_table(dir: &Path) -> Vec<Vec<String>> {
    let mut r = csv::Reader::from_path(dir.join("sweep.csv")).unwrap();
    let wall = r
        .headers()
        .unwrap()
        .iter()
        .position(|h| h == "wall_s")
        .unwrap();
    r.records()
        .map(|rec| {
            rec.unwrap()
                .iter()
                .enumerate()
                .filter(|(i, _)| *i != wall)
                .map(|(_, v)| v.to_string())
                .collect()
        })
        .collect()
}

/// A scratch folder under the system's temp folder, emptied when made and
/// removed when dropped, unless the test is failing: a failed test leaves its
/// files to read, a passing one leaves nothing (CI disks are small).
pub struct Scratch(PathBuf);

impl Scratch {
    /// `$TMPDIR/blox-{tag}-{pid}`, empty.
    pub fn new(tag: &str) -> Scratch {
        let d = std::env::temp_dir().join(format!("blox-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        Scratch(d)
    }
}

impl std::ops::Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.0
    }
}

impl AsRef<std::ffi::OsStr> for Scratch {
    fn as_ref(&self) -> &std::ffi::OsStr {
        self.0.as_os_str()
    }
}

impl AsRef<Path> for Scratch {
    fn as_ref(&self) -> &Path {
        &self.0
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}
