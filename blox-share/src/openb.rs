//! The openb node and pod lists of Alibaba's 2023 GPU trace
//! (`cluster-trace-gpu-v2023`, vendored under `data/openb/`).
//!
//! A node row is `sn,cpu_milli,memory_mib,gpu,model`; a pod row is
//! `name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec,qos,pod_phase,
//! creation_time,deletion_time,scheduled_time]` (the `multigpu` lists stop
//! after `gpu_milli`). A row that cannot be used is skipped and counted by
//! reason, with its line; a file that cannot be read at all is an error
//! naming it. Pod lists may be gzip-compressed (`.gz`).

use std::collections::{BTreeMap, HashSet};
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

/// One GPU's capacity in thousandths.
pub const GPU_MILLI: u32 = 1000;

/// A node of the cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeSpec {
    /// Its name (`openb-node-0000`).
    pub name: String,
    /// CPU in thousandths of a core.
    pub cpu_milli: i64,
    /// Memory in MiB.
    pub memory_mib: i64,
    /// Number of GPUs, each of [`GPU_MILLI`] thousandths.
    pub gpus: u32,
    /// GPU model (`V100M16`, `T4`, `G2`, …); empty on a node without GPUs.
    pub model: String,
}

/// A task (a pod in the trace).
#[derive(Debug, Clone, PartialEq)]
pub struct TaskSpec {
    /// Its name (`openb-pod-0000`).
    pub name: String,
    /// CPU in thousandths of a core.
    pub cpu_milli: i64,
    /// Memory in MiB.
    pub memory_mib: i64,
    /// GPUs asked for: 0, 1 (perhaps a fraction of it) or several whole ones.
    pub num_gpu: u32,
    /// Thousandths of each GPU (1–1000; 0 when `num_gpu` is 0).
    pub gpu_milli: u32,
    /// GPU models the task may run on; empty means any.
    pub gpu_models: Vec<String>,
    /// Creation and deletion times (seconds), where the list has them.
    pub creation_s: Option<i64>,
    /// See `creation_s`.
    pub deletion_s: Option<i64>,
}

impl TaskSpec {
    /// Thousandths of GPU over all its GPUs.
    pub fn total_gpu_milli(&self) -> i64 {
        self.gpu_milli as i64 * self.num_gpu as i64
    }

    /// Why the task cannot be placed by any policy, if so: a share of one
    /// GPU is 1–1000 thousandths; several GPUs are whole ones (the
    /// reference's scheduler stops on a share of several GPUs); a task with
    /// GPUs asks for some of each.
    pub fn check(&self) -> Result<(), String> {
        if self.num_gpu == 0 {
            if self.gpu_milli != 0 || !self.gpu_models.is_empty() {
                return Err("a GPU share or model on a task with `num_gpu` 0".to_string());
            }
            return Ok(());
        }
        if self.gpu_milli == 0 {
            return Err("`gpu_milli` is 0 on a task with GPUs".to_string());
        }
        if self.gpu_milli > GPU_MILLI {
            return Err(format!("`gpu_milli` is over {GPU_MILLI} (one GPU)"));
        }
        if self.num_gpu > 1 && self.gpu_milli < GPU_MILLI {
            return Err(
                "`gpu_milli` under 1000 on a task of several GPUs (only one GPU can be shared)"
                    .to_string(),
            );
        }
        Ok(())
    }

    /// Whether a node of this GPU model may host it.
    pub fn allows_model(&self, model: &str) -> bool {
        self.gpu_models.is_empty()
            || (!model.is_empty() && self.gpu_models.iter().any(|m| m == model))
    }
}

/// A file that could not be read.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    /// The file is missing or unreadable.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// What failed.
        source: std::io::Error,
    },
    /// Its header lacks a column the format needs.
    #[error("{path}: the header has no `{column}` column (it has: {header})")]
    Column {
        /// The file.
        path: String,
        /// The missing column.
        column: &'static str,
        /// The header as read.
        header: String,
    },
    /// Two nodes share a name.
    #[error("{path} line {line}: node `{name}` is listed twice (first at line {first})")]
    DuplicateNode {
        /// The file.
        path: String,
        /// The second row's line.
        line: usize,
        /// The first row's line.
        first: usize,
        /// The name.
        name: String,
    },
    /// No usable row.
    #[error("{path}: no usable row ({skipped})")]
    Empty {
        /// The file.
        path: String,
        /// What was skipped, by reason.
        skipped: String,
    },
}

/// Rows skipped, by reason, each with the first line it happened on.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Skipped {
    /// Reason → (rows, first line).
    pub by_reason: BTreeMap<String, (usize, usize)>,
}

impl Skipped {
    fn add(&mut self, reason: String, line: usize) {
        let e = self.by_reason.entry(reason).or_insert((0, line));
        e.0 += 1;
    }

    /// Rows skipped in all.
    pub fn total(&self) -> usize {
        self.by_reason.values().map(|(n, _)| n).sum()
    }
}

impl std::fmt::Display for Skipped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.by_reason.is_empty() {
            return write!(f, "none skipped");
        }
        let parts: Vec<String> = self
            .by_reason
            .iter()
            .map(|(r, (n, line))| format!("{n} × {r} (first at line {line})"))
            .collect();
        write!(f, "{}", parts.join("; "))
    }
}

fn open(path: &Path) -> Result<Box<dyn BufRead>, ReadError> {
    let io = |source| ReadError::Io {
        path: path.display().to_string(),
        source,
    };
    let file = std::fs::File::open(path).map_err(io)?;
    let reader: Box<dyn Read> = if path.extension().is_some_and(|e| e == "gz") {
        Box::new(flate2::read::GzDecoder::new(file))
    } else {
        Box::new(file)
    };
    Ok(Box::new(BufReader::new(reader)))
}

/// A CSV with a header, split on commas (the openb lists quote nothing).
struct Rows {
    path: String,
    columns: Vec<String>,
    reader: Box<dyn BufRead>,
    line: usize,
}

/// A row that is not UTF-8, skipped and counted like any unusable row.
const NOT_UTF8: &str = "the row is not UTF-8";

/// Reads one line without its end; `None` at the end of the file.
fn read_line(reader: &mut dyn BufRead, path: &str) -> Result<Option<Vec<u8>>, ReadError> {
    let mut buf = Vec::new();
    let n = reader
        .read_until(b'\n', &mut buf)
        .map_err(|source| ReadError::Io {
            path: path.to_string(),
            source,
        })?;
    if n == 0 {
        return Ok(None);
    }
    while buf.last().is_some_and(|b| *b == b'\n' || *b == b'\r') {
        buf.pop();
    }
    Ok(Some(buf))
}

impl Rows {
    fn new(path: &Path) -> Result<Self, ReadError> {
        let mut reader = open(path)?;
        let name = path.display().to_string();
        let header = read_line(reader.as_mut(), &name)?.unwrap_or_default();
        let header = String::from_utf8_lossy(&header);
        let columns = split_fields(header.trim_start_matches('\u{feff}'));
        Ok(Rows {
            path: name,
            columns,
            reader,
            line: 1,
        })
    }

    fn column(&self, name: &'static str) -> Result<usize, ReadError> {
        self.columns
            .iter()
            .position(|c| c == name)
            .ok_or_else(|| ReadError::Column {
                path: self.path.clone(),
                column: name,
                header: self.columns.join(","),
            })
    }

    fn optional(&self, name: &str) -> Option<usize> {
        self.columns.iter().position(|c| c == name)
    }

    /// The next row's fields (or that it is not UTF-8) and its line, `None`
    /// at the end.
    #[allow(clippy::type_complexity)]
    fn next_row(&mut self) -> Result<Option<(usize, Result<Vec<String>, String>)>, ReadError> {
        loop {
            let Some(bytes) = read_line(self.reader.as_mut(), &self.path)? else {
                return Ok(None);
            };
            self.line += 1;
            let Ok(text) = String::from_utf8(bytes) else {
                return Ok(Some((self.line, Err(NOT_UTF8.to_string()))));
            };
            if text.trim().is_empty() {
                continue;
            }
            let fields = split_fields(&text);
            return Ok(Some((self.line, Ok(fields))));
        }
    }
}

/// One line's fields, split by the `csv` crate (quotes allowed), trimmed.
/// Lines are read here rather than by `csv::Reader`, whose record positions
/// are a line short after a CRLF header or a blank line: the skipped rows'
/// lines must be right.
fn split_fields(text: &str) -> Vec<String> {
    if !text.contains('"') {
        // No quotes (every row of the published lists): the same fields,
        // without a reader per line.
        return text.split(',').map(|f| f.trim().to_string()).collect();
    }
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .trim(csv::Trim::All)
        .from_reader(text.as_bytes());
    let mut record = csv::StringRecord::new();
    match reader.read_record(&mut record) {
        Ok(true) => record.iter().map(str::to_string).collect(),
        // An unclosed quote and the like: the line's plain fields, which the
        // row's checks then refuse where they do not parse.
        _ => text.split(',').map(|f| f.trim().to_string()).collect(),
    }
}

fn field(row: &[String], i: usize) -> &str {
    row.get(i).map(String::as_str).unwrap_or("")
}

fn int(row: &[String], i: usize, name: &str) -> Result<i64, String> {
    let text = field(row, i);
    if text.is_empty() {
        return Err(format!("`{name}` is empty"));
    }
    let v: i64 = text
        .parse()
        .map_err(|_| format!("`{name}` is not an integer"))?;
    if v < 0 {
        return Err(format!("`{name}` is negative"));
    }
    Ok(v)
}

/// Reads a node list. Duplicate names are an error; unusable rows are skipped.
pub fn read_nodes(path: &Path) -> Result<(Vec<NodeSpec>, Skipped), ReadError> {
    let mut rows = Rows::new(path)?;
    let (sn, cpu, mem, gpu, model) = (
        rows.column("sn")?,
        rows.column("cpu_milli")?,
        rows.column("memory_mib")?,
        rows.column("gpu")?,
        rows.column("model")?,
    );
    let mut nodes = Vec::new();
    let mut skipped = Skipped::default();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    while let Some((line, row)) = rows.next_row()? {
        let parsed = row.and_then(|row| {
            let name = field(&row, sn).to_string();
            if name.is_empty() {
                return Err("`sn` is empty".to_string());
            }
            let gpus = int(&row, gpu, "gpu")?;
            if gpus > 64 {
                return Err("`gpu` is over 64".to_string());
            }
            let model = field(&row, model).to_string();
            if gpus > 0 && model.is_empty() {
                return Err("`model` is empty on a node with GPUs".to_string());
            }
            Ok(NodeSpec {
                name,
                cpu_milli: int(&row, cpu, "cpu_milli")?,
                memory_mib: int(&row, mem, "memory_mib")?,
                gpus: gpus as u32,
                model,
            })
        });
        match parsed {
            Ok(node) => {
                if let Some(&first) = seen.get(&node.name) {
                    return Err(ReadError::DuplicateNode {
                        path: rows.path.clone(),
                        line,
                        first,
                        name: node.name,
                    });
                }
                seen.insert(node.name.clone(), line);
                nodes.push(node);
            }
            Err(reason) => skipped.add(reason, line),
        }
    }
    if nodes.is_empty() {
        return Err(ReadError::Empty {
            path: rows.path,
            skipped: skipped.to_string(),
        });
    }
    Ok((nodes, skipped))
}

/// Reads a pod list against the cluster's nodes: a row asking for more than
/// one GPU's thousandths of one GPU, for a GPU model no node has, or with a
/// negative or absent field is skipped and counted.
pub fn read_tasks(path: &Path, nodes: &[NodeSpec]) -> Result<(Vec<TaskSpec>, Skipped), ReadError> {
    let (tasks, skipped) = read_tasks_at(path, nodes)?;
    Ok((tasks.into_iter().map(|(_, t)| t).collect(), skipped))
}

/// [`read_tasks`], each task with its line in the file.
pub fn read_tasks_at(
    path: &Path,
    nodes: &[NodeSpec],
) -> Result<(Vec<(usize, TaskSpec)>, Skipped), ReadError> {
    let mut rows = Rows::new(path)?;
    let (name_c, cpu, mem, num, milli) = (
        rows.column("name")?,
        rows.column("cpu_milli")?,
        rows.column("memory_mib")?,
        rows.column("num_gpu")?,
        rows.column("gpu_milli")?,
    );
    let (spec, created, deleted) = (
        rows.optional("gpu_spec"),
        rows.optional("creation_time"),
        rows.optional("deletion_time"),
    );
    let models: HashSet<&str> = nodes
        .iter()
        .filter(|n| n.gpus > 0)
        .map(|n| n.model.as_str())
        .collect();
    let mut tasks = Vec::new();
    let mut skipped = Skipped::default();
    let mut names = HashSet::new();
    while let Some((line, row)) = rows.next_row()? {
        let parsed = row.and_then(|row| {
            let name = field(&row, name_c).to_string();
            if name.is_empty() {
                return Err("`name` is empty".to_string());
            }
            if names.contains(&name) {
                return Err("`name` repeats an earlier task".to_string());
            }
            let num_gpu = int(&row, num, "num_gpu")?;
            let gpu_milli = int(&row, milli, "gpu_milli")?;
            if gpu_milli > GPU_MILLI as i64 {
                return Err(format!("`gpu_milli` is over {GPU_MILLI} (one GPU)"));
            }
            if num_gpu > 64 {
                return Err("`num_gpu` is over 64".to_string());
            }
            let gpu_models: Vec<String> = match spec {
                Some(i) if num_gpu > 0 => field(&row, i)
                    .split('|')
                    .filter(|m| !m.is_empty())
                    .map(str::to_string)
                    .collect(),
                _ => Vec::new(),
            };
            if !gpu_models.is_empty() && !gpu_models.iter().any(|m| models.contains(m.as_str())) {
                return Err("`gpu_spec` names only GPU models no node has".to_string());
            }
            let time = |c: Option<usize>, n: &str| match c.map(|i| field(&row, i)) {
                None | Some("") => Ok(None),
                Some(_) => int(&row, c.unwrap(), n).map(Some),
            };
            let (creation_s, deletion_s) = (
                time(created, "creation_time")?,
                time(deleted, "deletion_time")?,
            );
            if let (Some(c), Some(d)) = (creation_s, deletion_s) {
                if d < c {
                    return Err("`deletion_time` is before `creation_time`".to_string());
                }
            }
            let task = TaskSpec {
                name,
                cpu_milli: int(&row, cpu, "cpu_milli")?,
                memory_mib: int(&row, mem, "memory_mib")?,
                num_gpu: num_gpu as u32,
                gpu_milli: if num_gpu == 0 { 0 } else { gpu_milli as u32 },
                gpu_models,
                creation_s,
                deletion_s,
            };
            task.check()?;
            Ok(task)
        });
        match parsed {
            Ok(task) => {
                names.insert(task.name.clone());
                tasks.push((line, task))
            }
            Err(reason) => skipped.add(reason, line),
        }
    }
    if tasks.is_empty() {
        return Err(ReadError::Empty {
            path: rows.path,
            skipped: skipped.to_string(),
        });
    }
    Ok((tasks, skipped))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(dir: &tempfile::TempDir, name: &str, text: &str) -> std::path::PathBuf {
        let p = dir.path().join(name);
        std::fs::write(&p, text).unwrap();
        p
    }

    const NODES: &str =
        "sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,2,T4\nn1,32000,131072,0,\n";

    #[test]
    fn duplicate_node_names_are_refused_naming_both_lines() {
        let d = tempfile::tempdir().unwrap();
        let p = file(&d, "nodes.csv", &format!("{NODES}n0,1000,1,1,T4\n"));
        let e = read_nodes(&p).unwrap_err().to_string();
        assert!(
            e.contains("line 4") && e.contains("`n0`") && e.contains("first at line 2"),
            "{e}"
        );
    }

    #[test]
    fn bad_task_rows_are_counted_by_reason_and_the_rest_kept() {
        let d = tempfile::tempdir().unwrap();
        let (nodes, skipped) = read_nodes(&file(&d, "nodes.csv", NODES)).unwrap();
        assert_eq!((nodes.len(), skipped.total()), (2, 0));
        let pods = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n\
                    ok-share,4000,1024,1,460,\n\
                    too-much,4000,1024,1,1500,\n\
                    negative,4000,1024,1,-5,\n\
                    absent,4000,1024,1,,\n\
                    unknown-model,4000,1024,1,1000,A100|H100\n\
                    ok-model,4000,1024,2,1000,V100|T4\n\
                    ok-cpu,2000,0,0,0,\n\
                    ok-share,1,1,0,0,\n";
        let (tasks, skipped) = read_tasks(&file(&d, "pods.csv", pods), &nodes).unwrap();
        let names: Vec<&str> = tasks.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["ok-share", "ok-model", "ok-cpu"]);
        assert_eq!(tasks[1].gpu_models, ["V100", "T4"]);
        assert!(tasks[1].allows_model("T4") && !tasks[1].allows_model("G2"));
        let reasons: Vec<(&str, usize, usize)> = skipped
            .by_reason
            .iter()
            .map(|(r, (n, line))| (r.as_str(), *n, *line))
            .collect();
        assert_eq!(
            reasons,
            [
                ("`gpu_milli` is empty", 1, 5),
                ("`gpu_milli` is negative", 1, 4),
                ("`gpu_milli` is over 1000 (one GPU)", 1, 3),
                ("`gpu_spec` names only GPU models no node has", 1, 6),
                ("`name` repeats an earlier task", 1, 9),
            ]
        );
    }

    #[test]
    fn a_missing_column_or_file_is_an_error_naming_it() {
        let d = tempfile::tempdir().unwrap();
        let p = file(
            &d,
            "pods.csv",
            "name,cpu_milli,num_gpu,gpu_milli\nx,1,0,0\n",
        );
        let nodes = read_nodes(&file(&d, "nodes.csv", NODES)).unwrap().0;
        let e = read_tasks(&p, &nodes).unwrap_err().to_string();
        assert!(e.contains("memory_mib") && e.contains("pods.csv"), "{e}");
        let e = read_nodes(&d.path().join("none.csv"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("none.csv"), "{e}");
        let e = read_tasks(
            &file(
                &d,
                "empty.csv",
                "name,cpu_milli,memory_mib,num_gpu,gpu_milli\n",
            ),
            &nodes,
        )
        .unwrap_err()
        .to_string();
        assert!(e.contains("no usable row"), "{e}");
    }

    #[test]
    fn a_bom_a_row_not_utf8_and_a_bad_row_before_a_good_one_of_the_same_name() {
        let d = tempfile::tempdir().unwrap();
        let (nodes, _) = read_nodes(&file(&d, "nodes.csv", NODES)).unwrap();
        let mut bytes = "\u{feff}name,cpu_milli,memory_mib,num_gpu,gpu_milli\r\n"
            .as_bytes()
            .to_vec();
        bytes.extend_from_slice(b"a,1000,1,1,-5\r\n");
        bytes.extend_from_slice(b"x\xff\xfe,1000,1,1,500\r\n");
        bytes.extend_from_slice(b"a,1000,1,1,500\r\n");
        bytes.extend_from_slice(b"b,1000,1,2,500\r\n");
        bytes.extend_from_slice(b"c,1000,1,1,0\r\n");
        let p = d.path().join("pods.csv");
        std::fs::write(&p, bytes).unwrap();
        let (tasks, skipped) = read_tasks(&p, &nodes).unwrap();
        // The bad `a` does not hide the good one after it.
        assert_eq!(
            tasks.iter().map(|t| t.name.as_str()).collect::<Vec<_>>(),
            ["a"]
        );
        let reasons: Vec<(&str, usize)> = skipped
            .by_reason
            .iter()
            .map(|(r, (_, line))| (r.as_str(), *line))
            .collect();
        assert_eq!(
            reasons,
            [
                ("`gpu_milli` is 0 on a task with GPUs", 6),
                ("`gpu_milli` is negative", 2),
                (
                    "`gpu_milli` under 1000 on a task of several GPUs (only one GPU can be shared)",
                    5
                ),
                ("the row is not UTF-8", 3),
            ]
        );
    }

    #[test]
    fn a_quoted_field_keeps_its_comma() {
        let d = tempfile::tempdir().unwrap();
        let (nodes, _) = read_nodes(&file(&d, "nodes.csv", NODES)).unwrap();
        let p = file(
            &d,
            "pods.csv",
            "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n\"job, one\",1000,1,1,500,\"T4\"\n",
        );
        let (tasks, skipped) = read_tasks(&p, &nodes).unwrap();
        assert_eq!(skipped.total(), 0, "{skipped}");
        assert_eq!(
            (tasks[0].name.as_str(), tasks[0].gpu_models.clone()),
            ("job, one", vec!["T4".to_string()])
        );
    }
}
