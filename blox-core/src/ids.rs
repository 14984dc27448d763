//! Small typed identifiers, so a job id is never mistaken for a GPU id.

use serde::{Deserialize, Serialize};
use std::fmt;

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident($inner:ty), $prefix:literal) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub $inner);

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!($prefix, "{}"), self.0)
            }
        }

        impl $name {
            /// The id as an index into a dense table.
            pub fn index(self) -> usize {
                self.0 as usize
            }
        }
    };
}

id_type!(
    /// A job's id: unique for the whole run (trace order for traces).
    JobId(u64),
    "job-"
);
id_type!(
    /// A GPU's global id: dense, `0..ClusterState::num_gpus_ever()`, never reused.
    GpuId(u32),
    "gpu-"
);
id_type!(
    /// A node's id: dense, in the order nodes joined the cluster, never reused.
    NodeId(u32),
    "node-"
);
