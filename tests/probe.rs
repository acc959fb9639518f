//! `lachesis probe` as operators run it: recorded readings printed as the service's node, bad
//! recordings named, the plain no-driver failure, and pushes to a running `lachesis serve`
//! (once, every N seconds, with a token) that the service holds.

#![allow(clippy::unwrap_used)]

mod common;

use common::lachesis;
use common::server::{Server, http_get, listen_addrs};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn fixture(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("serve/tests/data/probe")
        .join(name)
        .to_str()
        .unwrap()
        .to_string()
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("lachesis-probe-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn stderr(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// A service on free ports, heuristics only (no model to load), with `extra` config lines.
fn start_service(dir: &Path, extra: &str) -> (Server, String, String) {
    let config = dir.join("serve.toml");
    std::fs::write(
        &config,
        format!(
            "model = \"\"\n[grpc]\naddr = \"127.0.0.1:0\"\n[http]\naddr = \"127.0.0.1:0\"\n{extra}"
        ),
    )
    .unwrap();
    let (server, line) = Server::start(&config);
    let (grpc, http) = listen_addrs(&line);
    (server, grpc, http.unwrap())
}

/// The service's count of `ReportNodes` calls answered `code`.
fn report_calls(http: &str, code: &str) -> u64 {
    let (status, body) = http_get(http, "/metrics");
    assert_eq!(status, 200);
    let key = format!("lachesis_requests_total{{rpc=\"ReportNodes\",code=\"{code}\"}} ");
    body.lines()
        .find_map(|l| l.strip_prefix(key.as_str()))
        .map_or(0, |v| v.trim().parse().unwrap())
}

/// Nodes the service holds now, asked over gRPC (an empty `ReportNodes` stores nothing and
/// answers `known`).
fn known_nodes(grpc: &str, token: Option<&str>) -> u32 {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime
        .block_on(lachesis_serve::client::report_nodes(
            grpc,
            &[],
            "test",
            token,
            None,
        ))
        .unwrap()
        .known
}

#[test]
fn recorded_readings_print_the_node_as_json_and_as_a_table() {
    let out = lachesis(&[
        "probe",
        "--recorded",
        &fixture("a100-8x-half-busy.json"),
        "--json",
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let node: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(node["name"], "gpu-a100-07");
    assert_eq!(node["gpu_model"], "A100");
    assert_eq!(node["gpus"], 8);
    assert_eq!(
        node["gpu_free_milli"],
        serde_json::json!([0, 20, 30, 0, 1000, 1000, 780, 1000])
    );
    assert_eq!(node["cpu_free_milli"], 153_600);
    assert_eq!(node["mem_free_mib"], 794_358);
    assert_eq!(node["labels"]["cuda_version"], "12.2");

    // The JSON drops into a snapshot's `nodes` as it is.
    let dir = temp_dir("json");
    let out = lachesis(&[
        "probe",
        "--recorded",
        &fixture("h100-mig.json"),
        "--node-name",
        "h100-a",
        "--label",
        "rack=r7",
        "--json",
        "--record",
        dir.join("again.json").to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    let node: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(node["name"], "h100-a");
    assert_eq!(node["labels"]["rack"], "r7");
    assert_eq!(node["labels"]["mig_gpus"], "0,1,2,3");
    let snapshot: lachesis_serve::proto::Snapshot =
        serde_json::from_value(serde_json::json!({"now_ms": 1, "nodes": [node]})).unwrap();
    lachesis_serve::world::World::build(&snapshot).unwrap();
    // --record wrote the readings in the format --recorded replays.
    let again = lachesis(&[
        "probe",
        "--recorded",
        dir.join("again.json").to_str().unwrap(),
        "--node-name",
        "h100-a",
        "--label",
        "rack=r7",
        "--json",
    ]);
    assert_eq!(again.stdout, out.stdout);

    let out = lachesis(&["probe", "--recorded", &fixture("v100-mixed.json")]);
    assert!(out.status.success(), "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with(
            "node v100-node-11: 4 x V100 (Tesla V100-SXM2-32GB), driver 525.147.05, CUDA 12.0"
        ),
        "{text}"
    );
    assert!(
        text.contains("cpu  48000 milli-cores, not sampled"),
        "{text}"
    );
}

#[test]
fn a_bad_recording_is_refused_naming_the_file_and_the_field() {
    let dir = temp_dir("bad");
    let bad = dir.join("bad-reading.json");
    let text = std::fs::read_to_string(fixture("v100-mixed.json"))
        .unwrap()
        .replacen(
            "\"utilization_percent\": 100",
            "\"utilization_percent\": 140",
            1,
        );
    std::fs::write(&bad, text).unwrap();
    let out = lachesis(&["probe", "--recorded", bad.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1));
    let err = stderr(&out);
    assert!(
        err.contains("bad-reading.json: gpus[1].utilization_percent: 140 %"),
        "{err}"
    );
}

/// Where NVML cannot be loaded (no NVIDIA driver: this machine and CI), the probe says so, what
/// to install, and exits 1.
#[test]
fn without_a_driver_the_probe_says_so_and_fails() {
    let ldconfig = Command::new("ldconfig").arg("-p").output();
    let listed = ldconfig
        .as_ref()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("libnvidia-ml.so.1"));
    if listed {
        eprintln!("skipped: libnvidia-ml.so.1 can be loaded here (an NVIDIA driver is installed)");
        return;
    }
    let out = lachesis(&["probe"]);
    let err = stderr(&out);
    if out.status.success() {
        // Loaded from a path ldconfig does not list (LD_LIBRARY_PATH): a driver is present.
        eprintln!("skipped: NVML loaded although ldconfig does not list it");
        return;
    }
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.starts_with("error: no NVIDIA driver: libnvidia-ml.so.1 could not be loaded ("),
        "{err}"
    );
    assert!(err.contains("Install the NVIDIA driver"), "{err}");
    assert!(err.contains("--recorded FILE"), "{err}");
    assert!(out.stdout.is_empty());
}

/// `lachesis probe --recorded FIXTURE --push GRPC EXTRA...`, which must succeed; its stderr.
fn push(name: &str, grpc: &str, extra: &[&str]) -> String {
    let recorded = fixture(name);
    let mut args = vec!["probe", "--recorded", &recorded, "--push", grpc];
    args.extend_from_slice(extra);
    let out = lachesis(&args);
    assert!(out.status.success(), "{}", stderr(&out));
    stderr(&out)
}

#[test]
fn pushes_once_and_every_interval_reach_the_service() {
    let dir = temp_dir("push");
    let (_server, grpc, http) = start_service(&dir, "");

    let said = push("a100-8x-half-busy.json", &grpc, &[]);
    assert!(
        said.contains(&format!(
            "pushed node gpu-a100-07 to {grpc}: accepted 1, the service knows 1 node(s)"
        )),
        "{said}"
    );
    // Another node, under the scheduler's name for it.
    let said = push("cpu-only.json", &grpc, &["--node-name", "cpu-01", "--json"]);
    assert!(said.contains("the service knows 2 node(s)"), "{said}");
    // The same node again replaces its report: still two.
    push("a100-8x-half-busy.json", &grpc, &[]);
    assert_eq!(known_nodes(&grpc, None), 2);
    assert_eq!(report_calls(&http, "Ok"), 4);

    // Every second until stopped, replaying two readings in turn.
    let sequence = dir.join("sequence.json");
    let a = std::fs::read_to_string(fixture("v100-mixed.json")).unwrap();
    let b = a.replace(
        "\"memory_used_bytes\": 0,",
        "\"memory_used_bytes\": 1073741824,",
    );
    std::fs::write(&sequence, format!("[{a}, {b}]")).unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_lachesis"))
        .args(["probe", "--recorded", sequence.to_str().unwrap()])
        .args(["--push", &grpc, "--interval-s", "1"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while report_calls(&http, "Ok") < 4 + 3 {
        if started.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            panic!("fewer than 3 pushes in 30 s");
        }
        assert!(child.try_wait().unwrap().is_none(), "the probe exited");
        std::thread::sleep(Duration::from_millis(100));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(known_nodes(&grpc, None), 3);
}

#[test]
fn a_service_that_wants_a_token_gets_it_from_the_token_file() {
    let dir = temp_dir("token");
    let token = dir.join("token");
    std::fs::write(&token, "s3cret-probe-token\n").unwrap();
    let (_server, grpc, _http) = start_service(
        &dir,
        &format!(
            "[auth]\ntoken_file = {:?}\nrequire_for_all = true\n",
            token.to_str().unwrap()
        ),
    );
    let fixture = fixture("h100-mig.json");
    let out = lachesis(&["probe", "--recorded", &fixture, "--push", &grpc]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        stderr(&out).contains("pushing node gpu-h100-02 to")
            && stderr(&out).contains("Unauthenticated"),
        "{}",
        stderr(&out)
    );
    let out = lachesis(&[
        "probe",
        "--recorded",
        &fixture,
        "--push",
        &grpc,
        "--token-file",
        token.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(known_nodes(&grpc, Some("s3cret-probe-token")), 1);
}
