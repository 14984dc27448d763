//! A simulation's event log written on a thread of its own: a round hands
//! its events over and goes on, while the writer turns them into JSON lines
//! and the kernel copies them into the file. At ten million jobs the log is
//! several GB, and writing it was a tenth of the simulation's thread.
//! The file is the same, line for line: one writer, rounds in order.

use blox_core::round::events::Event;
use blox_eventlog::{EventLog, EventLogError};
use std::sync::mpsc::{sync_channel, SyncSender};
use std::thread::JoinHandle;

/// Events gathered before they go to the writer in one hand-over (a small
/// run's rounds, a few events each, would otherwise wake it every round).
const BATCH: usize = 4096;

/// Batches handed over and not yet written, at most (then a round waits for
/// the writer: memory stays bounded however fast the rounds are).
const BATCHES_IN_FLIGHT: usize = 8;

/// An [`EventLog`] fed from another thread.
pub struct LogWriter {
    /// Whole rounds not yet handed over.
    batch: Vec<Event>,
    tx: Option<SyncSender<Vec<Event>>>,
    writer: Option<JoinHandle<Result<(), EventLogError>>>,
    /// The log's file, to name in an error.
    path: std::path::PathBuf,
}

impl LogWriter {
    /// Starts writing to `log` on a new thread.
    pub fn spawn(mut log: EventLog) -> Result<LogWriter, EventLogError> {
        let (tx, rx) = sync_channel::<Vec<Event>>(BATCHES_IN_FLIGHT);
        let path = log.path().to_path_buf();
        let writer = std::thread::Builder::new()
            .name("blox-events".into())
            .spawn(move || {
                for events in rx {
                    log.write(&events)?;
                }
                Ok(())
            })
            .map_err(|source| EventLogError::Io {
                path: path.clone(),
                source,
            })?;
        Ok(LogWriter {
            batch: Vec::new(),
            tx: Some(tx),
            writer: Some(writer),
            path,
        })
    }

    /// Takes a round's events; they go to the writer with those of the
    /// rounds after it, [`BATCH`] at a time, whole rounds only. A write that
    /// failed (a full disk) is reported at a later round and by
    /// [`close`](Self::close).
    pub fn send(&mut self, mut events: Vec<Event>) -> Result<(), EventLogError> {
        if self.batch.is_empty() {
            self.batch = std::mem::take(&mut events);
        } else {
            self.batch.append(&mut events);
        }
        if self.batch.len() < BATCH {
            return Ok(());
        }
        self.hand_over()
    }

    fn hand_over(&mut self) -> Result<(), EventLogError> {
        let batch = std::mem::take(&mut self.batch);
        let sent = self.tx.as_ref().is_some_and(|tx| tx.send(batch).is_ok());
        if sent {
            Ok(())
        } else {
            // The writer stopped: its error says why.
            self.close()
        }
    }

    /// Waits until everything taken is written; the writer's error if a
    /// write failed. Later calls return `Ok`.
    pub fn close(&mut self) -> Result<(), EventLogError> {
        let batch = std::mem::take(&mut self.batch);
        if let (Some(tx), false) = (&self.tx, batch.is_empty()) {
            // A writer that stopped has its error in the join below.
            let _ = tx.send(batch);
        }
        drop(self.tx.take());
        match self.writer.take().map(JoinHandle::join) {
            None => Ok(()),
            Some(Ok(r)) => r,
            // A panic is an error of this log, not of the thread that
            // closes it (which may be unwinding already, from `Drop`).
            Some(Err(panic)) => {
                let what = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "no message".into());
                Err(EventLogError::Io {
                    path: self.path.clone(),
                    source: std::io::Error::other(format!("the writer thread panicked: {what}")),
                })
            }
        }
    }
}

impl Drop for LogWriter {
    /// Writes what was handed over before the log goes; an error here has
    /// no caller left to take it, so it is logged.
    fn drop(&mut self) {
        if let Err(e) = self.close() {
            tracing::error!("event log: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use blox_core::ids::JobId;
    use blox_core::round::events::What;

    fn event(round: u64) -> Event {
        Event {
            round,
            time_s: round as f64 * 300.0,
            unix_s: None,
            job: Some(JobId(round)),
            name: Some(round.to_string()),
            what: What::Finished {
                jct_s: Some(round as f64 * 1.5),
                reason: None,
                attained_gpu_s: None,
                lost_gpu_s: None,
                startup_s: None,
            },
        }
    }

    #[test]
    fn the_file_is_what_writing_on_the_rounds_thread_makes() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a.jsonl"), dir.path().join("b.jsonl"));
        let rounds: Vec<Vec<Event>> = (0..5000)
            .map(|r| (0..r % 7).map(|i| event(r * 10 + i)).collect())
            .collect();
        let mut direct = EventLog::create(&a).unwrap();
        let mut bg = LogWriter::spawn(EventLog::create(&b).unwrap()).unwrap();
        for r in &rounds {
            direct.write(r).unwrap();
            bg.send(r.clone()).unwrap();
        }
        bg.close().unwrap();
        assert_eq!(std::fs::read(&a).unwrap(), std::fs::read(&b).unwrap());
        assert!(!std::fs::read(&b).unwrap().is_empty());
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_write_that_fails_is_reported_naming_the_file() {
        // /dev/full takes the open and refuses every write.
        let log = EventLog::create(std::path::Path::new("/dev/full")).unwrap();
        let mut bg = LogWriter::spawn(log).unwrap();
        let mut err = None;
        for r in 0..((BATCHES_IN_FLIGHT + 2) * BATCH) as u64 {
            if let Err(e) = bg.send(vec![event(r)]) {
                err = Some(e);
                break;
            }
        }
        let e = err.unwrap_or_else(|| bg.close().unwrap_err());
        assert!(e.to_string().contains("/dev/full"), "{e}");
        // Closed once; nothing more to report.
        assert!(bg.close().is_ok());
    }

    /// A writer whose thread panics on its first batch.
    fn panicking() -> LogWriter {
        let (tx, rx) = sync_channel::<Vec<Event>>(1);
        let writer = std::thread::spawn(move || match rx.recv() {
            Ok(_) => panic!("a bug in the writer"),
            Err(_) => Ok(()),
        });
        LogWriter {
            batch: Vec::new(),
            tx: Some(tx),
            writer: Some(writer),
            path: "events.jsonl".into(),
        }
    }

    #[test]
    fn a_writer_that_panics_is_an_error_naming_the_file_not_a_second_panic() {
        let mut w = panicking();
        w.send((0..BATCH as u64).map(event).collect()).ok();
        let e = w.close().unwrap_err().to_string();
        assert!(
            e.contains("events.jsonl") && e.contains("panicked: a bug in the writer"),
            "{e}"
        );
        // Dropped while its owner unwinds: the unwind goes on (a panic in
        // `Drop` during one would abort the process).
        let unwound = std::panic::catch_unwind(|| {
            let mut w = panicking();
            w.send((0..BATCH as u64).map(event).collect()).ok();
            panic!("the owner's own panic");
        });
        assert!(unwound.is_err());
    }
}
