//! Everything a run reports: the result tables of one run ([`tables`]:
//! `jobs.csv`, `rounds.csv`, Parquet, the summary), the charts ([`plots`])
//! and the plots and tables of a whole sweep ([`sweep`], `blox report`).

pub mod figures;
pub mod plots;
pub mod summary;
pub mod sweep;
pub mod tables;

pub use summary::Summary;
pub use sweep::report_sweep;
pub use tables::*;
