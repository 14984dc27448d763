//! Placement policies: concrete GPUs for the scheduled jobs, and whom to preempt
//! (Blox §3.1). `walk` holds the priority walk with preemption that the rigid
//! placements share; each policy only chooses GPUs.

pub mod bandwidth_aware;
pub mod class_walk;
pub mod consolidated;
pub mod explicit;
pub mod failure_aware;
pub mod first_free;
pub mod gpu_classes;
pub mod most_free;
pub mod packed_non_sticky;
pub mod pal;
pub mod pm_first;
pub mod py_random;
pub mod random;
pub mod share;
mod share_view;
pub mod synergy;
pub mod tiresias_skew;
pub mod topology;
