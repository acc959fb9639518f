//! A progress bar for long runs: appears after a second, only on a terminal, never with
//! `--quiet`.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use lachesis_env::sim::Progress;
use std::io::IsTerminal;
use std::time::{Duration, Instant};

#[derive(Debug)]
pub struct RunProgress {
    started: Instant,
    enabled: bool,
    bar: Option<ProgressBar>,
}

impl RunProgress {
    pub fn new(quiet: bool) -> Self {
        RunProgress {
            started: Instant::now(),
            enabled: !quiet && std::io::stderr().is_terminal(),
            bar: None,
        }
    }

    pub fn update(&mut self, p: Progress) {
        if !self.enabled || (self.bar.is_none() && self.started.elapsed() < Duration::from_secs(1))
        {
            return;
        }
        let bar = self.bar.get_or_insert_with(|| {
            let bar = ProgressBar::with_draw_target(Some(p.jobs), ProgressDrawTarget::stderr())
                .with_elapsed(self.started.elapsed());
            bar.set_style(
                ProgressStyle::with_template(
                    "{spinner} [{elapsed_precise}] {wide_bar} {pos}/{len} jobs done, ETA {eta} {msg}",
                )
                .expect("the template is valid"),
            );
            bar
        });
        bar.set_position(p.finished);
        bar.set_message(format!(
            "({} events, sim time {:.1} h)",
            p.events,
            p.now.secs_f64() / 3600.0
        ));
    }

    pub fn finish(self) {
        if let Some(bar) = self.bar {
            bar.finish_and_clear();
        }
    }
}
