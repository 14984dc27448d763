//! The registry: every module registers a factory under a name with `inventory`,
//! and configs select modules by that name (Kubernetes' scheduling framework
//! style: named plugins, a registry of factories, profiles choosing by name).
//!
//! A policy in its own crate registers itself with one macro call:
//!
//! ```ignore
//! blox_core::register_scheduling!("my-policy", "what it does", |params| {
//!     Ok(Box::new(MyPolicy::from_params(params)?))
//! });
//! ```
//!
//! and becomes selectable once the crate is linked into the binary
//! (`use my_policy as _;`).

use crate::config::{ConfigError, ModuleConfig, Section};
use crate::module::{AdmissionPolicy, PlacementPolicy, SchedulingPolicy};
use crate::round::{Policies, PolicyNames};

macro_rules! entry_type {
    ($(#[$doc:meta])* $entry:ident, $trait:ident, $kind:literal, $find:ident, $all:ident) => {
        entry_type!(
            $(#[$doc])* $entry, $kind, $find, $all,
            fn(&Section) -> Result<Box<dyn $trait>, ConfigError>
        );
    };
    ($(#[$doc:meta])* $entry:ident, $kind:literal, $find:ident, $all:ident, $build:ty) => {
        $(#[$doc])*
        pub struct $entry {
            /// Name used in configs.
            pub name: &'static str,
            /// One line for `blox policies`.
            pub about: &'static str,
            /// Builds it from its config section (`policy` removed).
            pub build: $build,
        }
        inventory::collect!($entry);

        /// The registered entry of that name.
        pub fn $find(name: &str) -> Option<&'static $entry> {
            inventory::iter::<$entry>().find(|e| e.name == name)
        }

        /// Every registered entry of this kind, sorted by name.
        pub fn $all() -> Vec<&'static $entry> {
            let mut v: Vec<_> = inventory::iter::<$entry>().collect();
            v.sort_by_key(|e| e.name);
            v
        }

        impl $entry {
            /// The entry `m` names, or an error naming where it was named
            /// and every registered name of this kind.
            pub fn named(
                m: &$crate::config::ModuleConfig,
            ) -> Result<&'static Self, $crate::config::ConfigError> {
                $find(&m.policy).ok_or_else(|| {
                    $crate::registry::unknown(m, $kind, $all().iter().map(|e| e.name).collect())
                })
            }
        }
    };
}
pub(crate) use entry_type;

entry_type!(
    /// A registered admission policy.
    AdmissionEntry, AdmissionPolicy, "admission", find_admission, admission_entries
);
entry_type!(
    /// A registered scheduling policy.
    SchedulingEntry, SchedulingPolicy, "scheduling", find_scheduling, scheduling_entries
);
entry_type!(
    /// A registered placement policy.
    PlacementEntry, PlacementPolicy, "placement", find_placement, placement_entries
);

/// Registers an admission policy: `register_admission!(name, about, |params| ...)`.
#[macro_export]
macro_rules! register_admission {
    ($name:expr, $about:expr, $build:expr) => {
        $crate::inventory::submit! {
            $crate::registry::AdmissionEntry { name: $name, about: $about, build: $build }
        }
    };
}

/// Registers a scheduling policy: `register_scheduling!(name, about, |params| ...)`.
#[macro_export]
macro_rules! register_scheduling {
    ($name:expr, $about:expr, $build:expr) => {
        $crate::inventory::submit! {
            $crate::registry::SchedulingEntry { name: $name, about: $about, build: $build }
        }
    };
}

/// Registers a placement policy: `register_placement!(name, about, |params| ...)`.
#[macro_export]
macro_rules! register_placement {
    ($name:expr, $about:expr, $build:expr) => {
        $crate::inventory::submit! {
            $crate::registry::PlacementEntry { name: $name, about: $about, build: $build }
        }
    };
}

pub(crate) fn unknown(
    m: &ModuleConfig,
    kind: &'static str,
    known: Vec<&'static str>,
) -> ConfigError {
    ConfigError::UnknownModule {
        at: m.location(),
        kind,
        name: m.policy.clone(),
        suggestion: crate::config::closest(&m.policy, known.iter().copied()).map(str::to_string),
        known: if known.is_empty() {
            "(none)".into()
        } else {
            known.join(", ")
        },
    }
}

/// Builds an admission policy from its config section.
pub fn build_admission(m: &ModuleConfig) -> Result<Box<dyn AdmissionPolicy>, ConfigError> {
    (AdmissionEntry::named(m)?.build)(&m.params)
}

/// Builds a scheduling policy from its config section.
pub fn build_scheduling(m: &ModuleConfig) -> Result<Box<dyn SchedulingPolicy>, ConfigError> {
    (SchedulingEntry::named(m)?.build)(&m.params)
}

/// Builds a placement policy from its config section.
pub fn build_placement(m: &ModuleConfig) -> Result<Box<dyn PlacementPolicy>, ConfigError> {
    (PlacementEntry::named(m)?.build)(&m.params)
}

/// Builds the three policies a config selects (all names are checked before any
/// module is built, so a bad name fails before anything runs).
pub fn build_policies(
    admission: &ModuleConfig,
    scheduling: &ModuleConfig,
    placement: &ModuleConfig,
) -> Result<Policies, ConfigError> {
    let admission_b = build_admission(admission)?;
    let mut scheduling_b = build_scheduling(scheduling)?;
    let placement_b = build_placement(placement)?;
    if let Some(need) = placement_b.requires_scheduling() {
        if need != scheduling.policy {
            return Err(ConfigError::Incompatible {
                at: placement.location(),
                message: format!(
                    "[placement] policy `{}` carries out the layout of scheduling policy `{need}` only, not of `{}` ({}): set `scheduling.policy = \"{need}\"` or another placement",
                    placement.policy,
                    scheduling.policy,
                    scheduling.location()
                ),
            });
        }
    }
    if let Err(why) = scheduling_b.pair_with_placement(&placement.policy) {
        return Err(ConfigError::Incompatible {
            at: placement.location(),
            message: format!(
                "[placement] policy `{}` cannot carry out scheduling policy `{}` ({}): {why}",
                placement.policy,
                scheduling.policy,
                scheduling.location()
            ),
        });
    }
    Ok(Policies {
        admission: admission_b,
        scheduling: scheduling_b,
        placement: placement_b,
        names: PolicyNames::new(
            admission.policy.clone(),
            scheduling.policy.clone(),
            placement.policy.clone(),
        ),
    })
}

/// The registered policies `admission`, `scheduling` and `placement`, each
/// with its default parameters (tests, benchmarks, tools).
pub fn build_named(
    admission: &str,
    scheduling: &str,
    placement: &str,
) -> Result<Policies, ConfigError> {
    let m = ModuleConfig::named;
    build_policies(
        &m("admission", admission),
        &m("scheduling", scheduling),
        &m("placement", placement),
    )
}
