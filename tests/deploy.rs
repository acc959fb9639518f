//! The operator files in `deploy/`: the production config parses and validates as
//! `ServeConfig`, starts a working service in shadow mode, and agrees with the systemd units and
//! the container image on paths and ports.

#![allow(clippy::unwrap_used)]

mod common;

use common::lachesis;
use common::server::{Server, listen_addrs};
use lachesis_serve::ServeConfig;
use lachesis_serve::config::RoutingMode;
use serde_json::Value;
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
