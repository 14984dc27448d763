//! # blox-policies
//!
//! The built-in modules, one file per policy, grouped by the extension point they
//! plug into. Each file's name is the policy's registered name (with `-` for `_`),
//! its doc comment cites the paper section it implements, and its tests state the
//! policy's defining property.
//!
//! | kind | names |
//! |---|---|
//! | admission | `accept-all`, `load-based`, `quota` |
//! | scheduling | `fifo`, `las`, `srtf`, `tiresias`, `optimus`, `themis`, `doubling`, `loss-termination` (wraps another), `pollux` (in [`pollux`]), `ones` (in [`ones`]), `sia` (in [`sia`]) |
//! | placement | `first-free`, `consolidated`, `most-free`, `bandwidth-aware`, `tiresias`, `explicit`, `fgd`/`share` (GPUs that jobs share) |
//!
//! Registration happens at link time (`inventory`); a binary that uses these
//! policies only by name must still link the crate: `use blox_policies as _;`
//! (the `blox` library does, so `blox::main()` always has them).

pub mod admission;
pub mod lp;
pub mod ones;
pub mod placement;
pub mod pollux;
mod profiles;
pub mod scheduling;
pub mod sia;

#[cfg(test)]
pub(crate) mod test_util;
