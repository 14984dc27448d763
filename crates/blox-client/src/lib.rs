//! # blox-client (skeleton)
//!
//! The library training jobs will link: a lease-aware iterator (optimistic lease
//! renewal against the local worker manager only; two-phase revocation for
//! multi-rank jobs, Blox EuroSys'24 §7 "Leases for Preemption"), key→value metric
//! push, checkpoint/resume and batch-size reconfiguration hooks. Nothing is
//! implemented yet; the runtime work item fills it.
