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

    /// All pins through one `scontrol` reading commands on stdin (one process, one RPC per
    /// job: about 2 ms a job instead of a process each). If that run reports any error, every
    /// pin is done again one by one (up to `PIN_THREADS` processes at once), so each job gets
    /// its own result; pinning a job twice to the same nodes is harmless.
    fn pin_many(&self, pins: &[(u64, Vec<String>, bool)]) -> Vec<Result<(), SlurmError>> {
        if pins.len() >= 2 && self.pin_batch(pins).is_ok() {
            return pins.iter().map(|_| Ok(())).collect();
        }
        self.pin_each(pins)
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

impl CommandCtl {
    /// `update` lines for every pin, fed to one `scontrol` on stdin.
    fn pin_batch(&self, pins: &[(u64, Vec<String>, bool)]) -> Result<(), SlurmError> {
        use std::io::Write;
        use std::process::Stdio;
        let mut input = String::new();
        for (job, nodes, restart) in pins {
            input.push_str(&format!(
                "update JobId={job} NodeList={}{}\n",
                nodes.join(","),
                if *restart { " StartTime=now" } else { "" }
            ));
        }
        let failed = |message: String| SlurmError {
            command: format!(
                "{} (stdin: {} updates)",
                self.scontrol.display(),
                pins.len()
            ),
            message,
        };
        let mut cmd = Command::new(&self.scontrol);
        cmd.env("SLURM_TIME_FORMAT", "%s")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        if let Some(conf) = &self.conf {
            cmd.env("SLURM_CONF", conf);
        }
        let mut child = cmd
            .spawn()
            .map_err(|e| failed(format!("cannot run: {e}")))?;
        if let Some(mut stdin) = child.stdin.take() {
            stdin
                .write_all(input.as_bytes())
                .map_err(|e| failed(format!("writing its input: {e}")))?;
        }
        let out = child
            .wait_with_output()
            .map_err(|e| failed(e.to_string()))?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() || !stderr.trim().is_empty() {
            return Err(failed(format!("{}: {}", out.status, stderr.trim())));
        }
        Ok(())
    }

    /// One `scontrol update` per pin, up to `PIN_THREADS` at once.
    fn pin_each(&self, pins: &[(u64, Vec<String>, bool)]) -> Vec<Result<(), SlurmError>> {
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
}

fn join_ids(jobs: &[u64]) -> String {
    jobs.iter()
        .map(u64::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// A stand-in `scontrol` that logs how it was called and fails for job 7.
    fn fake_scontrol() -> (PathBuf, PathBuf) {
        let dir =
            std::env::temp_dir().join(format!("lachesis-fake-scontrol-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("calls.log");
        let script = format!(
            "#!/bin/sh\nif [ $# -eq 0 ]; then\n  input=$(cat)\n  printf 'stdin:%s\\n' \"$input\" >> '{log}'\n  \
             case \"$input\" in *JobId=7\\ *) echo 'scontrol: error: Invalid job id specified' >&2; exit 1;; esac\n  \
             exit 0\nfi\nprintf 'args:%s\\n' \"$*\" >> '{log}'\n\
             case \"$*\" in *JobId=7\\ *) echo 'slurm_update error: Invalid job id specified' >&2; exit 1;; esac\nexit 0\n",
            log = log.display()
        );
        let path = dir.join("scontrol");
        std::fs::write(&path, script).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        (dir, log)
    }

    fn ctl(dir: &std::path::Path) -> CommandCtl {
        CommandCtl::new(&SlurmConfig {
            bin_dir: Some(dir.to_path_buf()),
            ..SlurmConfig::default()
        })
    }

    #[test]
    fn pins_go_through_one_scontrol_and_a_failure_is_attributed_per_job() {
        let (dir, log) = fake_scontrol();
        let c = ctl(&dir);
        let pins = vec![
            (1, vec!["a1".to_string()], false),
            (2, vec!["a2".to_string(), "a3".to_string()], true),
        ];
        assert!(c.pin_many(&pins).iter().all(Result::is_ok));
        let calls = std::fs::read_to_string(&log).unwrap();
        assert_eq!(
            calls,
            "stdin:update JobId=1 NodeList=a1\nupdate JobId=2 NodeList=a2,a3 StartTime=now\n",
            "one process for both"
        );

        std::fs::remove_file(&log).unwrap();
        let pins = vec![
            (1, vec!["a1".to_string()], false),
            (7, vec!["a2".to_string()], false),
            (3, vec!["a3".to_string()], false),
        ];
        let results = c.pin_many(&pins);
        assert!(results[0].is_ok() && results[2].is_ok(), "{results:?}");
        let e = results[1].as_ref().unwrap_err();
        assert!(e.message.contains("Invalid job id"), "{e}");
        let calls = std::fs::read_to_string(&log).unwrap();
        assert!(calls.starts_with("stdin:"), "{calls}");
        assert_eq!(
            calls.matches("args:update").count(),
            3,
            "then one by one: {calls}"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}
