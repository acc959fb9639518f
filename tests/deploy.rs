//! The operator files in `deploy/`: the production config parses and validates as
//! `ServeConfig`, starts a working service in shadow mode, and agrees with the systemd units and
//! the container image on paths and ports; the Prometheus alert rules and the Grafana dashboard
//! parse and query only metrics the service exports.

#![allow(clippy::unwrap_used)]

mod common;

use common::lachesis;
use common::server::{Server, listen_addrs};
use lachesis_serve::ServeConfig;
use lachesis_serve::config::RoutingMode;
use serde_json::Value;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &str) -> String {
    std::fs::read_to_string(root().join(path)).unwrap()
}

fn shipped_config() -> ServeConfig {
    ServeConfig::read(&root().join("deploy/serve.toml")).unwrap()
}

/// The value of `Key=` in a unit file (the first one).
fn unit_value<'a>(unit: &'a str, key: &str) -> &'a str {
    unit.lines()
        .find_map(|l| l.strip_prefix(&format!("{key}=")))
        .unwrap_or_else(|| panic!("no {key}= in the unit"))
}

#[test]
fn the_production_config_parses_validates_and_starts_in_shadow_mode() {
    let cfg = shipped_config();
    assert_eq!(
        cfg.routing.mode,
        RoutingMode::Shadow,
        "shadow is the first step"
    );
    assert_eq!(cfg.model, "/usr/local/share/lachesis/models/default");
    assert_eq!(
        cfg.decision_log.path.as_deref(),
        Some(Path::new("/var/lib/lachesis/decisions.jsonl")),
        "shadow mode needs the decision log"
    );
    assert!(cfg.auth.admin_token_file.is_some());
    // The probe unit pushes every N s: at least three reports per TTL.
    let probe = read("deploy/systemd/lachesis-probe.service");
    let interval_s: u64 = unit_value(&probe, "ExecStart")
        .split("--interval-s ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap()
        .parse()
        .unwrap();
    assert!(cfg.inventory_ttl_ms >= 3 * interval_s * 1000);
}

#[test]
fn the_units_and_the_image_agree_with_the_config() {
    let cfg = shipped_config();
    let log_dir = cfg.decision_log.path.as_ref().unwrap().parent().unwrap();
    let serve = read("deploy/systemd/lachesis-serve.service");
    assert!(
        unit_value(&serve, "ExecStart").contains("serve --config /etc/lachesis/serve.toml"),
        "{serve}"
    );
    assert_eq!(unit_value(&serve, "ExecReload"), "/bin/kill -HUP $MAINPID");
    assert_eq!(Path::new(unit_value(&serve, "ReadWritePaths")), log_dir);
    assert_eq!(
        Path::new("/var/lib").join(unit_value(&serve, "StateDirectory")),
        log_dir
    );
    assert_eq!(unit_value(&serve, "ProtectSystem"), "strict");
    assert_eq!(unit_value(&serve, "NoNewPrivileges"), "yes");
    assert_eq!(unit_value(&serve, "Restart"), "on-failure");

    let image = read("deploy/container/Containerfile");
    assert!(image.contains(&format!("COPY models/default {}\n", cfg.model)));
    assert!(image.contains("COPY deploy/serve.toml /etc/lachesis/serve.toml\n"));
    assert!(
        image.contains("VOLUME [\"/var/lib/lachesis\"]"),
        "the log directory is a volume"
    );
    let port = |addr: &str| addr.rsplit(':').next().unwrap().to_string();
    let expose = format!("EXPOSE {} {}\n", port(&cfg.grpc.addr), port(&cfg.http.addr));
    assert!(image.contains(&expose), "{expose}");
    assert!(image.contains(&format!(
        "http://127.0.0.1:{}/healthz",
        port(&cfg.http.addr)
    )));
}

/// The shipped file, with its install paths and ports moved to a temporary directory, runs a
/// service that answers from the baseline and logs the model's shadow answer.
#[test]
fn the_production_config_runs() {
    let dir = std::env::temp_dir().join(format!("lachesis-deploy-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let state = dir.join("state");
    std::fs::create_dir_all(&state).unwrap();
    std::fs::write(dir.join("admin-token"), "admin\n").unwrap();
    let text = read("deploy/serve.toml")
        .replace(
            "/usr/local/share/lachesis/models/default",
            root().join("models/default").to_str().unwrap(),
        )
        .replace(
            "/etc/lachesis/admin-token",
            dir.join("admin-token").to_str().unwrap(),
        )
        .replace("/var/lib/lachesis", state.to_str().unwrap())
        .replace("0.0.0.0:50051", "127.0.0.1:0")
        .replace("0.0.0.0:9090", "127.0.0.1:0");
    let config: PathBuf = dir.join("serve.toml");
    std::fs::write(&config, text).unwrap();
    let (mut server, line) = Server::start(&config);
    assert!(line.contains("(serving)"), "{line}");
    let (grpc, _) = listen_addrs(&line);
    let out = lachesis(&[
        "decide",
        "--server",
        &grpc,
        "--snapshot",
        root().join("docs/examples/snapshot.json").to_str().unwrap(),
    ]);
    assert!(out.status.success(), "{out:?}");
    let answer: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(answer["arm"], "shadow");
    assert_eq!(answer["decided_by"], "tiresias/best-fit/las-preempt");
    assert!(server.terminate(Duration::from_secs(20)).success());
    let log = std::fs::read_to_string(state.join("decisions.jsonl")).unwrap();
    assert_eq!(log.lines().count(), 1, "{log}");
    let record: Value = serde_json::from_str(&log).unwrap();
    assert!(
        record["shadow"]["decided_by"]
            .as_str()
            .unwrap()
            .starts_with("model:"),
        "the model's answer is logged beside the baseline's: {}",
        record["shadow"]
    );
}

/// The sample names the service exports, from its metrics registry.
fn exported_metrics() -> BTreeSet<String> {
    let names: BTreeSet<String> = lachesis_serve::Metrics::new()
        .names()
        .iter()
        .cloned()
        .collect();
    // A family with no series yet is listed too (the dashboard queries such families).
    assert!(names.contains("lachesis_fallbacks_total"), "{names:?}");
    names
}

/// Every `lachesis_*` name a PromQL expression uses.
fn metrics_in(expr: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut rest = expr;
    while let Some(at) = rest.find("lachesis_") {
        let name: String = rest[at..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        rest = &rest[at + name.len()..];
        found.push(name);
    }
    found
}

#[test]
fn the_alert_rules_parse_and_watch_exported_metrics() {
    let path = root().join("deploy/prometheus/lachesis-alerts.yml");
    let text = std::fs::read_to_string(&path).unwrap();
    let docs = yaml_rust2::YamlLoader::load_from_str(&text).unwrap();
    assert_eq!(docs.len(), 1, "one YAML document");
    let exported = exported_metrics();
    let mut alerts = Vec::new();
    for group in docs[0]["groups"].as_vec().expect("a `groups` list") {
        assert!(group["name"].as_str().is_some(), "a group without a name");
        for rule in group["rules"].as_vec().expect("a group's `rules` list") {
            let alert = rule["alert"]
                .as_str()
                .expect("an alerting rule")
                .to_string();
            let expr = rule["expr"].as_str().expect("a rule's `expr`");
            let used = metrics_in(expr);
            assert!(
                !used.is_empty(),
                "{alert}: watches no lachesis metric: {expr}"
            );
            for name in used {
                assert!(
                    exported.contains(&name),
                    "{alert}: the service exports no {name}"
                );
            }
            assert!(rule["labels"]["severity"].as_str().is_some(), "{alert}");
            for key in ["summary", "description"] {
                assert!(
                    rule["annotations"][key].as_str().is_some(),
                    "{alert}: no {key}"
                );
            }
            alerts.push(alert);
        }
    }
    for wanted in [
        "LachesisModelLosing",
        "LachesisGuardSwitchedToBaseline",
        "LachesisGuardStale",
    ] {
        assert!(alerts.iter().any(|a| a == wanted), "{wanted}: {alerts:?}");
    }
    // Prometheus' own checks where it is installed: the rules, and their unit tests (each
    // alert fires on the series it is for, and not on the others).
    let tests = root().join("deploy/prometheus/lachesis-alerts.test.yml");
    for (verb, file) in [("check", &path), ("test", &tests)] {
        match std::process::Command::new("promtool")
            .args([verb, "rules"])
            .arg(file)
            .output()
        {
            Ok(out) => assert!(
                out.status.success(),
                "promtool {verb} rules: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
            Err(e) => {
                eprintln!("promtool not run ({e}): the rules were checked as YAML only");
                break;
            }
        }
    }
}

#[test]
fn the_dashboard_queries_exported_metrics_and_shows_the_guard() {
    let dashboard: Value =
        serde_json::from_str(&read("deploy/grafana/lachesis-serve.json")).unwrap();
    let exported = exported_metrics();
    let mut used = BTreeSet::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().unwrap();
            for name in metrics_in(expr) {
                assert!(
                    exported.contains(&name),
                    "panel {}: the service exports no {name}",
                    panel["title"]
                );
                used.insert(name);
            }
        }
    }
    for guard in [
        "lachesis_guard_jct_difference_ratio",
        "lachesis_guard_jct_difference_ratio_low",
        "lachesis_guard_jct_difference_ratio_high",
        "lachesis_guard_model_losing",
        "lachesis_guard_switched",
        "lachesis_guard_last_run_timestamp_seconds",
        "lachesis_guard_runs_total",
    ] {
        assert!(used.contains(guard), "no panel shows {guard}");
    }
}

/// The Kubernetes sweep (deploy/kubernetes/compare-sweep.yaml, compare-merge.yaml): an Indexed
/// Job whose completions are the shards of `--shard $(SHARD_INDEX)/N` (N = completions, the
/// index from the Job's completion-index annotation), retried per index; the merge Job runs the
/// same arguments with `--merge` on the same volume and working directory; both argument lists
/// parse as `lachesis compare`.
#[test]
fn the_kubernetes_sweep_is_an_indexed_job_of_shards_and_a_merge() {
    let job = |path: &str| {
        let docs = yaml_rust2::YamlLoader::load_from_str(&read(path)).unwrap();
        assert_eq!(docs.len(), 1, "{path}: one document");
        let doc = docs.into_iter().next().unwrap();
        assert_eq!(doc["kind"].as_str(), Some("Job"), "{path}");
        doc
    };
    let sweep = job("deploy/kubernetes/compare-sweep.yaml");
    let merge = job("deploy/kubernetes/compare-merge.yaml");
    let spec = &sweep["spec"];
    assert_eq!(spec["completionMode"].as_str(), Some("Indexed"));
    let n = spec["completions"].as_i64().unwrap();
    assert!(n >= 1 && spec["parallelism"].as_i64().unwrap() <= n);
    assert!(
        spec["backoffLimitPerIndex"].as_i64().unwrap() >= 1,
        "a failed shard is retried"
    );
    let container =
        |doc: &yaml_rust2::Yaml| doc["spec"]["template"]["spec"]["containers"][0].clone();
    let args = |doc: &yaml_rust2::Yaml| -> Vec<String> {
        container(doc)["args"]
            .as_vec()
            .unwrap()
            .iter()
            .map(|a| a.as_str().unwrap().to_string())
            .collect()
    };
    let (sweep_args, merge_args) = (args(&sweep), args(&merge));
    let at = sweep_args
        .iter()
        .position(|a| a == "--shard")
        .expect("--shard");
    assert_eq!(sweep_args[at + 1], format!("$(SHARD_INDEX)/{n}"));
    let env = &container(&sweep)["env"][0];
    assert_eq!(env["name"].as_str(), Some("SHARD_INDEX"));
    assert_eq!(
        env["valueFrom"]["fieldRef"]["fieldPath"].as_str(),
        Some("metadata.annotations['batch.kubernetes.io/job-completion-index']")
    );
    let mut expected = sweep_args.clone();
    expected.splice(at..at + 2, ["--merge".to_string()]);
    assert_eq!(merge_args, expected, "the merge runs the sweep's arguments");
    for key in ["workingDir", "image", "volumeMounts"] {
        assert_eq!(container(&sweep)[key], container(&merge)[key], "{key}");
    }
    assert_eq!(
        sweep["spec"]["template"]["spec"]["volumes"],
        merge["spec"]["template"]["spec"]["volumes"]
    );
    for list in [sweep_args.clone(), merge_args] {
        let mut words: Vec<String> = list
            .iter()
            .map(|a| a.replace("$(SHARD_INDEX)", "0"))
            .collect();
        words.push("--help".into());
        let words: Vec<&str> = words.iter().map(String::as_str).collect();
        let out = lachesis(&words);
        assert!(
            out.status.success(),
            "lachesis {words:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
