use super::*;
use blox_core::round::events::GpuPlace;
use blox_core::JobId;

fn ev(round: u64, job: u64, what: What) -> Event {
    Event {
        round,
        time_s: round as f64,
        unix_s: None,
        job: Some(JobId(job)),
        name: Some(format!("j{job}")),
        what,
    }
}

fn launched(n: u32) -> What {
    What::Launched {
        gpus: (0..n).map(|g| GpuPlace { node: 0, gpu: g }).collect(),
        batch_size: None,
        share: None,
        node: None,
    }
}

/// Writes `n` events, one a round, to a log rotated past `max_bytes`
/// with `keep` files, polling a follower every `poll_every` rounds and
/// once at the end: (the log, the events written, those followed).
fn write_and_follow(
    path: &Path,
    max_bytes: u64,
    keep: u32,
    n: u64,
    poll_every: u64,
) -> (EventLog, Vec<Event>, Vec<Event>) {
    let mut log = EventLog::append(path, max_bytes, keep).unwrap();
    let mut follow = Follow::new(path, true).unwrap();
    let (mut all, mut followed) = (Vec::new(), Vec::new());
    for r in 0..n {
        let e = ev(r, r, launched(2));
        log.write(std::slice::from_ref(&e)).unwrap();
        all.push(e);
        if r % poll_every == poll_every - 1 {
            followed.extend(follow.poll().unwrap());
        }
    }
    followed.extend(follow.poll().unwrap());
    (log, all, followed)
}

#[test]
fn a_log_reads_back_across_rotations_and_a_follower_sees_every_line_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("events.jsonl");
    let (log, all, followed) = write_and_follow(&path, 400, 2, 40, 1);
    // Rotated: at most PATH, PATH.1, PATH.2, each near the limit.
    assert!(rotated(&path, 2).exists() && !rotated(&path, 3).exists());
    let kept = read(&path, true).unwrap();
    assert!(kept.len() < all.len());
    assert_eq!(kept[..], all[all.len() - kept.len()..]);
    assert_eq!(followed, all);
    // A follower that polls rarely still sees every line of the files
    // kept, however many rotations came between its calls: here every
    // line rotates, four times between calls.
    let dir2 = tempfile::tempdir().unwrap();
    let path2 = dir2.path().join("events.jsonl");
    let (_, all2, followed2) = write_and_follow(&path2, 1, 5, 30, 4);
    assert!(rotated(&path2, 5).exists(), "several rotations");
    assert_eq!(followed2, all2);
    // An appended-to log keeps what it had.
    drop(log);
    let mut log = EventLog::append(&path, 1 << 20, 2).unwrap();
    log.write(&[ev(40, 40, What::Admitted)]).unwrap();
    assert_eq!(read(&path, true).unwrap().len(), kept.len() + 1);
    // A live log holds every job's argv: its files are its owner's only,
    // rotated ones and the one that starts after a rotation too.
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        for p in [
            path.clone(),
            rotated(&path, 1),
            path2.clone(),
            rotated(&path2, 1),
        ] {
            let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600, "{}: {mode:o}", p.display());
        }
    }
}

#[test]
fn every_kind_of_event_reads_back_as_written() {
    // Flattened tags share the line with the event's own fields: a
    // field of the same name would be read back into the wrong one.
    let kinds = vec![
        What::Admitted,
        What::Rejected { reason: "r".into() },
        launched(3),
        What::Adopted {
            gpus: vec![GpuPlace { node: 2, gpu: 1 }],
        },
        What::Preempted { reason: "p".into() },
        What::Requeued { reason: "q".into() },
        What::Finished {
            jct_s: Some(1.5),
            reason: Some("done".into()),
            attained_gpu_s: Some(3.0),
            lost_gpu_s: Some(0.5),
            startup_s: Some(0.25),
        },
        What::Submitted {
            spec: Box::new(blox_core::JobSpec::new(4, 2.0, 8).with_duration(60.0)),
        },
        What::Failed { reason: "f".into() },
        What::Cancelled,
        What::Waiting {
            wait_kind: "waiting-for-gpus".into(),
            reason: "waiting for 4 GPUs (0 free); las: 2nd of 3".into(),
        },
        What::PolicySwitched {
            from: "a/b/c".into(),
            to: "a/d/c".into(),
        },
        What::NodeJoined {
            node: 4,
            gpus: 8,
            worker: Some("w4".into()),
            spec: None,
        },
        What::NodeJoined {
            node: 5,
            gpus: 4,
            worker: None,
            spec: Some(Box::new({
                let mut s = blox_core::NodeSpec::with_gpus(4);
                s.gpu_type = "A100".into();
                s.labels.insert("rack".into(), "r1".into());
                s
            })),
        },
        What::NodeLeft { node: 4 },
    ];
    for what in kinds {
        let mut e = ev(3, 9, what);
        e.unix_s = Some(1.8e9);
        let line = serde_json::to_string(&e).unwrap();
        let back: Event = serde_json::from_str(&line).unwrap();
        assert_eq!(back, e, "{line}");
        assert!(line.contains(&format!("\"event\":\"{}\"", e.what.kind())));
        assert!(!e.to_string().is_empty());
    }
}

#[test]
fn a_bad_line_is_named_by_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("events.jsonl");
    let good = serde_json::to_string(&ev(0, 1, What::Admitted)).unwrap();
    std::fs::write(&path, format!("{good}\n{{\"round\":1}}\n")).unwrap();
    let e = read(&path, false).unwrap_err().to_string();
    assert!(e.contains("events.jsonl:2: not an event"), "{e}");
}

#[test]
fn the_diff_matches_by_name_and_occurrence_and_sees_what_differs() {
    let a = vec![
        ev(5, 1, What::Admitted),
        ev(5, 1, launched(2)),
        ev(7, 1, What::Preempted { reason: "x".into() }),
        ev(9, 1, launched(2)),
    ];
    // Shifted by 100 rounds, other ids, same names: the same decisions.
    let mut b: Vec<Event> = a
        .iter()
        .map(|e| Event {
            round: e.round + 100,
            job: Some(JobId(77)),
            ..e.clone()
        })
        .collect();
    assert!(diff(&a, &b, 0).is_same());
    assert_eq!(diff(&a, &b, 0).matched, 4);
    // The relaunch a round later, on fewer GPUs; and a missing preemption.
    b[3] = ev(110, 1, launched(1));
    let d = diff(&a, &b, 0);
    assert_eq!(d.differences.len(), 1, "{:?}", d.differences);
    assert!(d.differences[0].contains("round 4 against 5"), "{:?}", d);
    assert!(d.differences[0].contains("2 GPUs against 1"), "{:?}", d);
    assert!(diff(&a, &b, 1).differences[0].contains("GPUs"));
    b.remove(2);
    let d = diff(&a, &b, 1);
    assert!(d
        .differences
        .iter()
        .any(|l| l.starts_with("only in the first") && l.contains("j1 preempted")));
}
