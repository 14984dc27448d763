//! The scheduler's persistent job table: one prost-encoded
//! [`JobRecord`] per job in an embedded redb
//! database, written before a submission is acknowledged and whenever a job
//! changes state, so a restarted scheduler still knows every accepted,
//! unfinished job.

use crate::proto::JobRecord;
use prost::Message;
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex, RwLock};

const JOBS: TableDefinition<u64, &[u8]> = TableDefinition::new("jobs");
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
/// Who holds each job uid of `[runtime] job_uids` (JSON of
/// [`crate::scheduler::uids::Holder`]).
const UIDS: TableDefinition<u32, &[u8]> = TableDefinition::new("uids");
/// The workers in the cluster as last written: id → address. A restarted
/// scheduler knows from it which workers to wait for before it queues the
/// jobs they ran again.
const WORKERS: TableDefinition<&str, &str> = TableDefinition::new("workers");

#[derive(Clone, Debug, thiserror::Error)]
#[error("job table {path}: {message}")]
pub struct StoreError {
    pub path: String,
    pub message: String,
}

/// Who a scheduler run is: see [`Store::begin_run`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RunIdentity {
    /// Created at random with the job table; 0 for a table older than
    /// identities.
    pub cluster_id: u64,
    /// This run's launches have generations from here up.
    pub generation_base: u64,
}

impl RunIdentity {
    /// The directory name that keys a job's launch directories and
    /// checkpoints by the table it belongs to (`c<16 hex digits>`), or
    /// `None` for a legacy table (the layout without it).
    pub fn dir_key(&self) -> Option<String> {
        (self.cluster_id != 0).then(|| format!("c{:016x}", self.cluster_id))
    }
}

/// The pages of the table kept in memory: redb's default (1 GiB) would let
/// a large table grow the scheduler by as much; records are read once, at
/// start, and written after.
const CACHE_BYTES: usize = 16 << 20;

fn create(path: &Path) -> Result<Database, redb::DatabaseError> {
    Database::builder().set_cache_size(CACHE_BYTES).create(path)
}

pub struct Store {
    /// `None` only while it is being reopened.
    db: RwLock<Option<Database>>,
    file: PathBuf,
    path: String,
    /// A transaction failed (a full disk, an I/O error): redb refuses every
    /// later one on the same handle, so the next use reopens the file
    /// first. What was committed before is intact (commits are atomic).
    broken: AtomicBool,
    /// Closed by a stopping scheduler ([`Store::close`]): nothing is
    /// written or reopened any more.
    closed: AtomicBool,
    /// Submissions waiting to be written together ([`Store::submit`]).
    group: Mutex<Group>,
    written: Condvar,
}

/// Group commit: records handed to [`Store::submit`] while another
/// transaction is being written go into the next one together.
#[derive(Default)]
struct Group {
    pending: Vec<(u64, JobRecord)>,
    /// The highest next job id asked for: written with every batch, so the
    /// stored value never goes back whatever order batches form in.
    next_id: u64,
    writing: bool,
    next_ticket: u64,
    done: std::collections::HashMap<u64, Result<JobRecord, StoreError>>,
}

impl Store {
    /// Opens (or creates) the table at `path`.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        let p = path.display().to_string();
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| StoreError {
                path: p.clone(),
                message: e.to_string(),
            })?;
        }
        let db = create(path).map_err(|e| StoreError {
            path: p.clone(),
            message: e.to_string(),
        })?;
        // It holds every job's argv: its owner's only.
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(
                |e| StoreError {
                    path: p.clone(),
                    message: e.to_string(),
                },
            )?;
        }
        let s = Store {
            db: RwLock::new(Some(db)),
            file: path.to_path_buf(),
            path: p,
            broken: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            group: Mutex::default(),
            written: Condvar::new(),
        };
        // Create the tables so reads of a fresh file succeed.
        s.write(&[], None)?;
        Ok(s)
    }

    /// Runs `f` on the database, reopening it first after a failed
    /// transaction; a failure marks it for reopening.
    fn with<T>(&self, f: impl FnOnce(&Database) -> Result<T, StoreError>) -> Result<T, StoreError> {
        if self.closed.load(Ordering::Acquire) {
            return Err(self.err("the job table is closed: the scheduler is stopping"));
        }
        if self.broken.load(Ordering::Acquire) {
            self.reopen()?;
        }
        let g = self.db.read().unwrap_or_else(|e| e.into_inner());
        let Some(db) = g.as_ref() else {
            return Err(self.err(if self.closed.load(Ordering::Acquire) {
                "the job table is closed: the scheduler is stopping"
            } else {
                "the job table is being reopened after a failed write"
            }));
        };
        let r = f(db);
        if r.is_err() {
            self.broken.store(true, Ordering::Release);
        }
        r
    }

    /// Closes the file now, releasing its lock, whoever else still holds
    /// this store: a scheduler started on the same file in this process
    /// (a restart) can open it at once, where a task of the stopped one
    /// that outlived its runtime's shutdown held it open before ("Database
    /// already open", once, beside two CPU hogs). Later uses get an error.
    pub fn close(&self) {
        self.closed.store(true, Ordering::Release);
        *self.db.write().unwrap_or_else(|e| e.into_inner()) = None;
    }

    fn reopen(&self) -> Result<(), StoreError> {
        let mut g = self.db.write().unwrap_or_else(|e| e.into_inner());
        if !self.broken.load(Ordering::Acquire) || self.closed.load(Ordering::Acquire) {
            return Ok(());
        }
        // The old handle holds the file's lock: dropped first.
        *g = None;
        let db = create(&self.file).map_err(|e| self.err(e))?;
        *g = Some(db);
        self.broken.store(false, Ordering::Release);
        tracing::info!(table = %self.path, "job table reopened after a failed write");
        Ok(())
    }

    fn err(&self, e: impl std::fmt::Display) -> StoreError {
        StoreError {
            path: self.path.clone(),
            message: e.to_string(),
        }
    }

    /// Writes `records` (and the next job id, if given) in one durable
    /// transaction.
    pub fn write(&self, records: &[&JobRecord], next_id: Option<u64>) -> Result<(), StoreError> {
        self.write_with_uids(records, next_id, None)
    }

    /// [`Store::write`], replacing the job uids' holders too when given
    /// (one transaction, one sync).
    pub fn write_with_uids(
        &self,
        records: &[&JobRecord],
        next_id: Option<u64>,
        uids: Option<&[(u32, crate::scheduler::uids::Holder)]>,
    ) -> Result<(), StoreError> {
        self.with(|db| {
            let tx = db.begin_write().map_err(|e| self.err(e))?;
            {
                let mut jobs = tx.open_table(JOBS).map_err(|e| self.err(e))?;
                let mut buf = Vec::new();
                for r in records {
                    let id = r.info.as_ref().map_or(0, |i| i.id);
                    buf.clear();
                    r.encode(&mut buf).map_err(|e| self.err(e))?;
                    jobs.insert(id, buf.as_slice()).map_err(|e| self.err(e))?;
                }
                let mut meta = tx.open_table(META).map_err(|e| self.err(e))?;
                if let Some(n) = next_id {
                    meta.insert("next_job_id", n).map_err(|e| self.err(e))?;
                }
                if let Some(holders) = uids {
                    let mut t = tx.open_table(UIDS).map_err(|e| self.err(e))?;
                    t.retain(|_, _| false).map_err(|e| self.err(e))?;
                    for (uid, h) in holders {
                        let v = serde_json::to_vec(h).map_err(|e| self.err(e))?;
                        t.insert(*uid, v.as_slice()).map_err(|e| self.err(e))?;
                    }
                }
            }
            tx.commit().map_err(|e| self.err(e))
        })
    }

    /// Writes a new job's record durably, with the next job id, and gives
    /// it back. Calls that arrive while a transaction is being written wait
    /// and go into the next one together (group commit: one fsync for a
    /// burst of submissions instead of one each); each learns its own
    /// outcome (a failed transaction fails every record in it).
    pub fn submit(&self, record: JobRecord, next_id: u64) -> Result<JobRecord, StoreError> {
        fn lock(m: &Mutex<Group>) -> std::sync::MutexGuard<'_, Group> {
            m.lock().unwrap_or_else(|e| e.into_inner())
        }
        let mut g = lock(&self.group);
        let ticket = g.next_ticket;
        g.next_ticket += 1;
        g.pending.push((ticket, record));
        g.next_id = g.next_id.max(next_id);
        loop {
            if let Some(r) = g.done.remove(&ticket) {
                return r;
            }
            if g.writing {
                g = self.written.wait(g).unwrap_or_else(|e| e.into_inner());
                continue;
            }
            // Lead: write everything pending (this call's among it).
            g.writing = true;
            let batch = std::mem::take(&mut g.pending);
            let next = g.next_id;
            drop(g);
            let refs: Vec<&JobRecord> = batch.iter().map(|(_, r)| r).collect();
            let r = self.write(&refs, Some(next));
            g = lock(&self.group);
            for (t, rec) in batch {
                g.done.insert(t, r.clone().map(|_| rec));
            }
            g.writing = false;
            self.written.notify_all();
        }
    }

    /// The job uids' holders as last written.
    pub fn load_uids(&self) -> Result<Vec<(u32, crate::scheduler::uids::Holder)>, StoreError> {
        self.with(|db| {
            let tx = db.begin_read().map_err(|e| self.err(e))?;
            let t = match tx.open_table(UIDS) {
                Ok(t) => t,
                Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
                Err(e) => return Err(self.err(e)),
            };
            let mut out = Vec::new();
            for row in t.iter().map_err(|e| self.err(e))? {
                let (k, v) = row.map_err(|e| self.err(e))?;
                let h = serde_json::from_slice(v.value())
                    .map_err(|e| self.err(format!("holder of job uid {}: {e}", k.value())))?;
                out.push((k.value(), h));
            }
            Ok(out)
        })
    }

    /// Replaces the workers in the cluster (id → address), durably.
    pub fn write_workers(
        &self,
        workers: &std::collections::BTreeMap<String, String>,
    ) -> Result<(), StoreError> {
        self.with(|db| {
            let tx = db.begin_write().map_err(|e| self.err(e))?;
            {
                let mut t = tx.open_table(WORKERS).map_err(|e| self.err(e))?;
                t.retain(|_, _| false).map_err(|e| self.err(e))?;
                for (id, address) in workers {
                    t.insert(id.as_str(), address.as_str())
                        .map_err(|e| self.err(e))?;
                }
            }
            tx.commit().map_err(|e| self.err(e))
        })
    }

    /// The workers in the cluster as last written (none for a table older
    /// than this record).
    pub fn load_workers(&self) -> Result<std::collections::BTreeMap<String, String>, StoreError> {
        self.with(|db| {
            let tx = db.begin_read().map_err(|e| self.err(e))?;
            let t = match tx.open_table(WORKERS) {
                Ok(t) => t,
                Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Default::default()),
                Err(e) => return Err(self.err(e)),
            };
            let mut out = std::collections::BTreeMap::new();
            for row in t.iter().map_err(|e| self.err(e))? {
                let (k, v) = row.map_err(|e| self.err(e))?;
                out.insert(k.value().to_string(), v.value().to_string());
            }
            Ok(out)
        })
    }

    /// Deletes the records of `ids` (ended jobs past their retention) in one
    /// durable transaction.
    pub fn remove(&self, ids: &[u64]) -> Result<(), StoreError> {
        self.with(|db| {
            let tx = db.begin_write().map_err(|e| self.err(e))?;
            {
                let mut jobs = tx.open_table(JOBS).map_err(|e| self.err(e))?;
                for id in ids {
                    jobs.remove(*id).map_err(|e| self.err(e))?;
                }
            }
            tx.commit().map_err(|e| self.err(e))
        })
    }

    /// Starts a run of the scheduler on this table: the table's cluster
    /// identity (created with the table) and this run's first launch
    /// generation, one `per_run` above the last run's, persisted before it
    /// is returned, so generations only grow whatever the clock does.
    ///
    /// A table written before identities existed (it holds jobs but no
    /// identity) keeps identity 0, the directory layout its jobs'
    /// checkpoints were written under, and its generations continue from
    /// `legacy_base` (the old clock-based scheme) on its first run.
    pub fn begin_run(&self, per_run: u64, legacy_base: u64) -> Result<RunIdentity, StoreError> {
        self.with(|db| self.begin_run_in(db, per_run, legacy_base))
    }

    fn begin_run_in(
        &self,
        db: &Database,
        per_run: u64,
        legacy_base: u64,
    ) -> Result<RunIdentity, StoreError> {
        let tx = db.begin_write().map_err(|e| self.err(e))?;
        let id = {
            let jobs = tx.open_table(JOBS).map_err(|e| self.err(e))?;
            let has_jobs = jobs.iter().map_err(|e| self.err(e))?.next().is_some();
            let mut meta = tx.open_table(META).map_err(|e| self.err(e))?;
            let get = |m: &redb::Table<&str, u64>, k: &str| -> Result<Option<u64>, StoreError> {
                Ok(m.get(k).map_err(|e| self.err(e))?.map(|v| v.value()))
            };
            let legacy = get(&meta, "cluster_id")?.is_none() && has_jobs;
            let cluster_id = match get(&meta, "cluster_id")? {
                Some(c) => c,
                None if legacy => 0,
                // Never 0: that is the legacy layout.
                None => crate::net::random_u64().map_err(|e| self.err(e))?.max(1),
            };
            let generation_base = match get(&meta, "generation_base")? {
                Some(g) => g.saturating_add(per_run),
                None if legacy => legacy_base.max(per_run),
                None => per_run,
            };
            meta.insert("cluster_id", cluster_id)
                .map_err(|e| self.err(e))?;
            meta.insert("generation_base", generation_base)
                .map_err(|e| self.err(e))?;
            RunIdentity {
                cluster_id,
                generation_base,
            }
        };
        tx.commit().map_err(|e| self.err(e))?;
        Ok(id)
    }

    /// Every record, by job id, and the next job id.
    pub fn load(&self) -> Result<(Vec<JobRecord>, u64), StoreError> {
        self.with(|db| self.load_from(db))
    }

    fn load_from(&self, db: &Database) -> Result<(Vec<JobRecord>, u64), StoreError> {
        let tx = db.begin_read().map_err(|e| self.err(e))?;
        let jobs = tx.open_table(JOBS).map_err(|e| self.err(e))?;
        let mut out = Vec::new();
        for row in jobs.iter().map_err(|e| self.err(e))? {
            let (k, v) = row.map_err(|e| self.err(e))?;
            let mut r = JobRecord::decode(v.value())
                .map_err(|e| self.err(format!("record of job {}: {e}", k.value())))?;
            let id = k.value();
            match (&mut r.info, &r.job) {
                (Some(info), _) if info.id != id => {
                    tracing::warn!(
                        "the job table's record {id} says it is job {}: kept as job {id}",
                        info.id
                    );
                    info.id = id;
                }
                // Records written before JobInfo carried duration_s.
                (Some(info), Some(job)) if info.duration_s.is_none() => {
                    info.duration_s = job.duration_s;
                }
                (Some(_), _) => {}
                // Without its info the job is known only by what was
                // submitted: it is queued again under its id.
                (None, Some(_)) => {
                    tracing::warn!(
                        job = id,
                        "the job table's record has no status; the job is queued again"
                    );
                    r.info = Some(crate::proto::JobInfo {
                        id,
                        status: "submitted".into(),
                        phase: crate::proto::JobPhase::Submitted as i32,
                        ..Default::default()
                    });
                }
                (None, None) => {
                    tracing::warn!(
                        job = id,
                        "the job table's record holds neither status nor submission; it is dropped"
                    );
                    continue;
                }
            }
            out.push(r);
        }
        let meta = tx.open_table(META).map_err(|e| self.err(e))?;
        let next = meta
            .get("next_job_id")
            .map_err(|e| self.err(e))?
            .map_or(0, |v| v.value());
        let next = next.max(
            out.iter()
                .filter_map(|r| r.info.as_ref())
                .map(|i| i.id + 1)
                .max()
                .unwrap_or(0),
        );
        Ok((out, next))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::{JobInfo, JobSubmission};

    /// A closed store releases its file while other holders remain: the
    /// file opens again at once, and a write through the old handle is an
    /// error, not a reopen.
    #[test]
    fn a_closed_store_releases_its_file_to_the_next_opener() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.redb");
        let s = std::sync::Arc::new(Store::open(&path).unwrap());
        let leftover = s.clone();
        assert!(Store::open(&path).is_err(), "the file is locked while open");
        s.close();
        let again = Store::open(&path).unwrap();
        let e = leftover.write(&[], Some(7)).unwrap_err();
        assert!(e.message.contains("closed"), "{e:?}");
        again.write(&[], Some(7)).unwrap();
    }

    /// Submissions from many threads at once go in shared
    /// transactions; each gets its own record back, every one is durable,
    /// and the stored next id is the highest asked for, whatever order the
    /// batches formed in.
    #[test]
    fn concurrent_submissions_are_written_together_and_all_kept() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.redb");
        let s = std::sync::Arc::new(Store::open(&path).unwrap());
        let threads: Vec<_> = (0..16u64)
            .map(|t| {
                let s = s.clone();
                std::thread::spawn(move || {
                    for k in 0..25u64 {
                        // Ids interleave across threads, so batches mix them.
                        let id = 1 + k * 16 + t;
                        let rec = JobRecord {
                            info: Some(JobInfo {
                                id,
                                ..Default::default()
                            }),
                            ..Default::default()
                        };
                        let back = s.submit(rec, id + 1).unwrap();
                        assert_eq!(back.info.unwrap().id, id);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        drop(s);
        let (recs, next) = Store::open(&path).unwrap().load().unwrap();
        let mut ids: Vec<u64> = recs.iter().map(|r| r.info.as_ref().unwrap().id).collect();
        ids.sort_unstable();
        assert_eq!(ids, (1..=400).collect::<Vec<_>>());
        assert_eq!(next, 401);
    }

    #[test]
    fn records_survive_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.redb");
        let rec = |id: u64, status: &str| JobRecord {
            info: Some(JobInfo {
                id,
                status: status.into(),
                ..Default::default()
            }),
            job: Some(JobSubmission {
                command: vec!["train".into(), format!("--id={id}")],
                gpus: 2,
                ..Default::default()
            }),
            run_time_s: 1.5,
        };
        {
            let s = Store::open(&path).unwrap();
            s.write(&[&rec(0, "queued"), &rec(1, "running")], Some(2))
                .unwrap();
            s.write(&[&rec(1, "finished")], None).unwrap();
        }
        let s = Store::open(&path).unwrap();
        let (recs, next) = s.load().unwrap();
        assert_eq!(next, 2);
        assert_eq!(recs.len(), 2);
        assert_eq!(recs[1].info.as_ref().unwrap().status, "finished");
        assert_eq!(recs[0].job.as_ref().unwrap().command[1], "--id=0");
        // Records written without their info (a damaged table) are repaired
        // on load: nothing later finds a record without one.
        {
            let g = s.db.read().unwrap();
            let tx = g.as_ref().unwrap().begin_write().unwrap();
            {
                let mut t = tx.open_table(JOBS).unwrap();
                let bare = JobRecord {
                    info: None,
                    ..rec(5, "queued")
                };
                t.insert(5, bare.encode_to_vec().as_slice()).unwrap();
                t.insert(6, JobRecord::default().encode_to_vec().as_slice())
                    .unwrap();
            }
            tx.commit().unwrap();
        }
        let (recs, next) = s.load().unwrap();
        assert_eq!(recs.len(), 3, "the empty record 6 is dropped");
        let five = recs.iter().find(|r| r.info.as_ref().unwrap().id == 5);
        let five = five.expect("record 5 repaired");
        assert_eq!(five.info.as_ref().unwrap().status, "submitted");
        assert_eq!(five.job.as_ref().unwrap().command[1], "--id=5");
        assert_eq!(next, 6);
        s.remove(&[0, 5, 7]).unwrap();
        let (recs, next) = s.load().unwrap();
        assert_eq!(recs.len(), 1);
        assert_eq!(next, 2, "removing records never reuses ids");
    }

    #[test]
    fn a_table_keeps_its_identity_and_its_generations_only_grow() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.redb");
        let first = Store::open(&path).unwrap().begin_run(10, 0).unwrap();
        assert_ne!(first.cluster_id, 0);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600, "the table holds argvs: {mode:o}");
        }
        assert_eq!(first.generation_base, 10);
        // Whatever clock-based base is offered, a table with an identity
        // counts on from its own.
        let second = Store::open(&path)
            .unwrap()
            .begin_run(10, u64::MAX / 2)
            .unwrap();
        assert_eq!(second.cluster_id, first.cluster_id);
        assert_eq!(second.generation_base, 20);
        // A new table is another cluster.
        let other = Store::open(&dir.path().join("other.redb"))
            .unwrap()
            .begin_run(10, 0)
            .unwrap();
        assert_ne!(other.cluster_id, first.cluster_id);
        assert!(first.dir_key().unwrap().starts_with('c'));
    }

    #[test]
    fn a_table_older_than_identities_keeps_its_layout_and_clock_generations() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.redb");
        let s = Store::open(&path).unwrap();
        let rec = JobRecord {
            info: Some(JobInfo {
                id: 1,
                status: "queued".into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        s.write(&[&rec], Some(2)).unwrap();
        let r = s.begin_run(10, 5_000).unwrap();
        assert_eq!(r.cluster_id, 0);
        assert_eq!(r.dir_key(), None);
        assert_eq!(r.generation_base, 5_000);
        // The clock stepped back: the generations still grow.
        let r = s.begin_run(10, 100).unwrap();
        assert_eq!((r.cluster_id, r.generation_base), (0, 5_010));
    }
}
