//! `lachesis probe`: reads this node's GPUs (NVML), CPUs and memory (`/proc`), prints the node
//! as the decision service takes it, and optionally pushes it (`ReportNodes`), once or every N
//! seconds. docs/probe.md has the mapping rules and how to run it as a service.

use anyhow::{Context, Result};
use lachesis_serve::client;
use lachesis_serve::probe::{MapOptions, NodeReader, NvmlReader, Probe, RecordedReader, host};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[derive(Debug, clap::Args)]
pub struct Args {
    /// The node's name in the scheduler (Slurm NodeName, Kubernetes node name); default: the
    /// hostname.
    #[arg(long)]
    node_name: Option<String>,
    /// GPU model to report (e.g. A100-80G), instead of the family read from NVML (A100).
    #[arg(long)]
    gpu_model: Option<String>,
    /// A label to add, KEY=VALUE (repeatable), e.g. rack=r12, nvlink_domain=nvl72-3.
    #[arg(long = "label", value_name = "KEY=VALUE", value_parser = parse_label)]
    labels: Vec<(String, String)>,
    /// Print the node as JSON (the `Node` message) instead of a table.
    #[arg(long, conflicts_with = "interval_s")]
    json: bool,
    /// Replay recorded readings (JSON: one reading, or an array read in turn) instead of NVML.
    #[arg(long, value_name = "FILE")]
    recorded: Option<PathBuf>,
    /// Also write the readings to FILE, in the format --recorded replays.
    #[arg(long, value_name = "FILE", conflicts_with = "interval_s")]
    record: Option<PathBuf>,
    /// Where the host's /proc is (a container may mount it elsewhere).
    #[arg(long, value_name = "DIR", default_value = "/proc")]
    proc: PathBuf,
    /// Send the node to the decision service at ADDR (host:port) through ReportNodes.
    #[arg(long, value_name = "ADDR")]
    push: Option<String>,
    /// File holding the bearer token to present.
    #[arg(long, requires = "push")]
    token_file: Option<PathBuf>,
    /// CA certificate (PEM) to check a TLS service against; implies TLS.
    #[arg(long, requires = "push")]
    ca: Option<PathBuf>,
    /// Push every N seconds until stopped (keep N well under the service's
    /// inventory_ttl_ms); without it, push once.
    #[arg(long, value_name = "N", requires = "push", value_parser = clap::value_parser!(u64).range(1..))]
    interval_s: Option<u64>,
}

fn parse_label(text: &str) -> Result<(String, String), String> {
    match text.split_once('=') {
        Some((k, v)) if !k.trim().is_empty() => Ok((k.trim().to_string(), v.to_string())),
        _ => Err(format!("{text:?} is not KEY=VALUE")),
    }
}

pub fn run(args: &Args) -> Result<()> {
    let options = MapOptions {
        node_name: args.node_name.clone(),
        gpu_model: args.gpu_model.clone(),
        labels: args.labels.iter().cloned().collect::<BTreeMap<_, _>>(),
    };
    let mut reader: Box<dyn NodeReader> = match &args.recorded {
        Some(path) => Box::new(RecordedReader::open(path)?),
        None => Box::new(NvmlReader::with_library(
            lachesis_serve::probe::nvml::NVML_LIBRARY,
            host::Proc::new(&args.proc),
        )?),
    };
    let token = match &args.token_file {
        Some(path) => Some(client::read_token(path)?),
        None => None,
    };
    let push = args.push.as_deref().map(|addr| Push {
        addr,
        token: token.as_deref(),
        ca: args.ca.as_deref(),
    });
    match (push, args.interval_s) {
        (Some(push), Some(every)) => every_interval(reader.as_mut(), &options, &push, every),
        (push, _) => {
            let probe = Probe::take(reader.as_mut(), &options)
                .with_context(|| format!("probing ({})", reader.source()))?;
            if let Some(path) = &args.record {
                std::fs::write(path, probe.reading_json() + "\n")
                    .with_context(|| format!("writing the readings to {}", path.display()))?;
            }
            if args.json {
                outln!("{}", probe.node_json());
            } else {
                outln!("{}", probe.text());
            }
            if let Some(push) = push {
                let line = push.send(&probe)?;
                eprintln!("{line}");
            }
            Ok(())
        }
    }
}

/// Where and how to push.
struct Push<'a> {
    addr: &'a str,
    token: Option<&'a str>,
    ca: Option<&'a Path>,
}

impl Push<'_> {
    /// Sends the node; returns a line saying what the service answered.
    fn send(&self, probe: &Probe) -> Result<String> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .context("starting the async runtime")?;
        let name = &probe.node().name;
        let reply = runtime
            .block_on(client::report_nodes(
                self.addr,
                std::slice::from_ref(probe.node()),
                &format!("probe@{name}"),
                self.token,
                self.ca,
            ))
            .with_context(|| format!("pushing node {name} to {}", self.addr))?;
        Ok(format!(
            "pushed node {name} to {}: accepted {}, the service knows {} node(s)",
            self.addr, reply.accepted, reply.known
        ))
    }
}

/// Reads and pushes every `every_s` seconds, forever. A failed read or push is reported and
/// retried at the next tick (the service may be restarting); only a reader that cannot start
/// ends the program, before the loop.
fn every_interval(
    reader: &mut dyn NodeReader,
    options: &MapOptions,
    push: &Push<'_>,
    every_s: u64,
) -> Result<()> {
    let every = Duration::from_secs(every_s);
    let mut next = Instant::now();
    let mut failures: u64 = 0;
    loop {
        let outcome = Probe::take(reader, options)
            .with_context(|| format!("probing ({})", reader.source()))
            .and_then(|probe| push.send(&probe));
        match outcome {
            Ok(line) => {
                failures = 0;
                outln!("{line}");
            }
            Err(e) => {
                failures += 1;
                eprintln!(
                    "error: {} (failure {failures} in a row; next try in {every_s} s)",
                    crate::error_chain(&e)
                );
            }
        }
        next += every;
        let now = Instant::now();
        if next > now {
            std::thread::sleep(next - now);
        } else {
            // A read or push took longer than the interval: start again from now.
            next = now;
        }
    }
}
