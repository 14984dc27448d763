//! A real training job for the blox runtime: a small MLP (16 → 64 → 64 → 1)
//! regressing a fixed random non-linear function of generated data, on CPU
//! with tch (libtorch). It
//!
//! - checks its lease at every iteration boundary (blox-client) and, when
//!   revoked, checkpoints its `VarStore`, its iteration counter and its
//!   noise-scale averages, and exits;
//! - resumes from that checkpoint on its next launch;
//! - applies a new batch size from the scheduler at a boundary (ONES);
//! - pushes `loss`, `progress`, `iteration_time_s`, `throughput`,
//!   `batch_size` and the gradient noise scale `gns` (from the squared
//!   gradient norms of a half batch and the full batch, every 10 iterations).
//!
//!     blox-tch-job [--iterations 2000] [--batch-size 64] [--lr 0.003] [--checkpoint-every 100]

use blox_client::Job;
use blox_tch_job::{gns_terms, NoiseScale};
use std::time::Instant;
use tch::nn::{self, Module, OptimizerConfig};
use tch::{Device, Kind, Tensor};

fn arg<T: std::str::FromStr>(args: &[String], name: &str) -> Option<T> {
    let i = args.iter().position(|a| a == name)?;
    args.get(i + 1)?.parse().ok()
}

fn fail(msg: impl std::fmt::Display) -> ! {
    eprintln!("blox-tch-job: {msg}");
    std::process::exit(1)
}

fn grad_sq(vs: &nn::VarStore) -> f64 {
    vs.trainable_variables()
        .iter()
        .map(|v| {
            v.grad()
                .pow_tensor_scalar(2)
                .sum(Kind::Double)
                .double_value(&[])
        })
        .sum()
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let iterations: u64 = arg(&args, "--iterations").unwrap_or(2000);
    let lr: f64 = arg(&args, "--lr").unwrap_or(3e-3);
    let every: u64 = arg::<u64>(&args, "--checkpoint-every")
        .unwrap_or(100)
        .max(1);
    let job = Job::from_env().unwrap_or_else(|e| fail(e));
    let mut batch: i64 = arg(&args, "--batch-size")
        .or(job.env.batch_size.map(i64::from))
        .unwrap_or(64)
        .max(2);
    tch::manual_seed(7);
    let dev = Device::Cpu;
    // The data set and the function to learn are fixed by the seed.
    let n = 8192;
    let x = Tensor::randn([n, 16], (Kind::Float, dev));
    let w = Tensor::randn([16, 1], (Kind::Float, dev));
    let y = (x.matmul(&w) * 0.5).sin() + x.narrow(1, 0, 1).pow_tensor_scalar(2) * 0.1;

    let mut vs = nn::VarStore::new(dev);
    let root = vs.root();
    let net = nn::seq()
        .add(nn::linear(&root / "l1", 16, 64, Default::default()))
        .add_fn(|t| t.relu())
        .add(nn::linear(&root / "l2", 64, 64, Default::default()))
        .add_fn(|t| t.relu())
        .add(nn::linear(&root / "l3", 64, 1, Default::default()));
    let mut opt = nn::Adam::default()
        .build(&vs, lr)
        .unwrap_or_else(|e| fail(e));

    // Resume.
    let model = job.checkpoint_path("model.safetensors");
    let mut start = 0u64;
    let mut gns = NoiseScale::default();
    if let Some(state) = job.load_checkpoint("state") {
        let s = String::from_utf8_lossy(&state).to_string();
        let v: Vec<f64> = s
            .split_whitespace()
            .filter_map(|t| t.parse().ok())
            .collect();
        if v.len() == 3 && model.exists() {
            vs.load(&model)
                .unwrap_or_else(|e| fail(format!("{}: {e}", model.display())));
            start = v[0] as u64;
            gns.update(v[1], v[2], 1.0);
            eprintln!("blox-tch-job: resumed at iteration {start}");
        }
    }
    let save = |vs: &nn::VarStore, it: u64, g: &NoiseScale| {
        // tch picks the format from the extension: keep `.safetensors`.
        let tmp = model.with_extension("tmp.safetensors");
        vs.save(&tmp)
            .and_then(|_| std::fs::rename(&tmp, &model).map_err(Into::into))
            .unwrap_or_else(|e| fail(format!("saving {}: {e}", model.display())));
        let (g2, s) = g.terms();
        job.save_checkpoint("state", format!("{it} {g2} {s}").as_bytes())
            .unwrap_or_else(|e| fail(e));
    };

    let mut done = start;
    let mut it = job.iterate(start..iterations);
    for i in &mut it {
        if let Some(b) = job.new_batch_size() {
            batch = i64::from(b).max(2);
            job.applied_batch_size(b);
            eprintln!("blox-tch-job: batch size {batch} from iteration {i}");
        }
        let t = Instant::now();
        let idx = Tensor::randint(n, [batch], (Kind::Int64, dev));
        let (xb, yb) = (x.index_select(0, &idx), y.index_select(0, &idx));
        if i % 10 == 0 {
            // The half batch's gradient, for the noise scale.
            let half = batch / 2;
            opt.zero_grad();
            net.forward(&xb.narrow(0, 0, half))
                .mse_loss(&yb.narrow(0, 0, half), tch::Reduction::Mean)
                .backward();
            let small = grad_sq(&vs);
            opt.zero_grad();
            let loss = net.forward(&xb).mse_loss(&yb, tch::Reduction::Mean);
            loss.backward();
            let big = grad_sq(&vs);
            let (g2, s) = gns_terms(small, half as f64, big, batch as f64);
            gns.update(g2, s, 0.1);
            opt.step();
            let _ = job.push_metric("loss", loss.double_value(&[]));
            if let Some(v) = gns.value() {
                let _ = job.push_metric("gns", v);
            }
        } else {
            opt.backward_step(&net.forward(&xb).mse_loss(&yb, tch::Reduction::Mean));
        }
        done = i + 1;
        let dt = t.elapsed().as_secs_f64();
        if done % 10 == 0 || done == iterations {
            let _ = job.push_metric("progress", done as f64 / iterations as f64);
            let _ = job.push_metric("iteration_time_s", dt);
            let _ = job.push_metric("throughput", batch as f64 / dt.max(1e-9));
            let _ = job.push_metric("batch_size", batch as f64);
        }
        if done % every == 0 {
            save(&vs, done, &gns);
        }
    }
    let revoked = it.revoked();
    save(&vs, done, &gns);
    let final_loss = net
        .forward(&x)
        .mse_loss(&y, tch::Reduction::Mean)
        .double_value(&[]);
    let _ = job.push_metric("loss", final_loss);
    let _ = job.push_metric("progress", done as f64 / iterations as f64);
    if revoked {
        eprintln!("blox-tch-job: lease revoked; checkpointed at iteration {done}");
    } else {
        eprintln!("blox-tch-job: done, loss {final_loss:.4}");
        job.finish().unwrap_or_else(|e| fail(e));
    }
}
