//! What goes wrong changing the GPU table.

use crate::ids::{GpuId, JobId, NodeId};

/// Errors from changing the GPU table.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ClusterError {
    #[error("{gpu} does not exist in this cluster")]
    NoSuchGpu { gpu: GpuId },
    #[error("{gpu} is offline")]
    Offline { gpu: GpuId },
    #[error("{gpu} is already held by {holder}; {job} cannot take it")]
    Busy {
        gpu: GpuId,
        holder: JobId,
        job: JobId,
    },
    #[error("{gpu} appears twice in the allocation of {job}")]
    Duplicate { gpu: GpuId, job: JobId },
    #[error("{node} does not exist in this cluster")]
    NoSuchNode { node: NodeId },
    #[error("cluster invariant broken: {0}")]
    Invariant(String),
    /// A node description that cannot be used.
    #[error("{0}")]
    InvalidSpec(String),
    #[error("{job} asks for {milli} thousandths of {gpu}, which has {free} free")]
    ShareTooLarge {
        gpu: GpuId,
        job: JobId,
        milli: u32,
        free: u32,
    },
}
