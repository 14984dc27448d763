//! # blox-config
//!
//! Reading a blox config: the TOML file, `--set`/`--unset` overrides,
//! whole sections supplied by another file (a sweep's), and what the
//! sections describe — the cluster ([`ClusterConfig`]: nodes, topology,
//! quarantine, GPU variability read from its CSV) and the loop's plugins
//! ([`Config::profile`]). Every mistake names the file and line where the
//! key was written (from the TOML parser's spans), or the `--set` that put
//! it there.
//!
//! ```toml
//! [cluster]
//! nodes = 16
//! gpus_per_node = 4
//!
//! [run]
//! round_s = 60
//!
//! [admission]
//! policy = "load-based"
//! k = 1.2            # parameters of that policy, checked by its own struct
//!
//! [scheduling]
//! policy = "las"
//!
//! [placement]
//! policy = "consolidated"
//! ```
//!
//! Sections owned by other crates (`[workload]`, `[sim]`, `[sweep]`,
//! `[synthesizer]`, `[runtime]`) are kept as [`Section`]s and parsed by their
//! owners with the same error positions. What a section holds once read
//! (format-free [`blox_core::config::Value`]s) and the module sections are
//! `blox_core::config`'s: a policy crate needs only `blox-core`.

mod cluster;
pub mod convert;
mod profile;
mod source;
pub mod variability;

pub use cluster::{ClusterConfig, NodeGroup, MAX_NODES};
pub use source::{key_lines, Override, SectionSource};

pub use blox_core::config::{
    closest, CheckpointRule, ConfigError, KeyLines, ModuleConfig, NonNegative, Origin, Positive,
    RunConfig, Section, Table, Value,
};
/// Re-exported for building and editing TOML in code and tests.
pub use toml;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A whole config file.
#[derive(Clone, Debug)]
pub struct Config {
    /// Where the config came from (file path, or a description).
    pub file: String,
    /// Directory that relative paths in the config are resolved against.
    pub base_dir: PathBuf,
    pub cluster: ClusterConfig,
    pub run: RunConfig,
    pub admission: ModuleConfig,
    pub scheduling: ModuleConfig,
    pub placement: ModuleConfig,
    /// The plugins at the loop's other extension points
    /// ([`blox_core::extension`]): `[protection]` and `[checkpointing]`.
    pub protection: ModuleConfig,
    pub checkpointing: ModuleConfig,
    /// `[recovery]`: what a job a node failure stopped does.
    pub recovery: ModuleConfig,
    /// Every other section, by name (`cluster`, `run`, `workload`, `sim`, …).
    sections: BTreeMap<String, Section>,
}

/// Where the module sections (policies and plugins) sit in [`SECTIONS`].
const MODULE_SECTIONS: std::ops::Range<usize> = 2..8;

/// Sections a config may have: the cluster, the run, the six modules
/// (policies and plugins), then the sections other crates own.
pub const SECTIONS: &[&str] = &[
    "cluster",
    "run",
    "admission",
    "scheduling",
    "placement",
    "protection",
    "checkpointing",
    "recovery",
    "workload",
    "sim",
    "sweep",
    "synthesizer",
    "forecast",
    "runtime",
    "worker",
    "failures",
];

/// What a config is read from: a file's text, plus whole sections supplied
/// from elsewhere and overrides applied in order.
#[derive(Clone, Debug)]
pub struct ConfigInput<'a> {
    pub source: &'a str,
    /// The file's name, as errors should show it.
    pub file: &'a str,
    /// Its folder (relative paths in it resolve against this).
    pub base_dir: &'a Path,
    /// Sections replacing the file's own.
    pub sections: Vec<SectionSource>,
    pub overrides: Vec<Override>,
    /// A missing `[cluster]` is no error (the cluster comes from elsewhere:
    /// a replayed log's nodes); [`Config::has_section`] says it was missing.
    pub cluster_optional: bool,
}

impl<'a> ConfigInput<'a> {
    pub fn new(source: &'a str, file: &'a str, base_dir: &'a Path) -> Self {
        ConfigInput {
            source,
            file,
            base_dir,
            sections: Vec::new(),
            overrides: Vec::new(),
            cluster_optional: false,
        }
    }
}

impl Config {
    /// Parses `source` (the text of `file`), after applying `overrides`
    /// (`("scheduling.policy", "las")`: dotted keys and TOML values; a value
    /// that is not valid TOML is taken as a string; an empty value removes
    /// the key).
    pub fn parse(
        source: &str,
        file: &str,
        base_dir: &Path,
        overrides: &[(String, String)],
    ) -> Result<Config, ConfigError> {
        let mut input = ConfigInput::new(source, file, base_dir);
        input.overrides = overrides.iter().map(|(k, v)| Override::set(k, v)).collect();
        Config::from_input(input)
    }

    /// Reads a config from its parts (see [`ConfigInput`]).
    pub fn from_input(input: ConfigInput<'_>) -> Result<Config, ConfigError> {
        let file = input.file;
        let mut doc: toml::Table =
            toml::from_str(input.source).map_err(|e| ConfigError::Parse {
                file: file.to_string(),
                message: e.to_string().trim_end().to_string(),
            })?;
        let lines = key_lines(input.source);
        let file_arc: Arc<str> = Arc::from(file);
        let mut origins: HashMap<String, (Origin, PathBuf)> = HashMap::new();
        let origin_of = |name: &str| Origin {
            file: file_arc.clone(),
            lines: Arc::new(lines.under(name)),
            header: lines.line(name).unwrap_or(0),
            set: Arc::default(),
            whole: None,
        };
        for s in input.sections {
            doc.insert(s.name.clone(), toml::Value::Table(s.table));
            let o = Origin {
                file: Arc::from(s.file.as_str()),
                lines: Arc::new(s.lines),
                header: s.line,
                set: Arc::default(),
                whole: None,
            };
            origins.insert(s.name.clone(), (o, s.base_dir));
        }
        let mut set: HashMap<String, HashMap<String, String>> = HashMap::new();
        let mut whole: HashMap<String, String> = HashMap::new();
        for o in &input.overrides {
            o.apply(&mut doc)?;
            match o.key.split_once('.') {
                Some((sec, rest)) => {
                    set.entry(sec.to_string())
                        .or_default()
                        .insert(rest.to_string(), o.origin.clone());
                }
                None => {
                    whole.insert(o.key.clone(), o.origin.clone());
                }
            }
        }
        let mut sections: BTreeMap<String, Section> = BTreeMap::new();
        for (key, value) in &doc {
            let (mut origin, base) = origins
                .get(key)
                .cloned()
                .unwrap_or_else(|| (origin_of(key), input.base_dir.to_path_buf()));
            origin.set = Arc::new(set.remove(key).unwrap_or_default());
            origin.whole = whole.remove(key);
            let at = |message: String| -> ConfigError {
                let s = Section::new(key, Table::new(), origin.clone(), None);
                s.error_at("", message)
            };
            if !SECTIONS.contains(&key.as_str()) {
                let near = closest(key, SECTIONS.iter().copied())
                    .map(|s| format!(" (did you mean `{s}`?)"))
                    .unwrap_or_default();
                return Err(at(format!(
                    "unknown section `{key}`{near}; expected one of: {}",
                    SECTIONS.join(", ")
                )));
            }
            let Some(table) = value.as_table() else {
                return Err(at(format!("`{key}` must be a table ([{key}])")));
            };
            sections.insert(
                key.clone(),
                Section::new(key, convert::from_toml(table), origin, Some(base)),
            );
        }
        let empty = |name: &str| {
            Section::new(
                name,
                Table::new(),
                Origin {
                    file: file_arc.clone(),
                    set: Arc::new(set.get(name).cloned().unwrap_or_default()),
                    ..Default::default()
                },
                Some(input.base_dir.to_path_buf()),
            )
        };
        // A scheduler's config ([runtime]) may leave the cluster out: the
        // workers that register bring the GPUs.
        let live = sections.contains_key("runtime") || sections.contains_key("worker");
        let cluster = match sections.get("cluster") {
            Some(s) => s.parse::<ClusterConfig>()?,
            None if live || input.cluster_optional => ClusterConfig::default(),
            None => {
                return Err(ConfigError::Parse {
                    file: file.to_string(),
                    message: "missing [cluster] section (e.g. nodes = 16, gpus_per_node = 4)"
                        .into(),
                })
            }
        };
        let run_section = sections.get("run").cloned().unwrap_or_else(|| empty("run"));
        let run: RunConfig = run_section.parse()?;
        run.validate(&run_section)?;
        let module = |name: &str, default: &str| -> Result<ModuleConfig, ConfigError> {
            let mut params = sections
                .get(name)
                .cloned()
                .unwrap_or_else(|| empty(name))
                .with_run_seed(run.seed)
                .with_workload(sections.get("workload").cloned());
            let line = params
                .line_of_key("policy")
                .unwrap_or_else(|| params.header_line());
            let policy = params
                .take_string("policy")?
                .unwrap_or_else(|| default.to_string());
            Ok(ModuleConfig {
                policy,
                line,
                params,
            })
        };
        let admission = module("admission", "accept-all")?;
        let scheduling = module("scheduling", "fifo")?;
        let placement = module("placement", "first-free")?;
        let protection = module("protection", "startup-aware")?;
        let checkpointing = module(
            "checkpointing",
            blox_core::extension::default_checkpointing(&run),
        )?;
        let recovery = module("recovery", "hot-spares")?;
        blox_core::extension::one_checkpointing_plugin(&run, &run_section, &checkpointing)?;
        for name in &SECTIONS[MODULE_SECTIONS] {
            sections.remove(*name);
        }
        let cfg = Config {
            file: file.to_string(),
            base_dir: input.base_dir.to_path_buf(),
            cluster,
            run,
            admission,
            scheduling,
            placement,
            protection,
            checkpointing,
            recovery,
            sections,
        };
        // A scheduler's config may describe only the topology's levels
        // (`[cluster.topology]`): its workers bring the nodes.
        let workers_bring_gpus = (live || (input.cluster_optional && !cfg.has_section("cluster")))
            && cfg.cluster.nodes.is_none()
            && cfg.cluster.node_groups.is_empty();
        if !workers_bring_gpus {
            cfg.cluster_state()?;
        }
        Ok(cfg)
    }

    /// A section other than the three modules (`cluster`, `run`, `workload`,
    /// `sim`, …), or an empty one.
    pub fn section(&self, name: &str) -> Section {
        self.sections.get(name).cloned().unwrap_or_else(|| {
            Section::new(
                name,
                Table::new(),
                Origin {
                    file: Arc::from(self.file.as_str()),
                    ..Default::default()
                },
                Some(self.base_dir.clone()),
            )
        })
    }

    /// Every section but the three modules, by name.
    pub fn sections(&self) -> impl Iterator<Item = &Section> {
        self.sections.values()
    }

    /// True if the config has that section.
    pub fn has_section(&self, name: &str) -> bool {
        self.sections.contains_key(name)
    }
}

#[cfg(test)]
mod tests;
