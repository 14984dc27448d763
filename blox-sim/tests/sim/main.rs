//! blox-sim's integration tests, one binary: simulations through the
//! public API (the round loop, the policies, workloads, results). One
//! binary builds and links once; its tests run four at a time
//! (`.cargo/config.toml`). Run one file's tests with its module name, e.g.
//! `cargo test -p blox-sim --test sim forecast::`.

mod adoption;
mod checkpoints;
mod ended_rows;
mod failures;
mod forecast;
mod guard_rails;
mod metrics_on_demand;
mod openb;
mod pollux_sim;
mod production_traces;
mod resilience;
mod semantics;
mod startup;
mod synergy_sim;
mod synth;
mod tables_stream;
mod teams;
mod topology;
mod wait_reasons;
mod whatif_cluster;
mod without_gpus;
