//! A worker's settings: [`WorkerConfig`] (the command line's) and the
//! `[worker]` section of a config file ([`WorkerSection`]), read, checked
//! and applied.

use super::cgroup;
use super::devices::host_mem_gb;
use crate::net::Security;
use std::net::SocketAddr;
use std::path::PathBuf;

/// Settings of a worker manager.
#[derive(Clone, Debug)]
pub struct WorkerConfig {
    /// The scheduler's address (`host:port` or a URL).
    pub scheduler: String,
    /// Where the worker's own service listens (port 0: any free port).
    pub listen: SocketAddr,
    /// The address the scheduler should use to reach this worker; by default
    /// the listening address (with the port actually bound).
    pub advertise: Option<String>,
    /// The node's name (host name by default).
    pub name: String,
    /// N logical GPUs instead of the ones NVML finds.
    pub logical_gpus: Option<u32>,
    /// Control directories of the launches (and checkpoints, unless the
    /// scheduler names a shared checkpoint directory).
    pub workdir: PathBuf,
    pub security: Security,
    /// Where the node sits in the scheduler's topology, by level name
    /// (`--labels rack=r3,block=b1`).
    pub labels: std::collections::BTreeMap<String, String>,
    /// The unprivileged account jobs run as (`--job-user NAME`); `None`:
    /// the worker's own.
    pub job_user: Option<String>,
    /// A uid of its own for every job, from this range (`--job-uids
    /// FIRST-LAST`; instead of `job_user`; see docs/RUNTIME.md, Security).
    pub job_uids: Option<(u32, u32)>,
    /// Run jobs as root when the worker runs as root without a job user
    /// (`--allow-root-jobs`: tests, single-user machines). Without it such
    /// a worker refuses to start: a job running as root can read every
    /// secret on the node.
    pub allow_root_jobs: bool,
    /// Each GPU's relative time, declared (`--gpu-slowdown 1.2,1,...`: one
    /// per GPU, by index), reported as measured.
    pub gpu_slowdown: Vec<f64>,
    /// A command run once per GPU before registering (`--speed-probe`),
    /// with `CUDA_VISIBLE_DEVICES` and `BLOX_GPU` set to the GPU's index:
    /// the number its last line of output prints (seconds), else its wall
    /// time, is the GPU's relative time.
    pub speed_probe: Option<String>,
    /// Variables of the worker's environment jobs get beyond the
    /// allow-list (`[worker] pass_env`, `--pass-env`; names, or prefixes
    /// ending in `*`; see [`crate::process::passed_env`]).
    pub pass_env: Vec<String>,
    /// How launches are contained (`[worker] cgroup`; [`cgroup`]).
    pub cgroup: cgroup::CgroupSetting,
    /// The memory limit of a launch whose job asks none, GB (`[worker]
    /// memory_gb`); `None`: no limit.
    pub memory_gb: Option<f64>,
    /// The process (and thread) limit of a launch whose job asks none
    /// (`[worker] max_processes`).
    pub max_processes: Option<u32>,
}

/// The process limit of a launch when neither its job nor the worker sets
/// one: far above what a training job with data-loader workers holds, far
/// below what a fork bomb reaches.
pub const DEFAULT_MAX_PROCESSES: u32 = 16_384;

impl Default for WorkerConfig {
    /// A worker of the scheduler at `127.0.0.1:50051`, listening on any
    /// free loopback port, in `./blox-worker`, with NVML's GPUs, no
    /// credential, and jobs run as the worker's own user.
    fn default() -> Self {
        WorkerConfig {
            scheduler: "127.0.0.1:50051".into(),
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            advertise: None,
            name: "worker".into(),
            logical_gpus: None,
            workdir: PathBuf::from("blox-worker"),
            security: Security::default(),
            labels: Default::default(),
            job_user: None,
            job_uids: None,
            allow_root_jobs: false,
            gpu_slowdown: Vec::new(),
            speed_probe: None,
            pass_env: Vec::new(),
            cgroup: cgroup::CgroupSetting::Auto,
            memory_gb: None,
            max_processes: None,
        }
    }
}

/// `[worker]` of a config file (`blox worker --config FILE`): what jobs
/// get of the worker's environment, the limits of their launches, and how
/// they are contained.
#[derive(Clone, Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerSection {
    /// Variables of the worker's environment jobs get beyond the
    /// allow-list: names, or prefixes ending in `*`; never `BLOX_*`.
    #[serde(default)]
    pub pass_env: Vec<String>,
    /// A launch's memory limit when its job asks none, GB.
    pub memory_gb: Option<f64>,
    /// A launch's process (and thread) limit when its job asks none
    /// (default 16384).
    pub max_processes: Option<u32>,
    /// `"auto"` (default), `"off"`, or a cgroup v2 directory delegated to
    /// the worker.
    pub cgroup: Option<String>,
}

impl WorkerSection {
    /// Reads `[worker]` of the config file `path`; errors name the file,
    /// the line and the figures.
    pub fn read(path: &std::path::Path) -> Result<WorkerSection, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let base = path.parent().unwrap_or(std::path::Path::new("."));
        let cfg = blox_config::Config::parse(&text, &path.display().to_string(), base, &[])
            .map_err(|e| e.to_string())?;
        let s = cfg.section("worker");
        let w: WorkerSection = s.parse().map_err(|e| e.to_string())?;
        for e in &w.pass_env {
            crate::process::check_pass_env(e).map_err(|m| {
                s.error_at("pass_env", format!("`pass_env`: {m}"))
                    .to_string()
            })?;
        }
        if let Some(m) = w.memory_gb {
            let host = host_mem_gb();
            if !(m > 0.0 && m.is_finite()) || (host > 0.0 && m > host) {
                return Err(s
                    .error_at(
                        "memory_gb",
                        format!("`memory_gb` = {m}: a launch's memory limit must be positive and at most this node's {host:.1} GB"),
                    )
                    .to_string());
            }
        }
        if w.max_processes == Some(0) {
            return Err(s
                .error_at("max_processes", "`max_processes` must be at least 1")
                .to_string());
        }
        Ok(w)
    }

    /// Applies it to `cfg` (what the command line set stays).
    pub fn apply(self, cfg: &mut WorkerConfig) {
        let mut pass = self.pass_env;
        pass.append(&mut cfg.pass_env);
        cfg.pass_env = pass;
        cfg.memory_gb = cfg.memory_gb.or(self.memory_gb);
        cfg.max_processes = cfg.max_processes.or(self.max_processes);
        if let (cgroup::CgroupSetting::Auto, Some(c)) = (&cfg.cgroup, &self.cgroup) {
            cfg.cgroup = cgroup::CgroupSetting::parse(c);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_worker_section_is_refused_with_its_file_line_and_figures() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("worker.toml");
        let read = |text: &str| {
            std::fs::write(&f, text).unwrap();
            WorkerSection::read(&f)
        };
        let e =
            read("[worker]\npass_env = [\"LD_LIBRARY_PATH\", \"BLOX_TOKEN_FILE\"]\n").unwrap_err();
        assert!(
            e.contains("worker.toml") && e.contains(":2") && e.contains("BLOX_TOKEN_FILE"),
            "{e}"
        );
        let e = read("[worker]\nmemory_gb = 1000000\n").unwrap_err();
        assert!(
            e.contains(":2") && e.contains("1000000") && e.contains("GB"),
            "{e}"
        );
        let e = read("[worker]\nmax_processes = 0\n").unwrap_err();
        assert!(e.contains("max_processes"), "{e}");
        let e = read("[worker]\npass_envs = []\n").unwrap_err();
        assert!(e.contains("pass_envs"), "{e}");
        let w = read("[worker]\npass_env = [\"NCCL_*\"]\nmax_processes = 64\ncgroup = \"off\"\n")
            .unwrap();
        let mut cfg = WorkerConfig {
            max_processes: Some(8),
            ..WorkerConfig::default()
        };
        w.apply(&mut cfg);
        // The command line's value stays; the file fills the rest.
        assert_eq!(cfg.max_processes, Some(8));
        assert_eq!(cfg.pass_env, vec!["NCCL_*".to_string()]);
        assert_eq!(cfg.cgroup, cgroup::CgroupSetting::Off);
    }
}
