//! The web dashboard (`[runtime] dashboard_listen`) of a real scheduler with
//! two workers: its JSON API pages and filters jobs as `blox status` does,
//! shows who runs where and the utilisation and queue per round, and needs
//! the users' token; the page itself, loaded in headless Chromium, shows
//! the jobs, a preemption and finished jobs' JCTs. The browser half needs
//! Chromium (`chromium`, `chromium-browser`, `google-chrome`, or
//! `BLOX_CHROMIUM`) and is an ignored test, so that a plain `cargo test`
//! counts it as not run: `-- --ignored` runs it (`.ci/run` does where
//! Chromium renders a page), and it fails without a working browser.
//! `BLOX_DASHBOARD_SCREENSHOT=FILE.png` also saves a screenshot of the page.

use super::common::*;
use serde_json::Value;
use std::io::Read;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

const TOKEN: &str = "dashboard-token";

/// One HTTP/1.1 GET; returns (status code, body).
fn get(addr: SocketAddr, path: &str, token: Option<&str>) -> (u16, String) {
    let (status, body) = http_get(addr, path, token);
    (status.split(' ').nth(1).unwrap().parse().unwrap(), body)
}

fn api(addr: SocketAddr, path: &str) -> Value {
    let (code, body) = get(addr, path, Some(TOKEN));
    assert_eq!(code, 200, "{path}: {body}");
    serde_json::from_str(&body).unwrap()
}

fn chromium() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("BLOX_CHROMIUM") {
        return Some(PathBuf::from(p));
    }
    let path = std::env::var_os("PATH")?;
    ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .flat_map(|b| std::env::split_paths(&path).map(move |d| d.join(b)))
        .find(|p| p.is_file())
}

/// Runs headless Chromium with `args` and `url`; its stdout, or why it
/// failed (an exit status, or no answer within `limit`: it is killed).
fn headless(
    browser: &PathBuf,
    profile: &std::path::Path,
    args: &[&str],
    url: &str,
    limit: Duration,
) -> Result<String, String> {
    let mut child = Command::new(browser)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
        ])
        .args(args)
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(url)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("{}: {e}", browser.display()))?;
    let (mut out, mut err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let out = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let err = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let t = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().map_err(|e| e.to_string())? {
            break Some(st);
        }
        if t.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let (out, err) = (
        out.join().unwrap_or_default(),
        err.join().unwrap_or_default(),
    );
    match status {
        Some(st) if st.success() => Ok(out),
        Some(st) => Err(format!("{st}: {err}")),
        None => Err(format!("no answer within {limit:?}: {err}")),
    }
}

/// Whether the browser can render anything at all (an install may be
/// broken, or the machine lack what it needs): a static page's DOM.
fn browser_works(browser: &PathBuf, profile: &std::path::Path) -> Result<(), String> {
    let out = headless(
        browser,
        profile,
        &["--dump-dom"],
        "data:text/html,<p id=probe>ok</p>",
        Duration::from_secs(60),
    )?;
    if out.contains("probe") {
        Ok(())
    } else {
        Err(format!("a static page came back as {out:?}"))
    }
}

/// The page's DOM after its scripts ran for a few seconds of virtual time.
fn dump_dom(browser: &PathBuf, url: &str, profile: &std::path::Path) -> String {
    headless(
        browser,
        profile,
        &["--virtual-time-budget=6000", "--dump-dom"],
        url,
        Duration::from_secs(120),
    )
    .unwrap_or_else(|e| panic!("Chromium on the dashboard: {e}"))
}

/// Saves a screenshot of the page at `url` to `png`.
fn screenshot(browser: &PathBuf, url: &str, profile: &std::path::Path, png: &std::path::Path) {
    let shot = format!("--screenshot={}", png.display());
    headless(
        browser,
        profile,
        &[
            "--hide-scrollbars",
            "--window-size=1400,1000",
            "--virtual-time-budget=3000",
            &shot,
        ],
        url,
        Duration::from_secs(120),
    )
    .unwrap_or_else(|e| panic!("Chromium's screenshot: {e}"));
}

/// The `data-NAME` attribute values of elements whose opening tag starts
/// with `<tr data-job=`.
fn rows(dom: &str) -> Vec<String> {
    dom.split("<tr data-job=")
        .skip(1)
        .map(|r| r.split('>').next().unwrap_or("").to_string())
        .collect()
}

fn attr(tag: &str, name: &str) -> String {
    tag.split(&format!("{name}=\""))
        .nth(1)
        .and_then(|r| r.split('"').next())
        .unwrap_or("")
        .to_string()
}

/// The API, on every machine.
#[test]
fn the_dashboard_serves_jobs_preemptions_jcts_and_the_cluster() {
    dashboard(None);
}

/// The page in a real browser: run with `--ignored` where Chromium renders
/// (CI does when it could install one); without one it fails, naming why.
#[test]
#[ignore = "needs headless Chromium (or BLOX_CHROMIUM): cargo test -p blox-runtime --test suite dashboard -- --ignored"]
fn the_dashboard_page_shows_them_in_a_browser() {
    let browser = chromium().expect(
        "no Chromium: install Debian's `chromium`, or set BLOX_CHROMIUM to a Chromium binary",
    );
    let probe = tempfile::tempdir().unwrap();
    if let Err(why) = browser_works(&browser, probe.path()) {
        panic!(
            "{} cannot render a static page here: {why}",
            browser.display()
        );
    }
    dashboard(Some(browser));
}

/// A scheduler with two workers and a preempting trace, its dashboard
/// checked through the API and, given a working browser, in it.
fn dashboard(browser: Option<PathBuf>) {
    let dir = tempfile::tempdir().unwrap();
    blox_runtime::net::write_private(&dir.path().join("token"), &format!("{TOKEN}\n")).unwrap();
    let mut cfg = runtime_config(dir.path());
    cfg.token_file = Some(dir.path().join("token"));
    cfg.dashboard_listen = Some("127.0.0.1:0".into());
    let c = Cluster::start(dir.path(), cfg, "las", 2);
    let addr = c.sched.as_ref().unwrap().dashboard_address.unwrap();

    // The page carries no data and needs no token; the API does.
    let (code, page) = get(addr, "/", None);
    assert_eq!(code, 200);
    assert!(page.contains("<title>blox scheduler</title>"));
    assert_eq!(get(addr, "/api/status", None).0, 401);
    assert_eq!(get(addr, "/api/status", Some("wrong")).0, 401);
    assert_eq!(get(addr, "/nope", None).0, 404);
    // A 5 MB request (a filter of 5 MB) is refused after its first 8 KiB,
    // and the dashboard goes on answering.
    {
        use std::io::Write;
        let mut conn = std::net::TcpStream::connect(addr).unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let huge = format!("GET /api/status?q={} HTTP/1.1\r\n\r\n", "x".repeat(5 << 20));
        let _ = conn.write_all(huge.as_bytes());
        let mut reply = String::new();
        let _ = conn.read_to_string(&mut reply);
        assert!(
            reply.is_empty() || reply.starts_with("HTTP/1.1 431"),
            "{}",
            &reply[..reply.len().min(200)]
        );
    }
    assert_eq!(get(addr, "/", None).0, 200);
    let (code, body) = get(addr, "/api/status?phase=sleeping", Some(TOKEN));
    assert_eq!(code, 400);
    assert!(
        body.contains("phase=sleeping: expected one of submitted"),
        "{body}"
    );
    assert_eq!(get(addr, "/api/status?limit=0", Some(TOKEN)).0, 400);

    // LAS on 2 × 2 GPUs: the trace's later jobs preempt the first ones.
    let mut ctl = c.ctl();
    let mut ids = Vec::new();
    for (i, &(a, g, d)) in preemption_trace().iter().enumerate() {
        let due = Instant::now() + Duration::from_secs_f64(a);
        if let Some(left) = due.checked_duration_since(Instant::now()) {
            std::thread::sleep(left);
        }
        let name = if i % 2 == 0 { "resnet" } else { "bert" };
        ids.push(
            ctl.submit(job(&format!("{name}-{i}"), g, toy(d, &[]), Some(d)))
                .unwrap(),
        );
    }
    // While they run: the cluster view shows who runs where.
    let t = Instant::now();
    let cluster = loop {
        let v = api(addr, "/api/cluster");
        let busy = v["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|n| n["gpus"].as_array().unwrap().clone())
            .filter(|g| !g["job"].is_null())
            .count();
        if busy > 0 {
            break v;
        }
        assert!(t.elapsed() < Duration::from_secs(20), "{v}");
        std::thread::sleep(Duration::from_millis(100));
    };
    let nodes = cluster["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 2);
    let mut workers: Vec<&str> = nodes
        .iter()
        .map(|n| n["worker"].as_str().unwrap())
        .collect();
    workers.sort();
    assert!(
        workers[0].starts_with("w0") && workers[1].starts_with("w1"),
        "{workers:?}"
    );
    let held = nodes
        .iter()
        .flat_map(|n| n["gpus"].as_array().unwrap())
        .find_map(|g| g["job"]["id"].as_u64())
        .unwrap();
    assert!(ids.contains(&held));
    // For docs/RUNTIME.md: the page while jobs run.
    if let (Some(png), Some(b)) = (std::env::var_os("BLOX_DASHBOARD_SCREENSHOT"), chromium()) {
        let url = format!("http://{addr}/#token={TOKEN}");
        screenshot(
            &b,
            &url,
            &dir.path().join("shot"),
            std::path::Path::new(&png),
        );
    }

    let r = c.wait_all(&ids, Duration::from_secs(60));
    assert!(r.values().all(|j| j.status == "finished"), "{r:?}");
    assert!(r.values().any(|j| j.preemptions > 0), "{r:?}");
    // The status view catches up at the next round.
    c.wait_rounds(1);

    // The API: a page of all jobs, as `blox status` sees them.
    let s = api(addr, "/api/status");
    assert_eq!(s["policy"], "accept-all/las/consolidated");
    assert_eq!(s["total_jobs"], ids.len() as u64);
    let jobs = s["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), ids.len());
    for j in jobs {
        let id = j["id"].as_u64().unwrap();
        let want = &r[&id];
        assert_eq!(j["state"], "finished");
        assert_eq!(j["preemptions"].as_u64().unwrap(), want.preemptions as u64);
        assert_eq!(j["launches"].as_u64().unwrap(), want.launches as u64);
        assert!((j["jct_s"].as_f64().unwrap() - want.jct_s.unwrap()).abs() < 1e-6);
    }
    // Both workers alive. (Beside two CPU hogs a worker once missed its
    // heartbeats past the timeout and registered again: three entries, the
    // first one dead.)
    let alive = s["workers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|w| w["alive"] == true)
        .count();
    assert_eq!(alive, 2, "{}", s["workers"]);
    // Paging: two at a time, in id order, until next_after_id is 0.
    let mut seen = Vec::new();
    let mut after = 0;
    loop {
        let p = api(addr, &format!("/api/status?limit=2&after_id={after}"));
        let page = p["jobs"].as_array().unwrap();
        assert!(page.len() <= 2);
        seen.extend(page.iter().map(|j| j["id"].as_u64().unwrap()));
        after = p["next_after_id"].as_u64().unwrap();
        if after == 0 {
            break;
        }
    }
    assert_eq!(seen, ids);
    // Filters: by state, by part of the name (any case).
    let running = api(addr, "/api/status?phase=running,queued");
    assert!(running["jobs"].as_array().unwrap().is_empty());
    let bert = api(addr, "/api/status?phase=finished&q=BERT");
    let names: Vec<&str> = bert["jobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["bert-1", "bert-3", "bert-5"]);
    // The series: a point per round, utilisation within the cluster, the
    // queue non-empty while LAS made jobs wait, one policy throughout.
    let series = api(addr, "/api/series");
    let points = series["points"].as_array().unwrap();
    assert!(points.len() > 5);
    assert!(points
        .iter()
        .all(|p| p["busy"].as_u64() <= p["total"].as_u64()));
    assert!(points.iter().any(|p| p["busy"].as_u64() == Some(4)));
    assert!(points.iter().any(|p| p["queued"].as_u64() > Some(0)));
    let rounds: Vec<u64> = points
        .iter()
        .map(|p| p["round"].as_u64().unwrap())
        .collect();
    assert!(rounds.windows(2).all(|w| w[1] == w[0] + 1), "{rounds:?}");
    assert_eq!(series["policies"].as_array().unwrap().len(), 1);

    // The page in a real browser.
    let Some(browser) = browser else {
        return;
    };
    let url = format!("http://{addr}/#token={TOKEN}");
    let dom = dump_dom(&browser, &url, &dir.path().join("chromium"));
    assert!(
        !dom.contains("data-loaded=\"0\""),
        "the page never loaded the API:\n{dom}"
    );
    assert!(!dom.contains("id=\"auth\" style=\"display: block"), "{dom}");
    let tags = rows(&dom);
    assert_eq!(tags.len(), ids.len(), "{dom}");
    for tag in &tags {
        assert_eq!(attr(tag, "data-state"), "finished", "{tag}");
        let jct: f64 = attr(tag, "data-jct").parse().unwrap();
        let id: u64 = tag
            .trim_start_matches('"')
            .split('"')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert!((jct - r[&id].jct_s.unwrap()).abs() < 0.01, "{tag}");
    }
    assert!(
        tags.iter().any(|t| attr(t, "data-preemptions") != "0"),
        "{tags:?}"
    );
    assert!(dom.contains("accept-all/las/consolidated"));
    assert!(dom.contains("data-worker=\"w0"), "workers table");
    assert!(dom.contains("class=\"node\""), "cluster view");
    assert!(dom.contains("<polyline"), "utilisation chart");
    // The name filter from the address, as a user would bookmark it.
    let dom = dump_dom(
        &browser,
        &format!("http://{addr}/?q=resnet#token={TOKEN}"),
        &dir.path().join("chromium"),
    );
    assert_eq!(rows(&dom).len(), 3, "{dom}");
}
