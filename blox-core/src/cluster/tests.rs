//! The GPU table: assignment rules, node churn and the free index.

use super::*;
use crate::job_state::JobState;
use proptest::prelude::*;

#[test]
fn an_elastic_cluster_admits_jobs_up_to_its_maximum_size() {
    let mut c = ClusterState::homogeneous(2, 4);
    assert_eq!(c.max_gpus(), 8);
    c.set_max_gpus(Some(64));
    assert_eq!(c.max_gpus(), 64);
    // Never below what is online.
    c.set_max_gpus(Some(4));
    assert_eq!(c.max_gpus(), 8);
}

#[test]
fn busy_gpu_cannot_be_assigned_to_another_job() {
    let mut c = ClusterState::homogeneous(1, 2);
    c.assign(JobId(1), &[GpuId(0)]).unwrap();
    let err = c.assign(JobId(2), &[GpuId(0), GpuId(1)]).unwrap_err();
    assert_eq!(
        err,
        ClusterError::Busy {
            gpu: GpuId(0),
            holder: JobId(1),
            job: JobId(2)
        }
    );
    // All-or-nothing: GPU 1 is still free.
    assert_eq!(c.num_free(), 1);
}

#[test]
fn removing_a_node_frees_the_whole_allocation_of_jobs_on_it() {
    let mut c = ClusterState::homogeneous(2, 2);
    c.assign(JobId(5), &[GpuId(1), GpuId(2)]).unwrap();
    let hit = c.remove_node(NodeId(0)).unwrap();
    assert_eq!(hit, vec![JobId(5)]);
    assert_eq!(c.num_gpus(), 2);
    assert_eq!(c.num_free(), 2);
}

proptest! {
    // Whatever sequence of assign/release requests arrives, no GPU ever has two
    // holders and the free counter always matches the table.
    #[test]
    fn counters_match_table_under_random_requests(
        ops in proptest::collection::vec((0u64..6, proptest::collection::vec(0u32..10, 1..4), any::<bool>()), 0..60)
    ) {
        let mut c = ClusterState::homogeneous(2, 4);
        let mut held: BTreeMap<JobId, Vec<GpuId>> = BTreeMap::new();
        for (job, gpus, release) in ops {
            let job = JobId(job);
            let gpus: Vec<GpuId> = gpus.into_iter().map(GpuId).collect();
            if release {
                if let Some(h) = held.remove(&job) { c.release(job, &h); }
            } else if c.assign(job, &gpus).is_ok() {
                let e = held.entry(job).or_default();
                for g in gpus { if !e.contains(&g) { e.push(g); } }
            }
            let free = c.gpus().iter().filter(|g| g.job.is_none()).count() as u32;
            prop_assert_eq!(free, c.num_free());
            let mut all: Vec<GpuId> = held.values().flatten().copied().collect();
            let n = all.len();
            all.sort_unstable(); all.dedup();
            prop_assert_eq!(n, all.len(), "a GPU was given to two jobs");
            // Each job's GPUs, in the order it took them.
            for j in 0..6 {
                let want = held.get(&JobId(j)).map_or(&[][..], |h| &h[..]);
                prop_assert_eq!(c.allocation_of(JobId(j)), want);
            }
            prop_assert_eq!(&c.holders(), &held);
        }
    }
}

/// Every job's list holds exactly the GPUs the table gives it.
fn lists_match_table(c: &ClusterState) -> Result<(), TestCaseError> {
    let mut by_table: BTreeMap<JobId, Vec<GpuId>> = BTreeMap::new();
    for g in c.gpus() {
        if let Some(j) = g.job {
            by_table.entry(j).or_default().push(g.id);
        }
    }
    let mut listed = c.holders();
    for gpus in listed.values_mut() {
        gpus.sort_unstable();
    }
    prop_assert_eq!(listed, by_table);
    Ok(())
}

#[test]
fn a_job_keeps_its_gpus_in_the_order_it_took_them() {
    let mut c = ClusterState::homogeneous(2, 4);
    c.assign(JobId(3), &[GpuId(5), GpuId(1), GpuId(6)]).unwrap();
    assert_eq!(c.allocation_of(JobId(3)), &[GpuId(5), GpuId(1), GpuId(6)]);
    // More GPUs go after; GPUs it holds already keep their place.
    c.assign(JobId(3), &[GpuId(1), GpuId(0)]).unwrap();
    assert_eq!(
        c.allocation_of(JobId(3)),
        &[GpuId(5), GpuId(1), GpuId(6), GpuId(0)]
    );
    c.release(JobId(3), &[GpuId(1), GpuId(2)]);
    assert_eq!(c.allocation_of(JobId(3)), &[GpuId(5), GpuId(6), GpuId(0)]);
    // A node going takes all of a job's GPUs, on other nodes too.
    assert_eq!(c.remove_node(NodeId(1)).unwrap(), vec![JobId(3)]);
    assert!(c.allocation_of(JobId(3)).is_empty());
    assert!(c.holders().is_empty());
    assert_eq!(c.num_free(), 4);
}

#[test]
fn a_cluster_read_back_keeps_each_jobs_order() {
    let mut c = ClusterState::homogeneous(2, 4);
    c.assign(JobId(2), &[GpuId(7), GpuId(0)]).unwrap();
    let text = serde_json::to_string(&c).unwrap();
    let back: ClusterState = serde_json::from_str(&text).unwrap();
    assert_eq!(back.allocation_of(JobId(2)), &[GpuId(7), GpuId(0)]);
    // Written before the lists were: each job's GPUs in GPU order.
    let mut v: serde_json::Value = serde_json::from_str(&text).unwrap();
    v.as_object_mut().unwrap().remove("held").unwrap();
    let old: ClusterState = serde_json::from_value(v).unwrap();
    assert_eq!(old.allocation_of(JobId(2)), &[GpuId(0), GpuId(7)]);
    assert!(
        old.check_invariants(&JobState::new()).is_err(),
        "no running job holds them"
    );
}

#[test]
fn a_cluster_read_back_with_lists_the_table_does_not_give_is_refused() {
    let mut c = ClusterState::homogeneous(2, 4);
    c.assign(JobId(2), &[GpuId(7), GpuId(0)]).unwrap();
    let v: serde_json::Value = serde_json::to_value(&c).unwrap();
    let with = |held: serde_json::Value| {
        let mut v = v.clone();
        v["held"] = held;
        serde_json::from_value::<ClusterState>(v)
    };
    let e = |held| with(held).map(|_| ()).unwrap_err().to_string();
    let m = e(serde_json::json!([[2, [7, 1]]]));
    assert!(
        m.contains("`held` lists gpu-1 for job-2, but the GPU table gives gpu-1 to no job"),
        "{m}"
    );
    let m = e(serde_json::json!([[3, [7, 0]]]));
    assert!(m.contains("gives gpu-7 to job-2"), "{m}");
    let m = e(serde_json::json!([[2, [7, 0, 99]]]));
    assert!(m.contains("the GPU table has no such GPU"), "{m}");
    let m = e(serde_json::json!([[2, [7]]]));
    assert!(
        m.contains("`held` lists 1 held GPUs, but the GPU table has 2"),
        "{m}"
    );
    // Another order of the same GPUs is the job's own.
    let back = with(serde_json::json!([[2, [0, 7]]])).unwrap();
    assert_eq!(back.allocation_of(JobId(2)), &[GpuId(0), GpuId(7)]);
}

/// The free index as the table gives it, and the largest node's free count.
fn from_table(c: &ClusterState) -> (Vec<bool>, Vec<u32>, u32) {
    let free: Vec<bool> = c
        .gpus()
        .iter()
        .map(|g| g.online && g.job.is_none())
        .collect();
    let per_node: Vec<u32> = c
        .nodes()
        .iter()
        .map(|n| n.gpus.iter().filter(|g| free[g.index()]).count() as u32)
        .collect();
    let largest = per_node.iter().copied().max().unwrap_or(0);
    (free, per_node, largest)
}

/// The nodes by free count as `per_node` gives them (rows up to the
/// largest node's size).
fn by_count(c: &ClusterState, per_node: &[u32]) -> Vec<Vec<u64>> {
    let most = c.nodes().iter().map(|n| n.gpus.len()).max().unwrap_or(0);
    let mut rows = vec![vec![0u64; per_node.len().div_ceil(64)]; most];
    for (i, &n) in per_node.iter().enumerate() {
        if n > 0 {
            rows[n as usize - 1][i / 64] |= 1 << (i % 64);
        }
    }
    rows
}

proptest! {
    // Whatever mix of assignments, releases, failures, repairs and new nodes
    // arrives, the kept free index equals the one scanned from the table.
    #[test]
    fn the_free_index_is_the_tables_under_any_churn(
        ops in proptest::collection::vec((0u8..5, 0u64..6, proptest::collection::vec(0u32..16, 1..4)), 0..80)
    ) {
        let mut c = ClusterState::homogeneous(3, 4);
        for (op, job, gpus) in ops {
            let gpus: Vec<GpuId> = gpus.into_iter().map(GpuId).collect();
            let node = NodeId(job as u32 % c.nodes().len() as u32);
            match op {
                0 => { let _ = c.assign(JobId(job), &gpus); }
                1 => c.release(JobId(job), &gpus),
                2 => { let _ = c.remove_node(node); }
                3 => { let _ = c.restore_node(node); }
                _ => { c.add_node(NodeSpec::with_gpus(1 + job as u32 % 3)); }
            }
            let (free, per_node, largest) = from_table(&c);
            prop_assert_eq!(c.free_mask(), &free[..]);
            prop_assert_eq!(c.free_per_node(), &per_node[..]);
            prop_assert_eq!(&c.index.by_free[..], &by_count(&c, &per_node)[..]);
            prop_assert_eq!(c.largest_placeable(), largest);
            lists_match_table(&c)?;
            let listed: Vec<GpuId> = c.free_gpus().collect();
            let scanned: Vec<GpuId> = c.gpus().iter().filter(|g| free[g.id.index()]).map(|g| g.id).collect();
            prop_assert_eq!(listed, scanned);
        }
    }
}

#[test]
fn a_cluster_read_back_rebuilds_its_free_index() {
    let mut c = ClusterState::homogeneous(2, 4);
    c.assign(JobId(1), &[GpuId(1), GpuId(6)]).unwrap();
    c.remove_node(NodeId(0)).unwrap();
    let text = serde_json::to_string(&c).unwrap();
    let back: ClusterState = serde_json::from_str(&text).unwrap();
    assert_eq!(back.free_mask(), c.free_mask());
    assert_eq!(back.free_per_node(), c.free_per_node());
    assert_eq!(back.free_per_node(), &[0, 4]);
    assert_eq!(&back.index.by_free[..], &c.index.by_free[..]);
    assert_eq!(
        &back.index.by_free[..],
        &[vec![0], vec![0], vec![0], vec![0b10]]
    );
    assert_eq!(back.largest_placeable(), 4);
    // Read back, host shares are not assumed proportional.
    assert!(back.custom_host);
}

#[test]
fn the_invariant_check_finds_a_free_index_that_parts_from_the_table() {
    let mut c = ClusterState::homogeneous(2, 2);
    let jobs = JobState::new();
    c.check_invariants(&jobs).unwrap();
    c.index.free[3] = false;
    c.index.per_node[1] -= 1;
    let err = c.check_invariants(&jobs).unwrap_err().to_string();
    assert!(err.contains("free-GPU index"), "{err}");
    // The nodes by free count: node 1 (2 free) also marked as having 1,
    // then only as having 1.
    let mut c = ClusterState::homogeneous(2, 2);
    c.index.by_free[0][0] |= 0b10;
    c.check_invariants(&jobs).unwrap_err();
    c.index.by_free[1][0] &= !0b10;
    c.check_invariants(&jobs).unwrap_err();
    c.index.by_free[0][0] &= !0b10;
    c.index.by_free[1][0] |= 0b10;
    c.check_invariants(&jobs).unwrap();
}

/// A running job with `gpus` as its allocation.
fn running(id: u64, gpus: &[u32]) -> crate::job::Job {
    let mut j = crate::job::Job::new(crate::job::JobSpec::new(id, 0.0, gpus.len() as u32));
    j.status = crate::job::JobStatus::Running;
    j.allocation = gpus.iter().map(|&g| GpuId(g)).collect();
    j
}

#[test]
fn the_invariant_check_finds_allocations_that_part_from_the_table() {
    let check = |c: &ClusterState, jobs: &[crate::job::Job]| {
        let mut state = JobState::new();
        for j in jobs {
            state.insert(j.clone());
        }
        c.check_invariants(&state).map_err(|e| e.to_string())
    };
    let mut c = ClusterState::homogeneous(2, 4);
    c.assign(JobId(1), &[GpuId(0), GpuId(1)]).unwrap();
    c.assign(JobId(2), &[GpuId(5)]).unwrap();
    check(&c, &[running(1, &[0, 1]), running(2, &[5])]).unwrap();
    // The allocation names a GPU the table gives to nobody, or to another.
    let e = check(&c, &[running(1, &[0, 2]), running(2, &[5])]).unwrap_err();
    assert!(e.contains("job-1 is running with allocation"), "{e}");
    let e = check(&c, &[running(1, &[0, 5]), running(2, &[5])]).unwrap_err();
    assert!(e.contains("job-1 is running with allocation"), "{e}");
    // A GPU held by a job that is not running.
    let mut queued = running(2, &[]);
    queued.status = crate::job::JobStatus::Queued;
    let e = check(&c, &[running(1, &[0, 1]), queued]).unwrap_err();
    assert!(e.contains("job-2 holds"), "{e}");
}

/// Held GPUs by job, as the proptests track them.
type Held = std::collections::BTreeMap<u64, Vec<GpuId>>;

/// One step of a proptest: `job` releases what it holds, or takes `n`
/// free GPUs if it holds none and that many are free. Returns the job
/// when it took GPUs.
fn step(c: &mut ClusterState, held: &mut Held, job: u64, n: usize, release: bool) -> Option<u64> {
    if release {
        if let Some(g) = held.remove(&job) {
            c.release(JobId(job), &g);
        }
    } else if let std::collections::btree_map::Entry::Vacant(e) = held.entry(job) {
        let free: Vec<GpuId> = c
            .gpus()
            .iter()
            .filter(|g| g.job.is_none())
            .map(|g| g.id)
            .take(n)
            .collect();
        if free.len() == n {
            c.assign(JobId(job), &free).unwrap();
            e.insert(free);
            return Some(job);
        }
    }
    None
}

/// A job state of running jobs with the allocations `held`.
fn jobs_of(held: &Held) -> JobState {
    let mut s = JobState::new();
    for (j, g) in held {
        s.insert(running(*j, &g.iter().map(|g| g.0).collect::<Vec<_>>()));
    }
    s
}

proptest! {
    /// Under any assignment and release, allocations that are the table's
    /// pass; moving one allocated GPU to a free one, or dropping one, fails.
    #[test]
    fn the_invariant_check_passes_exactly_the_allocations_the_table_holds(
        ops in proptest::collection::vec((0u64..6, 1usize..4, any::<bool>()), 1..40),
        seed in any::<u64>(),
    ) {
        let mut c = ClusterState::homogeneous(3, 4);
        let mut held = Held::default();
        for (job, n, release) in ops {
            step(&mut c, &mut held, job, n, release);
        }
        prop_assert!(c.check_invariants(&jobs_of(&held)).is_ok());
        let Some((&victim, _)) = held.iter().nth(seed as usize % held.len().max(1)) else {
            return Ok(());
        };
        let mut wrong = held.clone();
        let list = wrong.get_mut(&victim).unwrap();
        let at = (seed >> 8) as usize % list.len();
        match c.gpus().iter().find(|g| g.job.is_none()) {
            Some(f) if seed & 1 == 0 => list[at] = f.id,
            _ => {
                list.remove(at);
            }
        }
        prop_assert!(c.check_invariants(&jobs_of(&wrong)).is_err());
    }
}

#[test]
fn the_check_of_changes_finds_what_a_round_broke_and_checks_all_after_nodes_change() {
    let state = |jobs: &[crate::job::Job]| {
        let mut s = JobState::new();
        for j in jobs {
            s.insert(j.clone());
        }
        s
    };
    let mut c = ClusterState::homogeneous(2, 4);
    // Nodes were added: the first check is a full one.
    assert!(c.changed.everything);
    c.check_changes(&JobState::new()).unwrap();
    assert!(!c.changed.everything && c.changed.gpus.is_empty());
    c.assign(JobId(1), &[GpuId(0), GpuId(1)]).unwrap();
    assert_eq!(c.changed.gpus, [0, 1]);
    c.check_changes(&state(&[running(1, &[0, 1])])).unwrap();
    assert!(c.changed.gpus.is_empty());
    // A job given a GPU its allocation does not name.
    c.assign(JobId(2), &[GpuId(5)]).unwrap();
    let e = c
        .check_changes(&state(&[running(1, &[0, 1]), running(2, &[6])]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("job-2 holds gpu-5"), "{e}");
    // Its allocation names one more than the table gives it.
    c.release(JobId(2), &[GpuId(5)]);
    c.assign(JobId(2), &[GpuId(5)]).unwrap();
    let e = c
        .check_changes(&state(&[running(1, &[0, 1]), running(2, &[5, 6])]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("job-2 is running with allocation"), "{e}");
    // A GPU given to a job that is not running.
    c.release(JobId(2), &[GpuId(5)]);
    c.assign(JobId(2), &[GpuId(5)]).unwrap();
    let mut queued = running(2, &[5]);
    queued.status = crate::job::JobStatus::Queued;
    let e = c
        .check_changes(&state(&[running(1, &[0, 1]), queued]))
        .unwrap_err()
        .to_string();
    assert!(e.contains("job-2 holds gpu-5"), "{e}");
    // The free index parted from a changed GPU's entry.
    c.release(JobId(2), &[GpuId(5)]);
    c.index.free[5] = false;
    let e = c.check_changes(&state(&[running(1, &[0, 1])])).unwrap_err();
    assert!(e.to_string().contains("free-GPU index"), "{e}");
    c.index.free[5] = true;
    // A node's count parted from the table.
    c.release(JobId(1), &[GpuId(1)]);
    c.index.per_node[0] += 1;
    let e = c.check_changes(&state(&[])).unwrap_err();
    assert!(e.to_string().contains("free-GPU index"), "{e}");
    c.index.per_node[0] -= 1;
    // A node going away: the next check is a full one, and finds job-1's
    // GPU 0 held by a job the state does not have.
    c.remove_node(NodeId(1)).unwrap();
    assert!(c.changed.everything);
    let e = c.check_changes(&state(&[])).unwrap_err().to_string();
    assert!(e.contains("job-1 holds"), "{e}");
}

#[test]
fn the_list_of_changes_never_outgrows_the_table() {
    let mut c = ClusterState::homogeneous(100, 8);
    c.check_all(&JobState::new()).unwrap();
    // Nobody checks (a throwaway fork): the list stops at the table's
    // size and the next check is a full one.
    for _ in 0..10 {
        for g in 0..800 {
            c.assign(JobId(1), &[GpuId(g)]).unwrap();
            c.release(JobId(1), &[GpuId(g)]);
        }
    }
    assert!(c.changed.everything);
    assert!(c.changed.gpus.len() <= 800);
}

proptest! {
    /// Checked after each step of any assignment and release, the check of
    /// changes agrees with the full check, and a corrupted allocation among
    /// the changed ones is found by both.
    #[test]
    fn the_check_of_changes_agrees_with_the_full_check(
        ops in proptest::collection::vec((0u64..6, 1usize..4, any::<bool>()), 1..40),
        corrupt in any::<u64>(),
    ) {
        let mut c = ClusterState::homogeneous(3, 4);
        let mut held = Held::default();
        for (i, (job, n, release)) in ops.into_iter().enumerate() {
            let touched = step(&mut c, &mut held, job, n, release);
            let mut state = jobs_of(&held);
            let broken = touched.filter(|_| corrupt % 7 == i as u64 % 7);
            if let Some(j) = broken {
                // The job just placed reports one GPU fewer.
                state.get_mut(JobId(j)).unwrap().allocation.pop();
            }
            let full = c.check_invariants(&state).is_ok();
            let changes = c.check_changes(&state).is_ok();
            prop_assert_eq!(full, broken.is_none());
            prop_assert_eq!(changes, full);
        }
    }
}

#[test]
fn both_checks_find_an_allocation_in_another_order_than_the_clusters() {
    let mut c = ClusterState::homogeneous(2, 4);
    c.check_all(&JobState::new()).unwrap();
    c.assign(JobId(1), &[GpuId(5), GpuId(1)]).unwrap();
    let mut state = JobState::new();
    state.insert(running(1, &[1, 5]));
    // The same GPUs, in another order: its ranks would differ.
    let e = c.check_invariants(&state).unwrap_err().to_string();
    assert!(
        e.contains("but the cluster gives it [GpuId(5), GpuId(1)]"),
        "{e}"
    );
    let e = c.check_changes(&state).unwrap_err().to_string();
    assert!(
        e.contains("but the cluster gives it [GpuId(5), GpuId(1)]"),
        "{e}"
    );
    let mut state = JobState::new();
    state.insert(running(1, &[5, 1]));
    c.check_invariants(&state).unwrap();
    c.check_changes(&state).unwrap();
}

#[test]
fn the_check_of_changes_compares_a_job_that_gave_back_some_gpus() {
    let mut c = ClusterState::homogeneous(2, 4);
    c.assign(JobId(1), &[GpuId(0), GpuId(1), GpuId(2)]).unwrap();
    let one = |gpus: &[u32]| {
        let mut s = JobState::new();
        s.insert(running(1, gpus));
        s
    };
    c.check_all(&one(&[0, 1, 2])).unwrap();
    // It keeps 0 and 2: the changed GPU is free, so only its list says
    // what it holds now.
    c.release(JobId(1), &[GpuId(1)]);
    let e = c.check_changes(&one(&[0, 1, 2])).unwrap_err().to_string();
    assert!(e.contains("job-1 is running with allocation [GpuId(0), GpuId(1), GpuId(2)] but the cluster gives it [GpuId(0), GpuId(2)]"), "{e}");
    c.release(JobId(1), &[GpuId(2)]);
    c.check_changes(&one(&[0])).unwrap();
}
