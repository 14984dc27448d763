//! `blox status --start` on a live scheduler: toy jobs with known run times
//! queue behind each other; the forecast (the simulator under the same
//! policies) predicts when each starts, and the scheduler measures how far
//! off its first prediction was (`blox_prediction_error_seconds`).

use super::common::*;
use blox_config::Config;
use blox_core::round::events::What;
use blox_eventlog as event_log;
use blox_forecast::Forecaster;
use blox_runtime::scheduler::Extras;
use blox_sim::forecast::SimForecaster;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

fn forecaster(scheduling: &str) -> Arc<dyn Forecaster> {
    let text = format!(
        "[run]\nround_s = 1\n[cluster]\nnodes = 1\ngpus_per_node = 2\n[scheduling]\npolicy = \"{scheduling}\"\n\
         [placement]\npolicy = \"consolidated\"\n"
    );
    let cfg = Config::parse(&text, "test.toml", std::path::Path::new("."), &[]).unwrap();
    let sim = blox_sim::SimConfig::from_section(&cfg.section("sim")).unwrap();
    Arc::new(SimForecaster::from_config(&cfg, &sim).unwrap().unwrap())
}

#[test]
fn predicted_starts_of_known_jobs_are_within_ten_percent_of_the_actual_ones() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = runtime_config(dir.path());
    cfg.metrics_listen = Some("127.0.0.1:0".into());
    let events = cfg.events_path();
    let extras = Extras {
        forecaster: Some(forecaster("fifo")),
        ..Extras::default()
    };
    let c = Cluster::start_with(dir.path(), cfg, "fifo", 1, extras);
    let mut ctl = c.ctl();
    // Five 2-GPU jobs of 2.5 s on one worker of 2 GPUs: they run one by
    // one. (Not a whole number of 1 s rounds: a job that ends on a round's
    // edge ends before it or after it by the milliseconds its process takes
    // to start, which the first forecasts, made before any job reported its
    // start-up, cannot know.)
    let ids: Vec<u64> = (0..5)
        .map(|i| {
            ctl.submit(job(&format!("q{i}"), 2, toy(2.5, &[]), Some(2.5)))
                .unwrap()
        })
        .collect();
    let submitted = blox_runtime::ctl::unix_now();
    // The first prediction each job gets while it waits.
    let mut first: BTreeMap<u64, f64> = BTreeMap::new();
    let t = Instant::now();
    let mut text = String::new();
    while first.len() < ids.len() - 1 && t.elapsed() < Duration::from_secs(20) {
        let s = ctl.status_unended(&[]).unwrap();
        for j in &s.jobs {
            if let (Some(p), "queued") = (&j.prediction, j.status.as_str()) {
                assert_eq!(p.duration_from, "duration_s");
                if let Some(start) = p.start_unix_s {
                    first.entry(j.id).or_insert(start);
                }
            }
        }
        if text.is_empty()
            && s.jobs.len() == ids.len()
            && s.jobs.iter().all(|j| j.prediction.is_some())
        {
            text = blox_runtime::ctl::render_start("here", &s, blox_runtime::ctl::unix_now());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        first.len() >= 3,
        "predictions for the queued jobs: {first:?}"
    );
    c.wait_all(&ids, Duration::from_secs(60));
    // The actual starts, from the event log.
    let mut actual: BTreeMap<u64, f64> = BTreeMap::new();
    for e in event_log::read(&events, true).unwrap() {
        if let (Some(j), What::Launched { .. }, Some(u)) = (e.job, &e.what, e.unix_s) {
            actual.entry(j.0).or_insert(u);
        }
    }
    let (mut err, mut wait) = (0.0, 0.0);
    for (id, p) in &first {
        let a = actual[id];
        err += (p - a).abs();
        wait += a - submitted;
    }
    let n = first.len() as f64;
    eprintln!(
        "{text}\nmean |predicted - actual| start {:.3} s over {n} jobs, mean wait {:.2} s",
        err / n,
        wait / n
    );
    assert!(
        err / n <= 0.1 * wait / n,
        "mean error {:.2} s against a mean wait of {:.2} s: {first:?} vs {actual:?}",
        err / n,
        wait / n
    );
    // `blox status --start` shows them.
    assert!(
        text.contains("run time from") && text.contains("duration_s"),
        "{text}"
    );
    assert!(text.contains(" in "), "{text}");
    // The scheduler judged its own first predictions.
    let addr = c.sched.as_ref().unwrap().metrics_address.unwrap();
    let (_, body) = http_get(addr, "/metrics", None);
    let count = body
        .lines()
        .find(|l| l.starts_with("blox_prediction_error_seconds_count{what=\"start\"}"))
        .and_then(|l| l.split_whitespace().last())
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(0.0);
    assert!(count >= 3.0, "{body}");
    assert!(
        body.contains("blox_forecast_duration_seconds_count"),
        "{body}"
    );
}

#[test]
fn a_failing_forecaster_leaves_the_loop_running_and_says_why() {
    struct Broken;
    impl Forecaster for Broken {
        fn forecast(
            &self,
            _: &blox_forecast::Snapshot,
        ) -> Result<blox_forecast::Forecast, blox_forecast::ForecastError> {
            panic!("a broken forecaster")
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let extras = Extras {
        forecaster: Some(Arc::new(Broken)),
        ..Extras::default()
    };
    let c = Cluster::start_with(dir.path(), runtime_config(dir.path()), "fifo", 1, extras);
    let mut ctl = c.ctl();
    let id = ctl.submit(job("a", 1, toy(0.5, &[]), Some(0.5))).unwrap();
    let r = c.wait_all(&[id], Duration::from_secs(20));
    assert_eq!(r[&id].status, "finished");
    let s = ctl.status(&[id]).unwrap();
    let f = s.forecast.expect("the failure is shown");
    assert!(f.error.contains("panicked"), "{f:?}");
    assert!(s.jobs[0].prediction.is_none());
}
