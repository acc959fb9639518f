//! Table tests of the dependency kinds against Slurm's documentation (`man sbatch`,
//! `--dependency`), of the parser, and of the graph checks.

use super::*;

fn parse(text: &str) -> Dependency<String> {
    Dependency::parse_slurm(text).unwrap().unwrap()
}

const MIN: u64 = 60_000;

fn not_started() -> ParentState {
    ParentState::NotStarted
}
fn started(min: u64) -> ParentState {
    ParentState::Started {
        at: SimTime(min * MIN),
    }
}
fn ok(min: u64) -> ParentState {
    ParentState::Ended {
        started: Some(SimTime(0)),
        at: SimTime(min * MIN),
        ok: true,
    }
}
fn failed(min: u64) -> ParentState {
    ParentState::Ended {
        started: Some(SimTime(0)),
        at: SimTime(min * MIN),
        ok: false,
    }
}
fn cancelled(min: u64) -> ParentState {
    ParentState::Ended {
        started: None,
        at: SimTime(min * MIN),
        ok: false,
    }
}

/// The state of `text` at minute `now` when job "1" is `one` and job "2" is `two`.
fn state(text: &str, now: u64, one: ParentState, two: ParentState, singleton: bool) -> DepState {
    parse(text).state(
        SimTime(now * MIN),
        |j| if j == "1" { one } else { two },
        || singleton,
    )
}

#[test]
fn each_kind_follows_slurms_definition() {
    use DepState::*;
    let cases = [
        // after: "after the specified jobs start or are cancelled and 'time' in minutes from
        // job start or cancellation happens"
        ("after:1", 10, not_started(), Waiting),
        ("after:1", 10, started(10), Satisfied),
        ("after:1+5", 12, started(10), Waiting),
        ("after:1+5", 15, started(10), Satisfied),
        ("after:1", 10, cancelled(3), Satisfied),
        ("after:1", 10, failed(3), Satisfied),
        // afterany: "after the specified jobs have terminated"
        ("afterany:1", 10, started(1), Waiting),
        ("afterany:1", 10, ok(5), Satisfied),
        ("afterany:1", 10, failed(5), Satisfied),
        ("afterany:1", 10, cancelled(5), Satisfied),
        // afterok: "after the specified jobs have successfully executed (ran to completion
        // with an exit code of zero)"; a failed one never satisfies it
        ("afterok:1", 10, started(1), Waiting),
        ("afterok:1", 10, ok(5), Satisfied),
        ("afterok:1", 10, failed(5), Never),
        ("afterok:1", 10, cancelled(5), Never),
        // afternotok: "after the specified jobs have terminated in some failed state"
        ("afternotok:1", 10, started(1), Waiting),
        ("afternotok:1", 10, failed(5), Satisfied),
        ("afternotok:1", 10, cancelled(5), Satisfied),
        ("afternotok:1", 10, ok(5), Never),
    ];
    for (text, now, one, want) in cases {
        assert_eq!(
            state(text, now, one, not_started(), false),
            want,
            "{text} at {now} min with job 1 {one:?}"
        );
    }
}

#[test]
fn lists_join_with_all_or_any_and_a_term_waits_for_every_job() {
    use DepState::*;
    let cases = [
        // One term, two jobs: both must be done.
        ("afterok:1:2", ok(1), started(1), Waiting),
        ("afterok:1:2", ok(1), ok(2), Satisfied),
        ("afterok:1:2", ok(1), failed(2), Never),
        // `,`: all terms.
        ("afterok:1,afterany:2", ok(1), started(1), Waiting),
        ("afterok:1,afterany:2", ok(1), failed(2), Satisfied),
        ("afterok:1,afterany:2", failed(1), started(1), Never),
        // `?`: any term; never only when every term is.
        ("afterok:1?afternotok:2", failed(1), started(1), Waiting),
        ("afterok:1?afternotok:2", failed(1), failed(2), Satisfied),
        ("afterok:1?afternotok:2", failed(1), ok(2), Never),
        ("afterok:1?afternotok:2", ok(1), ok(2), Satisfied),
    ];
    for (text, one, two, want) in cases {
        assert_eq!(
            state(text, 10, one, two, false),
            want,
            "{text} {one:?} {two:?}"
        );
    }
    // singleton: "after any previously launched jobs sharing the same job name and user have
    // terminated"; with others.
    assert_eq!(state("singleton", 0, ok(1), ok(1), false), Waiting);
    assert_eq!(state("singleton", 0, ok(1), ok(1), true), Satisfied);
    assert_eq!(
        state("afterok:1,singleton", 10, ok(1), ok(1), false),
        Waiting
    );
    assert_eq!(
        state("afterok:1,singleton", 10, ok(1), ok(1), true),
        Satisfied
    );
}

#[test]
fn the_parser_reads_slurms_syntax_and_refuses_what_it_cannot_run() {
    assert_eq!(Dependency::parse_slurm("").unwrap(), None);
    assert_eq!(Dependency::parse_slurm(" (null) ").unwrap(), None);
    let d = parse("afterok:12:13,afterany:14,after:15+30,singleton");
    assert!(!d.any);
    assert_eq!(d.terms.len(), 4);
    assert_eq!(
        d.parents().cloned().collect::<Vec<_>>(),
        ["12", "13", "14", "15"]
    );
    // Printed back as Slurm writes it.
    assert_eq!(
        d.to_string(),
        "afterok:12:13,afterany:14,after:15+30,singleton"
    );
    assert_eq!(
        parse("AfterNotOk:7?afterok:8").to_string(),
        "afternotok:7?afterok:8"
    );
    for (text, says) in [
        ("afterok:1,afterany:2?afterok:3", "one separator"),
        ("aftercorr:5", "not a dependency kind"),
        ("afterburstbuffer:5", "not a dependency kind"),
        ("afterok:5_3", "job array"),
        ("afterok:1+5", "only `after` takes a delay"),
        ("after:1+soon", "whole minutes"),
        ("afterok", "expected KIND:ID"),
        ("afterok:", "empty job id"),
    ] {
        let e = Dependency::parse_slurm(text).unwrap_err().to_string();
        assert!(e.contains(text) && e.contains(says), "{text}: {e}");
    }
}

fn resolved(lists: &[&[usize]]) -> Vec<Option<Dependency<usize>>> {
    lists
        .iter()
        .map(|parents| {
            (!parents.is_empty()).then(|| Dependency {
                terms: vec![Term::Jobs {
                    kind: DepKind::AfterOk,
                    parents: parents
                        .iter()
                        .map(|&job| Parent {
                            job,
                            delay: SimTime::ZERO,
                        })
                        .collect(),
                }],
                any: false,
            })
        })
        .collect()
}

#[test]
fn the_graph_is_ordered_and_cycles_and_missing_jobs_are_refused() {
    let name = |i: usize| format!("j{i}");
    // A diamond: 0 -> 1, 0 -> 2, (1, 2) -> 3.
    let order = topological_order(&resolved(&[&[], &[0], &[0], &[1, 2]]), name).unwrap();
    let pos = |j: usize| order.iter().position(|&o| o == j).unwrap();
    assert!(pos(0) < pos(1) && pos(0) < pos(2) && pos(1) < pos(3) && pos(2) < pos(3));
    let e = topological_order(&resolved(&[&[], &[2], &[3], &[1]]), name).unwrap_err();
    let GraphError::Cycle { cycle } = &e else {
        panic!("{e}")
    };
    // The cycle is named, closed on itself.
    let jobs: Vec<&str> = cycle.split(" -> ").collect();
    assert_eq!(jobs.len(), 4, "{cycle}");
    assert_eq!(jobs[0], jobs[3]);
    for j in ["j1", "j2", "j3"] {
        assert!(jobs.contains(&j), "{cycle}");
    }
    let e = topological_order(&resolved(&[&[0]]), name).unwrap_err();
    assert_eq!(
        e.to_string(),
        "jobs j0 -> j0: their dependencies form a cycle"
    );
    let e = topological_order(&resolved(&[&[], &[7]]), name).unwrap_err();
    assert_eq!(
        e.to_string(),
        "job j1: depends on job #7, which is not in the trace"
    );
}

#[test]
fn settling_jobs_that_ended_before_drops_or_dooms_their_terms() {
    // Job "1" ended successfully before, "2" failed before; "3" is still to come.
    let ended = |j: &String| match j.as_str() {
        "1" => Some(true),
        "2" => Some(false),
        _ => None,
    };
    let settle = |text: &str| match parse(text).settle(ended) {
        Settled::Satisfied => "satisfied".to_string(),
        Settled::Never => "never".to_string(),
        Settled::Waiting(d) => d.to_string(),
    };
    assert_eq!(settle("afterok:1"), "satisfied");
    assert_eq!(settle("after:1+30"), "satisfied");
    assert_eq!(settle("afterok:2"), "never");
    assert_eq!(settle("afternotok:2"), "satisfied");
    assert_eq!(settle("afterok:1:3"), "afterok:3");
    assert_eq!(settle("afterok:2,afterany:3"), "never");
    assert_eq!(
        settle("afterok:1,afterany:3,singleton"),
        "afterany:3,singleton"
    );
    assert_eq!(settle("afterok:2?afterany:3"), "afterany:3");
    assert_eq!(settle("afterok:2?afterok:3"), "afterok:3");
    assert_eq!(settle("afterok:1?afterok:3"), "satisfied");
    assert_eq!(settle("afterok:2?afternotok:1"), "never");
    assert_eq!(settle("afterany:3"), "afterany:3");
    // What never leaves is an empty `?` list, never satisfied whatever comes.
    let never = Dependency::<String>::never();
    assert!(never.is_never());
    assert_eq!(
        never.state(SimTime(0), |_| not_started(), || true),
        DepState::Never
    );
}
