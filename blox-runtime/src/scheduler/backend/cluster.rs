//! Cluster management: workers that stop beating are declared gone (their
//! nodes failed, their launches retired), workers that register join as
//! nodes (or as the failed node back), and forgotten ones leave for good.

use super::*;

impl ClusterManager for ClusterBackend {
    /// A live cluster's nodes are the workers that registered: a policy that
    /// asks for another size (Pollux's autoscaling) is told no, once in the
    /// log and in `Status`, and the scheduler goes on with the nodes it has.
    fn request_nodes(&mut self, round: &RoundInfo, nodes: u32) -> Result<(), BackendError> {
        let text = format!(
            "round {}: the policy asked for {nodes} nodes; on a live cluster the nodes are the workers that register, so the request is ignored (turn the policy's autoscaling off)",
            round.round
        );
        let mut h = lock(&self.hub);
        if !h.last_error.contains("asked for") {
            tracing::warn!("{text}");
        }
        h.last_error = text;
        Ok(())
    }

    fn cluster_events(&mut self, _round: &RoundInfo) -> Result<Vec<ClusterEvent>, BackendError> {
        self.round_started = Some(Instant::now());
        let timeout = Duration::from_secs_f64(self.cfg.worker_timeout_s);
        let mut events = Vec::new();
        let mut lost = Vec::new();
        {
            let mut h = lock(&self.hub);
            let h = &mut *h;
            for (id, w) in h.workers.iter_mut() {
                if w.alive && w.last_seen.elapsed() > timeout {
                    w.alive = false;
                    w.dead_since = Some(Instant::now());
                    tracing::warn!(worker = %id, "no heartbeat for {:.1} s: the worker is gone; its jobs go back to the queue", self.cfg.worker_timeout_s);
                    self.metrics.workers_lost.inc();
                    h.expected.remove(id);
                    // Its busy uids no longer speak; those its launches
                    // held stay held until it beats again.
                    h.uids.gone(id);
                    // Its lease and fence grace are over: nothing runs there.
                    h.in_doubt.retain(|_, parts| {
                        parts.retain(|(w, _)| w != id);
                        !parts.is_empty()
                    });
                    if let Some(n) = w.node {
                        // A failed node: its jobs go back to their last
                        // checkpoint, and it is the same node if it comes back.
                        events.push(ClusterEvent::NodeFailed(n));
                        self.metrics.failures.inc();
                        self.failed_nodes
                            .insert(w.address.clone(), (n, w.gpus.len(), w.shares_gpus));
                        lost.push(id.clone());
                    }
                }
            }
        }
        // Workers that registered again after a restart: what they still
        // run is adopted or revoked before they join.
        self.hold_over = Instant::now() >= lock(&self.hub).hold_until;
        let adopted = self.settle_reports();
        {
            let mut h = lock(&self.hub);
            let h = &mut *h;
            let mut repaired = Vec::new();
            for (id, w) in h.workers.iter_mut() {
                if w.alive && w.verified && w.node.is_none() && w.reported.is_empty() {
                    if let Some((node, _, _)) = self
                        .failed_nodes
                        .get(&w.address)
                        .copied()
                        .filter(|(_, g, shares)| *g == w.gpus.len() && *shares == w.shares_gpus)
                    {
                        // The node that failed, back: same id, same GPUs,
                        // shared (or not) as before.
                        self.failed_nodes.remove(&w.address);
                        w.node = Some(node);
                        self.nodes[node.index()] = id.clone();
                        let mut local = w.gpus.iter().map(|g| g.index);
                        for e in self.gpu_map.iter_mut().filter(|e| e.0 == node.index()) {
                            e.1 = local.next().unwrap_or(e.1);
                        }
                        events.push(ClusterEvent::NodeRepaired(node));
                        repaired.push(node);
                        tracing::info!(worker = %id, node = %node, "worker back: its node rejoins the cluster");
                        continue;
                    }
                    let node = NodeId(self.nodes.len() as u32);
                    w.node = Some(node);
                    self.nodes.push(id.clone());
                    // The loop numbers GPUs in the order nodes add them.
                    self.gpu_map
                        .extend(w.gpus.iter().map(|g| (node.index(), g.index)));
                    let mut spec = NodeSpec::with_gpus(w.gpus.len() as u32);
                    spec.gpu_type = w.gpus[0].name.clone();
                    if w.gpus[0].memory_gb > 0.0 {
                        spec.gpu_mem_gb = w.gpus[0].memory_gb;
                    }
                    if w.cpus > 0 {
                        spec.cpus = w.cpus;
                    }
                    if w.host_mem_gb > 0.0 {
                        spec.host_mem_gb = w.host_mem_gb;
                    }
                    spec.labels = w.labels.clone();
                    // An older worker runs a launch on whole GPUs only.
                    spec.whole_gpus_only = !w.shares_gpus;
                    // Each GPU's relative time, where the worker measured
                    // every one ([`blox_core::variability`]).
                    if w.gpus.iter().all(|g| g.relative_time > 0.0) {
                        spec.gpu_slowdown = w.gpus.iter().map(|g| g.relative_time).collect();
                    }
                    events.push(ClusterEvent::NodeAdded(spec));
                    tracing::info!(worker = %id, node = %node, "worker joined the cluster");
                }
            }
            // The gone entry of a node that came back no longer holds it.
            for w in h.workers.values_mut() {
                if !w.alive && w.node.is_some_and(|n| repaired.contains(&n)) {
                    w.node = None;
                }
            }
            let forget_after = self.cfg.forget_workers_after_s;
            // A failed node whose worker is forgotten has left for good.
            for w in h.workers.values() {
                let forgotten = w
                    .dead_since
                    .is_some_and(|t| t.elapsed().as_secs_f64() >= forget_after);
                if let (true, Some(n)) = (forgotten, w.node) {
                    if self
                        .failed_nodes
                        .get(&w.address)
                        .is_some_and(|(f, _, _)| *f == n)
                    {
                        self.failed_nodes.remove(&w.address);
                        events.push(ClusterEvent::NodeRemoved(n));
                    }
                }
            }
            h.workers.retain(|_, w| {
                w.dead_since
                    .is_none_or(|t| t.elapsed().as_secs_f64() < forget_after)
            });
            // A gone worker's credential is worth nothing from then on.
            let workers = &h.workers;
            h.credentials
                .retain(|_, id| workers.get(id).is_some_and(|w| w.alive));
            h.cluster_gpus = h
                .workers
                .values()
                .filter(|w| w.alive && w.node.is_some())
                .map(|w| w.gpus.len() as u32)
                .sum();
        }
        events.extend(self.adopted(adopted));
        if !lost.is_empty() {
            let now = self.now();
            let hit: Vec<JobId> = self
                .running
                .iter()
                .filter(|(_, l)| l.parts.iter().any(|p| lost.contains(&p.worker)))
                .map(|(id, _)| *id)
                .collect();
            for id in hit {
                let mut live = self.retire(id, now).expect("listed above");
                // The job's parts on live workers stop too; the loop requeues it.
                live.parts.retain(|p| !lost.contains(&p.worker));
                if !live.parts.is_empty() {
                    self.revoke_parts(id, &live, true);
                } else {
                    self.forget_expected(id, &live);
                }
            }
        }
        Ok(events)
    }
}
