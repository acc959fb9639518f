//! The service as operators run it: `lachesis serve` as a process, `lachesis decide` as its
//! client, metrics and health over HTTP, graceful shutdown on SIGTERM, then `lachesis replay`
//! of the decision log it wrote.

#![allow(clippy::unwrap_used)]

mod common;

use common::lachesis;
use common::server::{Server, http_get};
use serde_json::{Value, json};
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Snapshots of a small cluster over five minutes: jobs arrive, run and finish.
fn snapshots() -> Vec<Value> {
    let node = |name: &str| {
        json!({"name": name, "gpu_model": "A100", "gpus": 8, "cpu_milli": 96000,
               "mem_mib": 1048576})
    };
    let job = |id: &str, gpus: u32, wait_s: u64| {
        json!({"id": id, "tenant": "t", "tasks": 1, "gpus_per_task": gpus,
               "cpu_milli": 8000, "mem_mib": 65536, "wait_ms": wait_s * 1000})
    };
    let running = |id: &str, gpus: u32, wait_s: u64, node: &str, run_s: u64| {
        json!({"job": job(id, gpus, wait_s), "run_ms": run_s * 1000,
               "tasks": [{"node": node, "gpus": (0..gpus).collect::<Vec<_>>()}]})
    };
    let nodes = json!([node("n0"), node("n1")]);
    vec![
        json!({"now_ms": 0, "nodes": nodes, "pending": [job("a", 8, 0), job("b", 4, 0)]}),
        json!({"now_ms": 60000, "nodes": nodes,
               "running": [running("a", 8, 60, "n0", 60), running("b", 4, 60, "n1", 60)],
               "pending": [job("c", 8, 10)]}),
        json!({"now_ms": 120000, "nodes": nodes,
               "running": [running("b", 4, 120, "n1", 120)],
               "pending": [job("c", 8, 70)]}),
        json!({"now_ms": 180000, "nodes": nodes,
               "running": [running("c", 8, 130, "n0", 50)], "pending": []}),
        json!({"now_ms": 300000, "nodes": nodes, "running": [], "pending": [job("d", 2, 0)]}),
    ]
}

#[test]
fn serve_decide_metrics_shutdown_and_replay() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = std::env::temp_dir().join(format!("lachesis-serve-e2e-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("decisions.jsonl");
    let config = dir.join("serve.toml");
    std::fs::write(
        &config,
        format!(
            "model = {:?}\ndeadline_ms = 60000.0\nmodel_slots = 1\nblocking_threads = 2\n\
             [routing]\nmode = \"shadow\"\n\
             [grpc]\naddr = \"127.0.0.1:0\"\n[http]\naddr = \"127.0.0.1:0\"\n\
             [decision_log]\npath = {:?}\n",
            root.join("models/default").display().to_string(),
            log.display().to_string()
        ),
    )
    .unwrap();
    let (mut server, line) = Server::start(&config);
    // "lachesis serve: gRPC on 127.0.0.1:PORT, HTTP on 127.0.0.1:PORT; model V (serving)"
    assert!(line.starts_with("lachesis serve: gRPC on "), "{line}");
    let grpc = line
        .split_whitespace()
        .nth(4)
        .unwrap()
        .trim_end_matches(',');
    let http = line
        .split_whitespace()
        .nth(7)
        .unwrap()
        .trim_end_matches(';');
    assert!(line.contains("(serving)"), "{line}");

    for (k, snap) in snapshots().iter().enumerate() {
        let path = dir.join(format!("snap{k}.json"));
        std::fs::write(&path, snap.to_string()).unwrap();
        let out = lachesis(&[
            "decide",
            "--server",
            grpc,
            "--snapshot",
            path.to_str().unwrap(),
        ]);
        assert!(out.status.success(), "snapshot {k}: {out:?}");
    }

    // The documented example snapshot (its clock is later than the sequence's).
    let out = lachesis(&[
        "decide",
        "--server",
        grpc,
        "--snapshot",
        root.join("docs/examples/snapshot.json").to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{out:?}");
    let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(answer["arm"], "shadow");
    assert_eq!(answer["decided_by"], "tiresias/best-fit/las-preempt");
    let placed = answer["placements"].as_array().unwrap().len();
    let pending = answer["pending"].as_array().unwrap().len();
    assert_eq!(placed + pending, 3, "{answer}");

    // A bad snapshot file: the client names the file and the position.
    let bad = dir.join("bad.json");
    std::fs::write(&bad, "{\"now_ms\": -5, \"nodes\": []}").unwrap();
    let out = lachesis(&[
        "decide",
        "--server",
        grpc,
        "--snapshot",
        bad.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("bad.json") && err.contains("line 1"), "{err}");
    // A snapshot the server refuses: INVALID_ARGUMENT with the field path.
    std::fs::write(&bad, "{\"now_ms\": 5, \"nodes\": []}").unwrap();
    let out = lachesis(&[
        "decide",
        "--server",
        grpc,
        "--snapshot",
        bad.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("InvalidArgument") && err.contains("snapshot.nodes"),
        "{err}"
    );

    let (code, body) = http_get(http, "/metrics");
    assert_eq!(code, 200);
    assert!(
        body.contains("lachesis_requests_total{rpc=\"Decide\",code=\"Ok\"} 6"),
        "{body}"
    );
    assert!(body.contains("lachesis_requests_total{rpc=\"Decide\",code=\"InvalidArgument\"} 1"));
    assert!(body.contains("lachesis_model_info{version="));
    assert!(body.contains("lachesis_request_duration_seconds_bucket"));
    assert!(body.contains("lachesis_model_passes_total "), "{body}");
    assert_eq!(http_get(http, "/healthz").0, 200);
    let (code, body) = http_get(http, "/readyz");
    assert_eq!(code, 200, "{body}");

    // SIGHUP reloads the configured model (the old one stays on failure).
    server.signal("-HUP");
    let started = Instant::now();
    loop {
        let (_, body) = http_get(http, "/metrics");
        if body.contains("lachesis_model_reloads_total{result=\"ok\"} 1") {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "no reload after SIGHUP: {body}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }

    // Graceful shutdown: SIGTERM, exit 0, the log flushed.
    let status = server.terminate(Duration::from_secs(20));
    assert!(status.success(), "{status:?}");
    let records = std::fs::read_to_string(&log).unwrap().lines().count();
    assert_eq!(records, 6);

    // Replay: jobs a, b and c finished while logged; d and the example's pending jobs never
    // started, its running ones were still running at the end.
    let out_dir = dir.join("replay");
    let out = Command::new(env!("CARGO_BIN_EXE_lachesis"))
        .current_dir(root)
        .args([
            "replay",
            log.to_str().unwrap(),
            "--out",
            out_dir.to_str().unwrap(),
            "--seeds",
            "1",
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("6 records"), "{text}");
    assert!(
        text.contains("9 seen, 3 finished while logged (replayed), 2 still running at the end and 4 never started"),
        "{text}"
    );
    assert!(text.contains("shadow: the model agreed"), "{text}");
    let trace = std::fs::read_to_string(out_dir.join("trace.csv")).unwrap();
    assert_eq!(trace.lines().count(), 3 + 3, "{trace}");
    let report = std::fs::read_to_string(out_dir.join("compare/comparison.json")).unwrap();
    assert!(
        report.contains("rl-batched:models/default"),
        "both arms compared, the model as the service decides by default"
    );
}

/// A model computation past its deadline keeps running on the blocking pool; SIGTERM must not
/// wait for it (it once kept the process alive 15-35 s).
#[test]
fn sigterm_does_not_wait_for_a_model_computation_past_its_deadline() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = std::env::temp_dir().join(format!("lachesis-serve-late-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // Big enough that the model (LAS preemption candidates over ~1,000 running jobs) takes
    // seconds even in release, and far longer in a debug build.
    let snap = lachesis_serve::synthetic::snapshot(800, 100, 0.9, 1);
    let snap_path = dir.join("big.json");
    std::fs::write(&snap_path, serde_json::to_string(&snap).unwrap()).unwrap();
    let config = dir.join("serve.toml");
    std::fs::write(
        &config,
        format!(
            "model = {:?}\ndeadline_ms = 20.0\n[grpc]\naddr = \"127.0.0.1:0\"\n[http]\naddr = \"\"\n",
            root.join("models/default").display().to_string()
        ),
    )
    .unwrap();
    let (mut server, line) = Server::start(&config);
    let grpc = line
        .split_whitespace()
        .nth(4)
        .unwrap()
        .trim_end_matches(';');
    let out = lachesis(&[
        "decide",
        "--server",
        grpc,
        "--snapshot",
        snap_path.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{out:?}");
    let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        answer["fallbacks"][0]["reason"], "timeout",
        "{}",
        answer["fallbacks"]
    );
    // The model is still computing; stop the server now.
    let status = server.terminate(Duration::from_secs(6));
    assert!(status.success(), "{status:?}");
}

/// A config for a service on free loopback ports, heuristics only, in `dir`.
fn quick_config(dir: &Path) -> std::path::PathBuf {
    let config = dir.join("serve.toml");
    std::fs::write(
        &config,
        "model = \"\"\nrouting = { mode = \"baseline\" }\n\
         [grpc]\naddr = \"127.0.0.1:0\"\n[http]\naddr = \"127.0.0.1:0\"\n",
    )
    .unwrap();
    config
}

fn fresh_dir(name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("lachesis-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Python's grpcio-reflection client speaks `grpc.reflection.v1alpha` only: it must list the
/// services and resolve the scheduler's methods with no .proto file.
#[test]
fn python_grpcio_reflection_lists_the_services() {
    let Some(python) = common::python("the grpcio-reflection test") else {
        return;
    };
    let dir = fresh_dir("reflection");
    let (server, line) = Server::start(&quick_config(&dir));
    let (grpc, _) = common::server::listen_addrs(&line);
    let script = r#"
import sys, grpc
from google.protobuf.descriptor_pool import DescriptorPool
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)
db = ProtoReflectionDescriptorDatabase(grpc.insecure_channel(sys.argv[1]))
for name in db.get_services():
    print("service", name)
scheduler = DescriptorPool(db).FindServiceByName("lachesis.v1.Scheduler")
print("methods", ",".join(m.name for m in scheduler.methods))
"#;
    let out = Command::new(python)
        .args(["-c", script, &grpc])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for service in [
        "service lachesis.v1.Scheduler",
        "service grpc.health.v1.Health",
        "service grpc.reflection.v1alpha.ServerReflection",
    ] {
        assert!(text.lines().any(|l| l == service), "{service}: {text}");
    }
    assert!(text.contains("methods Decide,"), "{text}");
    drop(server);
}

/// Logs written to a file or a pipe carry no ANSI colour codes; `--log-format json` writes
/// one JSON object a line.
#[test]
fn logs_are_plain_in_a_file_and_json_on_request() {
    let dir = fresh_dir("logs");
    let config = quick_config(&dir);
    for format in ["text", "json"] {
        let path = dir.join(format!("{format}.log"));
        let file = std::fs::File::create(&path).unwrap();
        let (mut server, _) = Server::start_with(&config, &["--log-format", format], file.into());
        assert!(server.terminate(Duration::from_secs(20)).success());
        let log = std::fs::read_to_string(&path).unwrap();
        assert!(log.contains("serving"), "{format}: {log}");
        assert!(
            !log.contains('\u{1b}'),
            "{format}: colour codes in a file: {log:?}"
        );
        if format == "json" {
            for line in log.lines() {
                let v: Value =
                    serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
                assert!(v["level"].is_string(), "{line}");
            }
        }
    }
}

/// A shadow-mode service whose model arm plays first-come-first-served while its baseline is
/// shortest-first on the users' estimates, on bursts of one long and four short jobs: the
/// model arm loses, and `lachesis replay` says so from the decision log, with its interval; the
/// arms tie when the model arm is the baseline; a short recent window is too little traffic.
#[test]
fn replay_gives_the_arm_verdict_losing_with_its_interval() {
    use lachesis_env::policy::{Policy, build_policy};
    use lachesis_serve::synthetic::Traffic;
    use lachesis_serve::{Engine, Metrics, ServeConfig};
    use std::sync::Arc;

    let dir = fresh_dir("replay-verdict");
    let log = dir.join("decisions.jsonl");
    let mut cfg = ServeConfig {
        model: String::new(),
        baseline: "sjf/best-fit".into(),
        deadline_ms: 60_000.0,
        ..ServeConfig::default()
    };
    cfg.routing.mode = lachesis_serve::config::RoutingMode::Shadow;
    cfg.decision_log.path = Some(log.clone());
    let engine = Arc::new(
        Engine::new(cfg, Arc::new(Metrics::new()))
            .unwrap()
            .with_model_policy(Arc::new(|| {
                build_policy("fifo/best-fit", 0).unwrap() as Box<dyn Policy>
            })),
    );
    tokio::runtime::Runtime::new().unwrap().block_on(async {
        Traffic::head_of_line(12, 10_800_000)
            .drive(&engine)
            .await
            .unwrap();
    });
    engine.flush();

    let log = log.to_str().unwrap();
    let out_dir = dir.join("replay");
    let out = out_dir.to_str().unwrap();
    let window = [
        "--recent-jobs",
        "60",
        "--window-jobs",
        "10",
        "--min-jobs",
        "40",
    ];
    let replay = |extra: &[&str]| {
        let mut args = vec!["replay", log, "--out", out, "--seeds", "1"];
        args.extend(extra);
        common::stdout_of(&args)
    };
    // Shadow routing logged both arms: the verdict comes after the comparison by default.
    let text = replay(&[&["--model-arm", "fifo/best-fit"], &window[..]].concat());
    assert!(
        text.contains("60 finished while logged (replayed)"),
        "{text}"
    );
    assert!(text.contains("report: "), "the comparison ran: {text}");
    let verdict = text
        .lines()
        .find(|l| l.starts_with("arm verdict: "))
        .unwrap_or_else(|| panic!("no verdict: {text}"));
    assert!(
        verdict.starts_with(
            "arm verdict: losing: the model arm (fifo/best-fit) is losing to the heuristic arm \
             (sjf/best-fit) on the last 60 finished jobs (6 windows of 10 jobs, 1 seed(s) each)"
        ),
        "{verdict}"
    );
    // "difference +D s [95% CI +LOW, +HIGH] ...": the whole interval above zero.
    let interval = verdict.split("[95% CI ").nth(1).unwrap();
    let bounds: Vec<f64> = interval
        .split(']')
        .next()
        .unwrap()
        .split(", ")
        .map(|x| x.parse().unwrap())
        .collect();
    assert!(0.0 < bounds[0] && bounds[0] <= bounds[1], "{verdict}");
    assert!(
        verdict.contains("worse on 6 and better on 0 of 6 windows"),
        "{verdict}"
    );

    // The same policy on both arms: a tie, not a loss.
    let tie = replay(
        &[
            &["--no-compare", "--verdict", "--model-arm", "sjf/best-fit"],
            &window[..],
        ]
        .concat(),
    );
    assert!(
        tie.contains(
            "arm verdict: inconclusive: the model arm (sjf/best-fit) is not clearly different"
        ),
        "{tie}"
    );
    assert!(tie.contains("difference 0 s [95% CI 0, 0]"), "{tie}");
    // What the service's selector would follow among the heuristic arm, a candidate and the
    // model arm: away from the losing model arm, to the heuristic arm, and why.
    let chosen = replay(
        &[
            &[
                "--no-compare",
                "--select",
                "fifo/fgd",
                "--model-arm",
                "fifo/best-fit",
            ],
            &window[..],
        ]
        .concat(),
    );
    assert!(
        chosen.contains(
            "select: following sjf/best-fit: switched from fifo/best-fit: sjf/best-fit - \
             fifo/best-fit: -"
        ) && chosen.contains("better on 6 and worse on 0 of 6 windows"),
        "{chosen}"
    );
    assert!(!chosen.contains("arm verdict"), "{chosen}");
    // Too little recent traffic is said as such.
    let short = replay(&[
        "--no-compare",
        "--verdict",
        "--model-arm",
        "fifo/best-fit",
        "--recent-hours",
        "4",
        "--window-jobs",
        "10",
        "--min-jobs",
        "40",
        "--recent-jobs",
        "60",
    ]);
    assert!(
        short.contains("arm verdict: too-little-traffic: 5 recent finished jobs, 40 needed"),
        "{short}"
    );
    // A window that cannot make an interval is refused, naming the flag.
    let err = common::stderr_of_failing(&[
        "replay",
        log,
        "--out",
        out,
        "--verdict",
        "--no-compare",
        "--min-jobs",
        "30",
    ]);
    assert!(err.contains("--min-jobs"), "{err}");
}

/// A guard that cannot work stops the service at start, naming the field at fault.
#[test]
fn a_bad_guard_config_is_refused_naming_the_field() {
    let dir = fresh_dir("guard-config");
    let config = dir.join("serve.toml");
    for (text, field) in [
        ("[guard]\nenabled = true\n", "guard.enabled"),
        (
            "[decision_log]\npath = \"d.jsonl\"\n[guard]\nenabled = true\nwindow_jobs = 0\n",
            "guard.window_jobs",
        ),
    ] {
        std::fs::write(&config, format!("model = \"\"\n{text}")).unwrap();
        let err = common::stderr_of_failing(&["serve", "--config", config.to_str().unwrap()]);
        assert!(err.contains(field), "{text}: {err}");
    }
}

/// `decide --session`: one snapshot opens the session, then each delta line is answered as
/// the cluster it leaves; a bad line stops it, named by its line number and field, after the
/// answers before it.
#[test]
fn decide_session_answers_each_delta_and_names_a_bad_line() {
    let dir = fresh_dir("decide-session");
    let (_server, line) = Server::start(&quick_config(&dir));
    let (grpc, _) = common::server::listen_addrs(&line);
    let job = |id: &str| {
        json!({"id": id, "tenant": "t", "tasks": 1, "gpus_per_task": 8, "cpu_milli": 8000,
               "mem_mib": 65536})
    };
    let node = |name: &str| {
        json!({"name": name, "gpu_model": "A100", "gpus": 8, "cpu_milli": 96000,
               "mem_mib": 1048576})
    };
    // "r" fills n0; "a" fits only on n1.
    let snapshot = dir.join("snapshot.json");
    let mut r = job("r");
    r["wait_ms"] = json!(60000);
    let opening = json!({"now_ms": 60000, "nodes": [node("n0"), node("n1")],
        "running": [{"job": r, "run_ms": 60000,
                     "tasks": [{"node": "n0", "gpus": [0, 1, 2, 3, 4, 5, 6, 7]}]}],
        "pending": [job("a")]});
    std::fs::write(&snapshot, opening.to_string()).unwrap();
    // Line 1: "b" comes while the cluster is full; line 2 is blank; line 3: "r" finishes, so
    // "b" starts on n0; line 4 gives a GPU count as a string.
    let deltas = dir.join("deltas.jsonl");
    let lines = [
        json!({"now_ms": 120000, "submitted": [job("b")]}).to_string(),
        String::new(),
        json!({"now_ms": 180000, "finished": ["r"]}).to_string(),
        r#"{"now_ms": 240000, "submitted": [{"id": "c", "gpus_per_task": "two"}]}"#.into(),
        json!({"now_ms": 300000, "finished": ["a"]}).to_string(),
    ];
    std::fs::write(&deltas, lines.join("\n")).unwrap();
    // `decide --session --deltas DELTAS` with `input` on its stdin.
    let decide_session = |deltas: &str, input: &str| {
        let mut child = Command::new(env!("CARGO_BIN_EXE_lachesis"))
            .args(["decide", "--server", &grpc, "--snapshot"])
            .args([snapshot.to_str().unwrap(), "--session", "--deltas", deltas])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
        child.wait_with_output().unwrap()
    };
    let out = decide_session(deltas.to_str().unwrap(), "");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "line 4 is not a delta");
    assert!(
        err.contains("deltas.jsonl, line 4") && err.contains("submitted[0].gpus_per_task"),
        "{err}"
    );
    let answers: Vec<Value> = serde_json::Deserializer::from_slice(&out.stdout)
        .into_iter()
        .collect::<Result<_, _>>()
        .unwrap();
    let placed = |answer: &Value| -> Vec<(String, String)> {
        answer["placements"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| {
                let node = p["tasks"][0]["node"].as_str().unwrap().to_string();
                (p["job"].as_str().unwrap().to_string(), node)
            })
            .collect()
    };
    assert_eq!(answers.len(), 3, "the opening and two deltas: {answers:?}");
    assert_eq!(placed(&answers[0]), [("a".into(), "n1".into())]);
    assert_eq!(placed(&answers[1]), []);
    assert_eq!(answers[1]["pending"][0]["job"], "b", "{}", answers[1]);
    assert_eq!(placed(&answers[2]), [("b".into(), "n0".into())]);
    let revisions: Vec<&Value> = answers.iter().map(|a| &a["revision"]).collect();
    assert_eq!(revisions, [1, 2, 3]);

    // From stdin, to its end: success.
    let out = decide_session("-", &lines[0]);
    assert!(out.status.success(), "{out:?}");
    let answers = serde_json::Deserializer::from_slice(&out.stdout)
        .into_iter::<Value>()
        .count();
    assert_eq!(answers, 2, "the opening and line 1");

    // From stdin: a delta the service refuses (no such job) is named by its line too.
    let input = format!(
        "{}\n{{\"now_ms\": 180000, \"finished\": [\"ghost\"]}}\n",
        lines[0]
    );
    let out = decide_session("-", &input);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains("stdin, line 2") && err.contains("delta.finished[0]"),
        "{err}"
    );
    let answers = serde_json::Deserializer::from_slice(&out.stdout)
        .into_iter::<Value>()
        .count();
    assert_eq!(answers, 2, "the opening and line 1");
}
