//! What the node has: its GPUs (NVML's, or logical ones) and its host
//! memory.

use super::WorkerError;
use crate::proto::GpuDevice;

/// Finds the node's GPUs: NVML's, or `logical` logical devices (also when
/// NVML is absent, which the log says).
pub fn discover_gpus(logical: Option<u32>) -> Result<Vec<GpuDevice>, WorkerError> {
    if let Some(n) = logical {
        if n == 0 {
            return Err(WorkerError::NoGpus("--gpus must be at least 1".into()));
        }
        tracing::info!("using {n} logical GPUs (--gpus); NVML is not consulted");
        return Ok(logical_gpus(n));
    }
    match nvml_gpus() {
        Ok(g) if !g.is_empty() => Ok(g),
        Ok(_) => Err(WorkerError::NoGpus(
            "NVML found no GPU on this node; pass --gpus N to run N logical GPUs".into(),
        )),
        Err(why) => Err(WorkerError::NoGpus(format!(
            "NVML is not available ({why}); pass --gpus N to run N logical GPUs"
        ))),
    }
}

pub(super) fn logical_gpus(n: u32) -> Vec<GpuDevice> {
    (0..n)
        .map(|i| GpuDevice {
            index: i,
            uuid: format!("logical-{i}"),
            name: "logical".into(),
            memory_gb: 16.0,
            relative_time: 0.0,
        })
        .collect()
}

#[cfg(feature = "nvml")]
fn nvml_gpus() -> Result<Vec<GpuDevice>, String> {
    let nvml = nvml_wrapper::Nvml::init().map_err(|e| e.to_string())?;
    let n = nvml.device_count().map_err(|e| e.to_string())?;
    let mut out = Vec::with_capacity(n as usize);
    for i in 0..n {
        let d = nvml.device_by_index(i).map_err(|e| e.to_string())?;
        out.push(GpuDevice {
            index: i,
            uuid: d.uuid().map_err(|e| e.to_string())?,
            name: d.name().map_err(|e| e.to_string())?,
            memory_gb: d
                .memory_info()
                .map(|m| m.total as f64 / (1u64 << 30) as f64)
                .unwrap_or(0.0),
            relative_time: 0.0,
        });
    }
    Ok(out)
}

#[cfg(not(feature = "nvml"))]
fn nvml_gpus() -> Result<Vec<GpuDevice>, String> {
    Err("this build has no NVML support (the `nvml` feature is off)".into())
}

/// Host memory in GiB (Linux: `/proc/meminfo`).
pub(super) fn host_mem_gb() -> f64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or(0.0, |kb| kb / (1u64 << 20) as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn logical_gpus_on_request_and_a_clear_error_without_nvml() {
        let g = discover_gpus(Some(3)).unwrap();
        assert_eq!(g.len(), 3);
        assert_eq!(g[2].index, 2);
        let e = discover_gpus(Some(0)).unwrap_err().to_string();
        assert!(e.contains("at least 1"), "{e}");
        match discover_gpus(None) {
            // A machine with NVIDIA drivers: real devices with UUIDs.
            Ok(g) => assert!(!g.is_empty() && g.iter().all(|d| !d.uuid.is_empty())),
            // Without them: the message says how to go on.
            Err(e) => assert!(e.to_string().contains("--gpus N"), "{e}"),
        }
    }
}
