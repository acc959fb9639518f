//! The throughput table file, version 1: CSV, one rate a row. Reading checks every rule of
//! [`super::TableBuilder`] and names the file, the line and the field at fault; writing a table
//! and reading it back gives an equal table. Described with examples in
//! `docs/throughput-tables.md`.
//!
//! ```text
//! #lachesis-throughput v1
//! #reference,V100
//! workload,gpu,gpus,placement,rate,partner,partner_rate
//! ResNet-50 (batch size 64),V100,1,consolidated,4.394774823323071,,
//! ResNet-50 (batch size 64),V100,2,spread,6.866,,
//! ResNet-50 (batch size 64),V100,1,consolidated,3.02,LM (batch size 20),24.8
//! ```
//!
//! - Line 1 is `#lachesis-throughput v1`; line 2 `#reference,GPU`, the GPU model trace durations
//!   are measured on (see the module docs of [`super`]).
//! - Then the header, these 7 columns in any order, no others.
//! - `workload`: a workload type name (case-insensitive; the first spelling is kept). `gpu`: a
//!   catalog GPU model (any alias; stored as the catalog spells it). `gpus`: 1..=65536, the
//!   job's GPU count. `placement`: `consolidated` or `spread` (a 1-GPU row is consolidated).
//!   `rate`: finite, >= 0, in the source's unit; 0 = cannot run that way.
//! - A row with `partner` empty (and `partner_rate` empty) is the job alone. A row with a
//!   `partner` is a pair sharing one GPU (`gpus` 1, consolidated): `rate` is this workload's
//!   rate and `partner_rate` the partner's; both 0 = cannot share. A pair is written once, in
//!   either order, and both jobs need a row alone on that GPU. Pairs not listed cannot share.

use super::{Consolidation, MAX_GPUS, Refused, TableBuilder, ThroughputTable};
use crate::job::WorkloadType;
use crate::trace::TraceReadError;
use crate::trace::table::{self, Table, Unknown};
use csv::StringRecord;
use std::io::{Read, Write};
use std::path::Path;

/// The first line starts with this, then a space and the version.
pub const MAGIC: &str = "#lachesis-throughput";
/// The format version this build reads and writes.
pub const VERSION: &str = "v1";
/// First field of the reference line (line 2).
pub const REFERENCE: &str = "#reference";
/// The columns, in the order Lachesis writes them.
pub const COLUMNS: &[&str] = &[
    "workload",
    "gpu",
    "gpus",
    "placement",
    "rate",
    "partner",
    "partner_rate",
];

/// Why a throughput table could not be read. Each names the file, and the line and field.
#[derive(Debug, thiserror::Error)]
pub enum ThroughputError {
    #[error("{file}: {source}")]
    Io {
        file: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{file} line {line}: {problem}")]
    Line {
        file: String,
        line: u64,
        problem: String,
    },
    #[error("{file} line {line}, field {field}: {problem}")]
    Field {
        file: String,
        line: u64,
        field: String,
        problem: String,
    },
    #[error("{file}: {problem}")]
    File { file: String, problem: String },
    #[error(
        "{dir}: Sia's throughput profiles are not there. They carry no licence, so Lachesis does \
         not ship them: copy `sia-simulator/traces/` of siasosp23/artifacts (commit {commit}) \
         to that folder, or set {env} to a folder holding `sia/traces/`",
        commit = super::sia::COMMIT,
        env = super::sia::DIR_ENV
    )]
    SiaNotFound { dir: String },
}

impl From<TraceReadError> for ThroughputError {
    /// The CSV helpers shared with the trace readers report in their own error type.
    fn from(err: TraceReadError) -> Self {
        match err {
            TraceReadError::Io { file, source } => ThroughputError::Io { file, source },
            TraceReadError::Line {
                file,
                line,
                problem,
            } => ThroughputError::Line {
                file,
                line,
                problem,
            },
            TraceReadError::Field {
                file,
                line,
                field,
                problem,
            } => ThroughputError::Field {
                file,
                line,
                field,
                problem,
            },
            // The CSV helpers raise only the three above.
            TraceReadError::Trace { file, source } => ThroughputError::File {
                file,
                problem: source.to_string(),
            },
            TraceReadError::Options { file, problem } => ThroughputError::File { file, problem },
        }
    }
}

fn field_error(file: &str, line: u64, refused: Refused) -> ThroughputError {
    ThroughputError::Field {
        file: file.into(),
        line,
        field: refused.field.into(),
        problem: refused.problem,
    }
}

/// Reads the table file at `path`; the table is named after it.
pub fn read_path(path: &Path) -> Result<ThroughputTable, ThroughputError> {
    let file = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|source| ThroughputError::Io {
        file: file.clone(),
        source,
    })?;
    read(bytes.as_slice(), &file)
}

/// Reads a table; `source` names it in errors and becomes the table's name.
pub fn read(input: impl Read, source: &str) -> Result<ThroughputTable, ThroughputError> {
    let mut reader = table::csv_reader(input);
    let mut record = StringRecord::new();
    let found = table::next_record(source, &mut reader, &mut record)?;
    check_version(source, found.then_some(&record))?;

    let found = table::next_record(source, &mut reader, &mut record)?;
    let reference_line = if found {
        table::line_of(&record)
    } else {
        reader.position().line()
    };
    let reference = match (found, record.get(0).map(str::trim), record.len()) {
        (true, Some(REFERENCE), 2) => record.get(1).unwrap_or_default().to_string(),
        _ => {
            return Err(ThroughputError::Line {
                file: source.into(),
                line: reference_line,
                problem: format!(
                    "expected the reference line `{REFERENCE},GPU` (one GPU model), got {}",
                    table::quote(&record.iter().collect::<Vec<_>>().join(","))
                ),
            });
        }
    };
    let mut builder = TableBuilder::new(source, &reference)
        .map_err(|refused| field_error(source, reference_line, refused))?;

    if !table::next_record(source, &mut reader, &mut record)? {
        return Err(table::missing_header(source, &reader, COLUMNS).into());
    }
    let mut rows = Table::with_header(source, reader, record, COLUMNS, Unknown::Reject)?;
    while let Some(row) = rows.next_row()? {
        add_row(&row, &mut builder)?;
    }
    builder.finish().map_err(|(line, refused)| {
        let line = if line == 0 { reference_line } else { line };
        field_error(source, line, refused)
    })
}

/// Checks line 1 is `#lachesis-throughput v1`.
fn check_version(source: &str, first: Option<&StringRecord>) -> Result<(), ThroughputError> {
    let text = first.map_or(String::new(), |r| r.iter().collect::<Vec<_>>().join(","));
    let problem = match text.trim().strip_prefix(MAGIC) {
        Some(version) if version.trim() == VERSION => return Ok(()),
        Some(version) => format!(
            "found throughput table version {}, this build reads only {VERSION}",
            table::quote(version.trim())
        ),
        None => format!(
            "expected the version line `{MAGIC} {VERSION}` first, got {}",
            table::quote(&text)
        ),
    };
    Err(ThroughputError::Line {
        file: source.into(),
        line: first.map_or(1, table::line_of),
        problem,
    })
}

fn add_row(row: &table::Row<'_>, builder: &mut TableBuilder) -> Result<(), ThroughputError> {
    let workload = WorkloadType::new(row.str("workload"))
        .ok_or_else(|| row.expected("workload", "a workload type name"))?;
    let gpus = row.int_in("gpus", 1..=MAX_GPUS)?;
    let placement = Consolidation::parse(row.str("placement"))
        .ok_or_else(|| row.expected("placement", "consolidated or spread"))?;
    let rate = parse_rate(row, "rate")?;
    let gpu = row.str("gpu");
    let added = match WorkloadType::new(row.str("partner")) {
        None => {
            if !row.str("partner_rate").trim().is_empty() {
                return Err(row
                    .error(
                        "partner_rate",
                        "a row without a partner has no partner_rate",
                    )
                    .into());
            }
            builder.single(&workload, gpu, gpus, placement, rate, row.line)
        }
        Some(partner) => {
            if gpus != 1 || placement != Consolidation::Consolidated {
                return Err(row
                    .error(
                        if gpus != 1 { "gpus" } else { "placement" },
                        "a pair shares one GPU: expected gpus 1, consolidated",
                    )
                    .into());
            }
            let partner_rate = parse_rate(row, "partner_rate")?;
            builder.pair(&workload, &partner, gpu, [rate, partner_rate], row.line)
        }
    };
    added.map_err(|refused| ThroughputError::from(row.error(refused.field, refused.problem)))
}

fn parse_rate(row: &table::Row<'_>, column: &'static str) -> Result<f64, ThroughputError> {
    Ok(row.parse::<f64>(column, "a rate >= 0")?)
}

/// Writes `table` in format v1: single-job rows by workload (table order), GPU model, GPU
/// count and placement, then pairs. Rates are written in the shortest form that reads back to
/// the same `f64`.
pub fn write(table: &ThroughputTable, writer: impl Write) -> std::io::Result<()> {
    let mut out = csv::WriterBuilder::new().flexible(true).from_writer(writer);
    out.write_record([format!("{MAGIC} {VERSION}")])?;
    out.write_record([REFERENCE, table.reference().name()])?;
    out.write_record(COLUMNS)?;
    for (workload, gpu, gpus, placement, rate) in table.single_rows() {
        out.write_record([
            table.workload_name(workload).as_str(),
            gpu.name(),
            &gpus.to_string(),
            placement.as_str(),
            &rate.to_string(),
            "",
            "",
        ])?;
    }
    for (a, b, gpu, [rate_a, rate_b]) in table.pair_rows() {
        out.write_record([
            table.workload_name(a).as_str(),
            gpu.name(),
            "1",
            Consolidation::Consolidated.as_str(),
            &rate_a.to_string(),
            table.workload_name(b).as_str(),
            &rate_b.to_string(),
        ])?;
    }
    out.flush()
}
