//! The jobs file of `blox local`: real job processes and when they arrive.
//!
//! ```toml
//! [[job]]
//! name = "resnet-a"              # optional
//! arrival_s = 0                  # seconds after start
//! gpus = 1
//! command = ["target/debug/blox-toy-job", "--duration-s", "20"]
//! duration_s = 20                # optional estimate (SRTF, Optimus, ...)
//! batch_size = 64                # optional
//! user = "alice"                 # optional
//! model = "resnet50"             # optional
//! ```

use blox_core::JobSpec;
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// A jobs file that cannot be used; the message names the job and field.
#[derive(Debug, thiserror::Error)]
#[error("{}: {message}", path.display())]
pub struct JobsFileError {
    pub path: PathBuf,
    pub message: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JobsFile {
    job: Vec<JobEntry>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct JobEntry {
    name: Option<String>,
    arrival_s: f64,
    gpus: u32,
    command: Vec<String>,
    duration_s: Option<f64>,
    batch_size: Option<u32>,
    user: Option<String>,
    model: Option<String>,
}

/// Reads and checks a jobs file; job ids are `0..n` in file order.
pub fn read_jobs_file(path: &Path) -> Result<Vec<JobSpec>, JobsFileError> {
    let text = std::fs::read_to_string(path).map_err(|e| JobsFileError {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    parse_jobs(&text, path)
}

/// Parses the text of a jobs file (`path` is for messages).
pub fn parse_jobs(text: &str, path: &Path) -> Result<Vec<JobSpec>, JobsFileError> {
    let err = |message: String| JobsFileError {
        path: path.to_path_buf(),
        message,
    };
    let file: JobsFile = toml::from_str(text).map_err(|e| err(e.to_string()))?;
    let mut out = Vec::with_capacity(file.job.len());
    for (i, j) in file.job.into_iter().enumerate() {
        let at = format!("job {} ({})", i + 1, j.name.as_deref().unwrap_or("unnamed"));
        if j.command.is_empty() || j.command[0].trim().is_empty() {
            return Err(err(format!(
                "{at}: `command` must name a program (argv, no shell)"
            )));
        }
        if let Some(k) = j.command.iter().position(|a| a.contains('\0')) {
            return Err(err(format!("{at}: `command[{k}]` contains a NUL byte")));
        }
        if !(j.arrival_s >= 0.0 && j.arrival_s.is_finite()) {
            return Err(err(format!(
                "{at}: `arrival_s` must be a non-negative number of seconds"
            )));
        }
        if j.gpus == 0 {
            return Err(err(format!("{at}: `gpus` must be at least 1")));
        }
        if let Some(d) = j.duration_s {
            if !(d > 0.0 && d.is_finite()) {
                return Err(err(format!("{at}: `duration_s` must be positive")));
            }
        }
        if j.batch_size == Some(0) {
            return Err(err(format!("{at}: `batch_size` must be at least 1")));
        }
        let mut s = JobSpec::new(i as u64, j.arrival_s, j.gpus);
        if let Some(n) = &j.name {
            s.name = n.clone();
        }
        s.command = j.command;
        s.expected_duration_s = j.duration_s;
        s.batch_size = j.batch_size;
        s.user = j.user;
        s.model = j.model;
        out.push(s);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_job_names_its_index_name_and_field() {
        let p = Path::new("jobs.toml");
        let e = parse_jobs(
            "[[job]]\narrival_s = 0\ngpus = 1\ncommand = [\"a\"]\n[[job]]\nname = \"x\"\narrival_s = -1\ngpus = 1\ncommand = [\"a\"]\n",
            p,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("jobs.toml: job 2 (x): `arrival_s`"), "{e}");
        let e = parse_jobs("[[job]]\narrival_s = 0\ngpus = 1\ncomand = [\"a\"]\n", p)
            .unwrap_err()
            .to_string();
        assert!(e.contains("comand"), "{e}");
        let ok = parse_jobs(
            "[[job]]\narrival_s = 2\ngpus = 3\ncommand = [\"a\", \"b\"]\n",
            p,
        )
        .unwrap();
        assert_eq!((ok[0].requested_gpus, ok[0].command.len()), (3, 2));
    }
}
