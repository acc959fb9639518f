//! Talking to Slurm: a trait (so the bridge's logic is tested against a fake) and its
//! implementation over the command-line tools (`scontrol`), with `SLURM_TIME_FORMAT=%s` so
//! times are Unix seconds.

use super::config::SlurmConfig;
use super::model::{SlurmJob, SlurmNode};
use std::path::PathBuf;
use std::process::Command;

/// A Slurm command failed, or printed what could not be read.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{command}: {message}")]
pub struct SlurmError {
    pub command: String,
    pub message: String,
}

/// What the bridge needs from Slurm.
pub trait SlurmCtl: Send {
    /// Every node and every job Slurm knows now.
    fn read(&self) -> Result<(Vec<SlurmNode>, Vec<SlurmJob>), SlurmError>;
    /// Pins a held job to exactly `nodes` (`NodeList=`); `restart`: also lift the begin time a
    /// requeue set (`StartTime=now`). Empty `nodes` clears the pin.
    fn pin(&self, job: u64, nodes: &[String], restart: bool) -> Result<(), SlurmError>;
    /// `pin` for many jobs; one result per pin, in order. Sequential unless overridden.
    fn pin_many(&self, pins: &[(u64, Vec<String>, bool)]) -> Vec<Result<(), SlurmError>> {
        pins.iter()
            .map(|(job, nodes, restart)| self.pin(*job, nodes, *restart))
            .collect()
    }
    /// Releases held jobs (one call for all).
    fn release(&self, jobs: &[u64]) -> Result<(), SlurmError>;
    /// Holds pending jobs again.
    fn hold(&self, jobs: &[u64]) -> Result<(), SlurmError>;
    /// Stops a running job and puts it back in the queue, held.
    fn requeue_hold(&self, job: u64) -> Result<(), SlurmError>;
}

/// Concurrent `scontrol update` processes when pinning many jobs.
pub const PIN_THREADS: usize = 8;

/// `SlurmCtl` over `scontrol`.
#[derive(Debug, Clone)]
pub struct CommandCtl {
    scontrol: PathBuf,
    conf: Option<PathBuf>,
}

impl CommandCtl {
    pub fn new(cfg: &SlurmConfig) -> Self {
        let scontrol = match &cfg.bin_dir {
            Some(dir) => dir.join("scontrol"),
            None => PathBuf::from("scontrol"),
        };
        CommandCtl {
            scontrol,
            conf: cfg.conf.clone(),
        }
    }

    fn run(&self, args: &[&str]) -> Result<String, SlurmError> {
        let mut cmd = Command::new(&self.scontrol);
        cmd.args(args).env("SLURM_TIME_FORMAT", "%s");
        if let Some(conf) = &self.conf {
            cmd.env("SLURM_CONF", conf);
        }
        let shown = || format!("{} {}", self.scontrol.display(), args.join(" "));
        let out = cmd.output().map_err(|e| SlurmError {
            command: shown(),
            message: format!("cannot run: {e}"),
        })?;
        if !out.status.success() {
            return Err(SlurmError {
                command: shown(),
                message: format!(
                    "{}: {}",
                    out.status,
                    String::from_utf8_lossy(&out.stderr).trim()
                ),
            });
        }
        String::from_utf8(out.stdout).map_err(|_| SlurmError {
            command: shown(),
            message: "printed text that is not UTF-8".into(),
        })
    }
}

fn records<T>(
    text: &str,
    command: &str,
    parse: impl Fn(&str) -> Result<T, String>,
) -> Result<Vec<T>, SlurmError> {
    text.lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with("No jobs in the system"))
        .enumerate()
        .map(|(i, l)| {
            parse(l).map_err(|message| SlurmError {
                command: command.to_string(),
                message: format!("record {}: {message}", i + 1),
            })
        })
        .collect()
}

impl SlurmCtl for CommandCtl {
    fn read(&self) -> Result<(Vec<SlurmNode>, Vec<SlurmJob>), SlurmError> {
        let nodes = self.run(&["-d", "-o", "show", "node"])?;
        let jobs = self.run(&["-d", "-o", "show", "job"])?;
        Ok((
            records(&nodes, "scontrol -d -o show node", SlurmNode::parse)?,
            records(&jobs, "scontrol -d -o show job", SlurmJob::parse)?,
        ))
    }

    fn pin(&self, job: u64, nodes: &[String], restart: bool) -> Result<(), SlurmError> {
        let id = format!("JobId={job}");
        let list = format!("NodeList={}", nodes.join(","));
        let mut args = vec!["update", id.as_str(), list.as_str()];
        if restart {
            args.push("StartTime=now");
        }
        self.run(&args).map(|_| ())
    }

    /// Up to `PIN_THREADS` `scontrol update` processes at once.
    fn pin_many(&self, pins: &[(u64, Vec<String>, bool)]) -> Vec<Result<(), SlurmError>> {
        if pins.len() < 2 {
            return pins
                .iter()
                .map(|(job, nodes, restart)| self.pin(*job, nodes, *restart))
                .collect();
        }
        let chunk = pins.len().div_ceil(PIN_THREADS);
        std::thread::scope(|scope| {
            let handles: Vec<_> = pins
                .chunks(chunk)
                .map(|part| {
                    let handle = scope.spawn(move || {
                        part.iter()
                            .map(|(job, nodes, restart)| self.pin(*job, nodes, *restart))
                            .collect::<Vec<_>>()
                    });
                    (part.len(), handle)
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|(n, h)| {
                    h.join().unwrap_or_else(|_| {
                        vec![
                            Err(SlurmError {
                                command: "scontrol update".into(),
                                message: "a pinning thread panicked".into(),
                            });
                            n
                        ]
                    })
                })
                .collect()
        })
    }

    fn release(&self, jobs: &[u64]) -> Result<(), SlurmError> {
        if jobs.is_empty() {
            return Ok(());
        }
        let ids = join_ids(jobs);
        self.run(&["release", &ids]).map(|_| ())
    }

    fn hold(&self, jobs: &[u64]) -> Result<(), SlurmError> {
        if jobs.is_empty() {
            return Ok(());
        }
        let ids = join_ids(jobs);
        self.run(&["hold", &ids]).map(|_| ())
    }

    fn requeue_hold(&self, job: u64) -> Result<(), SlurmError> {
        self.run(&["requeuehold", &job.to_string()]).map(|_| ())
    }
}

fn join_ids(jobs: &[u64]) -> String {
    jobs.iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(",")
}
