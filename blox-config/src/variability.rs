//! Reading GPU variability factors from their CSV (`[cluster.variability]
//! factors`, a `class-walk` placement's `clusters`): a `GPU_ID` column (the
//! cluster's GPU numbering: nodes in order, each node's GPUs in order),
//! optionally `Node_ID`, and one `PerfVar_<class>` column per class — the
//! layout of the PAL artifact's `32gpu-variability.csv` and of
//! `python/tools/pal_factors.py`'s output. What the factors mean is
//! [`blox_core::variability`]'s.

use blox_core::variability::Variability;
use std::collections::BTreeMap;
use std::path::Path;

/// Reads a factor table for whatever cluster it describes (GPU ids
/// 0..n, each on the node its `Node_ID` says, or node 0): for tables
/// read before the cluster is known (a placement's parameters).
pub fn read_table(path: &Path) -> Result<Variability, String> {
    let file = path.display();
    let text = std::fs::read_to_string(path).map_err(|e| format!("{file}: {e}"))?;
    let mut lines = text.lines();
    let cols: Vec<&str> = lines
        .next()
        .unwrap_or("")
        .split(',')
        .map(str::trim)
        .collect();
    let gpu_col = cols
        .iter()
        .position(|c| *c == "GPU_ID")
        .ok_or_else(|| format!("{file}:1: no `GPU_ID` column"))?;
    let node_col = cols.iter().position(|c| *c == "Node_ID");
    let default_class = cols
        .iter()
        .find_map(|c| c.strip_prefix("PerfVar_"))
        .ok_or_else(|| format!("{file}:1: no `PerfVar_<class>` column"))?
        .to_string();
    let mut node_of: Vec<u32> = Vec::new();
    for (i, l) in lines.enumerate() {
        let cells: Vec<&str> = l.split(',').map(str::trim).collect();
        let (Some(g), n) = (
            cells.get(gpu_col).and_then(|g| g.parse::<usize>().ok()),
            node_col.and_then(|c| cells.get(c)?.parse::<u32>().ok()),
        ) else {
            if l.trim().is_empty() {
                continue;
            }
            return Err(format!("{file}:{}: GPU_ID is not a GPU number", i + 2));
        };
        if g >= 1_000_000 {
            return Err(format!(
                "{file}:{}: GPU_ID {g} is beyond any cluster",
                i + 2
            ));
        }
        if node_of.len() <= g {
            node_of.resize(g + 1, 0);
        }
        node_of[g] = n.unwrap_or(0);
    }
    read_csv(path, &node_of, BTreeMap::new(), default_class)
}

/// Reads a factor table (module docs) for a cluster of `node_of_gpu`
/// (each GPU's node, by GPU id). Errors name the file, line and field,
/// or the node and GPU the table misses.
pub fn read_csv(
    path: &Path,
    node_of_gpu: &[u32],
    class_of_model: BTreeMap<String, String>,
    default_class: String,
) -> Result<Variability, String> {
    let file = path.display();
    let text = std::fs::read_to_string(path).map_err(|e| format!("{file}: {e}"))?;
    let mut lines = text.lines().enumerate();
    let (_, header) = lines.next().ok_or_else(|| {
        format!("{file}: empty (want a header with GPU_ID and PerfVar_<class> columns)")
    })?;
    let cols: Vec<&str> = header.split(',').map(str::trim).collect();
    let gpu_col = cols
        .iter()
        .position(|c| *c == "GPU_ID")
        .ok_or_else(|| format!("{file}:1: no `GPU_ID` column"))?;
    let node_col = cols.iter().position(|c| *c == "Node_ID");
    let class_cols: Vec<(usize, String)> = cols
        .iter()
        .enumerate()
        .filter_map(|(i, c)| Some((i, c.strip_prefix("PerfVar_")?.to_string())))
        .collect();
    if class_cols.is_empty() {
        return Err(format!("{file}:1: no `PerfVar_<class>` column"));
    }
    let n = node_of_gpu.len();
    let mut rows: Vec<Option<Vec<f64>>> = vec![None; n];
    for (i, line) in lines {
        let at = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        let cells: Vec<&str> = line.split(',').map(str::trim).collect();
        if cells.len() != cols.len() {
            return Err(format!(
                "{file}:{at}: {} fields, the header has {}",
                cells.len(),
                cols.len()
            ));
        }
        let gpu: usize = cells[gpu_col].parse().map_err(|_| {
            format!(
                "{file}:{at}: GPU_ID `{}` is not a GPU number",
                cells[gpu_col]
            )
        })?;
        if gpu >= n {
            // A table for a larger cluster serves a smaller one.
            continue;
        }
        if let Some(c) = node_col {
            let node: u32 = cells[c]
                .parse()
                .map_err(|_| format!("{file}:{at}: Node_ID `{}` is not a node number", cells[c]))?;
            if node != node_of_gpu[gpu] {
                return Err(format!(
                    "{file}:{at}: GPU {gpu} is on node {} in this cluster, the table puts it on node {node}",
                    node_of_gpu[gpu]
                ));
            }
        }
        if rows[gpu].is_some() {
            return Err(format!("{file}:{at}: GPU {gpu} listed twice"));
        }
        let mut r = Vec::with_capacity(class_cols.len());
        for (c, class) in &class_cols {
            let f: f64 = cells[*c].parse().map_err(|_| {
                format!(
                    "{file}:{at}: PerfVar_{class} `{}` is not a number",
                    cells[*c]
                )
            })?;
            if !(f.is_finite() && f > 0.0) {
                return Err(format!(
                    "{file}:{at}: PerfVar_{class} = {f} for GPU {gpu}: a slowdown factor must be finite and above 0"
                ));
            }
            r.push(f);
        }
        rows[gpu] = Some(r);
    }
    let found = rows.iter().filter(|r| r.is_some()).count();
    let rows = rows
        .into_iter()
        .enumerate()
        .map(|(g, r)| {
            r.ok_or_else(|| {
                format!(
                    "{file}: no factors for GPU {g} (node {}, GPU {} of it): the table covers {found} of the cluster's {n} GPUs",
                    node_of_gpu[g],
                    node_of_gpu[..g].iter().filter(|x| **x == node_of_gpu[g]).count(),
                )
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let classes = class_cols.into_iter().map(|(_, c)| c).collect();
    Variability::new(classes, rows, class_of_model, default_class)
        .map_err(|e| format!("{file}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use blox_core::GpuId;

    fn write(text: &str) -> tempfile::NamedTempFile {
        use std::io::Write;
        let mut f = tempfile::NamedTempFile::new().unwrap();
        f.write_all(text.as_bytes()).unwrap();
        f
    }

    fn classes() -> BTreeMap<String, String> {
        [("vgg19".to_string(), "classC".to_string())]
            .into_iter()
            .collect()
    }

    #[test]
    fn a_job_runs_at_its_slowest_gpus_pace_for_its_class() {
        let f = write(
            "GPU_ID,Node_ID,PerfVar_classA,PerfVar_classC\n0,0,1.0,1.3\n1,0,1.1,0.9\n2,1,0.95,1.0\n",
        );
        let v = read_csv(f.path(), &[0, 0, 1], classes(), "classA".into()).unwrap();
        assert_eq!(v.class_of(Some("vgg19")), "classC");
        assert_eq!(v.class_of(Some("bert")), "classA");
        assert_eq!(v.class_of(None), "classA");
        assert_eq!(v.slowest(&[GpuId(0), GpuId(1)], "classA"), 1.1);
        assert_eq!(v.slowest(&[GpuId(0), GpuId(1)], "classC"), 1.3);
        assert_eq!(v.slowest(&[GpuId(2)], "classC"), 1.0);
        assert_eq!(v.slowest(&[], "classC"), 1.0);
        assert_eq!(v.column("classC").unwrap(), vec![1.3, 0.9, 1.0]);
    }

    #[test]
    fn bad_tables_are_refused_naming_file_line_node_and_gpu() {
        let cases = [
            (
                "GPU_ID,PerfVar_classA\n0,1.0\n1,0\n",
                "3: PerfVar_classA = 0 for GPU 1",
            ),
            (
                "GPU_ID,PerfVar_classA\n0,1.0\n1,NaN\n",
                "3: PerfVar_classA = NaN",
            ),
            (
                "GPU_ID,PerfVar_classA\n0,1.0\n1,-2\n",
                "must be finite and above 0",
            ),
            (
                "GPU_ID,PerfVar_classA\n0,1.0\n",
                "no factors for GPU 1 (node 1, GPU 0 of it)",
            ),
            (
                "GPU_ID,PerfVar_classA\n0,1.0\n0,1.0\n",
                "3: GPU 0 listed twice",
            ),
            (
                "GPU_ID,PerfVar_classA\n0,1.0\n1,x\n",
                "3: PerfVar_classA `x` is not a number",
            ),
            (
                "GPU_ID,Node_ID,PerfVar_classA\n0,0,1\n1,0,1\n",
                "3: GPU 1 is on node 1",
            ),
            ("GPU,PerfVar_classA\n", "1: no `GPU_ID` column"),
            ("GPU_ID,speed\n", "1: no `PerfVar_<class>` column"),
            (
                "GPU_ID,PerfVar_classA\n0,1.0,2\n",
                "2: 3 fields, the header has 2",
            ),
        ];
        for (text, want) in cases {
            let f = write(text);
            let e = read_csv(f.path(), &[0, 1], BTreeMap::new(), "classA".into()).unwrap_err();
            assert!(e.contains(want), "{text:?}: {e}");
            assert!(e.contains(&f.path().display().to_string()), "{e}");
        }
        // A class a model maps to that the table lacks.
        let f = write("GPU_ID,PerfVar_classA\n0,1.0\n1,1.0\n");
        let e = read_csv(f.path(), &[0, 1], classes(), "classA".into()).unwrap_err();
        assert!(e.contains("class `classC` has no factors"), "{e}");
    }
}
