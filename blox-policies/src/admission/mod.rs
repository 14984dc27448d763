//! Admission policies: which submitted jobs the scheduler sees (Blox §3.1).

pub mod accept_all;
pub mod load_based;
pub mod quota;
