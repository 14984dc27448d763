//! The plugins a config selects at the loop's extension points.

use crate::{Config, ConfigError};

impl Config {
    /// The plugins its `[protection]`, `[checkpointing]` and `[recovery]`
    /// select, with its `[run]` rules
    /// ([`blox_core::extension::Profile::from_config`]). Spares kept for a
    /// recovery plugin that never calls them are refused.
    pub fn profile(&self) -> Result<blox_core::extension::Profile, ConfigError> {
        let p = blox_core::extension::Profile::from_config(
            &self.run,
            &self.protection,
            &self.checkpointing,
            &self.recovery,
        )?;
        let spares = self.cluster.spares.unwrap_or(0);
        if spares > 0 && !p.recovery.uses_spares() {
            return Err(ConfigError::Incompatible {
                at: self.recovery.location(),
                message: format!(
                    "[recovery] policy `{}` never calls a spare, and [cluster] spares = {spares} \
                     ({}) keeps {spares} nodes out of the scheduler's reach for one: set \
                     `recovery.policy = \"hot-spares\"`, or spares = 0",
                    p.recovery.name(),
                    self.section("cluster").location("spares"),
                ),
            });
        }
        Ok(p)
    }
}
