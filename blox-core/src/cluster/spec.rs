//! What a node offers: its description in a cluster config or a worker's
//! registration, and the host share a job gets per GPU.

use super::ClusterError;
use serde::{Deserialize, Serialize};

/// What a node offers (one entry of the cluster description).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeSpec {
    /// GPU model name, e.g. `"V100"`; Gavel-style policies key throughput on it.
    #[serde(default = "default_gpu_type")]
    pub gpu_type: String,
    /// GPUs on the node.
    pub gpus: u32,
    /// Memory per GPU, GiB.
    #[serde(default = "default_gpu_mem")]
    pub gpu_mem_gb: f64,
    /// CPU cores of the node (Synergy-style policies use them).
    #[serde(default = "default_cpus")]
    pub cpus: u32,
    /// Host memory, GiB.
    #[serde(default = "default_host_mem")]
    pub host_mem_gb: f64,
    /// Network bandwidth to other nodes, Gbit/s.
    #[serde(default = "default_inter_bw")]
    pub inter_node_bw_gbps: f64,
    /// GPU-to-GPU bandwidth inside the node, GB/s.
    #[serde(default = "default_intra_bw")]
    pub intra_node_bw_gbps: f64,
    /// Bandwidth between each pair of the node's GPUs (by local id), GB/s,
    /// where it is uneven (e.g. NVLink topologies); empty: every pair gets
    /// `intra_node_bw_gbps`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpu_bandwidth_gbps: Vec<Vec<f64>>,
    /// Where it sits in the topology, by level name (`rack = "r3"`): a live
    /// worker's `--labels` (config node groups name theirs in
    /// `[[cluster.node_groups]] labels`).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub labels: std::collections::BTreeMap<String, String>,
    /// Each GPU's measured (or declared) relative time, by local id: a live
    /// worker's speed probe or `--gpu-slowdown`, a node group's
    /// `gpu_slowdown`. The cluster divides them by their median over all its
    /// GPUs into one slowdown factor per GPU ([`crate::variability`], class
    /// `measured`) unless the config gives a factor table. Empty: not
    /// measured (1).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpu_slowdown: Vec<f64>,
    /// Its GPUs go to one job at a time: no placement may give a job a
    /// share of one (a live worker that does not host several launches on a
    /// GPU, `RegisterRequest.shares_gpus`; a node group's GPUs without
    /// sharing).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub whole_gpus_only: bool,
}

fn default_gpu_type() -> String {
    "V100".into()
}
fn default_gpu_mem() -> f64 {
    16.0
}
fn default_cpus() -> u32 {
    32
}
fn default_host_mem() -> f64 {
    244.0
}
fn default_inter_bw() -> f64 {
    25.0
}
fn default_intra_bw() -> f64 {
    300.0
}

/// CPU cores and host memory a job gets per GPU it holds (Synergy, OSDI'22 §3:
/// a job's demand vector beyond GPUs). On every node the job spans it takes
/// `k ×` this for its `k` GPUs there.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct HostShare {
    pub cpus_per_gpu: f64,
    pub mem_gb_per_gpu: f64,
}

impl HostShare {
    /// True if `self` asks for more than `other` in some dimension.
    pub fn exceeds(&self, other: &HostShare) -> bool {
        self.cpus_per_gpu > other.cpus_per_gpu + 1e-9
            || self.mem_gb_per_gpu > other.mem_gb_per_gpu + 1e-9
    }
}

impl NodeSpec {
    /// True if `cpus` CPUs and `mem_gb` GiB of host memory are more than
    /// this node has (beyond [`super::HOST_EPS`], the rounding the
    /// cluster's checks allow).
    pub fn over_host(&self, cpus: f64, mem_gb: f64) -> bool {
        cpus > self.cpus as f64 + super::HOST_EPS || mem_gb > self.host_mem_gb + super::HOST_EPS
    }

    /// The GPU-proportional share of this node: its CPUs and host memory split
    /// evenly over its GPUs (what every job gets unless a policy says otherwise).
    pub fn proportional_share(&self) -> HostShare {
        let g = self.gpus.max(1) as f64;
        HostShare {
            cpus_per_gpu: self.cpus as f64 / g,
            mem_gb_per_gpu: self.host_mem_gb / g,
        }
    }

    /// A node with `gpus` GPUs and defaults for the rest (V100, 16 GiB).
    pub fn with_gpus(gpus: u32) -> Self {
        NodeSpec {
            gpu_type: default_gpu_type(),
            gpus,
            gpu_mem_gb: default_gpu_mem(),
            cpus: default_cpus(),
            host_mem_gb: default_host_mem(),
            inter_node_bw_gbps: default_inter_bw(),
            intra_node_bw_gbps: default_intra_bw(),
            gpu_bandwidth_gbps: Vec::new(),
            labels: Default::default(),
            gpu_slowdown: Vec::new(),
            whole_gpus_only: false,
        }
    }

    /// Bandwidth between local GPUs `a` and `b`, GB/s.
    pub fn pair_bandwidth(&self, a: u32, b: u32) -> f64 {
        self.gpu_bandwidth_gbps
            .get(a as usize)
            .and_then(|row| row.get(b as usize))
            .copied()
            .unwrap_or(self.intra_node_bw_gbps)
    }

    /// Checks that a bandwidth matrix, if given, is `gpus × gpus`.
    pub fn validate(&self) -> Result<(), ClusterError> {
        let n = self.gpus as usize;
        if !self.gpu_bandwidth_gbps.is_empty()
            && (self.gpu_bandwidth_gbps.len() != n
                || self.gpu_bandwidth_gbps.iter().any(|r| r.len() != n))
        {
            return Err(ClusterError::InvalidSpec(format!(
                "gpu_bandwidth_gbps must be a {n} x {n} matrix (one row per GPU)"
            )));
        }
        if !self.gpu_slowdown.is_empty() && self.gpu_slowdown.len() != n {
            return Err(ClusterError::InvalidSpec(format!(
                "gpu_slowdown must give one value per GPU ({n}), not {}",
                self.gpu_slowdown.len()
            )));
        }
        if let Some((i, v)) = self
            .gpu_slowdown
            .iter()
            .enumerate()
            .find(|(_, v)| !(v.is_finite() && **v > 0.0))
        {
            return Err(ClusterError::InvalidSpec(format!(
                "gpu_slowdown[{i}] = {v}: a GPU's relative time must be finite and above 0"
            )));
        }
        Ok(())
    }
}
