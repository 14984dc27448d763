//! Scheduling policies: the priority order of runnable jobs and what each gets
//! (Blox §3.1).

pub mod doubling;
pub mod fifo;
pub mod gavel;
pub mod las;
pub mod loss_termination;
pub mod optimus;
pub mod srtf;
pub mod synergy;
pub mod teams;
pub mod themis;
pub mod tiresias;
