//! `lachesis compare --slurm TASKS`: the comparison as a Slurm job array. Each task runs this
//! binary with the same arguments and `--shard I/TASKS` (so the cluster's nodes must see the
//! binary, the working directory and `--out`, as on a shared file system); this process
//! waits for the array, resubmits the tasks that left no shard (failed, cancelled, or out of
//! time; Slurm requeues preempted ones itself), and gives up naming them when the retries
//! are spent. `compare` then merges the shards into the report one run would write.

use anyhow::{Context, Result, bail, ensure};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// The `--slurm*` flags of `compare` (and of `train`, for its card's comparisons).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct SlurmArgs {
    /// Run the comparison (with `train`, each of the model card's) as a Slurm job array of this
    /// many tasks (each `compare --shard I/TASKS`, the nodes seeing this binary, the working
    /// directory and the output), resubmit tasks that leave no shard, and merge them into the
    /// report one run writes.
    #[arg(long = "slurm", value_name = "TASKS")]
    pub tasks: Option<usize>,
    /// With `--slurm`: the partition of the tasks.
    #[arg(long = "slurm-partition", requires = "tasks")]
    pub partition: Option<String>,
    /// With `--slurm`: the account charged.
    #[arg(long = "slurm-account", requires = "tasks")]
    pub account: Option<String>,
    /// With `--slurm`: each task's time limit, in Slurm's format (e.g. 1:00:00).
    #[arg(long = "slurm-time", requires = "tasks")]
    pub time: Option<String>,
    /// With `--slurm`: at most this many tasks at once.
    #[arg(long = "slurm-throttle", requires = "tasks")]
    pub throttle: Option<usize>,
    /// With `--slurm`: how often tasks that left no shard are resubmitted (default 2).
    #[arg(long = "slurm-retries", requires = "tasks")]
    pub retries: Option<usize>,
}

impl SlurmArgs {
    /// The array to run, when `--slurm` is given.
    pub fn array(&self) -> Option<ArraySpec> {
        Some(ArraySpec {
            tasks: self.tasks?,
            partition: self.partition.clone(),
            account: self.account.clone(),
            time: self.time.clone(),
            throttle: self.throttle,
            retries: self.retries.unwrap_or(2),
        })
    }
}

/// How the array is submitted.
#[derive(Debug, Clone)]
pub struct ArraySpec {
    pub tasks: usize,
    pub partition: Option<String>,
    pub account: Option<String>,
    /// Slurm's time limit of each task (`--time`, e.g. `1:00:00`).
    pub time: Option<String>,
    /// At most this many tasks at once (`--array=...%N`).
    pub throttle: Option<usize>,
    /// Resubmissions of the tasks that left no shard, after the first submission.
    pub retries: usize,
}

/// The `--slurm*` flags (each takes a value), which the tasks and the report's command line
/// do without.
pub const FLAGS: [&str; 6] = [
    "--slurm",
    "--slurm-partition",
    "--slurm-account",
    "--slurm-time",
    "--slurm-throttle",
    "--slurm-retries",
];

/// How often the queue is looked at.
const POLL: Duration = Duration::from_secs(2);

/// `args` (a `compare` command line, program first) without the flags of `drop` and their
/// values (`--flag VALUE` or `--flag=VALUE`; `--merge` is the one that takes none).
pub fn without_flags(args: impl IntoIterator<Item = String>, drop: &[&str]) -> Vec<String> {
    let mut out = Vec::new();
    let mut args = args.into_iter();
    while let Some(a) = args.next() {
        let name = a.split_once('=').map_or(a.as_str(), |(n, _)| n);
        if !drop.contains(&name) {
            out.push(a);
        } else if name == a && a != "--merge" {
            args.next();
        }
    }
    out
}

/// `word` quoted for sh.
fn quoted(word: &str) -> String {
    format!("'{}'", word.replace('\'', r"'\''"))
}

/// The array's batch script: every task runs `program args --shard $SLURM_ARRAY_TASK_ID/N`
/// in `cwd`, its log in `logs/task-I.log`.
pub fn script(
    spec: &ArraySpec,
    cwd: &Path,
    logs: &Path,
    program: &Path,
    args: &[String],
) -> String {
    let mut s = String::from("#!/bin/sh\n#SBATCH --job-name=lachesis-compare\n");
    s += &format!("#SBATCH --output={}/task-%a.log\n", logs.display());
    // A preempted task goes back to the queue rather than failing.
    s += "#SBATCH --requeue\n";
    for (flag, value) in [
        ("partition", &spec.partition),
        ("account", &spec.account),
        ("time", &spec.time),
    ] {
        if let Some(v) = value {
            s += &format!("#SBATCH --{flag}={v}\n");
        }
    }
    s += &format!("cd {} || exit 1\n", quoted(&cwd.display().to_string()));
    let words: Vec<String> = std::iter::once(program.display().to_string())
        .chain(args.iter().cloned())
        .map(|w| quoted(&w))
        .collect();
    s += &format!(
        "exec {} --shard \"${{SLURM_ARRAY_TASK_ID}}/{}\"\n",
        words.join(" "),
        spec.tasks
    );
    s
}

/// Submits the array (the tasks of `indices`), returns its job id.
fn submit(spec: &ArraySpec, script: &Path, indices: &[usize]) -> Result<String> {
    let list: Vec<String> = indices.iter().map(usize::to_string).collect();
    let mut array = list.join(",");
    if let Some(n) = spec.throttle {
        array += &format!("%{n}");
    }
    let out = Command::new("sbatch")
        .args(["--parsable", &format!("--array={array}")])
        .arg(script)
        .output()
        .context("running sbatch (is Slurm's client installed and SLURM_CONF set?)")?;
    ensure!(
        out.status.success(),
        "sbatch {}: {}",
        script.display(),
        String::from_utf8_lossy(&out.stderr).trim()
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let id = text.trim().split(';').next().unwrap_or("").to_string();
    ensure!(!id.is_empty(), "sbatch printed no job id: {text:?}");
    Ok(id)
}

/// Whether any task of job `id` is still queued or running.
fn queued(id: &str) -> Result<bool> {
    let out = Command::new("squeue")
        .args(["-h", "-r", "-j", id, "-o", "%i"])
        .output()
        .context("running squeue")?;
    // squeue refuses a job id it has forgotten: the job is over.
    Ok(out.status.success() && !String::from_utf8_lossy(&out.stdout).trim().is_empty())
}

/// The shard indices of `tasks` with no file in `shards`.
fn missing(shards: &Path, tasks: usize) -> Vec<usize> {
    (0..tasks)
        .filter(|&index| {
            let shard = lachesis_agent::harness::Shard {
                index,
                count: tasks,
            };
            !shards.join(shard.file_name()).is_file()
        })
        .collect()
}

/// Runs the array for `args` (a compare command line without `--slurm*` flags, program
/// first) until every shard is in `out/shards/`, resubmitting missing ones `spec.retries`
/// times at most.
pub fn run(spec: &ArraySpec, args: &[String], out: &Path) -> Result<()> {
    ensure!(spec.tasks >= 1, "--slurm: give at least one task");
    let shards = out.join("shards");
    let logs = out.join("slurm");
    // Shards of an earlier split must not be merged with this one's.
    let _ = std::fs::remove_dir_all(&shards);
    std::fs::create_dir_all(&logs).with_context(|| format!("creating {}", logs.display()))?;
    let cwd = std::env::current_dir().context("reading the working directory")?;
    let program = std::env::current_exe().context("finding this binary")?;
    let script_path = logs.join("array.sh");
    std::fs::write(
        &script_path,
        script(spec, &cwd, &absolute(&cwd, &logs), &program, &args[1..]),
    )
    .with_context(|| format!("writing {}", script_path.display()))?;
    let mut todo: Vec<usize> = (0..spec.tasks).collect();
    for attempt in 0..=spec.retries {
        let id = submit(spec, &script_path, &todo)?;
        outln!(
            "slurm: job {id}, {} of {} tasks (attempt {} of {}); logs in {}",
            todo.len(),
            spec.tasks,
            attempt + 1,
            spec.retries + 1,
            logs.display()
        );
        while queued(&id)? {
            std::thread::sleep(POLL);
        }
        todo = missing(&shards, spec.tasks);
        if todo.is_empty() {
            return Ok(());
        }
        eprintln!("slurm: tasks {todo:?} of job {id} left no shard");
    }
    let logs_of: Vec<String> = todo
        .iter()
        .map(|i| logs.join(format!("task-{i}.log")).display().to_string())
        .collect();
    bail!(
        "--slurm: tasks {todo:?} left no shard after {} attempts; nothing merged (logs: {})",
        spec.retries + 1,
        logs_of.join(", ")
    )
}

fn absolute(cwd: &Path, p: &Path) -> PathBuf {
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        cwd.join(p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        s.split(' ').map(String::from).collect()
    }

    #[test]
    fn the_slurm_flags_and_their_values_are_dropped() {
        let args = words(
            "lachesis compare --slurm 4 --windows 2 --slurm-partition=gpu --merge \
             --slurm-throttle 2 --out o",
        );
        assert_eq!(
            without_flags(args, &FLAGS),
            words("lachesis compare --windows 2 --merge --out o")
        );
        let args = words("lachesis compare --shard 1/3 --merge --out o");
        assert_eq!(
            without_flags(args, &["--shard", "--merge"]),
            words("lachesis compare --out o")
        );
    }

    #[test]
    fn the_script_runs_each_task_on_its_shard_in_the_submitting_directory() {
        let spec = ArraySpec {
            tasks: 4,
            partition: Some("gpu".into()),
            account: None,
            time: Some("1:00:00".into()),
            throttle: Some(2),
            retries: 2,
        };
        let s = script(
            &spec,
            Path::new("/work/it's"),
            Path::new("/work/out/slurm"),
            Path::new("/bin/lachesis"),
            &words("compare --policies a,b"),
        );
        assert_eq!(
            s,
            "#!/bin/sh\n#SBATCH --job-name=lachesis-compare\n\
             #SBATCH --output=/work/out/slurm/task-%a.log\n#SBATCH --requeue\n\
             #SBATCH --partition=gpu\n#SBATCH --time=1:00:00\n\
             cd '/work/it'\\''s' || exit 1\n\
             exec '/bin/lachesis' 'compare' '--policies' 'a,b' --shard \"${SLURM_ARRAY_TASK_ID}/4\"\n"
        );
    }
}
