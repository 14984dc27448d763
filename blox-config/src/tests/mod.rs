//! Reading configs: sections, modules, overrides and their errors.

use super::*;

mod profile;

#[test]
fn the_module_sections_are_the_policies_and_plugins() {
    assert_eq!(
        SECTIONS[MODULE_SECTIONS],
        [
            "admission",
            "scheduling",
            "placement",
            "protection",
            "checkpointing",
            "recovery"
        ]
    );
}

fn parse(src: &str) -> Result<Config, ConfigError> {
    Config::parse(src, "test.toml", Path::new("."), &[])
}

#[test]
fn a_scheduler_config_may_give_only_the_topology_levels() {
    let levels = "[cluster.topology]\nlevels = [{ name = \"rack\", bandwidth_gbps = 50 }]\n";
    let live = parse(&format!("{levels}[runtime]\n")).unwrap();
    let l = live.topology_levels().unwrap().unwrap();
    assert_eq!(l[0].name, "rack");
    // A simulation needs the nodes.
    let e = parse(levels).unwrap_err().to_string();
    assert!(e.contains("the cluster has no GPUs"), "{e}");
}

#[test]
fn gpu_bandwidth_matrix_must_match_the_node() {
    let ok = "[cluster]\nnodes = 1\ngpus_per_node = 2\ngpu_bandwidth_gbps = [[0, 50], [50, 0]]\n";
    let c = parse(ok).unwrap().cluster_state().unwrap();
    assert_eq!(c.nodes()[0].spec.pair_bandwidth(0, 1), 50.0);
    let bad = "[cluster]\nnodes = 1\ngpus_per_node = 4\ngpu_bandwidth_gbps = [[0, 50], [50, 0]]\n";
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
    let err = parse("[cluster]\nnodes = 1\ngpus_per_node = 1\n[shceduling]\npolicy = \"las\"\n")
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
fn module_sections_know_the_run_seed() {
    let cfg = parse("[cluster]\nnodes = 1\ngpus_per_node = 1\n[run]\nseed = 42\n[scheduling]\npolicy = \"las\"\n").unwrap();
    assert_eq!(cfg.scheduling.params.run_seed(), Some(42));
    assert_eq!(
        cfg.admission.params.run_seed(),
        Some(42),
        "default sections too"
    );
    let t = Table::new();
    assert_eq!(
        cfg.scheduling.params.subsection("s", "x", t).run_seed(),
        Some(42)
    );
    let cfg = parse("[cluster]\nnodes = 1\ngpus_per_node = 1\n").unwrap();
    assert_eq!(cfg.placement.params.run_seed(), Some(cfg.run.seed));
    assert_eq!(Section::empty("scheduling").run_seed(), None);
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
    assert_eq!(cfg.run.round_s.get(), 60.0);
}

#[test]
fn node_groups_build_a_heterogeneous_cluster() {
    let cfg = parse(
        "[cluster]\n[[cluster.node_groups]]\ncount = 2\ngpus = 4\ngpu_type = \"K80\"\n[[cluster.node_groups]]\ncount = 1\ngpus = 8\n",
    )
    .unwrap();
    let c = cfg.cluster_state().unwrap();
    assert_eq!(c.num_gpus(), 16);
    assert_eq!(c.gpu_type(blox_core::GpuId(0)), Some("K80"));
    assert_eq!(c.gpu_type(blox_core::GpuId(8)), Some("V100"));
}

#[test]
fn cluster_without_gpus_is_rejected() {
    let e = parse("[cluster]\nnodes = 2\n").unwrap_err().to_string();
    assert!(e.contains("[cluster]") && e.contains("gpus"), "{e}");
}

#[test]
fn type_and_missing_field_errors_name_the_key_and_its_line() {
    let err = parse("[cluster]\nnodes = 2\ngpus_per_node = \"four\"\n")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("test.toml:3: [cluster] `gpus_per_node`"),
        "{err}"
    );
    let err =
        parse("[cluster]\n[[cluster.node_groups]]\ngpus = 4\n[[cluster.node_groups]]\ncount = 1\n")
            .unwrap_err()
            .to_string();
    assert!(
        err.contains("[cluster.node_groups[0]]") && err.contains("missing field `count`"),
        "{err}"
    );
    let err =
        parse("[cluster]\n[[cluster.node_groups]]\ncount = 1\ngpus = 4\ngpu_typ = \"A100\"\n")
            .unwrap_err()
            .to_string();
    assert!(
        err.contains("test.toml:5") && err.contains("gpu_typ"),
        "{err}"
    );
}

#[test]
fn a_mistyped_section_name_gets_a_suggestion() {
    let err = parse("[cluster]\nnodes = 1\ngpus_per_node = 1\n[schedulng]\npolicy = \"las\"\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("did you mean `scheduling`?"), "{err}");
}

#[test]
fn overrides_are_named_as_the_origin_of_what_they_set() {
    let err = Config::parse(
        "[cluster]\nnodes = 1\ngpus_per_node = 1\n[run]\nround_s = 60\n",
        "t.toml",
        Path::new("."),
        &[("run.seed".into(), "\"x\"".into())],
    )
    .unwrap_err()
    .to_string();
    assert!(err.starts_with("--set run.seed=\"x\": [run]"), "{err}");
    // An empty value removes the key: back to the default round length.
    let cfg = Config::parse(
        "[cluster]\nnodes = 1\ngpus_per_node = 1\n[run]\nround_s = 60\n",
        "t.toml",
        Path::new("."),
        &[("run.round_s".into(), "".into())],
    )
    .unwrap();
    assert_eq!(cfg.run.round_s.get(), 300.0);
}
