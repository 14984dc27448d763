//! Ended jobs' metrics, end to end in two columns (key number, value),
//! each job's run found through an index by id. A ten-million-job run
//! archives every job: an entry costs 12 bytes and a job's place in the
//! index 8 (where a table of `(name, value)` pairs and a hash index by id
//! cost about 70 bytes a job).

use super::{Key, Metrics};
use crate::ids::JobId;
use rustc_hash::FxHashMap;
use std::collections::BTreeMap;

/// Where a job's run lies: its first entry and its length.
type Run = (u32, u32);

/// No run at this place of the dense index.
const ABSENT: Run = (u32::MAX, 0);

#[derive(Clone, Debug, Default)]
pub(super) struct Archive {
    /// The distinct names archived, numbered by place (a handful per run).
    names: Vec<Key>,
    /// A name's number, once there are too many names to search in turn.
    numbers: FxHashMap<Box<str>, u32>,
    /// Each entry's name number and value.
    keys: Vec<u32>,
    values: Vec<f64>,
    /// Runs by id, for ids below a few times the jobs archived (a trace's
    /// ids, which count up from zero) ...
    dense: Vec<Run>,
    /// ... and by hash for any other id.
    sparse: FxHashMap<JobId, (usize, usize)>,
    /// Jobs archived, and entries of runs taken out (kept until compaction).
    jobs: usize,
    holes: usize,
}

/// One archived job's metrics.
#[derive(Clone, Copy)]
pub(super) struct ArchivedRun<'a> {
    names: &'a [Key],
    keys: &'a [u32],
    values: &'a [f64],
}

impl ArchivedRun<'_> {
    pub(super) fn len(&self) -> usize {
        self.keys.len()
    }

    pub(super) fn get(&self, key: &str) -> Option<f64> {
        self.keys
            .iter()
            .position(|&k| self.names[k as usize].is(key))
            .map(|i| self.values[i])
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (&Key, f64)> + '_ {
        self.keys
            .iter()
            .zip(self.values)
            .map(|(&k, &v)| (&self.names[k as usize], v))
    }

    pub(super) fn to_map(self) -> BTreeMap<String, f64> {
        self.iter()
            .map(|(k, v)| (k.as_str().to_string(), v))
            .collect()
    }
}

/// Names searched in turn up to this many; past it, by hash.
const NAMES_SEARCHED: usize = 32;

impl Archive {
    fn run(&self, job: JobId) -> Option<(usize, usize)> {
        match usize::try_from(job.0).ok().and_then(|i| self.dense.get(i)) {
            Some(&(at, n)) if (at, n) != ABSENT => Some((at as usize, n as usize)),
            _ => self.sparse.get(&job).copied(),
        }
    }

    fn view(&self, at: usize, n: usize) -> ArchivedRun<'_> {
        ArchivedRun {
            names: &self.names,
            keys: &self.keys[at..at + n],
            values: &self.values[at..at + n],
        }
    }

    pub(super) fn slice(&self, job: JobId) -> Option<ArchivedRun<'_>> {
        self.run(job).map(|(at, n)| self.view(at, n))
    }

    #[cfg(test)]
    pub(super) fn contains(&self, job: JobId) -> bool {
        self.run(job).is_some()
    }

    /// The number of `key`, added if new.
    fn number(&mut self, key: &Key) -> u32 {
        let s = key.as_str();
        let found = if self.names.len() <= NAMES_SEARCHED {
            self.names.iter().position(|k| k.is(s)).map(|i| i as u32)
        } else {
            self.numbers.get(s).copied()
        };
        found.unwrap_or_else(|| {
            let n = self.names.len() as u32;
            self.names.push(key.clone());
            self.numbers.insert(s.into(), n);
            n
        })
    }

    /// Records where `job`'s run lies: in the dense index when its id is
    /// small enough for the jobs archived and the place fits, else by hash.
    fn place(&mut self, job: JobId, at: usize, n: usize) {
        let bound = 4 * (self.jobs as u64 + 16_384);
        let fits = u32::try_from(at + n).is_ok_and(|end| end < u32::MAX);
        if job.0 < bound && fits {
            let i = job.0 as usize;
            if self.dense.len() <= i {
                self.dense.resize(i + 1, ABSENT);
            }
            self.dense[i] = (at as u32, n as u32);
        } else {
            self.sparse.insert(job, (at, n));
        }
    }

    pub(super) fn put(&mut self, job: JobId, m: Metrics) {
        self.take(job);
        let at = self.keys.len();
        let n = m.0.len();
        for (k, v) in &m.0 {
            let number = self.number(k);
            self.keys.push(number);
            self.values.push(*v);
        }
        self.place(job, at, n);
        self.jobs += 1;
    }

    pub(super) fn take(&mut self, job: JobId) -> Option<Metrics> {
        let (at, n) = self.run(job)?;
        match usize::try_from(job.0)
            .ok()
            .and_then(|i| self.dense.get_mut(i))
        {
            Some(r) if *r != ABSENT => *r = ABSENT,
            _ => {
                self.sparse.remove(&job);
            }
        }
        let m = Metrics(
            self.view(at, n)
                .iter()
                .map(|(k, v)| (k.clone(), v))
                .collect(),
        );
        // The run's place stays until compaction.
        self.jobs -= 1;
        self.holes += n;
        if self.holes > 1024 && self.holes * 2 > self.keys.len() {
            self.compact();
        }
        Some(m)
    }

    /// Every job's run, in no particular order.
    fn runs(&self) -> Vec<(JobId, usize, usize)> {
        let dense = self
            .dense
            .iter()
            .enumerate()
            .filter(|(_, r)| **r != ABSENT)
            .map(|(i, &(at, n))| (JobId(i as u64), at as usize, n as usize));
        let sparse = self.sparse.iter().map(|(j, &(at, n))| (*j, at, n));
        dense.chain(sparse).collect()
    }

    fn compact(&mut self) {
        let mut runs = self.runs();
        runs.sort_unstable_by_key(|r| r.1);
        let live = self.keys.len() - self.holes;
        let (mut keys, mut values) = (Vec::with_capacity(live), Vec::with_capacity(live));
        self.dense.clear();
        self.sparse.clear();
        for (job, at, n) in runs {
            let to = keys.len();
            keys.extend_from_slice(&self.keys[at..at + n]);
            values.extend_from_slice(&self.values[at..at + n]);
            self.place(job, to, n);
        }
        self.keys = keys;
        self.values = values;
        self.holes = 0;
    }

    pub(super) fn iter(&self) -> impl Iterator<Item = (JobId, ArchivedRun<'_>)> + '_ {
        self.runs()
            .into_iter()
            .map(|(j, at, n)| (j, self.view(at, n)))
    }

    /// Entries held, holes included.
    #[cfg(test)]
    pub(super) fn entries(&self) -> usize {
        self.keys.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metrics(pairs: &[(&'static str, f64)]) -> Metrics {
        Metrics(pairs.iter().map(|&(k, v)| (Key::Static(k), v)).collect())
    }

    #[test]
    fn runs_by_small_and_large_ids_read_back_and_survive_compaction() {
        let mut a = Archive::default();
        let far = JobId(u64::MAX - 3);
        let ids: Vec<JobId> = (0..5000u64)
            .map(JobId)
            .chain([JobId(1 << 40), far])
            .collect();
        for (i, &j) in ids.iter().enumerate() {
            a.put(j, metrics(&[("a", i as f64), ("b", 2.0 * i as f64)]));
        }
        assert!(a.sparse.contains_key(&far) && a.sparse.contains_key(&JobId(1 << 40)));
        assert_eq!(a.slice(far).map(|r| r.get("b")), Some(Some(2.0 * 5001.0)));
        // Most runs taken out: the columns are compacted, the rest intact.
        for j in 0..4000u64 {
            let m = a.take(JobId(j)).expect("archived");
            assert_eq!(m.get("a"), Some(&(j as f64)));
        }
        assert!(a.entries() < 5000, "{} entries", a.entries());
        assert!(a.take(JobId(3)).is_none() && !a.contains(JobId(3)));
        for (i, &j) in ids.iter().enumerate().skip(4000) {
            let r = a.slice(j).expect("kept");
            assert_eq!((r.len(), r.get("a"), r.get("c")), (2, Some(i as f64), None));
        }
        assert_eq!(a.iter().count(), ids.len() - 4000);
        // Written again: put replaces, never duplicates.
        a.put(far, metrics(&[("c", 1.0)]));
        assert_eq!(a.slice(far).map(|r| r.to_map().len()), Some(1));
    }

    #[test]
    fn many_names_are_numbered_by_hash_and_found_again() {
        let mut a = Archive::default();
        for j in 0..100u64 {
            let name = format!("speed.type{j}");
            let mut m = Metrics::default();
            m.insert(name, j as f64);
            m.insert("shared".to_string(), 1.0);
            a.put(JobId(j), m);
        }
        assert_eq!(a.names.len(), 101);
        for j in 0..100u64 {
            let r = a.slice(JobId(j)).unwrap();
            assert_eq!(r.get(&format!("speed.type{j}")), Some(j as f64));
            assert_eq!(r.get("shared"), Some(1.0));
        }
    }

    proptest::proptest! {
        /// Any sequence of archiving and taking back, with ids small and
        /// huge, reads back exactly what a plain map of each job's
        /// metrics holds, compactions included.
        #[test]
        fn the_archive_reads_back_what_a_map_holds(
            ops in proptest::collection::vec(
                (proptest::bool::ANY, 0u64..3000, 0u8..4, proptest::bool::ANY),
                0..3000,
            ),
        ) {
            let names = ["a", "b", "c", "d"];
            let mut a = Archive::default();
            let mut model: BTreeMap<JobId, Vec<(&str, f64)>> = BTreeMap::new();
            for (i, &(put, id, keys, far)) in ops.iter().enumerate() {
                let job = JobId(if far { u64::MAX - id } else { id });
                if put {
                    let m: Vec<(&'static str, f64)> =
                        names[..keys as usize].iter().map(|&k| (k, i as f64)).collect();
                    a.put(job, metrics(&m));
                    model.insert(job, m);
                } else {
                    let got = a.take(job).map(|m| m.0.len());
                    proptest::prop_assert_eq!(got, model.remove(&job).map(|m| m.len()));
                }
            }
            proptest::prop_assert_eq!(a.iter().count(), model.len());
            for (job, m) in &model {
                let r = a.slice(*job).expect("archived");
                proptest::prop_assert_eq!(r.len(), m.len());
                for (k, v) in m {
                    proptest::prop_assert_eq!(r.get(k), Some(*v));
                }
            }
        }
    }
}
