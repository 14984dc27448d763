//! Which GPUs are free, kept up to date as the table changes, so a round's
//! placement copies it instead of scanning every GPU or node (the walk's
//! [`FreeGpus`](crate::walk::FreeGpus) is such a copy, changed as it
//! places).

/// Free GPUs (online, held by no job), by GPU, counted by node, and the
/// nodes grouped by how many they have free.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct FreeIndex {
    /// By GPU index: free or not.
    pub free: Vec<bool>,
    /// By node index: how many of its GPUs are free.
    pub per_node: Vec<u32>,
    /// `by_free[c - 1]`: a bitset over node indices of the nodes with
    /// exactly `c` free GPUs (`c` ≥ 1); one row per count up to the
    /// largest node's GPUs, each `per_node.len()` bits long.
    pub by_free: Vec<Vec<u64>>,
}

impl FreeIndex {
    /// Built from the table (a cluster read back from a snapshot);
    /// `shared(g)`: whether jobs share GPU `g` (then it is not free).
    pub fn of(
        gpus: &[super::Gpu],
        nodes: usize,
        shared: impl Fn(crate::ids::GpuId) -> bool,
    ) -> Self {
        let mut size = vec![0usize; nodes];
        for g in gpus {
            if let Some(s) = size.get_mut(g.node.index()) {
                *s += 1;
            }
        }
        let most = size.iter().copied().max().unwrap_or(0);
        let mut index = FreeIndex {
            free: vec![false; gpus.len()],
            per_node: vec![0; nodes],
            by_free: vec![vec![0; nodes.div_ceil(64)]; most],
        };
        for g in gpus {
            let free = g.online && g.job.is_none() && !shared(g.id);
            index.set(g.id.index(), g.node.index(), free);
        }
        index
    }

    /// Room for a new node's GPUs, all free.
    pub fn add_node(&mut self, gpus: usize) {
        let node = self.per_node.len();
        self.free.extend(std::iter::repeat_n(true, gpus));
        self.per_node.push(gpus as u32);
        let words = (node + 1).div_ceil(64);
        if self.by_free.len() < gpus {
            self.by_free.resize(gpus, Vec::new());
        }
        for row in &mut self.by_free {
            row.resize(words, 0);
        }
        self.move_node(node, 0, gpus as u32);
    }

    /// Records whether GPU `gpu` of node `node` is free now.
    pub fn set(&mut self, gpu: usize, node: usize, free: bool) {
        if let Some(f) = self.free.get_mut(gpu) {
            if *f != free {
                *f = free;
                if let Some(&n) = self.per_node.get(node) {
                    let now = if free { n + 1 } else { n - 1 };
                    self.per_node[node] = now;
                    self.move_node(node, n, now);
                }
            }
        }
    }

    /// Moves `node` from the row of nodes with `from` GPUs free to `to`'s.
    fn move_node(&mut self, node: usize, from: u32, to: u32) {
        let (w, bit) = (node / 64, 1u64 << (node % 64));
        if let Some(x) = (from as usize)
            .checked_sub(1)
            .and_then(|r| self.by_free.get_mut(r))
            .and_then(|row| row.get_mut(w))
        {
            *x &= !bit;
        }
        if let Some(x) = (to as usize)
            .checked_sub(1)
            .and_then(|r| self.by_free.get_mut(r))
            .and_then(|row| row.get_mut(w))
        {
            *x |= bit;
        }
    }
}
