//! The simulated cluster's management: nodes planned to join, leave, fail
//! and come back (a replayed history's), the failure model's failures and
//! repairs, the jobs a lost node stops, and an elastic cloud's nodes.

use super::SimBackend;
use blox_core::*;

impl ClusterManager for SimBackend {
    fn cluster_events(&mut self, round: &RoundInfo) -> Result<Vec<ClusterEvent>, BackendError> {
        while self
            .planned
            .front()
            .is_some_and(|(t, _)| *t <= round.now_s + 1e-9)
        {
            let Some((_, ev)) = self.planned.pop_front() else {
                break;
            };
            match &ev {
                ClusterEvent::NodeAdded(spec) => {
                    self.track_added(spec);
                }
                ClusterEvent::NodeRemoved(id) => {
                    self.online_nodes.retain(|x| x != id);
                    if let Some(f) = &mut self.failures {
                        f.remove_node(*id);
                    }
                }
                // A replayed history's failures and repairs.
                other => self.note_up_or_down(other),
            }
            self.events.push(ev);
        }
        let due = match &mut self.failures {
            Some(f) => f.due(round.now_s),
            None => Vec::new(),
        };
        for ev in due {
            self.note_up_or_down(&ev);
            self.events.push(ev);
        }
        let events = std::mem::take(&mut self.events);
        for ev in &events {
            let (ClusterEvent::NodeRemoved(id) | ClusterEvent::NodeFailed(id)) = ev else {
                continue;
            };
            let failed = matches!(ev, ClusterEvent::NodeFailed(_));
            // Jobs on a released node stop (the loop requeues them).
            let hit: Vec<JobId> = self
                .running
                .iter()
                .copied()
                .filter(|j| {
                    self.jobs
                        .get(j)
                        .and_then(|s| s.segment.as_ref())
                        .is_some_and(|seg| seg.nodes.binary_search(id).is_ok())
                })
                .collect();
            for j in hit {
                self.stop_as(j, failed);
            }
        }
        Ok(events)
    }

    /// A simulated elastic cloud: nodes are provisioned (like the first node)
    /// or released (highest ids first) by the next round, between 1 and
    /// `[cluster] max_nodes` (default: the starting size).
    fn request_nodes(&mut self, _round: &RoundInfo, nodes: u32) -> Result<(), BackendError> {
        let online: Vec<NodeId> = self.online_nodes.clone();
        let nodes = nodes.clamp(1, self.max_nodes.max(1));
        if nodes as usize > online.len() {
            for _ in online.len()..nodes as usize {
                let spec = self.node_template.clone();
                self.track_added(&spec);
                self.events.push(ClusterEvent::NodeAdded(spec));
            }
        } else {
            for id in online.iter().rev().take(online.len() - nodes as usize) {
                self.online_nodes.retain(|x| x != id);
                self.events.push(ClusterEvent::NodeRemoved(*id));
            }
        }
        Ok(())
    }
}

impl SimBackend {
    /// Keeps the online nodes in step with a node that failed or was
    /// repaired (the failure model's, or a replayed history's).
    fn note_up_or_down(&mut self, ev: &ClusterEvent) {
        match ev {
            ClusterEvent::NodeFailed(id) => self.online_nodes.retain(|x| x != id),
            ClusterEvent::NodeRepaired(id) if !self.online_nodes.contains(id) => {
                self.online_nodes.push(*id);
                self.online_nodes.sort_unstable();
            }
            _ => {}
        }
    }
}
