//! Which GPUs are free, kept up to date as the table changes, so a round's
//! placement copies it instead of scanning every GPU.

/// Free GPUs (online, held by no job), by GPU and counted by node.
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct FreeIndex {
    /// By GPU index: free or not.
    pub free: Vec<bool>,
    /// By node index: how many of its GPUs are free.
    pub per_node: Vec<u32>,
}

impl FreeIndex {
    /// Built from the table (a cluster read back from a snapshot).
    pub fn of(gpus: &[super::Gpu], nodes: usize) -> Self {
        let mut index = FreeIndex {
            free: vec![false; gpus.len()],
            per_node: vec![0; nodes],
        };
        for g in gpus {
            index.set(g.id.index(), g.node.index(), g.online && g.job.is_none());
        }
        index
    }

    /// Room for a new node's GPUs, all free.
    pub fn add_node(&mut self, gpus: usize) {
        self.free.extend(std::iter::repeat_n(true, gpus));
        self.per_node.push(gpus as u32);
    }

    /// Records whether GPU `gpu` of node `node` is free now.
    pub fn set(&mut self, gpu: usize, node: usize, free: bool) {
        if let Some(f) = self.free.get_mut(gpu) {
            if *f != free {
                *f = free;
                if let Some(n) = self.per_node.get_mut(node) {
                    if free {
                        *n += 1;
                    } else {
                        *n -= 1;
                    }
                }
            }
        }
    }
}
