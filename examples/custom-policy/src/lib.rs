//! Third-party policies in their own crate: one per extension point, each
//! registered by name, selectable from any config once the crate is linked
//! into the binary that runs it (`src/main.rs` is that binary: three lines).
//!
//! | kind | name | file |
//! |---|---|---|
//! | admission | `max-waiting` | [`max_waiting`] |
//! | scheduling | `fewest-gpus-first` | [`fewest_gpus_first`] |
//! | placement | `spread` | [`spread`] |

pub mod fewest_gpus_first;
pub mod max_waiting;
pub mod spread;
