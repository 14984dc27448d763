//! Where a policy that reads the Pollux artifact's application profiles
//! (Optimus, the doubling heuristic) finds them.

use blox_core::{ConfigError, Section};
use std::path::{Path, PathBuf};

/// The profiles folder of a policy section: its own `key` if given (relative
/// to the config file), else the workload's, as the simulator finds them —
/// `[workload] traces_dir`, or `traces/` beside the workload file's folder.
/// `None` when neither is set; an error when the folder does not exist.
pub(crate) fn profiles_dir(
    p: &Section,
    key: &str,
    given: Option<&Path>,
) -> Result<Option<PathBuf>, ConfigError> {
    let (dir, from) = match given {
        Some(d) => (p.resolve_path(d), format!("`{key}`")),
        None => {
            let Some(w) = p.workload() else {
                return Ok(None);
            };
            let t = w.table();
            if let Some(d) = t.get("traces_dir").and_then(|v| v.as_str()) {
                (
                    w.resolve_path(Path::new(d)),
                    "`[workload] traces_dir`".into(),
                )
            } else if let Some(path) = t.get("path").and_then(|v| v.as_str()) {
                let dir = blox_goodput::profiles_beside(&w.resolve_path(Path::new(path)));
                if !dir.is_dir() {
                    // A workload without profiles beside it (a Philly trace).
                    return Ok(None);
                }
                (dir, "the workload's folder".into())
            } else {
                return Ok(None);
            }
        }
    };
    if !dir.is_dir() {
        return Err(p.error_at(
            key,
            format!(
                "{} (from {from}) is not a folder of application profiles",
                dir.display()
            ),
        ));
    }
    Ok(Some(dir))
}

#[cfg(test)]
mod tests {
    use super::*;
    use blox_config::Config;

    /// The `[scheduling]` section of a config written in `dir`.
    fn scheduling(dir: &Path, body: &str) -> Section {
        let text = format!("[cluster]\nnodes = 1\ngpus_per_node = 4\n{body}");
        Config::parse(&text, "c.toml", dir, &[])
            .unwrap()
            .scheduling
            .params
    }

    #[test]
    fn profiles_come_from_the_policy_then_the_workload_and_a_missing_folder_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let d = dir.path();
        std::fs::create_dir_all(d.join("data/traces")).unwrap();
        std::fs::create_dir_all(d.join("data/workloads")).unwrap();
        std::fs::create_dir_all(d.join("elsewhere")).unwrap();
        // Beside a Pollux-format workload's folder.
        let s = scheduling(d, "[workload]\npath = \"data/workloads/w.csv\"\n");
        assert_eq!(
            profiles_dir(&s, "traces_dir", None).unwrap(),
            Some(
                d.join("data/workloads/w.csv")
                    .parent()
                    .unwrap()
                    .parent()
                    .unwrap()
                    .join("traces")
            )
        );
        // The workload's own traces_dir.
        let s = scheduling(
            d,
            "[workload]\npath = \"x.csv\"\ntraces_dir = \"elsewhere\"\n",
        );
        assert_eq!(
            profiles_dir(&s, "traces_dir", None).unwrap(),
            Some(d.join("elsewhere"))
        );
        // The policy's own wins.
        let given = Path::new("data/traces");
        assert_eq!(
            profiles_dir(&s, "traces_dir", Some(given)).unwrap(),
            Some(d.join("data/traces"))
        );
        // No workload, or none with profiles: none.
        let s = scheduling(d, "");
        assert_eq!(profiles_dir(&s, "traces_dir", None).unwrap(), None);
        let s = scheduling(d, "[workload]\npath = \"trace.csv\"\n");
        assert_eq!(profiles_dir(&s, "traces_dir", None).unwrap(), None);
        // A folder named but missing is an error naming where it came from.
        let s = scheduling(d, "[workload]\npath = \"x.csv\"\ntraces_dir = \"nope\"\n");
        let e = profiles_dir(&s, "traces_dir", None)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("nope") && e.contains("[workload] traces_dir"),
            "{e}"
        );
        let e = profiles_dir(&s, "traces_dir", Some(Path::new("gone")))
            .unwrap_err()
            .to_string();
        assert!(e.contains("gone") && e.contains("`traces_dir`"), "{e}");
    }
}
