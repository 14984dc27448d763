//! Tiresias placement (Tiresias, NSDI'19, §3.3; Blox, EuroSys'24, §4.3 and
//! Fig. 10–11): consolidate only the jobs whose models are sensitive to
//! placement — in Tiresias, models with a highly skewed tensor-size
//! distribution — and place the rest where they cause the least fragmentation,
//! spreading across nodes when needed.
//!
//! `consolidate` lists the placement-sensitive model names (matched
//! case-insensitively against the job's `model`, as a prefix, so `vgg` covers
//! `vgg16` and `vgg19`). The default is the skew heuristic's choice: the
//! VGG and AlexNet families. Blox's profile-aware "Tiresias+" is the same
//! policy with the list taken from profiles of the hardware at hand, e.g.
//! `consolidate = ["vgg", "alexnet", "resnet50", "bert"]`.
//!
//! Placement-sensitive jobs go on the fewest nodes (best fit, as
//! `consolidated`); others take free GPUs from the fullest nodes first, so
//! that whole nodes stay free for sensitive jobs. Preemption follows Blox's walk.

use super::consolidated::fewest_nodes;
use blox_core::walk::{priority_walk, FreeGpus, WalkParams};
use blox_core::*;
use serde::Deserialize;

fn default_models() -> Vec<String> {
    vec!["vgg".into(), "alexnet".into()]
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TiresiasSkew {
    #[serde(default = "default_models")]
    pub consolidate: Vec<String>,
    #[serde(default)]
    pub backfill: bool,
    #[serde(default = "yes")]
    pub preempt: bool,
}

fn yes() -> bool {
    true
}

impl TiresiasSkew {
    /// Does this job's model benefit from consolidation?
    pub fn sensitive(&self, job: &Job) -> bool {
        let Some(model) = job.spec.model.as_deref() else {
            return false;
        };
        let model = model.to_ascii_lowercase();
        self.consolidate
            .iter()
            .any(|m| model.starts_with(&m.to_ascii_lowercase()))
    }
}

/// `n` free GPUs, fullest nodes first (least fragmentation): nodes with the
/// fewest free GPUs are used up before emptier ones are touched.
fn least_fragmenting(free: &FreeGpus, n: u32) -> Option<Vec<GpuId>> {
    if free.count() < n {
        return None;
    }
    let mut nodes: Vec<NodeId> = free
        .cluster
        .nodes()
        .iter()
        .map(|x| x.id)
        .filter(|id| free.on_node(*id) > 0)
        .collect();
    nodes.sort_by_key(|id| (free.on_node(*id), *id));
    Some(
        nodes
            .into_iter()
            .flat_map(|id| free.gpus_on(id).collect::<Vec<_>>())
            .take(n as usize)
            .collect(),
    )
}

impl PlacementPolicy for TiresiasSkew {
    fn fork(&self) -> Fork<dyn PlacementPolicy> {
        Fork::Copy(Box::new(self.clone()))
    }

    fn place(
        &mut self,
        _round: &RoundInfo,
        schedule: &Schedule,
        jobs: &JobState,
        cluster: &ClusterState,
    ) -> Placement {
        let walk = WalkParams {
            backfill: self.backfill,
            preempt: self.preempt,
        };
        priority_walk(&walk, schedule, jobs, cluster, |free, job, n| {
            if self.sensitive(job) {
                fewest_nodes(free, n)
            } else {
                least_fragmenting(free, n)
            }
        })
    }
}

blox_core::register_placement!(
    "tiresias",
    "consolidate placement-sensitive (skewed) models, spread the rest with least fragmentation (Tiresias §3.3, Blox §4.3)",
    |p| Ok(Box::new(p.parse::<TiresiasSkew>()?))
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::*;

    fn with_model(id: u64, gpus: u32, model: &str) -> Job {
        let mut j = job(id, id as f64, gpus);
        j.spec.model = Some(model.into());
        j
    }

    fn nodes_of(cluster: &ClusterState, gpus: &[GpuId]) -> Vec<NodeId> {
        let mut n: Vec<NodeId> = gpus.iter().map(|g| cluster.gpu(*g).unwrap().node).collect();
        n.sort();
        n.dedup();
        n
    }

    #[test]
    fn skewed_models_are_consolidated_others_fill_fragments() {
        // Node 0 has 2 free GPUs, node 1 has 4.
        let mut cluster = ClusterState::homogeneous(2, 4);
        let mut state = JobState::new();
        add(
            &mut state,
            &mut cluster,
            with_model(1, 2, "resnet50"),
            &[0, 1],
        );
        add(&mut state, &mut cluster, with_model(2, 4, "VGG19"), &[]);
        add(&mut state, &mut cluster, with_model(3, 2, "resnet18"), &[]);
        let order = [2, 3, 1].map(|i| state.get(JobId(i)).unwrap());
        let schedule = Schedule::in_priority_order(order);
        let p = TiresiasSkew {
            consolidate: default_models(),
            backfill: false,
            preempt: true,
        }
        .place(&info(0.0), &schedule, &state, &cluster);
        let vgg = p.launch.iter().find(|a| a.job == JobId(2)).unwrap();
        assert_eq!(
            nodes_of(&cluster, &vgg.gpus),
            vec![NodeId(1)],
            "VGG on one whole node"
        );
        let resnet = p.launch.iter().find(|a| a.job == JobId(3)).unwrap();
        assert_eq!(
            nodes_of(&cluster, &resnet.gpus),
            vec![NodeId(0)],
            "ResNet fills the fragment"
        );
    }

    #[test]
    fn an_insensitive_job_may_span_nodes() {
        let mut cluster = ClusterState::homogeneous(2, 4);
        let mut state = JobState::new();
        add(
            &mut state,
            &mut cluster,
            with_model(1, 2, "resnet50"),
            &[0, 1],
        );
        add(&mut state, &mut cluster, with_model(2, 1, "resnet50"), &[4]);
        add(&mut state, &mut cluster, with_model(3, 5, "resnet50"), &[]);
        let order = [1, 2, 3].map(|i| state.get(JobId(i)).unwrap());
        let schedule = Schedule::in_priority_order(order);
        let p = TiresiasSkew {
            consolidate: default_models(),
            backfill: false,
            preempt: true,
        }
        .place(&info(0.0), &schedule, &state, &cluster);
        let j3 = p.launch.iter().find(|a| a.job == JobId(3)).unwrap();
        assert_eq!(j3.gpus.len(), 5);
        assert_eq!(nodes_of(&cluster, &j3.gpus).len(), 2);
    }
}
