//! The README's "Writing a policy" works as written from a crate outside the
//! repository: its files are taken from the README, written to a temporary
//! folder (the repository's path put in place of `/path/to/blox-rs`), built
//! against this workspace by path, and its commands run.
//!
//! The crate shares this workspace's `target/` folder and `Cargo.lock` (so
//! nothing is fetched and only the blox crates and its own are compiled
//! anew) and builds offline.

mod shared;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

const PLACEHOLDER: &str = "/path/to/blox-rs";

/// The workspace's `[profile.dev]` (Cargo.toml) as `--config` values, one
/// per setting: `profile.dev.lto="off"`.
///
/// Settings for the workspace's own packages are left out. Cargo names a
/// path dependency's build after its place relative to the workspace root,
/// so a crate outside this workspace compiles the blox crates anew whatever
/// their settings; at the default opt-level they compile in half the time
/// (about 30 s instead of 60 s on 2 cores) and the README's commands run a
/// fraction of a second longer. What must match is the dependencies'
/// settings: those builds are shared.
fn dev_profile() -> Vec<String> {
    fn flatten(prefix: &str, table: &toml::Table, skip: &[String], out: &mut Vec<String>) {
        for (key, value) in table {
            if prefix == "profile.dev.package" && skip.contains(key) {
                continue;
            }
            // A bare key where TOML allows one, else quoted (`"*"`).
            let bare = key
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
            let key = if bare {
                key.clone()
            } else {
                format!("{key:?}")
            };
            match value {
                toml::Value::Table(t) => flatten(&format!("{prefix}.{key}"), t, skip, out),
                v => out.push(format!("{prefix}.{key}={v}")),
            }
        }
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let read = |dir: &Path| -> toml::Table {
        std::fs::read_to_string(dir.join("Cargo.toml"))
            .unwrap()
            .parse()
            .unwrap()
    };
    let manifest = read(root);
    let name = |m: &toml::Table| m["package"]["name"].as_str().unwrap().to_string();
    let mut members = vec![name(&manifest)];
    for dir in manifest["workspace"]["members"].as_array().unwrap() {
        members.push(name(&read(&root.join(dir.as_str().unwrap()))));
    }
    let mut out = Vec::new();
    flatten(
        "profile.dev",
        manifest["profile"]["dev"].as_table().unwrap(),
        &members,
        &mut out,
    );
    out
}

/// The README's files (`my-policy/<path>`: fenced block) and its commands.
fn readme_crate() -> (BTreeMap<String, String>, Vec<String>) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let section = readme
        .split("### Writing a policy")
        .nth(1)
        .expect("README has a Writing a policy section");
    let section = section.split("\n### ").next().unwrap();
    let mut files = BTreeMap::new();
    let mut commands = Vec::new();
    let mut lines = section.lines();
    let mut pending: Option<String> = None;
    while let Some(line) = lines.next() {
        if let Some(rest) = line.strip_prefix("`my-policy/") {
            pending = rest.split('`').next().map(str::to_string);
        } else if line.starts_with("```") {
            let lang = line.trim_start_matches('`');
            let mut body = String::new();
            for l in lines.by_ref() {
                if l.starts_with("```") {
                    break;
                }
                body.push_str(l);
                body.push('\n');
            }
            match pending.take() {
                Some(name) => {
                    files.insert(name, body);
                }
                None if lang == "sh" => commands.extend(
                    body.lines()
                        .filter(|l| l.starts_with("cargo run --"))
                        .map(|l| l.split('#').next().unwrap().trim().to_string()),
                ),
                None => {}
            }
        }
    }
    (files, commands)
}

#[test]
#[ignore = "long (a crate built from scratch: 35-40 s in a debug build): the README's long tests, run by .ci/run with --ignored"]
fn the_readme_policy_crate_builds_outside_the_repository_and_runs_every_tool() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let (files, commands) = readme_crate();
    for f in [
        "Cargo.toml",
        "src/lib.rs",
        "src/main.rs",
        "fewest.toml",
        "compare.toml",
    ] {
        assert!(files.contains_key(f), "the README shows my-policy/{f}");
    }
    assert_eq!(commands.len(), 4, "{commands:?}");
    let dir = tempfile::tempdir().unwrap();
    let krate = dir.path().join("my-policy");
    for (name, body) in &files {
        let p = krate.join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, body.replace(PLACEHOLDER, root.to_str().unwrap())).unwrap();
    }
    // Outside this workspace, resolved from this workspace's lock file.
    std::fs::copy(root.join("Cargo.lock"), krate.join("Cargo.lock")).unwrap();
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target"));
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    // The workspace's dev profile (Cargo.toml), which a crate outside it does not
    // inherit: without it every dependency is rebuilt here with full debug info,
    // a second multi-gigabyte copy of polars that once filled a CI disk. With it
    // the crate reuses the dependencies `cargo test` already built.
    let mut args = vec!["build".to_string(), "--offline".into(), "--quiet".into()];
    for setting in dev_profile() {
        args.extend(["--config".into(), setting]);
    }
    let build = Command::new(&cargo)
        .args(&args)
        .env("CARGO_TARGET_DIR", &target)
        .current_dir(&krate)
        .output()
        .unwrap();
    assert!(
        build.status.success(),
        "the README's crate does not build:\n{}",
        String::from_utf8_lossy(&build.stderr)
    );
    let bin = target.join("debug").join("my-policy");
    let out_dir = krate.join("sweep-out");
    let mut outputs = Vec::new();
    for cmd in &commands {
        let args: Vec<&str> = cmd
            .trim_start_matches("cargo run --")
            .split_whitespace()
            .collect();
        outputs.push(shared::run_ok(&bin, &krate, &args));
    }
    assert!(
        outputs[0].contains("fewest-gpus-first") && outputs[0].contains("las"),
        "{}",
        outputs[0]
    );
    assert!(
        outputs[1].contains("scheduling=fewest-gpus-first"),
        "{}",
        outputs[1]
    );
    assert!(outputs[1].contains("80 finished of 80"), "{}", outputs[1]);
    let table = std::fs::read_to_string(out_dir.join("sweep.csv")).unwrap();
    assert_eq!(table.lines().count(), 1 + 3, "{table}");
    assert!(table.contains("fewest-gpus-first"), "{table}");
    assert!(out_dir.join("summary.md").is_file(), "{}", outputs[3]);
    assert!(
        out_dir.join("compare-jct-cdf.png").is_file(),
        "{}",
        outputs[3]
    );
}

#[test]
fn the_policy_crate_builds_with_the_workspace_dev_profile() {
    let settings = dev_profile();
    for want in [
        r#"profile.dev.debug=false"#,
        r#"profile.dev.lto="off""#,
        r#"profile.dev.package.microlp.opt-level=3"#,
        r#"profile.dev.package.rand_chacha.opt-level=3"#,
    ] {
        assert!(settings.iter().any(|s| s == want), "{want}: {settings:?}");
    }
    // The workspace's own packages are compiled anew outside it: their
    // settings are left out (see `dev_profile`).
    assert!(!settings.iter().any(|s| s.contains("blox")), "{settings:?}");
}
