//! The example job's (`blox-toy-job`) attacker modes: what a hostile job on
//! a shared cluster tries (`--attack`), for `blox-harness`'s soak to count.

pub mod attack;
pub mod node_attack;
