//! Each GPU's relative time, reported at registration
//! ([`crate::proto::GpuDevice::relative_time`]): declared
//! (`--gpu-slowdown`) or measured by a probe the operator names
//! (`--speed-probe`).
//!
//! Why a probe at registration rather than the throughput jobs report:
//! a job's throughput mixes its GPUs with its model, batch size, locality
//! and input pipeline, and it exists only once jobs ran there; the
//! placements need an order before the first job. A probe (say a fixed
//! matrix multiply timing itself) runs the same work on every GPU, and its
//! figure is comparable across nodes. PAL's own factors come from such
//! fixed benchmarks per application class (SC'24 §III).

use super::WorkerError;
use crate::proto::GpuDevice;
use std::time::{Duration, Instant};

/// Longest a probe may run on one GPU.
const PROBE_LIMIT: Duration = Duration::from_secs(600);

/// Sets each GPU's `relative_time` from `declared` (one per GPU) or
/// `probe`'s run on it.
pub(super) fn measure(
    gpus: &mut [GpuDevice],
    declared: &[f64],
    probe: Option<&str>,
) -> Result<(), WorkerError> {
    if !declared.is_empty() {
        if declared.len() != gpus.len() {
            return Err(WorkerError::Refused(format!(
                "--gpu-slowdown: {} values for {} GPUs (one per GPU, by index)",
                declared.len(),
                gpus.len()
            )));
        }
        for (g, v) in gpus.iter_mut().zip(declared) {
            if !(v.is_finite() && *v > 0.0) {
                return Err(WorkerError::Refused(format!(
                    "--gpu-slowdown: GPU {}: {v} (must be finite and above 0)",
                    g.index
                )));
            }
            g.relative_time = *v;
        }
        return Ok(());
    }
    let Some(cmd) = probe else { return Ok(()) };
    for g in gpus.iter_mut() {
        g.relative_time = run_probe(cmd, g.index)?;
        tracing::info!(gpu = g.index, seconds = g.relative_time, "speed probe");
    }
    Ok(())
}

fn run_probe(cmd: &str, gpu: u32) -> Result<f64, WorkerError> {
    let fail = |why: String| WorkerError::Refused(format!("--speed-probe on GPU {gpu}: {why}"));
    let t = Instant::now();
    let mut child = std::process::Command::new("sh")
        .args(["-c", cmd])
        .env("CUDA_VISIBLE_DEVICES", gpu.to_string())
        .env("BLOX_GPU", gpu.to_string())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .map_err(|e| fail(e.to_string()))?;
    let out = child.stdout.take();
    let reader = std::thread::spawn(move || {
        use std::io::Read;
        let mut s = String::new();
        if let Some(mut o) = out {
            // At most 64 KiB of output is read.
            let _ = o.by_ref().take(64 << 10).read_to_string(&mut s);
        }
        s
    });
    let status = loop {
        match child.try_wait().map_err(|e| fail(e.to_string()))? {
            Some(s) => break s,
            None if t.elapsed() > PROBE_LIMIT => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(fail(format!(
                    "still running after {} s",
                    PROBE_LIMIT.as_secs()
                )));
            }
            None => std::thread::sleep(Duration::from_millis(20)),
        }
    };
    let wall = t.elapsed().as_secs_f64();
    let text = reader.join().unwrap_or_default();
    if !status.success() {
        return Err(fail(format!("exited with {status}")));
    }
    let printed = text
        .lines()
        .rev()
        .find(|l| !l.trim().is_empty())
        .and_then(|l| l.trim().parse::<f64>().ok());
    match printed {
        Some(v) if v.is_finite() && v > 0.0 => Ok(v),
        Some(v) => Err(fail(format!("printed {v} (want seconds above 0)"))),
        None => Ok(wall.max(1e-6)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gpus(n: u32) -> Vec<GpuDevice> {
        (0..n)
            .map(|i| GpuDevice {
                index: i,
                ..Default::default()
            })
            .collect()
    }

    #[test]
    fn declared_or_probed_times_reach_each_gpu_and_bad_ones_are_refused() {
        let mut g = gpus(3);
        measure(&mut g, &[1.0, 2.0, 1.0], None).unwrap();
        assert_eq!(
            g.iter().map(|g| g.relative_time).collect::<Vec<_>>(),
            [1.0, 2.0, 1.0]
        );
        let e = measure(&mut gpus(3), &[1.0], None).unwrap_err().to_string();
        assert!(e.contains("1 values for 3 GPUs"), "{e}");
        let e = measure(&mut gpus(2), &[1.0, 0.0], None)
            .unwrap_err()
            .to_string();
        assert!(e.contains("GPU 1: 0"), "{e}");
        // The probe prints its own seconds: GPU 1 takes three times as long.
        let mut g = gpus(2);
        let probe = r#"echo warming up; if [ "$BLOX_GPU" = 1 ]; then echo 0.6; else echo 0.2; fi"#;
        measure(&mut g, &[], Some(probe)).unwrap();
        assert_eq!(g[0].relative_time, 0.2);
        assert_eq!(g[1].relative_time, 0.6);
        // One that fails, or prints nonsense, stops the worker.
        let e = measure(&mut gpus(1), &[], Some("exit 3"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("GPU 0") && e.contains("exit"), "{e}");
        let e = measure(&mut gpus(1), &[], Some("echo -5"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("printed -5"), "{e}");
        // Nothing printed: its wall time.
        let mut g = gpus(1);
        measure(&mut g, &[], Some("true")).unwrap();
        assert!(g[0].relative_time > 0.0 && g[0].relative_time < 60.0);
    }
}
