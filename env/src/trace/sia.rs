//! Reader for the processed Microsoft Philly trace published with the Sia simulator (SOSP'23
//! artifacts, `sia-simulator/traces/philly.csv`; columns `timestamp,duration,num_gpus,
//! gpu_time,cluster`) and used by later work. One row becomes one job.
//!
//! Columns used: `timestamp` (submission, local wall-clock `YYYY-MM-DD HH:MM:SS`), `duration`
//! (run time, seconds, written as a float), `num_gpus`, `cluster` (the virtual cluster's hash).
//! `gpu_time` (= duration x num_gpus) and any other column are ignored.
//!
//! Rules, every one an assumption about a trace that does not say ([`ItpOptions`], under
//! `sia_philly` in [`super::ReadOptions`], overrides the numbers):
//! - Times: the file names no time zone; its timestamps are the cluster's local wall-clock
//!   time. Each is read as is, as seconds since 1970-01-01 00:00:00 of that same zone, with no
//!   daylight-saving correction: only differences matter, and they are exact except across a
//!   clock change (jobs submitted in the hour repeated when clocks go back, e.g. US
//!   2017-11-05, may be ordered up to an hour off). Time 0 is the earliest `timestamp` in the
//!   file, dropped rows included, noted as `origin` in [`super::ReadReport::notes`];
//!   submit = `timestamp` - origin. Rows are not sorted in the file: the trace sorts jobs by
//!   submit (ties keep file order). A missing or malformed `timestamp` is an error.
//! - true duration = `duration`, rounded to the millisecond; it must be a number >= 0.
//! - Rows dropped, checked in this order and counted by reason: a row equal field by field to
//!   an earlier one: [`DUPLICATE_ROW`] (the published file repeats some rows exactly, and the
//!   layout has no job id to tell two jobs apart); `num_gpus` 0: [`NO_GPUS`]; a GPU count that
//!   does not split evenly over nodes: [`UNEVEN_GANG`].
//! - Tasks: up to `gpus_per_node` (8) GPUs is one task; more is a gang of
//!   ceil(num_gpus / gpus_per_node) tasks of num_gpus / tasks GPUs each. Each task asks for
//!   `cpu_milli_per_gpu` (4000) milli-cores and `mem_mib_per_gpu` (16384) MiB per GPU.
//! - Tenant: `cluster`, the virtual cluster, in order of first appearance; an empty one is an
//!   error. Job name: the row's line number in the file (the layout has no job id).
//! - kind training; priority 0, no runtime estimate, no GPU type (Philly's are not named); qos
//!   latency-sensitive and preemptible for every job, as for ITP.

use super::table;
use super::{ItpOptions, ReadReport, Tenants, TraceFormat, TraceRead, TraceReadError};
use super::{WallClockJob, WallClockJobs, WallClockRow as Row, helios};
use crate::job::MAX_TASKS;
use std::collections::HashSet;
use std::io::Read;

/// Drop reason: the row repeats an earlier row exactly.
pub const DUPLICATE_ROW: &str = "duplicate-row";
/// Drop reason: `num_gpus` is 0.
pub const NO_GPUS: &str = "no-gpus";
/// Drop reason: the GPU count does not split evenly over ceil(num_gpus / gpus_per_node) nodes.
pub const UNEVEN_GANG: &str = helios::UNEVEN_GANG;

const COLUMNS: &[&str] = &["timestamp", "duration", "num_gpus", "cluster"];
const TIME_EXPECTED: &str = "a time YYYY-MM-DD HH:MM:SS";

/// Reads Sia's processed Philly trace; `source` names it in errors and becomes the trace's
/// name.
pub fn read(
    input: impl Read,
    source: &str,
    options: &ItpOptions,
) -> Result<TraceRead, TraceReadError> {
    let mut rows = options.open(input, source, COLUMNS)?;
    let mut report = ReadReport::new(TraceFormat::SiaPhilly);
    let (mut tenants, mut jobs) = (Tenants::default(), WallClockJobs::default());
    let mut seen = HashSet::new();
    while let Some(row) = rows.next_row()? {
        report.rows += 1;
        let name = row.line.to_string();
        let timestamp = row.str("timestamp");
        let submit_s = helios::parse_wall_clock(timestamp)
            .ok_or_else(|| row.expected("timestamp", TIME_EXPECTED))?;
        jobs.see(submit_s, timestamp);
        let parsed = if seen.insert(row.fields_key()) {
            parse_job(&row, submit_s, &name, options, &mut tenants)?
        } else {
            Row::Dropped(DUPLICATE_ROW)
        };
        jobs.add(&mut report, parsed, row.line, &name);
    }
    jobs.finish(source, tenants.names, report)
}

fn parse_job(
    row: &table::Row<'_>,
    submit_s: i64,
    name: &str,
    options: &ItpOptions,
    tenants: &mut Tenants,
) -> Result<Row, TraceReadError> {
    let duration = row
        .opt_secs_rounded("duration")?
        .ok_or_else(|| row.expected("duration", "seconds >= 0"))?;
    let max_gpus = MAX_TASKS.saturating_mul(options.gpus_per_node);
    let num_gpus = row.int_in("num_gpus", 0..=max_gpus)?;
    let tenant = row.str("cluster").trim();
    if tenant.is_empty() {
        return Err(row.expected("cluster", "a virtual cluster's name"));
    }
    if num_gpus == 0 {
        return Ok(Row::Dropped(NO_GPUS));
    }
    let Some((tasks, gpus)) = options.gang(num_gpus) else {
        return Ok(Row::Dropped(UNEVEN_GANG));
    };
    Ok(Row::Kept(WallClockJob {
        job: options.job(name, tasks, gpus, tenants.id(tenant)),
        submit_s,
        duration,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::{JobKind, Qos, TaskRequest};
    use crate::units::SimTime;
    use proptest::prelude::*;

    const HEADER: &str = "timestamp,duration,num_gpus,gpu_time,cluster";

    fn read_rows(rows: &str) -> Result<TraceRead, TraceReadError> {
        read(
            format!("{HEADER}\n{rows}").as_bytes(),
            "philly.csv",
            &ItpOptions::default(),
        )
    }

    const FIXTURE: &str = "philly-sia-format.csv";

    #[test]
    fn fixture_reads_sorted_with_the_duplicate_dropped() {
        let read = read(
            crate::trace::fixture_text(FIXTURE).as_bytes(),
            "sia",
            &ItpOptions::default(),
        )
        .unwrap();
        let (t, r) = (&read.trace, &read.report);
        // 25 rows (the trailing blank line is none): lines 5 and 26 are the same row.
        assert_eq!((r.rows, r.kept, r.dropped_total()), (25, 24, 1));
        assert_eq!(r.dropped.get(DUPLICATE_ROW), Some(&1));
        assert_eq!(
            (r.first_dropped[0].line, r.first_dropped[0].job.as_str()),
            (26, "26")
        );
        // Time 0: the earliest timestamp, on line 3.
        assert_eq!(r.notes[helios::ORIGIN_NOTE], "2017-10-01 03:30:57");
        let first = &t.jobs()[0];
        assert_eq!((first.name.as_str(), first.submit), ("3", SimTime::ZERO));
        assert_eq!(t.true_duration(first.id), SimTime::from_secs(260_000));
        // Last, line 25: 2 days + 22:03:07 - 03:30:57 = 172,800 + 66,730 s.
        let last = &t.jobs()[23];
        assert_eq!(
            (last.name.as_str(), last.submit),
            ("25", SimTime::from_secs(239_530))
        );
        assert!(t.jobs().is_sorted_by_key(|j| j.submit));
        // Lines 18 and 24 ask for 16 GPUs: two tasks of 8 each, 8 x 4000 mcores, 8 x 16 GiB.
        let gangs: Vec<&str> = t
            .jobs()
            .iter()
            .filter(|j| j.tasks == 2)
            .map(|j| j.name.as_str())
            .collect();
        assert_eq!(gangs, ["24", "18"]);
        let gang = t.jobs().iter().find(|j| j.name == "18").unwrap();
        assert_eq!(gang.task, TaskRequest::whole(8, 32_000, 131_072));
        assert_eq!(t.jobs().iter().map(|j| j.gpus_total()).sum::<u64>(), 82);
        // Virtual clusters as tenants, in order of first appearance.
        assert_eq!(
            t.tenants(),
            ["ee9e8c", "103959", "6214e9", "11cb48", "b436b2", "6c71a0"]
        );
        assert_eq!(t.tenant_name(gang.tenant), "6c71a0");
        assert!(gang.preemptible && gang.qos == Qos::LatencySensitive);
        assert_eq!(gang.kind, JobKind::Training);
    }

    #[test]
    fn rows_follow_the_documented_rules() {
        let read = read_rows(
            "2017-10-02 00:00:00,0.5,1,0.5,vcA\n\
             2017-10-01 23:59:59,100.0004,12,1200.0,vcB\n\
             2017-10-02 00:00:00,0.5,1,0.5,vcA\n\
             2017-10-02 00:00:00,0.5,1,0.5, vcA\n\
             2017-10-01 00:00:00,10,0,0,vcC\n\
             2017-10-02 00:00:01,10,9,90,vcC\n",
        )
        .unwrap();
        let (t, r) = (&read.trace, &read.report);
        assert_eq!((r.rows, r.kept), (6, 3));
        for reason in [DUPLICATE_ROW, NO_GPUS, UNEVEN_GANG] {
            assert_eq!(r.dropped.get(reason), Some(&1), "{reason}");
        }
        // Time 0 is the dropped 0-GPU row's timestamp, a day before the others.
        assert_eq!(r.notes[helios::ORIGIN_NOTE], "2017-10-01 00:00:00");
        let b = &t.jobs()[0];
        // 12 GPUs over 8-GPU nodes: 2 x 6; 100.0004 s rounds to 100 s.
        assert_eq!((b.name.as_str(), b.tasks, b.task.gpus), ("3", 2, 6));
        assert_eq!(b.submit, SimTime::from_secs(86_399));
        assert_eq!(t.true_duration(b.id), SimTime::from_secs(100));
        // The row with a space before its cluster is not an exact duplicate: kept.
        assert_eq!(t.jobs()[2].name, "5");
        assert_eq!(t.true_duration(t.jobs()[1].id), SimTime(500));
        assert_eq!(t.tenants(), ["vcA", "vcB"]);
    }

    #[test]
    fn errors_name_file_line_and_field() {
        let ok = "2017-10-01 00:00:00,1.0,1,1.0,vc\n";
        let e = read_rows(&format!("{ok}2017-10-01,1.0,1,1.0,vc\n")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "philly.csv line 3, field timestamp: expected a time YYYY-MM-DD HH:MM:SS, got \"2017-10-01\""
        );
        let e = read_rows("2017-10-01 00:00:00,-1.0,1,1.0,vc\n").unwrap_err();
        assert!(e.to_string().contains("line 2, field duration"), "{e}");
        let e = read_rows("2017-10-01 00:00:00,,1,1.0,vc\n").unwrap_err();
        assert!(
            e.to_string().contains("field duration: expected seconds"),
            "{e}"
        );
        let e = read_rows("2017-10-01 00:00:00,1.0,two,1.0,vc\n").unwrap_err();
        assert!(e.to_string().contains("field num_gpus"), "{e}");
        let e = read_rows("2017-10-01 00:00:00,1.0,1,1.0,\n").unwrap_err();
        assert!(e.to_string().contains("field cluster"), "{e}");
        let e = read_rows("2017-10-01 00:00:00,1.0,1\n").unwrap_err();
        assert!(e.to_string().contains("line 2: expected 5 fields"), "{e}");
        let e = read(
            "timestamp,duration\n".as_bytes(),
            "p.csv",
            &ItpOptions::default(),
        );
        assert!(
            e.unwrap_err()
                .to_string()
                .starts_with("p.csv line 1: missing column num_gpus"),
        );
    }

    proptest! {
        /// Random bytes, alone or before random rows after the header, are read or refused.
        #[test]
        fn random_input_never_panics(
            bytes in prop::collection::vec(any::<u8>(), 0..400),
            rows in prop::collection::vec(prop::collection::vec("[0-9]{1,6}(\\.[0-9]{1,5})?|[a-f0-9 ]{0,7}|-[0-9]|20[0-9]{2}-[01][0-9]-[0-3][0-9] [0-2][0-9]:[0-5][0-9]:[0-5][0-9]", 5), 0..6),
        ) {
            let _ = read(bytes.as_slice(), "r.csv", &ItpOptions::default());
            let rows: String = rows.iter().map(|r| r.join(",") + "\n").collect();
            let _ = read_rows(&format!("{}{rows}", String::from_utf8_lossy(&bytes)));
            let _ = read_rows(&rows);
        }
    }
}
