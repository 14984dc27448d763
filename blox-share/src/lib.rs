//! GPUs that jobs share.
//!
//! Tasks ask for a fraction of one GPU (in thousandths), several whole GPUs,
//! or none, with CPU and memory of their node, as in Alibaba's 2023 GPU trace.
//! This crate holds the per-GPU shares of a node, the trace's reader, and the
//! placement policies of "Beware of Fragmentation" (Weng et al., USENIX ATC
//! 2023): FGD and its baselines, scored as the authors' simulator scores them.

mod cooked;
pub mod curve;
pub mod frag;
pub mod gorand;
pub mod node;
pub mod openb;
pub mod packing;
pub mod placer;
pub mod policy;
pub mod timed;
