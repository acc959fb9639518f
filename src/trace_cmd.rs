//! `lachesis trace ...`: look at traces.

use anyhow::{Context, Result};
use lachesis_env::cluster::load_cluster;
use lachesis_env::trace::{TraceFormat, TraceStats, read_trace};
use std::path::PathBuf;

#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Jobs, span, GPU-demand histogram, durations, and offered load on a cluster.
    Stats {
        /// Trace file.
        path: PathBuf,
        /// Force the format: normalized, openb, itp.
        #[arg(long)]
        format: Option<String>,
        /// Cluster to compute the offered load on (preset, shape or TOML file).
        #[arg(long)]
        cluster: Option<String>,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
}

pub fn run(cmd: &Command) -> Result<()> {
    match cmd {
        Command::Stats {
            path,
            format,
            cluster,
            json,
        } => {
            let format = match format {
                None => None,
                Some(f) => Some(
                    TraceFormat::parse(f).with_context(|| format!("unknown trace format `{f}`"))?,
                ),
            };
            let read = read_trace(path, format)?;
            let cluster = cluster.as_deref().map(load_cluster).transpose()?;
            let stats = TraceStats::compute(&read.trace, Some(&read.report), cluster.as_ref());
            if *json {
                println!("{}", serde_json::to_string_pretty(&stats)?);
            } else {
                print!("{stats}");
            }
            Ok(())
        }
    }
}
