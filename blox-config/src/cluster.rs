//! `[cluster]`: the nodes a config describes.

use crate::{Config, ConfigError, NonNegative, Positive, Section, Table, Value};
use blox_core::cluster::{ClusterState, NodeSpec};
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
    pub node_groups: Vec<Table>,
    /// Levels above the nodes (`blox_core::topology`).
    pub topology: Option<Table>,
    /// Hot spares: this many nodes (the highest ids) are kept out of the
    /// scheduler's reach until a failure calls one in (`blox_core::health`).
    pub spares: Option<i64>,
    /// `[cluster.quarantine]`: failing nodes kept out after their repair.
    pub quarantine: Option<Table>,
    /// `[cluster.variability]`: per-GPU slowdown factors by application
    /// class (`blox_core::variability`).
    pub variability: Option<Table>,
}

/// `[cluster.variability]` as written.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct VariabilityConfig {
    /// The factor table (CSV: `GPU_ID`, optional `Node_ID`,
    /// `PerfVar_<class>`...), relative to the config file.
    factors: std::path::PathBuf,
    /// A model's class (`{ resnet50 = "classA", ... }`).
    #[serde(default)]
    classes: std::collections::BTreeMap<String, String>,
    /// The class of models `classes` does not name (and of jobs without a
    /// model).
    default_class: String,
}

/// `[cluster.quarantine]` as written.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct QuarantineConfig {
    /// More failures than this within the window quarantine a node.
    failures: u32,
    window_h: Positive,
    probation_h: Positive,
}

/// `[cluster.topology]`'s levels.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TopologyConfig {
    levels: Vec<LevelConfig>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LevelConfig {
    name: String,
    bandwidth_gbps: Positive,
    /// Children per domain (nodes fill them in order); else node groups'
    /// `labels` name the domains.
    size: Option<u32>,
}

/// One group of identical nodes: `count` plus the fields of [`NodeSpec`].
#[derive(Clone, Debug, PartialEq)]
pub struct NodeGroup {
    /// How many nodes of this kind.
    pub count: u32,
    pub spec: NodeSpec,
    /// The domains its nodes sit in, by level name (`[cluster.topology]`).
    pub labels: Option<Table>,
}

/// Most nodes a config may describe (a typo such as `nodes = 1e9` would
/// otherwise try to allocate them).
pub const MAX_NODES: u32 = 1_000_000;

impl NodeGroup {
    fn from_section(s: &Section) -> Result<Self, ConfigError> {
        let mut t = s.table().clone();
        let count = match t.remove("count") {
            Some(Value::Integer(n)) if (0..=MAX_NODES as i64).contains(&n) => n as u32,
            Some(_) => {
                return Err(s.error_at(
                    "count",
                    format!("`count` must be an integer from 0 to {MAX_NODES}"),
                ))
            }
            None => return Err(s.error_at("count", "missing field `count`")),
        };
        let labels = match t.remove("labels") {
            None => None,
            Some(Value::Table(l)) => Some(l),
            Some(_) => {
                return Err(s.error_at(
                    "labels",
                    "`labels` is a table of level = \"domain\", e.g. { rack = \"r1\" }",
                ))
            }
        };
        let spec: NodeSpec = s.with_table(t).parse()?;
        spec.validate().map_err(|e| {
            let e = e.to_string();
            let key = if e.starts_with("gpu_slowdown") {
                "gpu_slowdown"
            } else {
                "gpu_bandwidth_gbps"
            };
            s.error_at(key, e)
        })?;
        Ok(NodeGroup {
            count,
            spec,
            labels,
        })
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
        // Each node's labels (from its group), for the topology.
        let mut labels: Vec<Option<(Table, Section)>> = vec![None; cluster.nodes().len()];
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
                labels.push(g.labels.clone().map(|l| (l, sub.clone())));
            }
        }
        if let Some(t) = &c.topology {
            let topo = topology(&s, t, &labels)?;
            cluster.set_topology(Some(topo));
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
        if let Some(t) = &c.variability {
            let sub = s.subsection("cluster.variability", "variability", t.clone());
            let v: VariabilityConfig = sub.parse()?;
            let path = sub.resolve_path(&v.factors);
            let node_of: Vec<u32> = cluster.gpus().iter().map(|g| g.node.0).collect();
            let table = crate::variability::read_csv(&path, &node_of, v.classes, v.default_class)
                .map_err(|e| sub.error_at("factors", e))?;
            cluster.set_variability(Some(table));
        }
        let (spares, quarantine) = self.health_rules()?;
        cluster.health_mut().quarantine = quarantine;
        if let Some(k) = spares {
            let k = i64::from(k);
            let nodes = cluster.nodes().len() as i64;
            if k >= nodes {
                return Err(s.error_at(
                    "spares",
                    format!(
                        "`spares` must be from 0 to {} (the cluster has {nodes} nodes, and spares \
                         leave the others for jobs)",
                        nodes - 1
                    ),
                ));
            }
            cluster
                .set_spares(k as u32)
                .map_err(|e| s.error_at("spares", e.to_string()))?;
        }
        Ok(cluster)
    }
}

impl Config {
    /// `[cluster] spares` and `[cluster.quarantine]` ([`blox_core::health`]),
    /// checked alone (a scheduler's cluster has no nodes until workers
    /// register; [`Config::cluster_state`] checks spares against the nodes).
    pub fn health_rules(
        &self,
    ) -> Result<(Option<u32>, Option<blox_core::health::QuarantineRule>), ConfigError> {
        let s = self.section("cluster");
        let spares = match self.cluster.spares {
            None => None,
            Some(k) => Some(
                u32::try_from(k)
                    .ok()
                    .filter(|k| *k <= MAX_NODES)
                    .ok_or_else(|| {
                        s.error_at("spares", format!("`spares` must be from 0 to {MAX_NODES}"))
                    })?,
            ),
        };
        let quarantine = match &self.cluster.quarantine {
            None => None,
            Some(t) => {
                let sub = s.subsection("cluster.quarantine", "quarantine", t.clone());
                let q: QuarantineConfig = sub.parse()?;
                Some(blox_core::health::QuarantineRule {
                    failures: q.failures,
                    window_s: q.window_h.get() * 3600.0,
                    probation_s: q.probation_h.get() * 3600.0,
                })
            }
        };
        Ok((spares, quarantine))
    }

    /// `[cluster.topology]`'s levels, if the config has one (a scheduler's:
    /// its workers place themselves with `blox worker --labels`).
    pub fn topology_levels(&self) -> Result<Option<Vec<blox_core::topology::Level>>, ConfigError> {
        let Some(t) = &self.cluster.topology else {
            return Ok(None);
        };
        let s = self.section("cluster");
        let sub = s.subsection("cluster.topology", "topology", t.clone());
        let tc: TopologyConfig = sub.parse()?;
        let levels: Vec<blox_core::topology::Level> = tc
            .levels
            .iter()
            .map(|l| blox_core::topology::Level {
                name: l.name.clone(),
                bandwidth_gbps: l.bandwidth_gbps.get(),
            })
            .collect();
        blox_core::topology::Topology::empty(levels.clone())
            .map_err(|e| sub.error_at("levels", e))?;
        Ok(Some(levels))
    }
}

/// `[cluster.topology]` over the cluster's nodes (`labels`: each node's
/// group labels and where they were written).
fn topology(
    s: &Section,
    table: &Table,
    labels: &[Option<(Table, Section)>],
) -> Result<blox_core::topology::Topology, ConfigError> {
    use blox_core::topology::{Level, Topology};
    let sub = s.subsection("cluster.topology", "topology", table.clone());
    let tc: TopologyConfig = sub.parse()?;
    let levels: Vec<Level> = tc
        .levels
        .iter()
        .map(|l| Level {
            name: l.name.clone(),
            bandwidth_gbps: l.bandwidth_gbps.get(),
        })
        .collect();
    let sized = tc.levels.iter().filter(|l| l.size.is_some()).count();
    let err = |m: String| sub.error_at("levels", m);
    if sized == tc.levels.len() && sized > 0 {
        let sizes: Vec<u32> = tc.levels.iter().map(|l| l.size.unwrap_or(0)).collect();
        if labels.iter().any(Option::is_some) {
            return Err(err(
                "give every level a `size`, or [[cluster.node_groups]] `labels`, not both".into(),
            ));
        }
        return Topology::regular(levels, &sizes, labels.len()).map_err(err);
    }
    if sized > 0 {
        return Err(err(
            "give every level a `size` (nodes fill domains in order), or none (node groups' `labels` name the domains)".into(),
        ));
    }
    let mut paths = Vec::with_capacity(labels.len());
    for (n, l) in labels.iter().enumerate() {
        let Some((l, group)) = l else {
            return Err(err(format!(
                "node {n} has no `labels`: without `size`, every node comes from a [[cluster.node_groups]] with labels = {{ {} }}",
                levels
                    .iter()
                    .map(|l| format!("{} = \"…\"", l.name))
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        };
        for key in l.keys() {
            if !levels.iter().any(|x| &x.name == key) {
                return Err(group.error_at(
                    &format!("labels.{key}"),
                    format!(
                        "`{key}` is not a level of [cluster.topology] ({})",
                        levels
                            .iter()
                            .map(|x| x.name.as_str())
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                ));
            }
        }
        let mut path = Vec::with_capacity(levels.len());
        for lv in &levels {
            match l.get(&lv.name) {
                Some(Value::String(d)) => path.push(d.clone()),
                Some(_) => {
                    return Err(group.error_at(
                        &format!("labels.{}", lv.name),
                        "a domain is named by a string",
                    ))
                }
                None => {
                    return Err(group.error_at(
                        "labels",
                        format!("no `{}` in labels: every level needs one", lv.name),
                    ))
                }
            }
        }
        paths.push(path);
    }
    Topology::from_labels(levels, &paths).map_err(err)
}

#[cfg(test)]
mod tests {
    use crate::Config;
    use blox_core::topology::Span;
    use blox_core::NodeId;

    fn cluster(body: &str) -> Result<blox_core::ClusterState, String> {
        let text = format!("[scheduling]\npolicy = \"fifo\"\n{body}");
        let cfg = Config::parse(&text, "c.toml", std::path::Path::new("."), &[])
            .map_err(|e| e.to_string())?;
        cfg.cluster_state().map_err(|e| e.to_string())
    }

    #[test]
    fn a_regular_topology_and_a_labelled_one_describe_the_same_tree() {
        let regular = cluster(
            "[cluster]\nnodes = 8\ngpus_per_node = 4\n[cluster.topology]\n\
             levels = [{ name = \"block\", bandwidth_gbps = 10, size = 2 }, { name = \"rack\", bandwidth_gbps = 50, size = 2 }]\n",
        )
        .unwrap();
        let t = regular.topology().unwrap();
        assert_eq!(t.span(&[NodeId(0), NodeId(1)]), Span::Level(1));
        assert_eq!(t.span(&[NodeId(0), NodeId(3)]), Span::Level(0));
        assert_eq!(t.span(&[NodeId(0), NodeId(4)]), Span::Cluster);
        let mut groups = String::new();
        for r in 0..4 {
            groups += &format!(
                "[[cluster.node_groups]]\ncount = 2\ngpus = 4\nlabels = {{ block = \"b{}\", rack = \"r{r}\" }}\n",
                r / 2
            );
        }
        let labelled = cluster(&format!(
            "[cluster.topology]\nlevels = [{{ name = \"block\", bandwidth_gbps = 10 }}, {{ name = \"rack\", bandwidth_gbps = 50 }}]\n{groups}"
        ))
        .unwrap();
        let u = labelled.topology().unwrap();
        for a in 0..8 {
            for b in 0..8 {
                let n = [NodeId(a), NodeId(b)];
                assert_eq!(t.span(&n), u.span(&n));
            }
        }
        assert_eq!(regular.largest_placeable(), 8, "a rack of 2 × 4 GPUs");
    }

    #[test]
    fn a_bad_topology_is_refused_naming_the_key() {
        let levels = "[cluster.topology]\nlevels = [{ name = \"block\", bandwidth_gbps = 10 }, { name = \"rack\", bandwidth_gbps = 50 }]\n";
        // Not a tree: rack r0 under two blocks.
        let e = cluster(&format!(
            "{levels}[[cluster.node_groups]]\ncount = 1\ngpus = 4\nlabels = {{ block = \"b0\", rack = \"r0\" }}\n\
             [[cluster.node_groups]]\ncount = 1\ngpus = 4\nlabels = {{ block = \"b1\", rack = \"r0\" }}\n"
        ))
        .unwrap_err();
        assert!(e.contains("c.toml:") && e.contains("must be a tree"), "{e}");
        // A label naming an unknown level.
        let e = cluster(&format!(
            "{levels}[[cluster.node_groups]]\ncount = 1\ngpus = 4\nlabels = {{ block = \"b0\", rack = \"r0\", row = \"x\" }}\n"
        ))
        .unwrap_err();
        assert!(
            e.contains("c.toml:8") && e.contains("`row` is not a level"),
            "{e}"
        );
        // A level without its label.
        let e = cluster(&format!(
            "{levels}[[cluster.node_groups]]\ncount = 1\ngpus = 4\nlabels = {{ block = \"b0\" }}\n"
        ))
        .unwrap_err();
        assert!(e.contains("no `rack` in labels"), "{e}");
        // Nodes without labels and levels without sizes.
        let e = cluster(&format!(
            "[cluster]\nnodes = 2\ngpus_per_node = 4\n{levels}"
        ))
        .unwrap_err();
        assert!(e.contains("has no `labels`"), "{e}");
        // Some sizes, not all.
        let e = cluster(
            "[cluster]\nnodes = 2\ngpus_per_node = 4\n[cluster.topology]\n\
             levels = [{ name = \"block\", bandwidth_gbps = 10, size = 2 }, { name = \"rack\", bandwidth_gbps = 50 }]\n",
        )
        .unwrap_err();
        assert!(e.contains("every level a `size`"), "{e}");
        let e = cluster(
            "[cluster]\nnodes = 2\ngpus_per_node = 4\n[cluster.topology]\nlevels = [{ name = \"rack\", bandwidth_gbps = -1, size = 2 }]\n",
        )
        .unwrap_err();
        assert!(e.contains("bandwidth_gbps"), "{e}");
    }
}
