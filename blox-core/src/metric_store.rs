//! The per-job metric store: a key→value table of every job's metrics
//! (loss, gradient noise scale, throughput fits, …), shared between the
//! round loop and the threads that report metrics (behind one lock, held
//! for a lookup at a time).
//!
//! Jobs that have ended are *archived*: their metrics stay readable but
//! move out of the table that running jobs' metrics are written to every
//! round, into compact columns (`metric_store/archive.rs`). The table a
//! simulator updates for its thousands of running jobs then stays the size
//! of what runs, not of everything that ever ran, and an ended job costs 8
//! bytes and 12 a metric instead of a table entry and an allocation (a
//! ten-million-job run).

use crate::ids::JobId;
use archive::{Archive, ArchivedRun};
use rustc_hash::FxHashMap;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};

mod archive;

/// Per-job key→value metrics.
///
/// Cloning a `MetricStore` shares it (it is a handle); an RPC thread can push into
/// it while a round runs. [`crate::JobState::fork`] deep-copies it.
///
/// The table written every round and the archive sit behind one lock, so a
/// job is always in exactly one of the two, whoever looks.
#[derive(Clone, Debug, Default)]
pub struct MetricStore {
    inner: Arc<Mutex<Tables>>,
    /// What the policies read and what a backend leaves out.
    reads: Arc<Reads>,
}

/// The metrics of jobs that may still change, and ended jobs' metrics.
#[derive(Clone, Debug, Default)]
struct Tables {
    /// Fx hashing: keys are small and trusted, and the simulator updates a few
    /// metrics of every running job every round.
    live: FxHashMap<JobId, Metrics>,
    /// Ended jobs' metrics ([`MetricStore::archive`]).
    archive: Archive,
}

impl Tables {
    /// `job`'s metrics to change, brought back from the archive if it was
    /// there.
    fn entry(&mut self, job: JobId) -> &mut Metrics {
        let Tables { live, archive } = self;
        live.entry(job)
            .or_insert_with(|| archive.take(job).unwrap_or_default())
    }

    /// `job`'s metrics wherever they are.
    fn find(&self, job: JobId) -> Option<Found<'_>> {
        match self.live.get(&job) {
            Some(m) => Some(Found::Live(&m.0)),
            None => self.archive.slice(job).map(Found::Archived),
        }
    }
}

/// A job's metrics, in the table written every round or in the archive.
enum Found<'a> {
    Live(&'a [(Key, f64)]),
    Archived(ArchivedRun<'a>),
}

impl Found<'_> {
    fn len(&self) -> usize {
        match self {
            Found::Live(m) => m.len(),
            Found::Archived(r) => r.len(),
        }
    }

    fn get(&self, key: &str) -> Option<f64> {
        match self {
            Found::Live(m) => find(m, key),
            Found::Archived(r) => r.get(key),
        }
    }

    fn to_map(&self) -> BTreeMap<String, f64> {
        match self {
            Found::Live(m) => to_map(m),
            Found::Archived(r) => r.to_map(),
        }
    }
}

/// Metrics on demand: the keys the loop's policies declare they
/// read, the per-round keys a backend leaves out because none of them does,
/// and the first read that would have needed one.
#[derive(Debug, Default)]
struct Reads {
    /// `None`: not declared (every key counts as read).
    declared: RwLock<Option<Vec<&'static str>>>,
    withheld: RwLock<&'static [&'static str]>,
    /// `withheld` is not empty (the read path's one check).
    withholding: AtomicBool,
    /// The first read of a withheld key that found nothing, by job.
    missed: Mutex<Option<(JobId, String)>>,
    missed_any: AtomicBool,
}

impl Reads {
    fn copy(&self) -> Reads {
        let r = Reads::default();
        *r.declared.write().unwrap_or_else(|e| e.into_inner()) = self
            .declared
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let w = *self.withheld.read().unwrap_or_else(|e| e.into_inner());
        *r.withheld.write().unwrap_or_else(|e| e.into_inner()) = w;
        r.withholding.store(!w.is_empty(), Ordering::Relaxed);
        r
    }
}

/// One job's metrics. A job has a handful of keys, and the simulator sets a
/// few of every running job's each round: a linear search (length first,
/// then bytes) beats hashing the key here.
#[derive(Clone, Debug, Default)]
struct Metrics(Vec<(Key, f64)>);

/// A metric's name: a literal the caller promised to keep passing (found by
/// address before bytes are compared), or an owned copy.
#[derive(Clone, Debug)]
enum Key {
    Static(&'static str),
    Owned(Box<str>),
}

impl Key {
    fn as_str(&self) -> &str {
        match self {
            Key::Static(s) => s,
            Key::Owned(s) => s,
        }
    }

    /// Whether this is `key`: length first, then the literal's address,
    /// then bytes.
    fn is(&self, key: &str) -> bool {
        let k = self.as_str();
        k.len() == key.len() && (std::ptr::eq(k.as_ptr(), key.as_ptr()) || k == key)
    }
}

impl Metrics {
    fn position(&self, key: &str) -> Option<usize> {
        self.0.iter().position(|(k, _)| k.is(key))
    }

    fn get(&self, key: &str) -> Option<&f64> {
        self.position(key).map(|i| &self.0[i].1)
    }

    fn get_mut(&mut self, key: &str) -> Option<&mut f64> {
        self.position(key).map(|i| &mut self.0[i].1)
    }

    fn insert(&mut self, key: String, value: f64) {
        match self.get_mut(&key) {
            Some(v) => *v = value,
            None => self.0.push((Key::Owned(key.into_boxed_str()), value)),
        }
    }

    fn remove(&mut self, key: &str) {
        if let Some(i) = self.position(key) {
            self.0.swap_remove(i);
        }
    }

    fn iter(&self) -> impl Iterator<Item = (String, f64)> + '_ {
        self.0.iter().map(|(k, v)| (k.as_str().to_string(), *v))
    }
}

impl FromIterator<(String, f64)> for Metrics {
    fn from_iter<I: IntoIterator<Item = (String, f64)>>(iter: I) -> Self {
        let mut m = Metrics::default();
        for (k, v) in iter {
            m.insert(k, v);
        }
        m
    }
}

fn find(m: &[(Key, f64)], key: &str) -> Option<f64> {
    m.iter().find(|(k, _)| k.is(key)).map(|(_, v)| *v)
}

fn to_map(m: &[(Key, f64)]) -> BTreeMap<String, f64> {
    m.iter()
        .map(|(k, v)| (k.as_str().to_string(), *v))
        .collect()
}

impl MetricStore {
    /// The tables (a panic elsewhere while they were held leaves them
    /// whole: every change under the lock is one assignment or push).
    fn tables(&self) -> std::sync::MutexGuard<'_, Tables> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Sets `key` of job `job` to `value`.
    pub fn set(&self, job: JobId, key: &str, value: f64) {
        let mut t = self.tables();
        let m = t.entry(job);
        // No allocation when the key is already there (the common case).
        match m.get_mut(key) {
            Some(v) => *v = value,
            None => {
                m.insert(key.to_owned(), value);
            }
        }
    }

    /// Several changes to one job's metrics under one lookup (what a
    /// backend reporting a handful of metrics for every running job each
    /// round wants): `f` gets that job's metrics. `f` must not use the
    /// store itself.
    pub fn update<R>(&self, job: JobId, f: impl FnOnce(&mut JobMetrics<'_>) -> R) -> R {
        let mut t = self.tables();
        f(&mut JobMetrics(t.entry(job)))
    }

    /// Adds `delta` to `key` (missing = 0).
    pub fn add(&self, job: JobId, key: &str, delta: f64) {
        let mut t = self.tables();
        let m = t.entry(job);
        match m.get_mut(key) {
            Some(v) => *v += delta,
            None => {
                m.insert(key.to_owned(), delta);
            }
        }
    }

    /// Forgets `key` of job `job` (a metric that no longer holds).
    pub fn remove(&self, job: JobId, key: &str) {
        let mut t = self.tables();
        if t.find(job).is_some() {
            t.entry(job).remove(key);
        }
    }

    /// Moves an ended job's metrics out of the table written every round
    /// into the compact archive; they stay readable, and a later write
    /// brings them back.
    pub fn archive(&self, job: JobId) {
        let mut t = self.tables();
        if let Some(m) = t.live.remove(&job) {
            t.archive.put(job, m);
        }
    }

    /// Reads `job`'s metrics wherever they are.
    fn read<R>(&self, job: JobId, f: impl Fn(&Found<'_>) -> R) -> Option<R> {
        self.tables().find(job).map(|m| f(&m))
    }

    /// How many keys job `job` has.
    pub fn key_count(&self, job: JobId) -> usize {
        self.read(job, |m| m.len()).unwrap_or(0)
    }

    pub fn get(&self, job: JobId, key: &str) -> Option<f64> {
        let v = self.read(job, |m| m.get(key)).flatten();
        if v.is_none() && self.reads.withholding.load(Ordering::Relaxed) {
            self.note_missed(job, key);
        }
        v
    }

    /// Declares the keys the loop's policies read (their `metrics_read()`
    /// names, families included); `None` when that is not known, so that
    /// every key counts as read. The round loop sets it every round.
    pub fn declare_reads(&self, keys: Option<Vec<&'static str>>) {
        *self
            .reads
            .declared
            .write()
            .unwrap_or_else(|e| e.into_inner()) = keys;
    }

    /// Whether a policy of the loop declares it reads `key` (true when the
    /// reads are not declared).
    pub fn is_read(&self, key: &str) -> bool {
        match &*self
            .reads
            .declared
            .read()
            .unwrap_or_else(|e| e.into_inner())
        {
            None => true,
            Some(names) => names.iter().any(|n| crate::metric::covers(n, key)),
        }
    }

    /// A backend says which keys it leaves out of the store because no
    /// policy reads them (`&[]`: none). A read of one of them that finds
    /// nothing is kept for [`MetricStore::take_undeclared_read`], so a
    /// policy that reads a metric it does not declare is stopped, not
    /// left reading nothing.
    pub fn withhold(&self, keys: &'static [&'static str]) {
        let mut w = self
            .reads
            .withheld
            .write()
            .unwrap_or_else(|e| e.into_inner());
        *w = keys;
        self.reads
            .withholding
            .store(!keys.is_empty(), Ordering::Relaxed);
    }

    fn note_missed(&self, job: JobId, key: &str) {
        let withheld = *self
            .reads
            .withheld
            .read()
            .unwrap_or_else(|e| e.into_inner());
        if withheld.contains(&key) {
            let mut m = self.reads.missed.lock().unwrap_or_else(|e| e.into_inner());
            if m.is_none() {
                *m = Some((job, key.to_string()));
                self.reads.missed_any.store(true, Ordering::Release);
            }
        }
    }

    /// The first read of a withheld key since the last call (which job,
    /// which key), if any: a policy read a metric it does not declare.
    pub fn take_undeclared_read(&self) -> Option<(JobId, String)> {
        if !self.reads.missed_any.swap(false, Ordering::Acquire) {
            return None;
        }
        self.reads
            .missed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }

    /// All metrics of one job, sorted by key.
    pub fn of_job(&self, job: JobId) -> BTreeMap<String, f64> {
        self.read(job, |m| m.to_map()).unwrap_or_default()
    }

    pub fn remove_job(&self, job: JobId) -> BTreeMap<String, f64> {
        let mut t = self.tables();
        if let Some(m) = t.live.remove(&job) {
            return m.iter().collect();
        }
        t.archive
            .take(job)
            .map(|m| m.iter().collect())
            .unwrap_or_default()
    }

    fn snapshot(&self) -> BTreeMap<JobId, BTreeMap<String, f64>> {
        let t = self.tables();
        let mut out: BTreeMap<JobId, BTreeMap<String, f64>> = t
            .live
            .iter()
            .map(|(job, m)| (*job, m.iter().collect()))
            .collect();
        for (job, m) in t.archive.iter() {
            out.entry(job).or_insert_with(|| m.to_map());
        }
        out
    }

    /// A new, independent store with the same contents.
    pub fn deep_clone(&self) -> Self {
        MetricStore {
            inner: Arc::new(Mutex::new(self.tables().clone())),
            reads: Arc::new(self.reads.copy()),
        }
    }
}

/// One job's metrics, inside [`MetricStore::update`].
pub struct JobMetrics<'a>(&'a mut Metrics);

impl JobMetrics<'_> {
    /// Sets `key` to `value` (no allocation when the key is already there).
    pub fn set(&mut self, key: &str, value: f64) {
        match self.0.get_mut(key) {
            Some(v) => *v = value,
            None => {
                self.0.insert(key.to_owned(), value);
            }
        }
    }

    /// [`JobMetrics::set`] for a name that is a string literal: found by its
    /// address, without comparing bytes, when the same literal is passed
    /// again (a backend setting a few metrics of every running job every
    /// round).
    pub fn set_static(&mut self, key: &'static str, value: f64) {
        match self.0.get_mut(key) {
            Some(v) => *v = value,
            None => self.0 .0.push((Key::Static(key), value)),
        }
    }

    /// Forgets `key`.
    pub fn remove(&mut self, key: &str) {
        self.0.remove(key);
    }

    pub fn get(&self, key: &str) -> Option<f64> {
        self.0.get(key).copied()
    }
}

impl Serialize for MetricStore {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.snapshot().serialize(s)
    }
}

impl<'de> Deserialize<'de> for MetricStore {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let snap = BTreeMap::<JobId, HashMap<String, f64>>::deserialize(d)?;
        let out = MetricStore::default();
        out.tables().live = snap
            .into_iter()
            .map(|(k, v)| (k, v.into_iter().collect()))
            .collect();
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_archived_jobs_metrics_stay_readable_and_come_back_when_written() {
        let store = MetricStore::default();
        for j in 0..3000u64 {
            store.update(JobId(j), |m| {
                m.set_static("epochs_done", j as f64);
                m.set_static("throughput", 2.0);
            });
            store.set(JobId(j), "loss", 1.0 / (j + 1) as f64);
        }
        for j in 0..3000u64 {
            store.archive(JobId(j));
        }
        assert_eq!(store.tables().live.len(), 0);
        assert_eq!(store.get(JobId(7), "epochs_done"), Some(7.0));
        assert_eq!(store.get(JobId(7), "loss"), Some(0.125));
        assert_eq!(store.key_count(JobId(7)), 3);
        assert_eq!(store.of_job(JobId(8)).len(), 3);
        // A write brings the job back with all its keys.
        store.add(JobId(7), "epochs_done", 1.0);
        assert_eq!(store.get(JobId(7), "epochs_done"), Some(8.0));
        assert_eq!(store.get(JobId(7), "throughput"), Some(2.0));
        assert_eq!(store.tables().live.len(), 1);
        assert!(!store.tables().archive.contains(JobId(7)));
        // Forgetting most archived jobs compacts the array.
        for j in 0..2900u64 {
            assert!(!store.remove_job(JobId(j)).is_empty());
        }
        let n = store.tables().archive.entries();
        assert!(n < 1500, "{n} entries");
        assert_eq!(store.get(JobId(2999), "throughput"), Some(2.0));
        assert_eq!(store.snapshot().len(), 100);
        let copy = store.deep_clone();
        store.set(JobId(2999), "loss", 9.0);
        assert_eq!(copy.get(JobId(2999), "loss"), Some(1.0 / 3000.0));
        assert_eq!(store.get(JobId(2999), "loss"), Some(9.0));
    }

    #[test]
    fn archiving_while_another_thread_writes_loses_nothing() {
        let store = MetricStore::default();
        let pusher = store.clone();
        let t = std::thread::spawn(move || {
            for i in 0..20_000u64 {
                pusher.add(JobId(i % 50), "n", 1.0);
            }
        });
        for _ in 0..2000 {
            for j in 0..50 {
                store.archive(JobId(j));
            }
        }
        t.join().unwrap();
        let total: f64 = (0..50).map(|j| store.get(JobId(j), "n").unwrap()).sum();
        assert_eq!(total, 20_000.0);
    }
}
