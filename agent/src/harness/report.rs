//! The compare report: `report.md`, `report.html` with SVG plots (plotters' SVG backend, no
//! system libraries), `runs.csv` (one row per run) and `comparison.json`; and `rewrite_page`,
//! which writes the HTML page of a compare directory again from its `comparison.json` and
//! plots (`lachesis report DIR`). The page's stylesheet is the caller's (the binary passes
//! the dashboard's, which lives in the service crate).

use super::HarnessError;
use super::compare::{
    Comparison, MetricView, RunView, Setup, fmt_num, fmt_paired, reports_view, runs_view,
};
use plotters::prelude::*;
use serde_json::json;
use std::fmt::Write as _;
use std::fs;
use std::path::Path;

const COLORS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

/// The plots' files, in the order the pages show them.
const PLOTS: [&str; 6] = [
    "jct_cdf.svg",
    "wait_cdf.svg",
    "tenant_share.svg",
    "load_sweep.svg",
    "alloc_timeline.svg",
    "queue_timeline.svg",
];

/// `comparison.json` as `write` leaves it.
#[derive(serde::Deserialize)]
struct Saved {
    setup: Setup,
    metrics: Vec<SavedMetric>,
}

#[derive(serde::Deserialize)]
struct SavedMetric {
    key: String,
    label: String,
    better: lachesis_env::metrics::paired::Better,
    policies: Vec<SavedPolicy>,
}

#[derive(serde::Deserialize)]
struct SavedPolicy {
    mean: f64,
    vs_baseline: Option<lachesis_env::metrics::paired::Paired>,
}

/// Writes the HTML page of the compare directory `dir` to `out` (in the look of `style`, a
/// stylesheet) from its `comparison.json` and plots: the same page `write` wrote, for a
/// directory written before the look changed or copied without it.
pub fn rewrite_page(dir: &Path, out: &Path, style: &str) -> Result<(), HarnessError> {
    let path = dir.join("comparison.json");
    let text = fs::read_to_string(&path).map_err(|source| HarnessError::Io {
        path: path.clone(),
        source,
    })?;
    let saved: Saved = serde_json::from_str(&text).map_err(|e| HarnessError::Config {
        path: path.clone(),
        what: "compare's comparison.json",
        message: e.to_string(),
    })?;
    let means: Vec<Vec<f64>> = saved
        .metrics
        .iter()
        .map(|m| m.policies.iter().map(|p| p.mean).collect())
        .collect();
    let paired: Vec<Vec<_>> = saved
        .metrics
        .iter()
        .map(|m| m.policies.iter().map(|p| p.vs_baseline.clone()).collect())
        .collect();
    let views: Vec<MetricView<'_>> = saved
        .metrics
        .iter()
        .zip(&means)
        .zip(&paired)
        .map(|((m, means), paired)| MetricView {
            key: &m.key,
            label: &m.label,
            better: m.better,
            means,
            paired,
        })
        .collect();
    let plots = PLOTS
        .into_iter()
        .map(|name| {
            let path = dir.join(name);
            fs::read_to_string(&path)
                .map_err(|source| HarnessError::Io { path, source })
                .map(|svg| (name, svg))
        })
        .collect::<Result<Vec<_>, _>>()?;
    fs::write(out, html(&saved.setup, &views, &plots, style)).map_err(|source| HarnessError::Io {
        path: out.to_path_buf(),
        source,
    })
}

/// Writes the report of `comparison` into `dir` (created if missing): `runs.csv`,
/// `comparison.json`, the plots, `report.md` and `report.html` (styled by `style`).
pub fn write(dir: &Path, comparison: &Comparison, style: &str) -> Result<(), HarnessError> {
    write_views(
        dir,
        &comparison.setup,
        &comparison.units,
        &runs_view(&comparison.runs, &comparison.setup.policies),
        &reports_view(&comparison.metrics),
        style,
    )
}

fn write_views<U: serde::Serialize>(
    dir: &Path,
    setup: &Setup,
    units: &[U],
    runs: &[RunView<'_>],
    metrics: &[MetricView<'_>],
    style: &str,
) -> Result<(), HarnessError> {
    let io = |path: std::path::PathBuf| move |source| HarnessError::Io { path, source };
    fs::create_dir_all(dir).map_err(io(dir.to_path_buf()))?;
    let put = |name: &str, text: String| -> Result<(), HarnessError> {
        let path = dir.join(name);
        fs::write(&path, text).map_err(io(path))
    };
    put("runs.csv", runs_csv(runs))?;
    let json = json!({
        "setup": setup,
        "units": units,
        "metrics": metrics.iter().map(|m| json!({
            "key": m.key, "label": m.label, "better": m.better,
            "policies": setup.policies.iter().enumerate().map(|(i, p)| json!({
                "policy": p, "mean": m.means[i], "vs_baseline": m.paired[i],
            })).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
    });
    put("comparison.json", serde_json::to_string_pretty(&json)?)?;
    let svgs = [
        cdf(setup, runs, "JCT", |r| r.jcts)?,
        cdf(setup, runs, "wait", |r| r.waits)?,
        tenant_share(setup, runs)?,
        load_sweep(setup, runs, units.len())?,
        timeline(setup, runs, "allocated GPUs", |r| r.allocated_gpus)?,
        timeline(setup, runs, "queue length", |r| r.queue_len as f64)?,
    ];
    let plots: Vec<(&str, String)> = PLOTS.into_iter().zip(svgs).collect();
    for (name, svg) in &plots {
        put(name, svg.clone())?;
    }
    put(
        "report.md",
        markdown(setup, metrics, &plots) + &tenant_waits(setup, runs) + &queue_section(setup, runs),
    )?;
    put("report.html", html(setup, metrics, &plots, style))?;
    Ok(())
}

/// One row per run; the typed-run columns (`effective_throughput`, `fastest_gpu_share`,
/// `shares`, `resizes`) only when some run has them (empty where a run has none), then the
/// pipeline columns likewise (`Summary::pipelines`).
fn runs_csv(runs: &[RunView<'_>]) -> String {
    let typed = runs
        .iter()
        .any(|r| r.summary.effective_throughput.is_some());
    let pipelines = runs.iter().any(|r| r.summary.pipelines.is_some());
    let mut s = String::from(
        "policy,unit,avg_jct_s,min_avg_jct_s,p50_jct_s,p95_jct_s,p99_jct_s,avg_wait_s,avg_bsld,makespan_s,\
         gpu_alloc_rate,frag_gpu_rate,energy_kwh,jain_fairness,preemption_waste_gpu_h,jobs,finished",
    );
    if typed {
        s.push_str(",effective_throughput,fastest_gpu_share,shares,resizes");
    }
    if pipelines {
        s.push_str(
            ",avg_pipeline_completion_s,avg_critical_path_slowdown,ready_wait_share,\
             dependency_never_satisfied",
        );
    }
    s.push('\n');
    let opt = |x: Option<f64>| x.map_or(String::new(), |v| v.to_string());
    for r in runs {
        let m = r.summary;
        let _ = write!(
            s,
            "{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{},{}",
            r.policy,
            r.unit,
            m.avg_jct_s,
            m.min_avg_jct_s,
            m.p50_jct_s,
            m.p95_jct_s,
            m.p99_jct_s,
            m.avg_wait_s,
            m.avg_bsld,
            m.makespan_s,
            m.gpu_alloc_rate,
            m.frag_gpu_rate,
            m.energy_kwh,
            m.jain_fairness,
            m.preemption_waste_gpu_h,
            m.jobs,
            m.finished
        );
        if typed {
            let _ = write!(
                s,
                ",{},{},{},{}",
                opt(m.effective_throughput),
                opt(m.fastest_gpu_share),
                m.shares,
                m.resizes
            );
        }
        if pipelines {
            let p = m.pipelines.as_ref();
            let _ = write!(
                s,
                ",{},{},{},{}",
                opt(p.map(|p| p.avg_completion_s)),
                opt(p.map(|p| p.avg_critical_path_slowdown)),
                opt(p.map(|p| p.ready_wait_share)),
                m.dependency_never_satisfied
            );
        }
        s.push('\n');
    }
    s
}

fn header(setup: &Setup) -> String {
    let verdict = setup
        .verdict
        .as_ref()
        .map_or(String::new(), |v| format!("- {v}\n"));
    let verdict = setup
        .captured_gap
        .iter()
        .fold(verdict, |acc, line| acc + &format!("- {line}\n"));
    let loads: Vec<String> = setup
        .loads
        .iter()
        .map(|l| l.map_or("trace's own".into(), |x| x.to_string()))
        .collect();
    format!(
        "- trace: `{}` ({} jobs)\n- cluster: `{}`: {}\n- policies: {}; baseline `{}`\n\
         - units: {} windows of {} jobs x offered loads {} x {} seeds = {} units, {} runs \
         (every policy on every unit)\n- wall time: {:.2} s on {} threads\n- command: `{}`\n\
         {verdict}",
        setup.trace,
        setup.trace_jobs,
        setup.cluster,
        setup.cluster_desc,
        setup
            .policies
            .iter()
            .map(|p| format!("`{p}`"))
            .collect::<Vec<_>>()
            .join(", "),
        setup.baseline,
        setup.windows,
        setup.window_jobs,
        loads.join(", "),
        setup.seeds,
        setup.units,
        setup.runs,
        setup.wall_s,
        setup.threads,
        setup.command
    )
}

fn markdown(setup: &Setup, metrics: &[MetricView<'_>], plots: &[(&str, String)]) -> String {
    let mut s = String::from("# Policy comparison\n\n");
    s.push_str(&header(setup));
    s.push_str(
        "\nEach cell: the mean over units, then the paired difference against the baseline \
         (policy - baseline) with its bootstrap 95% interval, and the units where the policy did \
         better (W) or worse (L).\n\n",
    );
    s.push_str("| metric | ");
    s.push_str(
        &setup
            .policies
            .iter()
            .map(|p| format!("`{p}`"))
            .collect::<Vec<_>>()
            .join(" | "),
    );
    s.push_str(" |\n|---|");
    s.push_str(&"---|".repeat(setup.policies.len()));
    s.push('\n');
    for m in metrics {
        let arrow = match m.better {
            lachesis_env::metrics::paired::Better::Lower => "↓",
            lachesis_env::metrics::paired::Better::Higher => "↑",
            lachesis_env::metrics::paired::Better::Neither => "(count)",
        };
        let _ = write!(s, "| {} {arrow} |", m.label);
        for (i, _) in setup.policies.iter().enumerate() {
            let _ = write!(
                s,
                " {} <br> {} |",
                fmt_num(m.means[i]),
                fmt_paired(&m.paired[i])
            );
        }
        s.push('\n');
    }
    s.push_str(HEADROOM);
    if typed(metrics) {
        s.push_str(TYPED);
    }
    s.push_str("\n## Plots\n\n");
    for (name, _) in plots {
        let _ = writeln!(s, "![{name}]({name})\n");
    }
    s.push_str("Per-run numbers: `runs.csv`; everything above as JSON: `comparison.json`.\n");
    s
}

/// `report.md`'s table of the longest wait per tenant (the ten with the longest), each cell
/// the mean over the units where the tenant had jobs; empty with fewer than two tenants.
fn tenant_waits(setup: &Setup, runs: &[RunView<'_>]) -> String {
    let k = setup.policies.len();
    // Tenant -> per policy (sum, units).
    let mut acc: std::collections::BTreeMap<&str, Vec<(f64, u32)>> = Default::default();
    for r in runs {
        for (t, w) in r.tenant_max_wait_s {
            let cell = &mut acc.entry(t.as_str()).or_insert_with(|| vec![(0.0, 0); k])
                [r.policy_idx.min(k.saturating_sub(1))];
            cell.0 += w;
            cell.1 += 1;
        }
    }
    if acc.len() < 2 {
        return String::new();
    }
    let mean = |c: &(f64, u32)| (c.1 > 0).then(|| c.0 / f64::from(c.1));
    let mut rows: Vec<(&str, Vec<Option<f64>>)> = acc
        .into_iter()
        .map(|(t, cells)| (t, cells.iter().map(mean).collect()))
        .collect();
    let worst = |cells: &[Option<f64>]| cells.iter().flatten().copied().fold(0.0, f64::max);
    rows.sort_by(|a, b| worst(&b.1).total_cmp(&worst(&a.1)).then(a.0.cmp(b.0)));
    let shown = rows.len().min(10);
    let mut s = format!(
        "\n## Longest wait per tenant\n\nThe longest wait (s) of each tenant's measured \
         finished jobs, mean over the units where it had jobs; the {shown} tenants with the \
         longest of {}.\n\n| tenant | {} |\n|---|{}\n",
        rows.len(),
        setup
            .policies
            .iter()
            .map(|p| format!("`{p}`"))
            .collect::<Vec<_>>()
            .join(" | "),
        "---|".repeat(k)
    );
    for (t, cells) in rows.iter().take(shown) {
        let cells: Vec<String> = cells
            .iter()
            .map(|c| c.map_or_else(|| "-".to_string(), fmt_num))
            .collect();
        let _ = writeln!(s, "| {t} | {} |", cells.join(" | "));
    }
    s
}

/// Runs with quotas only: per queue, each policy's mean over units of its queue metrics
/// (`super::compare::queue_table`).
fn queue_section(setup: &Setup, runs: &[RunView<'_>]) -> String {
    let k = setup.policies.len();
    let rows = super::compare::queue_table(runs.iter().map(|r| (r.policy_idx, r.summary)), k);
    if rows.is_empty() {
        return String::new();
    }
    let mut s = format!(
        "\n## Per queue\n\nEach queue's metrics (docs/quotas.md), mean over the units where it \
         had jobs.\n\n| queue | policy | {} |\n|---|---|{}\n",
        super::compare::QUEUE_COLUMNS.join(" | "),
        "---|".repeat(super::compare::QUEUE_COLUMNS.len())
    );
    for (queue, cells) in &rows {
        for (p, cell) in setup.policies.iter().zip(cells) {
            let values: Vec<String> = match cell {
                Some(c) => c.iter().map(|v| fmt_num(*v)).collect(),
                None => vec!["-".to_string(); super::compare::QUEUE_COLUMNS.len()],
            };
            let _ = writeln!(s, "| {queue} | `{p}` | {} |", values.join(" | "));
        }
    }
    s
}

/// What the two bound rows mean (both formats).
const HEADROOM: &str = "\nThe avg JCT lower bound of a run is the average, over the jobs its avg JCT \
     covers, of each job's true run time alone (started at submit on the fastest GPUs, never \
     preempted; with a throughput table, a typed job at its best table speed over the \
     cluster's GPU models, at its size): no scheduler can go below it, not even one that \
     knows every duration, so it is an upper bound on what any policy achieves. \
     Reducible avg JCT is the share of a run's avg JCT above that bound: the most any policy \
     could still win there. A policy cannot beat another by more than the other's reducible \
     share.\n";

/// What the typed-run rows mean (both formats; shown when the report has them).
const TYPED: &str = "\nEffective throughput: reference GPU-hours of work the typed jobs did (trace \
     duration x GPUs, as measured on the throughput table's reference GPU) per GPU-hour they \
     were allocated, restarts and lost work included; 1 = every job at its trace shape on the \
     reference GPU. GPU-time on fastest model: the share of their allocated GPU-time spent on \
     the cluster GPU model where the table says each runs fastest at its size. GPU shares \
     started and elastic resizes: how often the policy put a job on a GPU another used, and \
     resized a running elastic job (counts, neither better nor worse).\n";

/// Whether the report has the typed-run rows.
fn typed(metrics: &[MetricView<'_>]) -> bool {
    metrics.iter().any(|m| m.key == "effective_throughput")
}

fn html(
    setup: &Setup,
    metrics: &[MetricView<'_>],
    plots: &[(&str, String)],
    style: &str,
) -> String {
    let esc = |t: &str| {
        t.replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
    };
    // The dashboard's look (`lachesis serve`'s `/ui`), its stylesheet inlined: the page is
    // one file that opens anywhere.
    let mut s = format!(
        "<!doctype html><html lang=\"en\"><meta charset=\"utf-8\">\
         <title>Lachesis policy comparison</title><link rel=\"icon\" href=\"data:,\">\
         <style>{}\ntd.num{{white-space:nowrap}}.ci{{color:var(--muted);font-size:85%}}\
         .plots{{display:flex;flex-wrap:wrap;gap:1em}}.plots>div{{background:var(--panel);\
         border:1px solid var(--line);border-radius:6px;padding:.5em}}</style>\
         <header><h1>Lachesis</h1><nav><a class=\"active\">Policy comparison</a></nav></header>\
         <main><div class=\"cards\">",
        style
    );
    for (value, key) in [
        (setup.policies.len().to_string(), "policies"),
        (setup.units.to_string(), "units"),
        (setup.runs.to_string(), "runs"),
        (setup.baseline.clone(), "baseline"),
    ] {
        let _ = write!(
            s,
            "<div class=\"card\"><div class=\"v\">{}</div><div class=\"k\">{key}</div></div>",
            esc(&value)
        );
    }
    s.push_str("</div><ul>");
    for line in header(setup).lines() {
        let _ = write!(s, "<li>{}</li>", esc(line.trim_start_matches("- ")));
    }
    s.push_str("</ul><table><tr><th>metric</th>");
    for p in &setup.policies {
        let _ = write!(s, "<th>{}</th>", esc(p));
    }
    s.push_str("</tr>");
    for m in metrics {
        let _ = write!(s, "<tr><td>{}</td>", esc(m.label));
        for (i, _) in setup.policies.iter().enumerate() {
            let _ = write!(
                s,
                "<td class=\"num\">{}<br><span class=\"ci\">{}</span></td>",
                fmt_num(m.means[i]),
                esc(&fmt_paired(&m.paired[i]))
            );
        }
        s.push_str("</tr>");
    }
    s.push_str("</table>");
    let typed_note = if typed(metrics) {
        format!("<p class=\"note\">{}</p>", esc(TYPED.trim()))
    } else {
        String::new()
    };
    let _ = write!(
        s,
        "<p class=\"note\">{}</p>{typed_note}<h2>Plots</h2><div class=\"plots\">",
        esc(HEADROOM.trim())
    );
    for (_, svg) in plots {
        let _ = write!(s, "<div>{svg}</div>");
    }
    s.push_str("</div></main></html>");
    s
}

/// Empirical CDF per policy of a per-job quantity, pooled over every unit (log scale).
fn cdf(
    setup: &Setup,
    runs: &[RunView<'_>],
    what: &str,
    values: for<'r> fn(&RunView<'r>) -> &'r [f64],
) -> Result<String, HarnessError> {
    let mut per_policy: Vec<Vec<f64>> = vec![Vec::new(); setup.policies.len()];
    for r in runs {
        per_policy[r.policy_idx].extend_from_slice(values(r));
    }
    for v in &mut per_policy {
        v.sort_by(f64::total_cmp);
    }
    let max = per_policy
        .iter()
        .filter_map(|v| v.last())
        .copied()
        .fold(1.0, f64::max);
    let series: Vec<Vec<(f64, f64)>> = per_policy
        .iter()
        .map(|v| {
            v.iter()
                .enumerate()
                .map(|(i, x)| (x.max(1.0).log10(), (i + 1) as f64 / v.len() as f64))
                .collect()
        })
        .collect();
    line_chart(
        &format!("{what} distribution (all units)"),
        &format!("log10 {what} (s), values below 1 s shown at 0"),
        "fraction of jobs",
        (0.0, max.log10().max(1.0)),
        (0.0, 1.0),
        &setup.policies,
        &series,
    )
}

/// Share of the served GPU-time per tenant (the largest tenants), one bar per policy.
fn tenant_share(setup: &Setup, runs: &[RunView<'_>]) -> Result<String, HarnessError> {
    let mut per_policy: Vec<std::collections::BTreeMap<&str, f64>> =
        vec![Default::default(); setup.policies.len()];
    let mut total: std::collections::BTreeMap<&str, f64> = Default::default();
    for r in runs {
        for (t, s) in r.tenant_gpu_s {
            *per_policy[r.policy_idx].entry(t.as_str()).or_insert(0.0) += s;
            *total.entry(t.as_str()).or_insert(0.0) += s;
        }
    }
    let mut tenants: Vec<(&str, f64)> = total.into_iter().collect();
    tenants.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(b.0)));
    tenants.truncate(10);
    let shares: Vec<Vec<f64>> = per_policy
        .iter()
        .map(|m| {
            let sum: f64 = m.values().sum();
            tenants
                .iter()
                .map(|(t, _)| m.get(t).copied().unwrap_or(0.0) / sum.max(1e-12))
                .collect()
        })
        .collect();
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (720, 420)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_error)?;
        let n = tenants.len().max(1);
        let k = setup.policies.len().max(1);
        let ymax = shares.iter().flatten().copied().fold(0.05, f64::max) * 1.1;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                "Share of served GPU-time by tenant (largest 10)",
                ("sans-serif", 18),
            )
            .margin(10)
            .x_label_area_size(36)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..n as f64, 0.0..ymax)
            .map_err(plot_error)?;
        let names: Vec<String> = tenants.iter().map(|(t, _)| t.to_string()).collect();
        chart
            .configure_mesh()
            .x_desc("tenant")
            .y_desc("share")
            .x_labels(n)
            .x_label_formatter(&|x| names.get(x.floor() as usize).cloned().unwrap_or_default())
            .draw()
            .map_err(plot_error)?;
        for (p, (name, share)) in setup.policies.iter().zip(&shares).enumerate() {
            let color = COLORS[p % COLORS.len()];
            let width = 0.8 / k as f64;
            chart
                .draw_series(share.iter().enumerate().map(|(t, v)| {
                    let x0 = t as f64 + 0.1 + p as f64 * width;
                    Rectangle::new([(x0, 0.0), (x0 + width, *v)], color.filled())
                }))
                .map_err(plot_error)?
                .label(name.as_str())
                .legend(move |(lx, ly)| {
                    Rectangle::new([(lx, ly - 5), (lx + 12, ly + 5)], color.filled())
                });
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(plot_error)?;
        root.present().map_err(plot_error)?;
    }
    Ok(svg)
}

/// Mean average JCT per policy at each load.
fn load_sweep(setup: &Setup, runs: &[RunView<'_>], units: usize) -> Result<String, HarnessError> {
    let loads: Vec<f64> = setup.loads.iter().map(|l| l.unwrap_or(0.0)).collect();
    let per_load = units / loads.len().max(1) / setup.windows.max(1);
    let _ = per_load;
    let mut series = vec![Vec::new(); setup.policies.len()];
    for (li, load) in loads.iter().enumerate() {
        for (pi, s) in series.iter_mut().enumerate() {
            // Units are window-major, then load, then seed.
            let seeds = setup.seeds as usize;
            let vals: Vec<f64> = runs
                .iter()
                .filter(|r| r.policy_idx == pi && (r.unit / seeds) % loads.len() == li)
                .map(|r| r.summary.avg_jct_s)
                .collect();
            s.push((*load, lachesis_env::metrics::mean(&vals)));
        }
    }
    let ymax = series.iter().flatten().map(|p| p.1).fold(1.0, f64::max) * 1.05;
    let (xmin, xmax) = (
        loads.iter().copied().fold(f64::INFINITY, f64::min),
        loads.iter().copied().fold(0.0, f64::max),
    );
    let (xmin, xmax) = if xmax > xmin {
        (xmin, xmax)
    } else {
        (xmin - 0.1, xmax + 0.1)
    };
    line_chart(
        "Average JCT vs offered load",
        "offered load",
        "avg JCT (s)",
        (xmin, xmax),
        (0.0, ymax),
        &setup.policies,
        &series,
    )
}

/// A timeline of the first unit (window 0, first load, seed 0) for every policy.
fn timeline(
    setup: &Setup,
    runs: &[RunView<'_>],
    what: &str,
    get: fn(&lachesis_env::metrics::TimelineRow) -> f64,
) -> Result<String, HarnessError> {
    let mut series = vec![Vec::new(); setup.policies.len()];
    for r in runs.iter().filter(|r| r.unit == 0) {
        let t0 = r.timeline.first().map_or(0.0, |p| p.time_s);
        series[r.policy_idx] = r
            .timeline
            .iter()
            .map(|p| ((p.time_s - t0) / 3600.0, get(p)))
            .collect();
    }
    let xmax = series.iter().flatten().map(|p| p.0).fold(1.0, f64::max);
    let ymax = series.iter().flatten().map(|p| p.1).fold(1.0, f64::max) * 1.05;
    line_chart(
        &format!("{what} over time (unit 0)"),
        "hours",
        what,
        (0.0, xmax),
        (0.0, ymax),
        &setup.policies,
        &series,
    )
}

fn line_chart(
    title: &str,
    x_label: &str,
    y_label: &str,
    x: (f64, f64),
    y: (f64, f64),
    names: &[String],
    series: &[Vec<(f64, f64)>],
) -> Result<String, HarnessError> {
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (720, 420)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_error)?;
        let mut chart = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(36)
            .y_label_area_size(60)
            .build_cartesian_2d(x.0..x.1, y.0..y.1)
            .map_err(plot_error)?;
        chart
            .configure_mesh()
            .x_desc(x_label)
            .y_desc(y_label)
            .draw()
            .map_err(plot_error)?;
        for (i, (name, points)) in names.iter().zip(series).enumerate() {
            let color = COLORS[i % COLORS.len()];
            chart
                .draw_series(LineSeries::new(
                    points.iter().copied(),
                    color.stroke_width(2),
                ))
                .map_err(plot_error)?
                .label(name.as_str())
                .legend(move |(lx, ly)| {
                    PathElement::new(vec![(lx, ly), (lx + 16, ly)], color.stroke_width(2))
                });
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(plot_error)?;
        root.present().map_err(plot_error)?;
    }
    Ok(svg)
}

fn plot_error(e: impl std::fmt::Display) -> HarnessError {
    HarnessError::Plot(e.to_string())
}
