//! `lachesis`: the command line. One binary, subcommands; each lives in its own module.

/// `println!` that ends the program quietly when stdout is closed (e.g. piped into `head`)
/// instead of panicking.
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        if let Err(e) = writeln!(std::io::stdout(), $($arg)*) {
            crate::stdout_failed(e);
        }
    }};
}

/// `print!` with the same handling as `outln!`.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        if let Err(e) = write!(std::io::stdout(), $($arg)*) {
            crate::stdout_failed(e);
        }
    }};
}

/// mimalloc for every subcommand: the service's requests and the simulator's steps allocate
/// many short-lived vectors, which glibc's malloc served at ~30% of a session request's CPU.
#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

mod bench;
mod bench_decide;
mod bench_env;
mod bench_fgd;
mod bench_fork;
mod bench_infer;
mod bench_lp;
mod bench_serve;
mod bench_slurm;
mod compare;
mod compare_slurm;
mod decide_session;
mod probe_cmd;
mod progress;
mod replay_cmd;
mod serve_cmd;
mod simulate;
mod slurm_cmd;
mod trace_cmd;
mod train_cmd;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// Lachesis: a learned scheduler for GPU clusters. Replays real traces in a fast simulator
/// and compares scheduling policies on them.
#[derive(Debug, Parser)]
#[command(name = "lachesis", version, about, propagate_version = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Replay a trace on a cluster under a policy; print the summary, write the outputs.
    Simulate(simulate::Args),
    /// Compare policies on identical windows, loads and seeds: tables, report, plots.
    Compare(Box<compare::Args>),
    /// Write the HTML page of a compare output directory (the dashboard's look) again.
    Report(compare::ReportArgs),
    /// Train a learned policy (behaviour cloning, then PPO) into a model directory.
    Train(train_cmd::Args),
    /// Work with traces.
    Trace {
        #[command(subcommand)]
        command: trace_cmd::Command,
    },
    /// List the registered policies and their parts.
    Policies,
    /// Run the decision service (gRPC, metrics, fallback chain, A/B and shadow routing).
    Serve(serve_cmd::ServeArgs),
    /// Send one cluster snapshot (JSON) to a running service and print its decision (with
    /// `--session`, then deltas on it).
    Decide(serve_cmd::DecideArgs),
    /// Drive a Slurm controller: hold jobs, ask the service, pin and release them.
    SlurmBridge(slurm_cmd::Args),
    /// Read this node's GPUs (NVML), CPUs and memory; print the node or push it to a service.
    Probe(probe_cmd::Args),
    /// Rebuild the traffic of a decision log as a trace and compare the arms on it offline.
    Replay(replay_cmd::Args),
    /// Benchmarks that print ratios and rates (not timed tests).
    Bench {
        #[command(subcommand)]
        command: bench::Command,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Simulate(args) => simulate::run(&args),
        Command::Compare(args) => compare::run(&args),
        Command::Report(args) => compare::report(&args),
        Command::Train(args) => train_cmd::run(&args),
        Command::Trace { command } => trace_cmd::run(&command),
        Command::Policies => {
            list_policies();
            Ok(())
        }
        Command::Serve(args) => serve_cmd::serve(&args),
        Command::Decide(args) => serve_cmd::decide(&args),
        Command::Probe(args) => probe_cmd::run(&args),
        Command::Replay(args) => replay_cmd::run(&args),
        Command::SlurmBridge(args) => slurm_cmd::run(&args),
        Command::Bench { command } => bench::run(&command),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {}", error_chain(&e));
            ExitCode::FAILURE
        }
    }
}

/// The error and its causes on one line, leaving out a cause whose text the line already holds
/// (library errors often quote their source in their own message).
fn error_chain(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if line.contains(&text) {
            continue;
        }
        if !line.is_empty() {
            line.push_str(": ");
        }
        line.push_str(&text);
    }
    line
}

/// A closed stdout (a pipe whose reader left) ends the program successfully; any other write
/// error is reported.
fn stdout_failed(e: std::io::Error) {
    if e.kind() == std::io::ErrorKind::BrokenPipe {
        std::process::exit(0);
    }
    eprintln!("error: writing to stdout: {e}");
    std::process::exit(1);
}

fn list_policies() {
    outln!(
        "Policies are named ORDER/PLACE[/MODIFIER...], e.g. fifo/best-fit, or are whole \
         policies (part `policy`) named alone, e.g. gavel-maxmin.\n"
    );
    for info in lachesis_env::policy::policy_catalog() {
        outln!("  {:<10} {:<15} {}", info.part, info.name, info.summary);
    }
}

#[cfg(test)]
mod tests {
    use super::Cli;
    use clap::{CommandFactory, Parser};

    /// Every subcommand's `--out` takes `-o` and its `--quiet` `-q`, as in other tools.
    #[test]
    fn output_flags_take_their_conventional_short_forms() {
        fn walk(cmd: &clap::Command, path: &str, seen: &mut Vec<String>) {
            for arg in cmd.get_arguments() {
                let want = match arg.get_long() {
                    Some("out") => 'o',
                    Some("quiet") => 'q',
                    _ => continue,
                };
                assert_eq!(arg.get_short(), Some(want), "{path} --{:?}", arg.get_long());
                seen.push(format!("{path} -{want}"));
            }
            for sub in cmd.get_subcommands() {
                walk(sub, &format!("{path} {}", sub.get_name()), seen);
            }
        }
        let mut seen = Vec::new();
        walk(&Cli::command(), "lachesis", &mut seen);
        // The commands that run simulations and print tables take both: `-o` for where the
        // files go, `-q` to keep the terminal to the essentials.
        for command in ["simulate", "compare", "train", "replay"] {
            for flag in ["-o", "-q"] {
                let want = format!("lachesis {command} {flag}");
                assert!(seen.contains(&want), "no {want}: {seen:?}");
            }
        }
        assert!(seen.len() >= 10, "{seen:?}");
        Cli::command().debug_assert();
        let cli = Cli::try_parse_from([
            "lachesis",
            "simulate",
            "--trace",
            "t.csv",
            "--cluster",
            "4x8:A100",
            "-o",
            "x",
            "-q",
        ]);
        assert!(cli.is_ok(), "{cli:?}");
        let cli = Cli::try_parse_from(["lachesis", "compare", "-q", "-o", "x"]);
        assert!(cli.is_ok(), "{cli:?}");
    }
}
