//! Failure mechanisms on a live scheduler (issue 37): spares and quarantine
//! act on failed nodes, which only the simulator reports so far, so a
//! scheduler's config that asks for them is refused at their line.

use super::*;

#[test]
fn spares_and_quarantine_are_refused_at_their_line_by_a_live_scheduler() {
    let dir = tempfile::tempdir().unwrap();
    for (extra, line, key) in [
        ("[cluster]\nspares = 1\n", 6, "spares"),
        (
            "[cluster.quarantine]\nfailures = 1\nwindow_h = 24\nprobation_h = 24\n",
            5,
            "quarantine",
        ),
    ] {
        let path = dir.path().join("live.toml");
        std::fs::write(
            &path,
            format!("[run]\nround_s = 1\n[runtime]\nlisten = \"127.0.0.1:0\"\n{extra}"),
        )
        .unwrap();
        let cfg = blox_sim::load_config(&path, None, &[]).unwrap();
        let e = RuntimeConfig::from_config(&cfg).unwrap_err().to_string();
        assert!(
            e.contains(&format!("live.toml:{line}")) && e.contains(key),
            "{extra}: {e}"
        );
    }
}
