//! The scheduler's persistent job table: one prost-encoded
//! [`JobRecord`] per job in an embedded redb
//! database, written before a submission is acknowledged and whenever a job
//! changes state, so a restarted scheduler still knows every accepted,
//! unfinished job.

use crate::proto::JobRecord;
use prost::Message;
use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};
use std::path::Path;

const JOBS: TableDefinition<u64, &[u8]> = TableDefinition::new("jobs");
const META: TableDefinition<&str, u64> = TableDefinition::new("meta");

#[derive(Debug, thiserror::Error)]
#[error("job table {path}: {message}")]
pub struct StoreError {
    pub path: String,
    pub message: String,
}

pub struct Store {
    db: Database,
    path: String,
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
        let db = Database::create(path).map_err(|e| StoreError {
            path: p.clone(),
            message: e.to_string(),
        })?;
        let s = Store { db, path: p };
        // Create the tables so reads of a fresh file succeed.
        s.write(&[], None)?;
        Ok(s)
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
        let tx = self.db.begin_write().map_err(|e| self.err(e))?;
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
        }
        tx.commit().map_err(|e| self.err(e))
    }

    /// Deletes the records of `ids` (ended jobs past their retention) in one
    /// durable transaction.
    pub fn remove(&self, ids: &[u64]) -> Result<(), StoreError> {
        let tx = self.db.begin_write().map_err(|e| self.err(e))?;
        {
            let mut jobs = tx.open_table(JOBS).map_err(|e| self.err(e))?;
            for id in ids {
                jobs.remove(*id).map_err(|e| self.err(e))?;
            }
        }
        tx.commit().map_err(|e| self.err(e))
    }

    /// Every record, by job id, and the next job id.
    pub fn load(&self) -> Result<(Vec<JobRecord>, u64), StoreError> {
        let tx = self.db.begin_read().map_err(|e| self.err(e))?;
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
            let tx = s.db.begin_write().unwrap();
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
}
