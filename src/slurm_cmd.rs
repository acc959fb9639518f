//! `lachesis slurm-bridge`: Lachesis behind a real Slurm controller (see docs/slurm.md).

use anyhow::{Context, Result};
use lachesis_serve::slurm::metrics::BridgeMetrics;
use lachesis_serve::slurm::{Bridge, BridgeConfig, CommandCtl};
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, clap::Args)]
pub struct Args {
    /// Bridge configuration (TOML; deploy/slurm/bridge.toml is a commented example).
    #[arg(long)]
    config: PathBuf,
    /// Run one cycle and exit.
    #[arg(long)]
    once: bool,
    #[command(flatten)]
    log: crate::serve_cmd::LogArgs,
}

pub fn run(args: &Args) -> Result<()> {
    crate::serve_cmd::init_logging(&args.log);
    let cfg = BridgeConfig::load(&args.config)?;
    // Two workers: the cycle blocks on Slurm's commands while the metrics listener answers.
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(bridge_loop(cfg, args.once))
}

async fn bridge_loop(cfg: BridgeConfig, once: bool) -> Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let interval = Duration::from_millis(cfg.interval_ms);
    let ctl = CommandCtl::new(&cfg.slurm);
    let metrics = std::sync::Arc::new(BridgeMetrics::new());
    let metrics_line = if cfg.metrics_addr.trim().is_empty() {
        String::new()
    } else {
        let listener = tokio::net::TcpListener::bind(&cfg.metrics_addr)
            .await
            .with_context(|| format!("binding metrics_addr {}", cfg.metrics_addr))?;
        let addr = listener.local_addr()?;
        let m = std::sync::Arc::clone(&metrics);
        tokio::spawn(async move {
            if let Err(e) = lachesis_serve::slurm::metrics::serve(listener, m).await {
                tracing::warn!(error = %e, "metrics listener failed");
            }
        });
        format!("; metrics on {addr}")
    };
    let mut bridge = Bridge::new(cfg, ctl)?;
    let mut term = signal(SignalKind::terminate()).context("SIGTERM handler")?;
    let mut int = signal(SignalKind::interrupt()).context("SIGINT handler")?;
    println!(
        "lachesis slurm-bridge: deciding through {} every {} ms{metrics_line}",
        bridge.config().service.addr,
        interval.as_millis()
    );
    use std::io::Write;
    let _ = std::io::stdout().flush();
    loop {
        let started = std::time::Instant::now();
        let result = bridge.cycle().await;
        metrics.record(
            result.as_ref().map_err(|_| ()),
            started.elapsed().as_secs_f64(),
        );
        match result {
            Ok(r) => {
                if !(r.placed.is_empty()
                    && r.preempted.is_empty()
                    && r.to_slurm.is_empty()
                    && r.refused.is_empty()
                    && r.pin_failed.is_empty()
                    && r.reheld.is_empty())
                {
                    tracing::info!(
                        candidates = r.candidates,
                        placed = r.placed.len(),
                        preempted = ?r.preempted,
                        refused = ?r.refused,
                        pin_failed = ?r.pin_failed,
                        to_slurm = r.to_slurm.len(),
                        reheld = ?r.reheld,
                        decided_by = ?r.decided_by,
                        fallbacks = ?r.fallbacks,
                        torn_reads = r.torn_reads,
                        read_ms = r.read_ms as u64,
                        decide_ms = r.decide_ms as u64,
                        apply_ms = r.apply_ms as u64,
                        ms = started.elapsed().as_millis() as u64,
                        "cycle"
                    );
                }
            }
            // Slurm itself failing (controller down, a command refused) is not fatal: the
            // next cycle re-reads everything.
            Err(e) => tracing::warn!(error = %e, "cycle failed"),
        }
        if once {
            return Ok(());
        }
        let wait = interval.saturating_sub(started.elapsed());
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = term.recv() => break,
            _ = int.recv() => break,
        }
    }
    tracing::info!("stopping");
    Ok(())
}
