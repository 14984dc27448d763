//! What of the worker's environment a job gets, and what it is told of
//! its share of a GPU: the allow-list ([`passed_env`], `[worker]
//! pass_env` checked by [`check_pass_env`]) and the CUDA MPS variables of
//! a sharing launch ([`GpuShareEnv`]).

use blox_client::env;

/// What a launch that shares its GPU is told of its share, in the
/// variables CUDA MPS reads (an MPS control daemon on the node enforces
/// them; without one they are advice the job may read).
#[derive(Clone, Debug, PartialEq)]
pub struct GpuShareEnv {
    /// Thousandths of the GPU (`BLOX_GPU_MILLI`).
    pub milli: u32,
    /// `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`: the share in percent, rounded
    /// up (1-100).
    pub thread_percentage: u32,
    /// `CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`, MiB of device 0 (the one GPU it
    /// sees): that part of the GPU's memory; `None` when the worker does
    /// not know the GPU's memory (logical GPUs).
    pub memory_mib: Option<u64>,
}

impl GpuShareEnv {
    /// The variables of a share of `milli` thousandths of a GPU of
    /// `memory_gb` GB (0: unknown).
    pub fn of(milli: u32, memory_gb: f64) -> Self {
        let milli = milli.clamp(1, blox_core::GPU_MILLI);
        let mib = memory_gb * 1024.0 * f64::from(milli) / f64::from(blox_core::GPU_MILLI);
        GpuShareEnv {
            milli,
            thread_percentage: milli.div_ceil(10),
            memory_mib: (memory_gb > 0.0 && mib.is_finite()).then(|| (mib.floor() as u64).max(1)),
        }
    }

    /// The variables and their values.
    pub fn vars(&self) -> Vec<(&'static str, String)> {
        let mut v = vec![
            (env::GPU_MILLI, self.milli.to_string()),
            (
                env::MPS_THREAD_PERCENTAGE,
                self.thread_percentage.to_string(),
            ),
        ];
        if let Some(m) = self.memory_mib {
            v.push((env::MPS_PINNED_MEM_LIMIT, format!("0={m}M")));
        }
        v
    }
}

/// Whether the worker's environment variable `name` reaches a job: an
/// allow-list, so a secret set for the worker (a cloud or registry
/// credential) reaches no job. A job gets `PATH`, `HOME`, `USER`,
/// `LOGNAME`, `LANG`, `LANGUAGE`, `LC_*`, `TZ`, the GPU variables (`CUDA_*`,
/// `NVIDIA_*`, `ROCR_VISIBLE_DEVICES`, `HIP_VISIBLE_DEVICES`,
/// `GPU_DEVICE_ORDINAL`), and what the operator passes (`[worker]
/// pass_env`: names, or prefixes ending in `*`); never the worker's own
/// `BLOX_*` settings (its token file, its scheduler), as a job gets the
/// `BLOX_*` variables of [`blox_client::env`] set afresh.
pub fn passed_env(name: &str, pass_env: &[String]) -> bool {
    if name.starts_with("BLOX_") {
        return false;
    }
    matches!(
        name,
        "PATH"
            | "HOME"
            | "USER"
            | "LOGNAME"
            | "LANG"
            | "LANGUAGE"
            | "TZ"
            | "ROCR_VISIBLE_DEVICES"
            | "HIP_VISIBLE_DEVICES"
            | "GPU_DEVICE_ORDINAL"
    ) || name.starts_with("LC_")
        // (CUDA MPS's two limits are a sharing launch's own: never the
        // worker's, which a whole-GPU job would otherwise inherit. Its pipe
        // and log directories pass.)
        || (name.starts_with("CUDA_")
            && name != env::MPS_THREAD_PERCENTAGE
            && name != env::MPS_PINNED_MEM_LIMIT)
        || name.starts_with("NVIDIA_")
        || pass_env.iter().any(|p| match p.strip_suffix('*') {
            Some(prefix) => name.starts_with(prefix),
            None => p == name,
        })
}

/// Checks a `pass_env` entry: a variable name (letters, digits, `_`), or
/// a prefix of one ending in `*`; never a `BLOX_*` variable (the worker's
/// own settings; a job's are set afresh).
pub fn check_pass_env(entry: &str) -> Result<(), String> {
    let name = entry.strip_suffix('*').unwrap_or(entry);
    if name.is_empty() && entry.ends_with('*') {
        return Err(format!(
            "`{entry}` would pass the worker's whole environment: name the variables jobs need"
        ));
    }
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(format!(
            "`{entry}` is not a variable name (letters, digits and `_`, or a prefix ending in `*`)"
        ));
    }
    if name.starts_with("BLOX_") || "BLOX_".starts_with(name) {
        return Err(format!(
            "`{entry}` names the worker's own BLOX_* settings (its token file, its scheduler): a job never gets them; its own BLOX_* variables are set for it"
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_share_becomes_the_mps_thread_percentage_and_memory_limit() {
        let s = GpuShareEnv::of(460, 16.0);
        assert_eq!(
            s.vars(),
            [
                (env::GPU_MILLI, "460".to_string()),
                (env::MPS_THREAD_PERCENTAGE, "46".to_string()),
                (env::MPS_PINNED_MEM_LIMIT, "0=7536M".to_string()),
            ]
        );
        // Rounded up to a whole percent, at least 1; no memory limit where
        // the GPU's memory is unknown (logical GPUs).
        let tiny = GpuShareEnv::of(1, 0.0);
        assert_eq!(tiny.thread_percentage, 1);
        assert_eq!(tiny.memory_mib, None);
        assert_eq!(GpuShareEnv::of(1000, 80.0).thread_percentage, 100);
        assert_eq!(GpuShareEnv::of(455, 0.0).thread_percentage, 46);
    }

    #[test]
    fn a_job_gets_the_allowed_variables_and_what_the_operator_passes() {
        for name in [
            "PATH",
            "HOME",
            "LANG",
            "LC_ALL",
            "TZ",
            "CUDA_HOME",
            "CUDA_MPS_PIPE_DIRECTORY",
            "NVIDIA_DRIVER_CAPABILITIES",
        ] {
            assert!(passed_env(name, &[]), "{name}");
        }
        for name in [
            "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE",
            "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT",
            "BLOX_TOKEN_FILE",
            "AWS_SECRET_ACCESS_KEY",
            "AWS_CA_BUNDLE",
            "PIP_INDEX_URL",
            "OLDPWD",
            "LD_PRELOAD",
            "LD_LIBRARY_PATH",
            "XBLOX_Y",
        ] {
            assert!(!passed_env(name, &[]), "{name}");
        }
        let pass = vec!["LD_LIBRARY_PATH".to_string(), "NCCL_*".to_string()];
        assert!(passed_env("LD_LIBRARY_PATH", &pass));
        assert!(passed_env("NCCL_SOCKET_IFNAME", &pass));
        assert!(!passed_env("NCC", &pass));
        // Never the worker's own settings, whatever is passed.
        assert!(!passed_env(
            "BLOX_TOKEN_FILE",
            &["BLOX_TOKEN_FILE".to_string()]
        ));
        for bad in ["BLOX_TOKEN_FILE", "BLOX_*", "BLO*", "*", "A B", ""] {
            assert!(check_pass_env(bad).is_err(), "{bad}");
        }
        for good in ["LD_LIBRARY_PATH", "NCCL_*", "HF_HOME"] {
            check_pass_env(good).unwrap();
        }
    }
}
