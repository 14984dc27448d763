//! `[cluster]`: the nodes a config describes.

use super::{Config, ConfigError, NonNegative, Positive, Section};
use crate::cluster::{ClusterState, NodeSpec};
use serde::Deserialize;

/// `[cluster]`: either `nodes` × `gpus_per_node` (plus optional node fields), or a
/// list of `[[cluster.node_groups]]` (each `count` plus the fields of [`NodeSpec`]).
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ClusterConfig {
    pub nodes: Option<u32>,
    /// Elastic (cloud) cluster: it may grow to this many nodes like the first
    /// (auto-scaling); jobs are only rejected if they exceed that size.
    pub max_nodes: Option<u32>,
    pub gpus_per_node: Option<u32>,
    pub gpu_type: Option<String>,
    pub gpu_mem_gb: Option<Positive>,
    pub cpus: Option<u32>,
    pub host_mem_gb: Option<NonNegative>,
    pub inter_node_bw_gbps: Option<Positive>,
    pub intra_node_bw_gbps: Option<Positive>,
    /// Per-pair GPU bandwidth inside a node (see `NodeSpec::gpu_bandwidth_gbps`).
    #[serde(default)]
    pub gpu_bandwidth_gbps: Vec<Vec<f64>>,
    #[serde(default)]
    pub node_groups: Vec<toml::Table>,
}

/// One group of identical nodes: `count` plus the fields of [`NodeSpec`].
#[derive(Clone, Debug, PartialEq)]
pub struct NodeGroup {
    /// How many nodes of this kind.
    pub count: u32,
    pub spec: NodeSpec,
}

/// Most nodes a config may describe (a typo such as `nodes = 1e9` would
/// otherwise try to allocate them).
pub const MAX_NODES: u32 = 1_000_000;

impl NodeGroup {
    fn from_section(s: &Section) -> Result<Self, ConfigError> {
        let mut t = s.table().clone();
        let count = match t.remove("count") {
            Some(toml::Value::Integer(n)) if (0..=MAX_NODES as i64).contains(&n) => n as u32,
            Some(_) => {
                return Err(s.error_at(
                    "count",
                    format!("`count` must be an integer from 0 to {MAX_NODES}"),
                ))
            }
            None => return Err(s.error_at("count", "missing field `count`")),
        };
        let spec: NodeSpec = s.with_table(t).parse()?;
        spec.validate()
            .map_err(|e| s.error_at("gpu_bandwidth_gbps", e.to_string()))?;
        Ok(NodeGroup { count, spec })
    }
}

impl Config {
    /// The cluster the config describes.
    pub fn cluster_state(&self) -> Result<ClusterState, ConfigError> {
        let c = &self.cluster;
        let s = self.section("cluster");
        let mut cluster = ClusterState::new();
        match (c.nodes, c.gpus_per_node) {
            (Some(n), Some(g)) => {
                if n > MAX_NODES {
                    return Err(s.error_at("nodes", format!("`nodes` must be at most {MAX_NODES}")));
                }
                if g == 0 || g > 1024 {
                    return Err(
                        s.error_at("gpus_per_node", "`gpus_per_node` must be from 1 to 1024")
                    );
                }
                let mut spec = NodeSpec::with_gpus(g);
                if let Some(t) = &c.gpu_type {
                    spec.gpu_type = t.clone();
                }
                if let Some(v) = c.gpu_mem_gb {
                    spec.gpu_mem_gb = v.get();
                }
                if let Some(v) = c.cpus {
                    spec.cpus = v;
                }
                if let Some(v) = c.host_mem_gb {
                    spec.host_mem_gb = v.get();
                }
                if let Some(v) = c.inter_node_bw_gbps {
                    spec.inter_node_bw_gbps = v.get();
                }
                if let Some(v) = c.intra_node_bw_gbps {
                    spec.intra_node_bw_gbps = v.get();
                }
                spec.gpu_bandwidth_gbps = c.gpu_bandwidth_gbps.clone();
                spec.validate()
                    .map_err(|e| s.error_at("gpu_bandwidth_gbps", e.to_string()))?;
                for _ in 0..n {
                    cluster.add_node(spec.clone());
                }
            }
            (None, None) => {}
            (None, Some(_)) => {
                return Err(s.error_at("gpus_per_node", "give both `nodes` and `gpus_per_node`"))
            }
            (Some(_), None) => {
                return Err(s.error_at("nodes", "give both `nodes` and `gpus_per_node`"))
            }
        }
        let mut total: u64 = cluster.nodes().len() as u64;
        for (i, group) in c.node_groups.iter().enumerate() {
            let sub = s.subsection(
                &format!("cluster.node_groups[{i}]"),
                &format!("node_groups.{i}"),
                group.clone(),
            );
            let g = NodeGroup::from_section(&sub)?;
            total += g.count as u64;
            if total > MAX_NODES as u64 {
                return Err(sub.error_at(
                    "count",
                    format!("the cluster would have more than {MAX_NODES} nodes"),
                ));
            }
            for _ in 0..g.count {
                cluster.add_node(g.spec.clone());
            }
        }
        if let Some(m) = c.max_nodes {
            let per_node = cluster.nodes().first().map_or(0, |n| n.gpus.len() as u64);
            if (m as usize) < cluster.nodes().len() {
                return Err(s.error_at(
                    "max_nodes",
                    format!(
                        "max_nodes = {m} is below the {} nodes the cluster starts with",
                        cluster.nodes().len()
                    ),
                ));
            }
            let gpus = u32::try_from(m as u64 * per_node)
                .map_err(|_| s.error_at("max_nodes", "max_nodes × GPUs per node is too large"))?;
            cluster.set_max_gpus(Some(gpus));
        }
        if cluster.num_gpus() == 0 {
            return Err(s.error_at(
                "nodes",
                "the cluster has no GPUs: set `nodes` and `gpus_per_node`, or [[cluster.node_groups]]",
            ));
        }
        Ok(cluster)
    }
}
