//! The model against the Pollux artifact's own outputs
//! (`data/pollux/test-vectors/`, pollux-data.md §3.1, §4, §5).

use blox_goodput::model::BatchSearch;
use blox_goodput::*;
use serde_json::Value;
use std::collections::HashMap;
use std::path::PathBuf;

fn data() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../data/pollux")
}

const APPS: [&str; 6] = [
    "bert",
    "cifar10",
    "deepspeech2",
    "imagenet",
    "ncf",
    "yolov3",
];

fn profiles() -> HashMap<String, AppProfile> {
    APPS.iter()
        .map(|a| {
            (
                a.to_string(),
                AppProfile::load(&data().join("traces"), a).unwrap(),
            )
        })
        .collect()
}

fn rows(file: &str) -> Vec<HashMap<String, String>> {
    let mut r = csv::Reader::from_path(data().join("test-vectors").join(file)).unwrap();
    let h = r.headers().unwrap().clone();
    r.records()
        .map(|rec| {
            let rec = rec.unwrap();
            h.iter()
                .zip(rec.iter())
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        })
        .collect()
}

fn close(a: f64, b: f64, rel: f64) -> bool {
    (a - b).abs() <= rel * b.abs().max(1e-12)
}

fn f(v: &Value) -> f64 {
    v.as_f64().unwrap()
}

#[test]
fn placement_canonicalisation_is_rotation_not_sorting() {
    assert_eq!(canonical_placement(&[4, 2]), 24);
    assert_eq!(canonical_placement(&[4, 1, 2]), 124);
    assert_eq!(canonical_placement(&[4, 2, 1]), 142);
}

fn per_node(code: &str) -> Vec<u32> {
    code.chars().map(|c| c.to_digit(10).unwrap()).collect()
}

#[test]
fn step_time_lookup_matches_the_artifact_up_to_four_nodes() {
    let p = profiles();
    let mut checked = 0;
    for r in rows("throughput_lookup.csv") {
        if r["step_time"] == "ERROR" || r["num_nodes"].parse::<u32>().unwrap() > 4 {
            continue;
        }
        let b: f64 = r["local_bsz"].parse().unwrap();
        let (step, sync) = p[&r["app"]]
            .step_time(&per_node(&r["placement"]), b)
            .unwrap();
        assert!(
            close(step, r["step_time"].parse().unwrap(), 1e-9),
            "{r:?}: {step}"
        );
        assert!(
            close(sync, r["sync_time"].parse().unwrap(), 1e-9),
            "{r:?}: {sync}"
        );
        checked += 1;
    }
    assert!(checked >= 240, "only {checked} rows checked");
}

/// ≥ 5 nodes: the artifact interpolates over Qhull's tetrahedralisation of
/// the profile's points; with the shipped `delaunay-*.csv` ours is the same,
/// value for value (the grid it replaced was off by 1.8 % on average, 38 % at
/// worst, on these rows).
#[test]
fn step_time_beyond_four_nodes_is_the_artifacts_interpolation() {
    let p = profiles();
    let mut n = 0;
    for r in rows("throughput_lookup.csv") {
        if r["step_time"] == "ERROR" || r["num_nodes"].parse::<u32>().unwrap() <= 4 {
            continue;
        }
        let nodes: usize = r["num_nodes"].parse().unwrap();
        let reps: u32 = r["num_replicas"].parse().unwrap();
        let mut layout = vec![reps / nodes as u32; nodes];
        for x in layout.iter_mut().take(reps as usize % nodes) {
            *x += 1;
        }
        let b: f64 = r["local_bsz"].parse().unwrap();
        let (step, sync) = p[&r["app"]].step_time(&layout, b).unwrap();
        for (got, col) in [(step, "step_time"), (sync, "sync_time")] {
            let want: f64 = r[col].parse().unwrap();
            assert!(
                close(got, want, 1e-9),
                "{} {layout:?} b={b}: {col} {got} vs {want}",
                r["app"]
            );
        }
        n += 1;
    }
    assert!(n > 100, "{n}");
}

#[test]
fn epoch_boundaries_and_completion_target_match_the_artifact() {
    let p = profiles();
    for r in rows("epoch_progress.csv") {
        let e: usize = r["epoch"].parse().unwrap();
        let want: f64 = r["progress_boundary"].parse().unwrap();
        assert!(close(p[&r["app"]].epoch_boundary(e), want, 1e-12), "{r:?}");
    }
    assert!(close(
        p["cifar10"].target_progress(),
        39062.908166595334,
        1e-12
    ));
}

#[test]
fn gradient_statistics_gain_and_iterations_match_the_artifact() {
    let p = profiles();
    for r in rows("grad_stats.csv") {
        let m: f64 = r["batch_size"].parse().unwrap();
        let e: usize = r["epoch_index"].parse().unwrap();
        let app = &p[&r["app"]];
        let g = app.grad_stats(m, e);
        assert!(close(g.sqr, r["grad_sqr"].parse().unwrap(), 1e-9), "{r:?}");
        assert!(close(g.var, r["grad_var"].parse().unwrap(), 1e-9), "{r:?}");
        assert!(
            close(app.gain(m, e), r["gain_per_step"].parse().unwrap(), 1e-9),
            "{r:?}"
        );
        let it: f64 = r["iteration_after_epoch_row"].parse().unwrap();
        assert!(close(app.iterations(m, e), it, 1e-9), "{r:?}");
    }
}

#[test]
fn application_limits_are_the_documented_ones() {
    let p = profiles();
    let l = |a: &str| p[a].limits;
    assert_eq!(
        l("bert"),
        AppLimits {
            m0: 12,
            mmax: 384,
            bmin: 4,
            bmax: 12
        }
    );
    assert_eq!(
        l("yolov3"),
        AppLimits {
            m0: 8,
            mmax: 512,
            bmin: 4,
            bmax: 8
        }
    );
    assert_eq!(l("ncf").mmax, 32768);
    assert_eq!(p["imagenet"].max_epochs, 90);
}

fn vectors() -> Vec<Value> {
    let text =
        std::fs::read_to_string(data().join("test-vectors/perf_fit_and_goodput.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn case_model(
    case: &Value,
    params: ThroughputParams,
    p: &HashMap<String, AppProfile>,
) -> GoodputModel {
    GoodputModel {
        params,
        grad: GradStats {
            sqr: f(&case["grad_sqr"]),
            var: f(&case["grad_var"]),
        },
        limits: p[case["app"].as_str().unwrap()].limits,
    }
}

fn their_params(case: &Value) -> ThroughputParams {
    let q = &case["fitted_params"];
    ThroughputParams {
        alpha_c: f(&q["alpha_c"]),
        beta_c: f(&q["beta_c"]),
        alpha_n: f(&q["alpha_n"]),
        beta_n: f(&q["beta_n"]),
        alpha_r: f(&q["alpha_r"]),
        beta_r: f(&q["beta_r"]),
        gamma: f(&q["gamma"]),
    }
}

/// With the artifact's fitted θ, the batch-size search picks the same
/// configuration and goodput (§5.3).
#[test]
fn best_batch_size_matches_the_artifact_given_its_parameters() {
    let p = profiles();
    for case in vectors() {
        let m = case_model(&case, their_params(&case), &p);
        for (key, want) in case["optimize_accum_true"].as_object().unwrap() {
            let (n, r) = key.split_once(',').unwrap();
            let (n, r): (u32, u32) = (n.parse().unwrap(), r.parse().unwrap());
            let best = m.best(n, r, BatchSearch::Grid50);
            let ctx = format!("{} {} ({n},{r})", case["app"], case["profile"]);
            assert!(
                close(best.goodput, f(&want["goodput"]), 1e-9),
                "{ctx}: {best:?} vs {want}"
            );
            assert_eq!(
                best.config.atomic as i64,
                want["atomic_bsz"].as_i64().unwrap(),
                "{ctx}"
            );
            assert_eq!(
                best.config.accum as i64,
                want["accum_steps"].as_i64().unwrap(),
                "{ctx}"
            );
        }
    }
}

fn observations(case: &Value) -> Vec<Observation> {
    case["observations"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| Observation {
            nodes: o["num_nodes"].as_u64().unwrap() as u32,
            replicas: o["num_replicas"].as_u64().unwrap() as u32,
            atomic_bsz: f(&o["local_bsz"]),
            compute_time: f(&o["compute_time"]),
            step_time: f(&o["step_time"]),
        })
        .collect()
}

/// Our fit on the artifact's observations predicts the same step times and
/// best goodputs as the artifact's fit (the optimisers may stop at different
/// parameters where the data leave them free).
#[test]
fn throughput_fit_predicts_what_the_artifacts_fit_predicts() {
    let p = profiles();
    let mut worst = 0.0f64;
    let mut diffs = Vec::new();
    for case in vectors() {
        let obs = observations(&case);
        let ours = fit_throughput(&obs).unwrap();
        let theirs = their_params(&case);
        let ctx = format!("{} {}", case["app"], case["profile"]);
        // Our optimum is as good as the artifact's on its own objective (within 2 %)…
        let (lo, lt) = (fit::fit_loss(&ours, &obs), fit::fit_loss(&theirs, &obs));
        assert!(
            lo <= lt * 1.02 + 1e-6,
            "{ctx}: loss {lo} vs the artifact's {lt}: {ours:?} vs {theirs:?}"
        );
        // …and predicts nearly the same times.
        for o in &obs {
            let (a, b) = (
                ours.t_opt(o.nodes, o.replicas, o.atomic_bsz),
                theirs.t_opt(o.nodes, o.replicas, o.atomic_bsz),
            );
            worst = worst.max(((a - b) / b).abs());
            assert!(close(a, b, 5e-2), "{ctx}: T_opt {a} vs {b} at {o:?}");
        }
        let (mo, mt) = (case_model(&case, ours, &p), case_model(&case, theirs, &p));
        for key in case["optimize_accum_true"].as_object().unwrap().keys() {
            let (n, r) = key.split_once(',').unwrap();
            let (n, r): (u32, u32) = (n.parse().unwrap(), r.parse().unwrap());
            let (a, b) = (
                mo.best(n, r, BatchSearch::Grid50).goodput,
                mt.best(n, r, BatchSearch::Grid50).goodput,
            );
            diffs.push(((a - b) / b).abs());
            // Where the observations leave the model open (one observation, or
            // an allocation unlike any observed), the two optima extrapolate
            // differently: within 10 %. Multi-node goodput when only single-node
            // configurations were observed is pure prior (α_n ≥ 1.1·α_r on a
            // network time that γ may hide entirely) and is not compared.
            let extrapolated = n > 1 && !obs.iter().any(|o| o.nodes > 1);
            if !extrapolated {
                assert!(close(a, b, 0.1), "{ctx} ({n},{r}): goodput {a} vs {b}");
            }
        }
    }
    diffs.sort_by(f64::total_cmp);
    let median = diffs[diffs.len() / 2];
    assert!(median < 1e-2, "median goodput difference {median}");
    eprintln!(
        "fit vs artifact: T_opt worst {worst:.2e}; goodput median {median:.2e}, worst {:.2e}",
        diffs[diffs.len() - 1]
    );
}

/// On noiseless synthetic observations the fit lands where the artifact's
/// own `fit_perf_params` (scipy 1.15.3's L-BFGS-B with the Pollux artifact's
/// default tolerance) lands: the compute model exactly, but γ at 1.16 where
/// the truth is 1.8 (a flat valley the optimiser stops in). Its result,
/// printed by that function on these points, to 1e-6.
#[test]
fn throughput_fit_lands_where_scipy_lands() {
    let truth = ThroughputParams {
        alpha_c: 0.03,
        beta_c: 0.004,
        alpha_n: 0.25,
        beta_n: 0.02,
        alpha_r: 0.06,
        beta_r: 0.008,
        gamma: 1.8,
    };
    let mut obs = Vec::new();
    for (n, r) in [(1, 1), (1, 2), (1, 4), (2, 4), (2, 8), (4, 16), (3, 6)] {
        for b in [16.0, 64.0, 256.0] {
            obs.push(Observation {
                nodes: n,
                replicas: r,
                atomic_bsz: b,
                compute_time: truth.t_acc(b),
                step_time: truth.t_opt(n, r, b),
            });
        }
    }
    let fit = fit_throughput(&obs).unwrap();
    let scipy = [
        0.030000000384267568,
        0.003999999997816503,
        0.04381856165103635,
        0.039092401987457046,
        0.03709743726305615,
        0.002358752584307918,
        1.1639152164663595,
    ];
    for (i, (a, b)) in fit.to_array().iter().zip(scipy).enumerate() {
        assert!(
            close(*a, b, 1e-6),
            "param {i}: {a} vs scipy's {b} ({fit:?})"
        );
    }
    for o in &obs {
        assert!(
            close(fit.t_acc(o.atomic_bsz), o.compute_time, 1e-6),
            "{fit:?}"
        );
    }
}
