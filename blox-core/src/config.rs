//! The TOML config: cluster, run settings, and one section per module naming a
//! registered policy and its parameters. Every mistake names the file and line.
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
//! Sections owned by other crates (`[workload]`, `[sim]`, `[sweep]`) are kept as
//! [`Section`]s and parsed by their owners with the same error positions.

use crate::cluster::{ClusterState, NodeSpec};
use serde::de::DeserializeOwned;
use serde::Deserialize;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A config problem, with where it is.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// TOML syntax or a top-level field; toml's message carries line and column.
    #[error("{file}: {message}")]
    Parse { file: String, message: String },
    /// A field inside a section.
    #[error("{file}:{line}: [{section}] {message}")]
    Field {
        file: String,
        line: usize,
        section: String,
        message: String,
    },
    /// A module name that nothing registered.
    #[error("{file}:{line}: [{section}] unknown {kind} policy `{name}`; registered {kind} policies: {known}")]
    UnknownModule {
        file: String,
        line: usize,
        section: String,
        kind: &'static str,
        name: String,
        known: String,
    },
    /// A `--set key=value` override that cannot apply.
    #[error("--set {expr}: {message}")]
    Override { expr: String, message: String },
}

/// One table of the config, with enough context to report positions.
#[derive(Clone, Debug)]
pub struct Section {
    name: String,
    table: toml::Table,
    span: Range<usize>,
    source: Arc<str>,
    file: Arc<str>,
    /// Folder relative paths in this section are resolved against (the config
    /// file's folder); `None` for sections built in code (the current folder).
    base_dir: Option<PathBuf>,
}

impl Section {
    /// `p` resolved against the config file's folder when relative.
    pub fn resolve_path(&self, p: &Path) -> PathBuf {
        match &self.base_dir {
            Some(b) if p.is_relative() => b.join(p),
            _ => p.to_path_buf(),
        }
    }

    /// A section built in code (tests, forks): errors report line 0.
    pub fn from_table(name: &str, table: toml::Table) -> Self {
        Section {
            name: name.to_string(),
            table,
            span: 0..0,
            source: Arc::from(""),
            file: Arc::from("<code>"),
            base_dir: None,
        }
    }

    /// An empty section (every parameter at its default).
    pub fn empty(name: &str) -> Self {
        Self::from_table(name, toml::Table::new())
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn table(&self) -> &toml::Table {
        &self.table
    }

    pub fn file(&self) -> &str {
        &self.file
    }

    /// Deserialises the section into a typed struct (use
    /// `#[serde(deny_unknown_fields)]` so a mistyped key is an error).
    pub fn parse<T: DeserializeOwned>(&self) -> Result<T, ConfigError> {
        toml::Value::Table(self.table.clone())
            .try_into::<T>()
            .map_err(|e| {
                let message = e.message().trim().to_string();
                let line = backticked(&message)
                    .into_iter()
                    .find_map(|k| self.line_of_key(k))
                    .unwrap_or_else(|| self.header_line());
                self.field_error(line, message)
            })
    }

    /// An error at `key` (or at the section header if the key is absent).
    pub fn error_at(&self, key: &str, message: impl Into<String>) -> ConfigError {
        let line = self.line_of_key(key).unwrap_or_else(|| self.header_line());
        self.field_error(line, message.into())
    }

    fn field_error(&self, line: usize, message: String) -> ConfigError {
        ConfigError::Field {
            file: self.file.to_string(),
            line,
            section: self.name.clone(),
            message,
        }
    }

    fn line_at(&self, offset: usize) -> usize {
        self.source[..offset.min(self.source.len())]
            .bytes()
            .filter(|b| *b == b'\n')
            .count()
            + 1
    }

    fn header_line(&self) -> usize {
        let header = format!("[{}]", self.name);
        match self.source.find(&header) {
            Some(off) => self.line_at(off),
            None => self.line_at(self.span.start),
        }
    }

    /// Line of `key = …` inside this section, if it is written there.
    pub fn line_of_key(&self, key: &str) -> Option<usize> {
        if self.source.is_empty() {
            return None;
        }
        // Search from the section header to the next header.
        let header = format!("[{}]", self.name);
        let start = self.source.find(&header).unwrap_or(self.span.start);
        let mut offset = start;
        for (i, line) in self.source[start..].split_inclusive('\n').enumerate() {
            let t = line.trim_start();
            if i > 0 && t.starts_with('[') {
                break;
            }
            let rest = t
                .strip_prefix(key)
                .or_else(|| t.strip_prefix(&format!("\"{key}\"")));
            if let Some(rest) = rest {
                if rest.trim_start().starts_with('=') {
                    return Some(self.line_at(offset));
                }
            }
            offset += line.len();
        }
        None
    }

    /// Removes and returns a string-valued key (e.g. `policy`).
    pub fn take_string(&mut self, key: &str) -> Result<Option<String>, ConfigError> {
        match self.table.get(key) {
            None => Ok(None),
            Some(toml::Value::String(s)) => {
                let s = s.clone();
                self.table.remove(key);
                Ok(Some(s))
            }
            Some(other) => Err(self.error_at(
                key,
                format!("`{key}` must be a string, found {}", other.type_str()),
            )),
        }
    }
}

/// The words between backticks in a serde message (field names).
fn backticked(msg: &str) -> Vec<&str> {
    msg.split('`').skip(1).step_by(2).collect()
}

/// One group of identical nodes: `count` plus the fields of [`NodeSpec`].
#[derive(Clone, Debug, PartialEq)]
pub struct NodeGroup {
    /// How many nodes of this kind.
    pub count: u32,
    pub spec: NodeSpec,
}

impl NodeGroup {
    fn from_table(mut t: toml::Table) -> Result<Self, String> {
        let count = match t.remove("count") {
            Some(toml::Value::Integer(n)) if n >= 0 => n as u32,
            Some(_) => return Err("`count` must be a non-negative integer".into()),
            None => return Err("missing field `count`".into()),
        };
        let spec: NodeSpec = toml::Value::Table(t)
            .try_into()
            .map_err(|e| e.message().trim().to_string())?;
        spec.validate()?;
        Ok(NodeGroup { count, spec })
    }
}

/// `[cluster]`: either `nodes` × `gpus_per_node` (plus optional node fields), or a
/// list of `[[cluster.node_groups]]`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ClusterConfig {
    pub nodes: Option<u32>,
    /// Elastic (cloud) cluster: it may grow to this many nodes like the first
    /// (auto-scaling); jobs are only rejected if they exceed that size.
    pub max_nodes: Option<u32>,
    pub gpus_per_node: Option<u32>,
    pub gpu_type: Option<String>,
    pub gpu_mem_gb: Option<f64>,
    pub cpus: Option<u32>,
    pub host_mem_gb: Option<f64>,
    pub inter_node_bw_gbps: Option<f64>,
    pub intra_node_bw_gbps: Option<f64>,
    /// Per-pair GPU bandwidth inside a node (see `NodeSpec::gpu_bandwidth_gbps`).
    #[serde(default)]
    pub gpu_bandwidth_gbps: Vec<Vec<f64>>,
    #[serde(default)]
    pub node_groups: Vec<toml::Table>,
}

/// `[run]`: settings of the loop shared by every backend.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RunConfig {
    /// Round length, seconds (Blox uses 300 s; Pollux 60 s).
    #[serde(default = "default_round_s")]
    pub round_s: f64,
    /// Seed of every random draw (workload generation, randomised policies).
    #[serde(default = "default_seed")]
    pub seed: u64,
    /// Stop after this much (simulated or wall) time, seconds.
    pub max_time_s: Option<f64>,
    /// Stop after this many rounds.
    pub max_rounds: Option<u64>,
    /// `[first, last]` job ids (inclusive) over which metrics are computed; the run
    /// stops once all of them have ended while later jobs keep arriving (Blox §6).
    pub track_jobs: Option<[u64; 2]>,
}

fn default_round_s() -> f64 {
    300.0
}
fn default_seed() -> u64 {
    1
}

impl Default for RunConfig {
    fn default() -> Self {
        RunConfig {
            round_s: default_round_s(),
            seed: default_seed(),
            max_time_s: None,
            max_rounds: None,
            track_jobs: None,
        }
    }
}

/// A module section: the registered name and its parameters.
#[derive(Clone, Debug)]
pub struct ModuleConfig {
    pub policy: String,
    /// Line of `policy = …`, for messages.
    pub line: usize,
    /// Everything but `policy`: the module's own parameters.
    pub params: Section,
}

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
    /// Sections owned by other crates, by name (`workload`, `sim`, `sweep`).
    pub extra: std::collections::BTreeMap<String, Section>,
}

const TOP_LEVEL: &[&str] = &[
    "cluster",
    "run",
    "admission",
    "scheduling",
    "placement",
    "workload",
    "sim",
    "sweep",
    "synthesizer",
    "runtime",
];

impl Config {
    /// Parses `source` (the text of `file`), after applying `overrides`
    /// (`("scheduling.policy", "\"las\"")`-style dotted keys and TOML values; a value
    /// that is not valid TOML is taken as a string).
    pub fn parse(
        source: &str,
        file: &str,
        base_dir: &Path,
        overrides: &[(String, String)],
    ) -> Result<Config, ConfigError> {
        let parse_err = |file: &str, e: toml::de::Error| ConfigError::Parse {
            file: file.to_string(),
            message: e.to_string().trim_end().to_string(),
        };
        let mut file_name = file.to_string();
        let mut text = source.to_string();
        if !overrides.is_empty() {
            let mut doc: toml::Table = toml::from_str(source).map_err(|e| parse_err(file, e))?;
            for (key, value) in overrides {
                apply_override(&mut doc, key, value)?;
            }
            text = toml::to_string(&doc).map_err(|e| ConfigError::Override {
                expr: "…".into(),
                message: e.to_string(),
            })?;
            file_name = format!("{file} (after --set)");
        }
        let source: Arc<str> = Arc::from(text.as_str());
        let file_arc: Arc<str> = Arc::from(file_name.as_str());
        let doc: toml::Table = toml::from_str(&source).map_err(|e| parse_err(&file_name, e))?;

        let section = |name: &str| -> Option<Section> {
            doc.get(name).map(|v| Section {
                name: name.to_string(),
                table: v.as_table().cloned().unwrap_or_default(),
                span: 0..source.len(),
                source: source.clone(),
                file: file_arc.clone(),
                base_dir: Some(base_dir.to_path_buf()),
            })
        };
        for (key, value) in &doc {
            let line_of = |k: &str| {
                source
                    .lines()
                    .position(|l| {
                        let t = l.trim_start();
                        t.starts_with(&format!("[{k}]"))
                            || t.starts_with(&format!("[[{k}"))
                            || t.starts_with(&format!("[{k}."))
                            || t.starts_with(&format!("{k} ="))
                            || t.starts_with(&format!("{k}="))
                    })
                    .map(|i| i + 1)
                    .unwrap_or(0)
            };
            if !TOP_LEVEL.contains(&key.as_str()) {
                return Err(ConfigError::Field {
                    file: file_name.clone(),
                    line: line_of(key),
                    section: key.clone(),
                    message: format!(
                        "unknown section `{key}`; expected one of: {}",
                        TOP_LEVEL.join(", ")
                    ),
                });
            }
            if !value.is_table() {
                return Err(ConfigError::Field {
                    file: file_name.clone(),
                    line: line_of(key),
                    section: key.clone(),
                    message: format!("`{key}` must be a table ([{key}])"),
                });
            }
        }

        // A scheduler's config ([runtime]) may leave the cluster out: the
        // workers that register bring the GPUs.
        let workers_bring_gpus = section("cluster").is_none() && section("runtime").is_some();
        let cluster = match section("cluster") {
            Some(s) => s.parse::<ClusterConfig>()?,
            None if workers_bring_gpus => toml::Value::Table(toml::Table::new())
                .try_into::<ClusterConfig>()
                .expect("every [cluster] field is optional"),
            None => {
                return Err(ConfigError::Parse {
                    file: file_name,
                    message: "missing [cluster] section (e.g. nodes = 16, gpus_per_node = 4)"
                        .into(),
                })
            }
        };
        let run = match section("run") {
            Some(s) => s.parse::<RunConfig>()?,
            None => RunConfig::default(),
        };
        let module = |name: &str, default: &str| -> Result<ModuleConfig, ConfigError> {
            let mut params = section(name).unwrap_or_else(|| Section {
                name: name.to_string(),
                table: toml::Table::new(),
                span: 0..0,
                source: source.clone(),
                file: file_arc.clone(),
                base_dir: Some(base_dir.to_path_buf()),
            });
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
        let mut extra = std::collections::BTreeMap::new();
        for name in ["workload", "sim", "sweep", "synthesizer", "runtime"] {
            if let Some(s) = section(name) {
                extra.insert(name.to_string(), s);
            }
        }
        let cfg = Config {
            file: file_name,
            base_dir: base_dir.to_path_buf(),
            cluster,
            run,
            admission,
            scheduling,
            placement,
            extra,
        };
        if !workers_bring_gpus {
            cfg.cluster_state()?;
        }
        if !(cfg.run.round_s > 0.0 && cfg.run.round_s.is_finite()) {
            return Err(section("run")
                .expect("round_s <= 0 needs a [run] section")
                .error_at("round_s", "round_s must be a positive number of seconds"));
        }
        Ok(cfg)
    }

    /// A section owned by another crate, or an empty one.
    pub fn section(&self, name: &str) -> Section {
        self.extra.get(name).cloned().unwrap_or_else(|| Section {
            name: name.to_string(),
            table: toml::Table::new(),
            span: 0..0,
            source: Arc::from(""),
            file: Arc::from(self.file.as_str()),
            base_dir: Some(self.base_dir.clone()),
        })
    }

    /// The cluster the config describes.
    pub fn cluster_state(&self) -> Result<ClusterState, ConfigError> {
        let c = &self.cluster;
        let err = |message: String| ConfigError::Parse {
            file: self.file.clone(),
            message: format!("[cluster] {message}"),
        };
        let mut cluster = ClusterState::new();
        match (c.nodes, c.gpus_per_node) {
            (Some(n), Some(g)) => {
                let mut spec = NodeSpec::with_gpus(g);
                if let Some(t) = &c.gpu_type {
                    spec.gpu_type = t.clone();
                }
                if let Some(v) = c.gpu_mem_gb {
                    spec.gpu_mem_gb = v;
                }
                if let Some(v) = c.cpus {
                    spec.cpus = v;
                }
                if let Some(v) = c.host_mem_gb {
                    spec.host_mem_gb = v;
                }
                if let Some(v) = c.inter_node_bw_gbps {
                    spec.inter_node_bw_gbps = v;
                }
                if let Some(v) = c.intra_node_bw_gbps {
                    spec.intra_node_bw_gbps = v;
                }
                spec.gpu_bandwidth_gbps = c.gpu_bandwidth_gbps.clone();
                spec.validate().map_err(err)?;
                for _ in 0..n {
                    cluster.add_node(spec.clone());
                }
            }
            (None, None) => {}
            _ => return Err(err("give both `nodes` and `gpus_per_node`".into())),
        }
        for (i, group) in c.node_groups.iter().enumerate() {
            let g = NodeGroup::from_table(group.clone())
                .map_err(|e| err(format!("node_groups[{i}]: {e}")))?;
            for _ in 0..g.count {
                cluster.add_node(g.spec.clone());
            }
        }
        if let Some(m) = c.max_nodes {
            let per_node = cluster.nodes().first().map_or(0, |n| n.gpus.len() as u32);
            if (m as usize) < cluster.nodes().len() {
                return Err(err(format!(
                    "max_nodes = {m} is below the {} nodes the cluster starts with",
                    cluster.nodes().len()
                )));
            }
            cluster.set_max_gpus(Some(m * per_node));
        }
        if cluster.num_gpus() == 0 {
            return Err(err(
                "the cluster has no GPUs: set `nodes` and `gpus_per_node`, or [[cluster.node_groups]]"
                    .into(),
            ));
        }
        Ok(cluster)
    }
}

/// Sets a dotted `key` of a TOML document to `value` (TOML syntax; anything that is
/// not valid TOML is taken as a string).
pub fn apply_override(doc: &mut toml::Table, key: &str, value: &str) -> Result<(), ConfigError> {
    let expr = format!("{key}={value}");
    let parts: Vec<&str> = key.split('.').collect();
    if parts.iter().any(|p| p.trim().is_empty()) {
        return Err(ConfigError::Override {
            expr,
            message: "the key must be a dotted path like `scheduling.policy`".into(),
        });
    }
    let parsed: toml::Value = toml::from_str::<toml::Table>(&format!("v = {value}"))
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(value.to_string()));
    let mut table = doc;
    for p in &parts[..parts.len() - 1] {
        let entry = table
            .entry(p.to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        table = match entry {
            toml::Value::Table(t) => t,
            _ => {
                return Err(ConfigError::Override {
                    expr,
                    message: format!("`{p}` is not a table"),
                })
            }
        };
    }
    table.insert(parts[parts.len() - 1].to_string(), parsed);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(src: &str) -> Result<Config, ConfigError> {
        Config::parse(src, "test.toml", Path::new("."), &[])
    }

    #[test]
    fn gpu_bandwidth_matrix_must_match_the_node() {
        let ok =
            "[cluster]\nnodes = 1\ngpus_per_node = 2\ngpu_bandwidth_gbps = [[0, 50], [50, 0]]\n";
        let c = parse(ok).unwrap().cluster_state().unwrap();
        assert_eq!(c.nodes()[0].spec.pair_bandwidth(0, 1), 50.0);
        let bad =
            "[cluster]\nnodes = 1\ngpus_per_node = 4\ngpu_bandwidth_gbps = [[0, 50], [50, 0]]\n";
        let err = parse(bad).unwrap_err().to_string();
        assert!(err.contains("4 x 4"), "{err}");
    }

    #[test]
    fn mistyped_key_names_key_and_line() {
        let src = "[cluster]\nnodes = 2\ngpus_per_node = 4\n\n[run]\nround_s = 60\nsed = 3\n";
        let err = parse(src).unwrap_err().to_string();
        assert!(err.contains("sed"), "{err}");
        assert!(err.contains("test.toml:7"), "{err}");
    }

    #[test]
    fn unknown_section_is_an_error_with_line() {
        let err =
            parse("[cluster]\nnodes = 1\ngpus_per_node = 1\n[shceduling]\npolicy = \"las\"\n")
                .unwrap_err()
                .to_string();
        assert!(err.contains("test.toml:4"), "{err}");
        assert!(err.contains("shceduling"), "{err}");
    }

    #[test]
    fn module_params_are_kept_apart_from_policy_name() {
        let cfg = parse(
            "[cluster]\nnodes = 1\ngpus_per_node = 1\n[admission]\npolicy = \"load-based\"\nk = 1.4\n",
        )
        .unwrap();
        assert_eq!(cfg.admission.policy, "load-based");
        assert_eq!(cfg.admission.line, 5);
        assert_eq!(
            cfg.admission.params.table().get("k").unwrap().as_float(),
            Some(1.4)
        );
        assert_eq!(cfg.scheduling.policy, "fifo");
    }

    #[test]
    fn overrides_replace_values_and_create_tables() {
        let cfg = Config::parse(
            "[cluster]\nnodes = 1\ngpus_per_node = 1\n",
            "t.toml",
            Path::new("."),
            &[
                ("scheduling.policy".into(), "las".into()),
                ("run.round_s".into(), "60".into()),
            ],
        )
        .unwrap();
        assert_eq!(cfg.scheduling.policy, "las");
        assert_eq!(cfg.run.round_s, 60.0);
    }

    #[test]
    fn node_groups_build_a_heterogeneous_cluster() {
        let cfg = parse(
            "[cluster]\n[[cluster.node_groups]]\ncount = 2\ngpus = 4\ngpu_type = \"K80\"\n[[cluster.node_groups]]\ncount = 1\ngpus = 8\n",
        )
        .unwrap();
        let c = cfg.cluster_state().unwrap();
        assert_eq!(c.num_gpus(), 16);
        assert_eq!(c.gpu_type(crate::ids::GpuId(0)), Some("K80"));
        assert_eq!(c.gpu_type(crate::ids::GpuId(8)), Some("V100"));
    }

    #[test]
    fn cluster_without_gpus_is_rejected() {
        assert!(parse("[cluster]\nnodes = 2\n").is_err());
    }
}
