//! The cluster's topology: levels above the nodes (e.g. block → rack), each
//! a partition of the nodes into domains, with the bandwidth between the
//! members of a domain. A tree: every node sits in one domain per level, and
//! every domain inside one domain of the level above. Nodes the topology
//! does not name (added later, e.g. by auto-scaling) are domains of their own.
//!
//! ```toml
//! [cluster.topology]
//! # outermost first; `size`: children per domain (nodes fill them in order)
//! levels = [
//!   { name = "block", bandwidth_gbps = 12.5, size = 2 },  # 2 racks a block
//!   { name = "rack", bandwidth_gbps = 50, size = 4 },     # 4 nodes a rack
//! ]
//! ```
//!
//! Without `size`, each `[[cluster.node_groups]]` names its domains:
//! `labels = { block = "b0", rack = "r1" }`.

use crate::ids::NodeId;
use std::collections::HashMap;

/// One level above the nodes.
#[derive(Clone, Debug, PartialEq)]
pub struct Level {
    pub name: String,
    /// Bandwidth between two members of one domain of this level, GB/s.
    pub bandwidth_gbps: f64,
}

/// How far a set of GPUs spans: within one node, within one domain of a
/// level, or across the whole cluster.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Span {
    /// Within one node.
    Node,
    /// Within one domain of level `i` (0: outermost), and no deeper one.
    Level(usize),
    /// Across top-level domains.
    Cluster,
}

/// Levels, and each node's domain at each level.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Topology {
    levels: Vec<Level>,
    /// `node_dom[node][level]`; `None` for a node it does not name.
    node_dom: Vec<Option<Vec<u32>>>,
    /// `names[level][domain]`.
    names: Vec<Vec<String>>,
    /// `members[level][domain]`: its nodes, in id order.
    members: Vec<Vec<Vec<NodeId>>>,
    /// `index[level][name]`: the domain of that name (derived from `names`,
    /// so that placing a node does not scan every domain).
    index: Vec<HashMap<String, u32>>,
}

impl Topology {
    /// The domain called `name` at `level`, if any.
    fn find(&self, level: usize, name: &str) -> Option<usize> {
        self.index[level].get(name).map(|d| *d as usize)
    }
}

impl Topology {
    /// From each node's domain name at every level (`labels[node][level]`,
    /// outermost first). Refuses what is not a tree: a domain inside two
    /// domains of the level above.
    pub fn from_labels(levels: Vec<Level>, labels: &[Vec<String>]) -> Result<Topology, String> {
        if levels.is_empty() {
            return Err("a topology needs at least one level".into());
        }
        for (i, l) in levels.iter().enumerate() {
            if l.name.is_empty() || l.name == "node" {
                return Err(format!("level {i}: a level needs a name other than `node`"));
            }
            if levels[..i].iter().any(|x| x.name == l.name) {
                return Err(format!("level `{}` appears twice", l.name));
            }
            if !(l.bandwidth_gbps.is_finite() && l.bandwidth_gbps > 0.0) {
                return Err(format!(
                    "level `{}`: bandwidth_gbps must be positive",
                    l.name
                ));
            }
        }
        let depth = levels.len();
        let mut t = Topology {
            names: vec![Vec::new(); depth],
            members: vec![Vec::new(); depth],
            index: vec![HashMap::new(); depth],
            levels,
            node_dom: Vec::with_capacity(labels.len()),
        };
        // Node by node, as a live cluster's nodes join: one rule, one check.
        for (n, path) in labels.iter().enumerate() {
            if path.len() != depth {
                return Err(format!(
                    "node {n} has {} labels for {depth} levels",
                    path.len()
                ));
            }
            t.check_path(path)?;
            t.insert(NodeId(n as u32), path);
        }
        Ok(t)
    }

    /// The tree invariant, for a node about to join with `path` (its domain
    /// at every level, outermost first): a domain already known stays inside
    /// the domain it is in: a known rack under a new block is refused too.
    /// Config loading ([`Topology::from_labels`]) and live registration
    /// ([`Topology::path_of`], [`Topology::add_node`]) both check here.
    fn check_path(&self, path: &[String]) -> Result<(), String> {
        for l in 1..path.len() {
            let Some(d) = self.find(l, &path[l]) else {
                continue; // a new domain may sit anywhere
            };
            let parent = self.members[l][d]
                .first()
                .and_then(|m| self.node_dom.get(m.index()))
                .and_then(|p| p.as_ref())
                .map(|p| p[l - 1]);
            let up = self.find(l - 1, &path[l - 1]);
            if parent.is_none() || parent != up.map(|u| u as u32) {
                return Err(format!(
                    "{} `{}` is in {} `{}`, not `{}`: the topology must be a tree",
                    self.levels[l].name,
                    path[l],
                    self.levels[l - 1].name,
                    parent.map_or("?", |p| self.names[l - 1][p as usize].as_str()),
                    path[l - 1]
                ));
            }
        }
        Ok(())
    }

    /// Puts node `node` (checked) at `path`; nodes before it not placed yet
    /// stay unnamed.
    fn insert(&mut self, node: NodeId, path: &[String]) {
        self.node_dom.resize(node.index(), None);
        let mut doms = Vec::with_capacity(path.len());
        for (l, name) in path.iter().enumerate() {
            let d = match self.find(l, name) {
                Some(d) => d as u32,
                None => {
                    let d = self.names[l].len() as u32;
                    self.names[l].push(name.clone());
                    self.members[l].push(Vec::new());
                    self.index[l].insert(name.clone(), d);
                    d
                }
            };
            self.members[l][d as usize].push(node);
            doms.push(d);
        }
        self.node_dom.push(Some(doms));
    }

    /// Levels and no nodes yet (a live cluster's: workers bring their
    /// labels when they join, [`Topology::add_node`]).
    pub fn empty(levels: Vec<Level>) -> Result<Topology, String> {
        Topology::from_labels(levels, &[])
    }

    /// Each level's domain name in `labels` (level name → domain), in
    /// level order; an error names a label of no level, a level without a
    /// label, or a domain that would sit in two domains of the level above.
    pub fn path_of(
        &self,
        labels: &std::collections::BTreeMap<String, String>,
    ) -> Result<Vec<String>, String> {
        let names: Vec<&str> = self.levels.iter().map(|l| l.name.as_str()).collect();
        if let Some(k) = labels.keys().find(|k| !names.contains(&k.as_str())) {
            return Err(format!(
                "label `{k}` names no level of the topology ({})",
                names.join(", ")
            ));
        }
        let path: Vec<String> = self
            .levels
            .iter()
            .map(|l| {
                labels
                    .get(&l.name)
                    .cloned()
                    .ok_or_else(|| format!("no `{}` label: every level needs one", l.name))
            })
            .collect::<Result<_, _>>()?;
        self.check_path(&path)?;
        Ok(path)
    }

    /// Places node `node` (the next one, or a later one: nodes between are
    /// left unnamed) by its `labels`; see [`Topology::path_of`].
    pub fn add_node(
        &mut self,
        node: NodeId,
        labels: &std::collections::BTreeMap<String, String>,
    ) -> Result<(), String> {
        let path = self.path_of(labels)?;
        if node.index() < self.node_dom.len() {
            return Err(format!("node {} is placed already", node.0));
        }
        self.insert(node, &path);
        Ok(())
    }

    /// A regular tree over `nodes` nodes: `sizes[i]` children per domain
    /// of level `i` (the last: nodes per innermost domain), nodes in order.
    /// Domains are named `<level><index>` (`rack3`).
    pub fn regular(levels: Vec<Level>, sizes: &[u32], nodes: usize) -> Result<Topology, String> {
        if sizes.len() != levels.len() || sizes.contains(&0) {
            return Err("every level needs a `size` of at least 1".into());
        }
        let labels: Vec<Vec<String>> = (0..nodes)
            .map(|n| {
                (0..sizes.len())
                    .map(|l| {
                        // Nodes per domain of level l.
                        let per: usize = sizes[l..].iter().map(|s| *s as usize).product();
                        format!("{}{}", levels[l].name, n / per)
                    })
                    .collect()
            })
            .collect();
        Topology::from_labels(levels, &labels)
    }

    pub fn levels(&self) -> &[Level] {
        &self.levels
    }

    /// The level named `name`.
    pub fn level(&self, name: &str) -> Option<usize> {
        self.levels.iter().position(|l| l.name == name)
    }

    /// Nodes the topology names.
    pub fn nodes(&self) -> usize {
        self.node_dom.iter().filter(|d| d.is_some()).count()
    }

    /// Domains of level `l`.
    pub fn domains(&self, l: usize) -> usize {
        self.names.get(l).map_or(0, Vec::len)
    }

    /// The domain of `node` at level `l`, if the topology names the node.
    pub fn domain_of(&self, node: NodeId, l: usize) -> Option<u32> {
        self.node_dom.get(node.index())?.as_ref().map(|d| d[l])
    }

    /// `node`'s domain names, outermost first, if the topology names it.
    pub fn labels_of(&self, node: NodeId) -> Option<Vec<(&str, &str)>> {
        let d = self.node_dom.get(node.index())?.as_ref()?;
        Some(
            d.iter()
                .enumerate()
                .map(|(l, x)| {
                    (
                        self.levels[l].name.as_str(),
                        self.names[l][*x as usize].as_str(),
                    )
                })
                .collect(),
        )
    }

    /// The nodes of domain `d` of level `l`, in id order.
    pub fn members(&self, l: usize, d: u32) -> &[NodeId] {
        &self.members[l][d as usize]
    }

    pub fn name(&self, l: usize, d: u32) -> &str {
        &self.names[l][d as usize]
    }

    /// A node's place, outermost first: its domains, then itself (a key
    /// that orders nodes along the tree: ring order).
    pub fn path(&self, node: NodeId) -> Vec<u32> {
        let mut p = match self.node_dom.get(node.index()).and_then(|d| d.as_ref()) {
            Some(d) => d.clone(),
            // Unnamed nodes after every named domain.
            None => vec![u32::MAX; self.levels.len()],
        };
        p.push(node.0);
        p
    }

    /// The lowest level that holds all of `nodes`.
    pub fn span(&self, nodes: &[NodeId]) -> Span {
        let Some(first) = nodes.first() else {
            return Span::Node;
        };
        if nodes.iter().all(|n| n == first) {
            return Span::Node;
        }
        for l in (0..self.levels.len()).rev() {
            let Some(d) = self.domain_of(*first, l) else {
                return Span::Cluster;
            };
            if nodes.iter().all(|n| self.domain_of(*n, l) == Some(d)) {
                return Span::Level(l);
            }
        }
        Span::Cluster
    }

    /// Bandwidth between GPUs spanning `span` (`node_gbps` within a node;
    /// the outermost level's across the cluster, halved).
    pub fn bandwidth(&self, span: Span, node_gbps: f64) -> f64 {
        match span {
            Span::Node => node_gbps,
            Span::Level(l) => self.levels[l].bandwidth_gbps,
            Span::Cluster => self.levels[0].bandwidth_gbps / 2.0,
        }
    }

    /// Free GPUs under domain `d` of level `l`, given each node's.
    pub fn free_under(&self, l: usize, d: u32, free_on: impl Fn(NodeId) -> u32) -> u32 {
        self.members(l, d).iter().map(|n| free_on(*n)).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lv(name: &str, bw: f64) -> Level {
        Level {
            name: name.into(),
            bandwidth_gbps: bw,
        }
    }

    #[test]
    fn a_regular_tree_fills_domains_in_node_order() {
        let t = Topology::regular(vec![lv("block", 10.0), lv("rack", 50.0)], &[2, 4], 16).unwrap();
        assert_eq!(t.domains(0), 2);
        assert_eq!(t.domains(1), 4);
        assert_eq!(
            t.members(1, 1),
            &[NodeId(4), NodeId(5), NodeId(6), NodeId(7)]
        );
        assert_eq!(t.name(1, 3), "rack3");
        assert_eq!(t.domain_of(NodeId(9), 0), Some(1));
        assert_eq!(t.span(&[NodeId(0), NodeId(3)]), Span::Level(1));
        assert_eq!(t.span(&[NodeId(0), NodeId(5)]), Span::Level(0));
        assert_eq!(t.span(&[NodeId(0), NodeId(9)]), Span::Cluster);
        assert_eq!(t.span(&[NodeId(2), NodeId(2)]), Span::Node);
        assert_eq!(t.span(&[NodeId(0), NodeId(20)]), Span::Cluster);
    }

    #[test]
    fn what_is_not_a_tree_is_refused_by_name() {
        let labels = vec![
            vec!["b0".to_string(), "r0".to_string()],
            vec!["b1".to_string(), "r0".to_string()],
        ];
        let e =
            Topology::from_labels(vec![lv("block", 10.0), lv("rack", 50.0)], &labels).unwrap_err();
        assert!(e.contains("rack `r0` is in block `b0`, not `b1`"), "{e}");
        let e = Topology::from_labels(vec![lv("rack", 1.0), lv("rack", 2.0)], &[]).unwrap_err();
        assert!(e.contains("twice"), "{e}");
        let e = Topology::from_labels(vec![lv("rack", 0.0)], &[]).unwrap_err();
        assert!(e.contains("bandwidth"), "{e}");
    }

    #[test]
    fn nodes_join_a_live_topology_by_their_labels() {
        let mut t = Topology::empty(vec![lv("block", 10.0), lv("rack", 50.0)]).unwrap();
        let l = |b: &str, r: &str| {
            [
                ("block".to_string(), b.to_string()),
                ("rack".to_string(), r.to_string()),
            ]
            .into_iter()
            .collect::<std::collections::BTreeMap<_, _>>()
        };
        t.add_node(NodeId(0), &l("b0", "r0")).unwrap();
        t.add_node(NodeId(2), &l("b0", "r0")).unwrap();
        t.add_node(NodeId(3), &l("b1", "r1")).unwrap();
        assert_eq!(t.span(&[NodeId(0), NodeId(2)]), Span::Level(1));
        assert_eq!(
            t.span(&[NodeId(0), NodeId(1)]),
            Span::Cluster,
            "node 1 is unnamed"
        );
        assert_eq!(
            t.labels_of(NodeId(3)),
            Some(vec![("block", "b1"), ("rack", "r1")])
        );
        let e = t.path_of(&l("b1", "r0")).unwrap_err();
        assert!(e.contains("rack `r0` is in block `b0`, not `b1`"), "{e}");
        // A known rack under a block never seen is no tree either (it was
        // accepted live, and span() then gave rack bandwidth across blocks).
        let e = t.add_node(NodeId(4), &l("b9", "r0")).unwrap_err();
        assert!(e.contains("rack `r0` is in block `b0`, not `b9`"), "{e}");
        let e = Topology::from_labels(
            vec![lv("block", 10.0), lv("rack", 50.0)],
            &[
                vec!["b0".to_string(), "r0".to_string()],
                vec!["b9".to_string(), "r0".to_string()],
            ],
        )
        .unwrap_err();
        assert!(e.contains("rack `r0` is in block `b0`, not `b9`"), "{e}");
        let mut bad = l("b0", "r0");
        bad.insert("row".into(), "x".into());
        assert!(t
            .path_of(&bad)
            .unwrap_err()
            .contains("label `row` names no level"));
        bad = l("b0", "r0");
        bad.remove("rack");
        assert!(t.path_of(&bad).unwrap_err().contains("no `rack` label"));
    }
}
