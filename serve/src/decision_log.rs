//! The decision log: one JSON line per `Decide` with the request's snapshot, the answer and,
//! in shadow mode, the model's answer that was not returned. `lachesis replay` reads it.
//!
//! A dedicated thread serializes and writes, so a decision never waits on the disk: records
//! go through a bounded queue, and when it is full they are dropped and counted
//! (`decision_log_records_total{result="dropped"}`). The file rotates at `max_bytes`
//! (`decisions.jsonl` -> `.1` -> ... -> `.keep`, the oldest deleted), so the log never takes
//! more than `(keep + 1) * max_bytes` plus one record.

use crate::config::DecisionLogConfig;
use crate::metrics::Metrics;
use crate::proto;
use serde::{Deserialize, Serialize};
use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::{Receiver, SyncSender, TryRecvError, TrySendError, sync_channel};

/// One logged decision.
#[derive(Debug, Clone)]
pub struct LogRecord {
    pub unix_ms: u64,
    pub snapshot: Arc<proto::Snapshot>,
    pub answer: proto::DecideResponse,
    /// The model's answer in shadow mode (not returned to the caller).
    pub shadow: Option<proto::DecideResponse>,
}

/// A log line as written and read back.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LogLine {
    pub unix_ms: u64,
    pub snapshot: proto::Snapshot,
    pub answer: proto::DecideResponse,
    #[serde(default)]
    pub shadow: Option<proto::DecideResponse>,
}

#[derive(Serialize)]
struct LogLineRef<'a> {
    unix_ms: u64,
    snapshot: &'a proto::Snapshot,
    answer: &'a proto::DecideResponse,
    #[serde(skip_serializing_if = "Option::is_none")]
    shadow: Option<&'a proto::DecideResponse>,
}

enum Message {
    Record(Box<LogRecord>),
    Flush(SyncSender<()>),
}

/// The writer's handle.
#[derive(Debug)]
pub struct DecisionLog {
    tx: SyncSender<Message>,
    metrics: Arc<Metrics>,
}

impl std::fmt::Debug for Message {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Message")
    }
}

impl DecisionLog {
    /// Opens (appends to) the log and starts its writer thread.
    pub fn start(cfg: &DecisionLogConfig, metrics: Arc<Metrics>) -> std::io::Result<DecisionLog> {
        let path = cfg
            .path
            .clone()
            .ok_or_else(|| std::io::Error::other("decision_log.path is not set"))?;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)?;
        }
        let file = open(&path)?;
        let size = file.metadata()?.len();
        let (tx, rx) = sync_channel(cfg.queue);
        let writer = Writer {
            path,
            out: BufWriter::new(file),
            size,
            max_bytes: cfg.max_bytes,
            keep: cfg.keep,
            metrics: Arc::clone(&metrics),
        };
        std::thread::Builder::new()
            .name("decision-log".into())
            .spawn(move || writer.run(rx))?;
        Ok(DecisionLog { tx, metrics })
    }

    /// Queues a record; drops it (counted) when the writer is behind.
    pub fn record(&self, record: LogRecord) {
        match self.tx.try_send(Message::Record(Box::new(record))) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) | Err(TrySendError::Disconnected(_)) => {
                Metrics::count(&self.metrics.decision_log, "result", "dropped");
            }
        }
    }

    /// Waits until everything queued so far is on disk.
    pub fn flush(&self) {
        let (done_tx, done_rx) = sync_channel(1);
        if self.tx.send(Message::Flush(done_tx)).is_ok() {
            let _ = done_rx.recv();
        }
    }
}

fn open(path: &Path) -> std::io::Result<File> {
    OpenOptions::new().create(true).append(true).open(path)
}

struct Writer {
    path: PathBuf,
    out: BufWriter<File>,
    size: u64,
    max_bytes: u64,
    keep: usize,
    metrics: Arc<Metrics>,
}

impl Writer {
    fn run(mut self, rx: Receiver<Message>) {
        loop {
            let msg = match rx.try_recv() {
                Ok(m) => m,
                Err(TryRecvError::Empty) => {
                    // Queue drained for now: put what we have on disk, then wait.
                    let _ = self.out.flush();
                    match rx.recv() {
                        Ok(m) => m,
                        Err(_) => break,
                    }
                }
                Err(TryRecvError::Disconnected) => break,
            };
            match msg {
                Message::Record(r) => {
                    let result = self.write(&r);
                    let label = if result.is_ok() { "written" } else { "error" };
                    if let Err(e) = result {
                        tracing::error!(path = %self.path.display(), error = %e, "decision log write failed");
                    }
                    Metrics::count(&self.metrics.decision_log, "result", label);
                }
                Message::Flush(done) => {
                    if let Err(e) = self.out.flush() {
                        tracing::error!(path = %self.path.display(), error = %e, "decision log flush failed");
                    }
                    let _ = done.send(());
                }
            }
        }
        let _ = self.out.flush();
    }

    fn write(&mut self, r: &LogRecord) -> std::io::Result<()> {
        let mut line = serde_json::to_vec(&LogLineRef {
            unix_ms: r.unix_ms,
            snapshot: &r.snapshot,
            answer: &r.answer,
            shadow: r.shadow.as_ref(),
        })
        .map_err(std::io::Error::other)?;
        line.push(b'\n');
        if self.size > 0 && self.size + line.len() as u64 > self.max_bytes {
            self.rotate()?;
        }
        self.out.write_all(&line)?;
        self.size += line.len() as u64;
        Ok(())
    }

    fn rotate(&mut self) -> std::io::Result<()> {
        self.out.flush()?;
        let numbered = |k: usize| PathBuf::from(format!("{}.{k}", self.path.display()));
        if self.keep == 0 {
            std::fs::remove_file(&self.path)?;
        } else {
            let _ = std::fs::remove_file(numbered(self.keep));
            for k in (1..self.keep).rev() {
                if numbered(k).exists() {
                    std::fs::rename(numbered(k), numbered(k + 1))?;
                }
            }
            std::fs::rename(&self.path, numbered(1))?;
        }
        self.out = BufWriter::new(open(&self.path)?);
        self.size = 0;
        Ok(())
    }
}

/// The files of a log, oldest first (`path.keep` ... `path.1`, `path`).
pub fn log_files(path: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = (1..=1000)
        .map(|k| PathBuf::from(format!("{}.{k}", path.display())))
        .take_while(|p| p.exists())
        .collect();
    files.reverse();
    if path.exists() {
        files.push(path.to_path_buf());
    }
    files
}
