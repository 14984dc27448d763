//! `[failures]`: nodes fail and come back after their repair, as a seeded
//! renewal process per node, plus correlated failures of a topology domain
//! (a rack, a switch) and a share of *lemon* nodes that fail several times
//! more often.
//!
//! Each node of `g` GPUs of type `t` fails with mean time between failures
//! `gpu_mtbf_h(t) / g` hours (independent GPUs in series), exponentially or
//! Weibull distributed (the scale chosen so the mean is that), counted from
//! when it last came up; a failed node is down for `repair_h`. A domain of
//! `domain_level` fails every `domain_mtbf_h` on average (exponential), taking
//! every node under it down for `repair_h`. A lemon fails `lemon_factor`
//! times as often. Every process draws from its own stream of the seed, so a
//! run is a function of its config, whatever order nodes are visited in.
//!
//! Failures take effect at the first round boundary at or after their time
//! (a round's cluster changes come first): a job on a failed node stops
//! there, back at its last checkpoint, and is requeued
//! ([`blox_core::ClusterEvent::NodeFailed`]).
//!
//! The default rate comes from Meta's Llama 3 report (arXiv 2407.21783,
//! §3.3.4): 419 unexpected interruptions in 54 days of pre-training on
//! 16,384 H100 GPUs, i.e. 419 / (16,384 × 54 × 24 GPU-h) = 1.97e-5 per
//! GPU-hour, a per-GPU MTBF of 50,700 h (an 8-GPU node: 6,340 h; the whole
//! 16,384-GPU job: 3.1 h between interruptions).

use blox_core::config::{NonNegative, Positive, Section};
use blox_core::*;
use serde::Deserialize;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

/// Per-GPU mean time between failures by default, hours (module docs).
pub use blox_core::health::LLAMA3_GPU_MTBF_H;

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FailuresSection {
    #[serde(default = "d_true")]
    enabled: bool,
    /// `exponential` or `weibull`.
    #[serde(default = "d_model")]
    model: String,
    #[serde(default = "d_mtbf")]
    gpu_mtbf_h: Positive,
    #[serde(default)]
    gpu_mtbf_h_by_type: BTreeMap<String, Positive>,
    #[serde(default = "d_shape")]
    weibull_shape: Positive,
    #[serde(default = "d_repair")]
    repair_h: NonNegative,
    #[serde(default = "d_zero")]
    lemon_share: NonNegative,
    #[serde(default = "d_lemon_factor")]
    lemon_factor: Positive,
    #[serde(default)]
    domain_level: Option<String>,
    #[serde(default)]
    domain_mtbf_h: Option<Positive>,
    #[serde(default)]
    seed: Option<u64>,
}

fn d_true() -> bool {
    true
}
fn d_model() -> String {
    "exponential".into()
}
fn d_mtbf() -> Positive {
    Positive::new(LLAMA3_GPU_MTBF_H).expect("positive")
}
fn d_shape() -> Positive {
    Positive::new(1.0).expect("positive")
}
fn d_repair() -> NonNegative {
    NonNegative::new(4.0).expect("non-negative")
}
fn d_zero() -> NonNegative {
    NonNegative::new(0.0).expect("non-negative")
}
fn d_lemon_factor() -> Positive {
    Positive::new(5.0).expect("positive")
}

/// The time-to-failure distribution of a node.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Dist {
    Exponential,
    /// Shape `k`; the scale is set from each node's mean.
    Weibull(f64),
}

/// splitmix64: one stream per process, from the seed and the process's key.
#[derive(Clone, Debug)]
struct Rng(u64);

impl Rng {
    fn of(seed: u64, kind: u64, index: u64) -> Rng {
        let mut r = Rng(seed ^ kind.wrapping_mul(0x9e37_79b9_7f4a_7c15));
        r.0 ^= index.wrapping_mul(0xbf58_476d_1ce4_e5b9);
        r.next_u64();
        r
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in (0, 1].
    fn unit(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 1.0) / (1u64 << 53) as f64
    }
}

/// Γ(x) for x > 0 (Lanczos, g = 7; ~1e-15 relative).
fn gamma(x: f64) -> f64 {
    const G: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    if x < 0.5 {
        return std::f64::consts::PI / ((std::f64::consts::PI * x).sin() * gamma(1.0 - x));
    }
    let x = x - 1.0;
    let mut a = G[0];
    let t = x + 7.5;
    for (i, g) in G.iter().enumerate().skip(1) {
        a += g / (x + i as f64);
    }
    (2.0 * std::f64::consts::PI).sqrt() * t.powf(x + 0.5) * (-t).exp() * a
}

impl Dist {
    /// A time to failure of mean `mean_s`.
    fn sample(self, rng: &mut Rng, mean_s: f64) -> f64 {
        let e = -rng.unit().ln();
        match self {
            Dist::Exponential => mean_s * e,
            Dist::Weibull(k) => mean_s / gamma(1.0 + 1.0 / k) * e.powf(1.0 / k),
        }
    }
}

#[derive(Clone, Debug)]
struct NodeProc {
    mean_s: f64,
    rng: Rng,
    /// Down until then (`None`: up).
    down_until: Option<f64>,
    /// Stale heap entries carry an older generation.
    gen: u64,
    lemon: bool,
}

#[derive(Clone, Debug)]
struct DomainProc {
    members: Vec<NodeId>,
    rng: Rng,
}

/// A transition due at a time: (time, kind, index, generation); kinds:
/// 0 a node fails, 1 a node is repaired, 2 a domain fails.
type Due = Reverse<(OrdF64, u8, u32, u64)>;

#[derive(Clone, Copy, Debug)]
struct OrdF64(f64);
impl PartialEq for OrdF64 {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o).is_eq()
    }
}
impl Eq for OrdF64 {}
impl PartialOrd for OrdF64 {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for OrdF64 {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        self.0.total_cmp(&o.0)
    }
}

/// Failure counts of a run.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct FailureCounts {
    pub node_failures: u64,
    pub domain_failures: u64,
    pub lemons: u64,
}

/// The failure processes of a cluster's nodes and domains.
#[derive(Clone, Debug)]
pub struct Failures {
    dist: Dist,
    repair_s: f64,
    gpu_mtbf_s: f64,
    by_type_s: BTreeMap<String, f64>,
    lemon_share: f64,
    lemon_factor: f64,
    seed: u64,
    domain_mean_s: f64,
    nodes: BTreeMap<NodeId, NodeProc>,
    domains: Vec<DomainProc>,
    heap: BinaryHeap<Due>,
    pub counts: FailureCounts,
}

impl Failures {
    /// `[failures]` of a config on `cluster` (`None`: no such section, or
    /// `enabled = false`). Bad values are refused naming file, line and key.
    pub fn from_section(
        section: &Section,
        cluster: &ClusterState,
        run_seed: u64,
    ) -> Result<Option<Failures>, ConfigError> {
        if section.table().is_empty() {
            return Ok(None);
        }
        let s: FailuresSection = section.parse()?;
        if !s.enabled {
            return Ok(None);
        }
        let dist = match s.model.as_str() {
            "exponential" => Dist::Exponential,
            "weibull" => Dist::Weibull(s.weibull_shape.get()),
            other => {
                return Err(section.error_at(
                    "model",
                    format!("unknown failure model `{other}`: choose `exponential` or `weibull`"),
                ))
            }
        };
        if s.lemon_share.get() > 1.0 {
            return Err(section.error_at(
                "lemon_share",
                "`lemon_share` is the share of nodes that are lemons: between 0 and 1",
            ));
        }
        if s.lemon_factor.get() < 1.0 {
            return Err(section.error_at(
                "lemon_factor",
                "`lemon_factor` (how many times as often a lemon fails) must be at least 1",
            ));
        }
        let types: std::collections::BTreeSet<&str> = cluster
            .nodes()
            .iter()
            .map(|n| n.spec.gpu_type.as_str())
            .collect();
        for t in s.gpu_mtbf_h_by_type.keys() {
            if !types.contains(t.as_str()) {
                return Err(section.error_at(
                    "gpu_mtbf_h_by_type",
                    format!(
                        "no node has GPUs of type `{t}` (types: {})",
                        types.iter().copied().collect::<Vec<_>>().join(", ")
                    ),
                ));
            }
        }
        let mut domains = Vec::new();
        let mut domain_mean_s = f64::INFINITY;
        match (&s.domain_level, s.domain_mtbf_h) {
            (None, None) => {}
            (Some(level), Some(mtbf)) => {
                let Some(t) = cluster.topology() else {
                    return Err(section.error_at(
                        "domain_level",
                        "correlated failures of a domain need a [cluster.topology]",
                    ));
                };
                let Some(l) = t.level(level) else {
                    return Err(section.error_at(
                        "domain_level",
                        format!(
                            "the topology has no level `{level}` (levels: {})",
                            t.levels()
                                .iter()
                                .map(|l| l.name.as_str())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    ));
                };
                let seed = s.seed.unwrap_or(run_seed);
                domains = (0..t.domains(l) as u32)
                    .map(|d| DomainProc {
                        members: t.members(l, d).to_vec(),
                        rng: Rng::of(seed, 2, u64::from(d)),
                    })
                    .collect();
                domain_mean_s = mtbf.get() * 3600.0;
            }
            (Some(_), None) => return Err(section.error_at(
                "domain_level",
                "`domain_level` needs `domain_mtbf_h`, the mean time between a domain's failures",
            )),
            (None, Some(_)) => {
                return Err(section.error_at(
                    "domain_mtbf_h",
                    "`domain_mtbf_h` needs `domain_level`, the topology level whose domains fail",
                ))
            }
        }
        let mut f = Failures {
            dist,
            repair_s: s.repair_h.get() * 3600.0,
            gpu_mtbf_s: s.gpu_mtbf_h.get() * 3600.0,
            by_type_s: s
                .gpu_mtbf_h_by_type
                .iter()
                .map(|(k, v)| (k.clone(), v.get() * 3600.0))
                .collect(),
            lemon_share: s.lemon_share.get(),
            lemon_factor: s.lemon_factor.get(),
            seed: s.seed.unwrap_or(run_seed),
            domain_mean_s,
            nodes: BTreeMap::new(),
            domains,
            heap: BinaryHeap::new(),
            counts: FailureCounts::default(),
        };
        for n in cluster.nodes().iter().filter(|n| n.online) {
            f.add_node(n.id, &n.spec, 0.0);
        }
        for d in 0..f.domains.len() {
            f.schedule_domain(d, 0.0);
        }
        Ok(Some(f))
    }

    /// A node that joined at `now_s` gets its failure process.
    pub fn add_node(&mut self, id: NodeId, spec: &NodeSpec, now_s: f64) {
        if spec.gpus == 0 {
            return;
        }
        let per_gpu = self
            .by_type_s
            .get(&spec.gpu_type)
            .copied()
            .unwrap_or(self.gpu_mtbf_s);
        let mut rng = Rng::of(self.seed, 1, u64::from(id.0));
        let lemon = rng.unit() <= self.lemon_share;
        self.counts.lemons += u64::from(lemon);
        let mean_s = per_gpu / f64::from(spec.gpus) / if lemon { self.lemon_factor } else { 1.0 };
        self.nodes.insert(
            id,
            NodeProc {
                mean_s,
                rng,
                down_until: None,
                gen: 0,
                lemon,
            },
        );
        self.schedule_failure(id, now_s);
    }

    /// A node that left for good has no process any more.
    pub fn remove_node(&mut self, id: NodeId) {
        self.nodes.remove(&id);
    }

    /// Whether some node is down (its repair is pending).
    pub fn any_down(&self) -> bool {
        self.nodes.values().any(|n| n.down_until.is_some())
    }

    /// Whether `id` is a lemon.
    pub fn is_lemon(&self, id: NodeId) -> bool {
        self.nodes.get(&id).is_some_and(|n| n.lemon)
    }

    fn schedule_failure(&mut self, id: NodeId, from_s: f64) {
        let dist = self.dist;
        let Some(n) = self.nodes.get_mut(&id) else {
            return;
        };
        n.gen += 1;
        let t = from_s + dist.sample(&mut n.rng, n.mean_s);
        self.heap.push(Reverse((OrdF64(t), 0, id.0, n.gen)));
    }

    fn schedule_domain(&mut self, d: usize, from_s: f64) {
        let mean = self.domain_mean_s;
        let dp = &mut self.domains[d];
        let t = from_s + Dist::Exponential.sample(&mut dp.rng, mean);
        self.heap.push(Reverse((OrdF64(t), 2, d as u32, 0)));
    }

    /// Takes node `id` down at `t` (if up) until `t + repair`; its events.
    fn fail(&mut self, id: NodeId, t: f64, out: &mut Vec<ClusterEvent>) {
        let repair = self.repair_s;
        let Some(n) = self.nodes.get_mut(&id) else {
            return;
        };
        let until = t + repair;
        // Down already until later: nothing changes.
        if n.down_until.is_some_and(|u| u >= until) {
            return;
        }
        // Down already (a domain failure on a failed node): down longer.
        let was_up = n.down_until.is_none();
        n.down_until = Some(until);
        n.gen += 1;
        self.heap.push(Reverse((OrdF64(until), 1, id.0, n.gen)));
        if was_up {
            self.counts.node_failures += 1;
            out.push(ClusterEvent::NodeFailed(id));
        }
    }

    /// The failures and repairs due by `now_s`, in time order.
    pub fn due(&mut self, now_s: f64) -> Vec<ClusterEvent> {
        let mut out = Vec::new();
        while let Some(Reverse((OrdF64(t), kind, idx, gen))) = self.heap.peek().copied() {
            if t > now_s + 1e-9 {
                break;
            }
            self.heap.pop();
            let id = NodeId(idx);
            match kind {
                0 => {
                    if self.nodes.get(&id).is_some_and(|n| n.gen == gen) {
                        self.fail(id, t, &mut out);
                    }
                }
                1 => {
                    let current = self
                        .nodes
                        .get(&id)
                        .is_some_and(|n| n.gen == gen && n.down_until.is_some());
                    if current {
                        if let Some(n) = self.nodes.get_mut(&id) {
                            n.down_until = None;
                        }
                        out.push(ClusterEvent::NodeRepaired(id));
                        // Its next lifetime starts now.
                        self.schedule_failure(id, t);
                    }
                }
                _ => {
                    let d = idx as usize;
                    self.counts.domain_failures += 1;
                    let members = self.domains[d].members.clone();
                    for m in members {
                        self.fail(m, t, &mut out);
                    }
                    self.schedule_domain(d, t);
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weibull_means_are_the_mean_asked_for() {
        assert!((gamma(5.0) - 24.0).abs() < 1e-9);
        assert!((gamma(0.5) - std::f64::consts::PI.sqrt()).abs() < 1e-12);
        for k in [0.7, 1.0, 2.5] {
            let mut rng = Rng::of(3, 0, 0);
            let n = 200_000;
            let mean: f64 = (0..n)
                .map(|_| Dist::Weibull(k).sample(&mut rng, 10.0))
                .sum::<f64>()
                / n as f64;
            assert!((mean - 10.0).abs() < 0.1, "shape {k}: mean {mean}");
        }
    }

    #[test]
    fn a_node_fails_and_comes_back_in_order_and_the_same_seed_repeats_it() {
        let cfg = blox_config::Config::parse(
            "[run]\nround_s = 60\n[cluster]\nnodes = 4\ngpus_per_node = 8\n[failures]\ngpu_mtbf_h = 8\nrepair_h = 0.5\n",
            "f.toml",
            std::path::Path::new("."),
            &[],
        )
        .unwrap();
        let cluster = cfg.cluster_state().unwrap();
        let run = |seed| {
            let mut f = Failures::from_section(&cfg.section("failures"), &cluster, seed)
                .unwrap()
                .unwrap();
            let mut seen = Vec::new();
            for r in 1..=200 {
                seen.extend(f.due(r as f64 * 60.0));
            }
            seen
        };
        let a = run(1);
        assert_eq!(a, run(1));
        assert_ne!(a, run(2));
        // Each node alternates failed, repaired; a node of 8 GPUs at 8 h per
        // GPU fails every hour: about 4 × 200 min / 90 min ≈ 9 failures.
        let mut down = std::collections::BTreeSet::new();
        let mut failures = 0;
        for ev in &a {
            match ev {
                ClusterEvent::NodeFailed(n) => {
                    assert!(down.insert(*n), "{n} failed twice");
                    failures += 1;
                }
                ClusterEvent::NodeRepaired(n) => assert!(down.remove(n), "{n} repaired while up"),
                other => panic!("{other:?}"),
            }
        }
        assert!((3..=20).contains(&failures), "{failures}");
    }

    #[test]
    fn bad_failure_settings_name_their_key() {
        let cases = [
            ("gpu_mtbf_h = -1", "gpu_mtbf_h"),
            ("repair_h = inf", "repair_h"),
            ("lemon_share = 2", "lemon_share"),
            ("model = \"gauss\"", "model"),
            ("domain_level = \"rack\"", "domain_level"),
            ("domain_mtbf_h = 5", "domain_mtbf_h"),
            ("gpu_mtbf_h_by_type = { H999 = 5 }", "H999"),
            ("mtbf = 5", "mtbf"),
        ];
        for (line, want) in cases {
            let text = format!(
                "[run]\nround_s = 60\n[cluster]\nnodes = 2\ngpus_per_node = 8\n[failures]\n{line}\n"
            );
            let cfg = blox_config::Config::parse(&text, "f.toml", std::path::Path::new("."), &[])
                .unwrap();
            let cluster = cfg.cluster_state().unwrap();
            let e = Failures::from_section(&cfg.section("failures"), &cluster, 1)
                .err()
                .unwrap_or_else(|| panic!("`{line}` accepted"))
                .to_string();
            assert!(e.contains("f.toml:7") && e.contains(want), "{line}: {e}");
        }
    }
}
