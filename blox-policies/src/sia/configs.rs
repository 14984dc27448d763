//! The cluster's configurations (Sia, SOSP'23, §3.2): for each GPU type,
//! the GPU counts one job may get on it, and on how many nodes.

use blox_core::{ClusterState, NodeId};
use std::collections::BTreeMap;

/// The cluster's configurations: `(type, nodes, GPUs)`, by type.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Configs {
    pub types: Vec<String>,
    pub list: Vec<(usize, u32, u32)>,
    pub of_type: Vec<Vec<usize>>,
    pub gpus_per_node: Vec<u32>,
    /// Online GPUs of each type.
    pub type_gpus: Vec<u32>,
    /// Online nodes of each type, in id order.
    pub nodes: Vec<Vec<NodeId>>,
}

impl Configs {
    /// Sia §3.2: on `R`-GPU nodes, powers of two below `R` and `R` on one
    /// node, then `n·R` on `n` nodes, up to `max_gpus` GPUs and the type's
    /// node cap. Types in the order their first node appears.
    pub fn of(cluster: &ClusterState, max_gpus: u32, max_nodes: &BTreeMap<String, u32>) -> Self {
        let mut c = Configs::default();
        for n in cluster.nodes().iter().filter(|n| n.online) {
            let online = n
                .gpus
                .iter()
                .filter(|g| cluster.gpu(**g).is_some_and(|x| x.online))
                .count() as u32;
            let t = match c.types.iter().position(|t| *t == n.spec.gpu_type) {
                Some(t) => t,
                None => {
                    c.types.push(n.spec.gpu_type.clone());
                    c.gpus_per_node.push(0);
                    c.type_gpus.push(0);
                    c.nodes.push(Vec::new());
                    c.of_type.push(Vec::new());
                    c.types.len() - 1
                }
            };
            c.gpus_per_node[t] = c.gpus_per_node[t].max(n.gpus.len() as u32);
            c.type_gpus[t] += online;
            c.nodes[t].push(n.id);
        }
        for t in 0..c.types.len() {
            let r = c.gpus_per_node[t];
            let nodes =
                (c.nodes[t].len() as u32).min(*max_nodes.get(&c.types[t]).unwrap_or(&u32::MAX));
            let mut sizes: Vec<(u32, u32)> = Vec::new();
            let mut g = 1;
            while g < r {
                sizes.push((1, g));
                g *= 2;
            }
            for n in 1..=nodes {
                sizes.push((n, n * r));
            }
            for (n, g) in sizes {
                if g <= max_gpus && n <= nodes && g >= 1 {
                    c.of_type[t].push(c.list.len());
                    c.list.push((t, n, g));
                }
            }
        }
        c
    }
}
