//! The operators' dashboard in a real browser: `lachesis serve` with a token, a session opened
//! over gRPC, Debian's headless Chromium driven through chromedriver (WebDriver). The page
//! must load with no console errors, ask for the token, show the session's nodes and queue,
//! follow a delta live, and leave a screenshot of each view in the test's output
//! (`target/tmp/dashboard/`).
//!
//! Skipped (with the reason printed) without chromium and chromedriver, except where `CI` is
//! set: `.ci/run` installs them.

#![allow(clippy::unwrap_used)]

mod common;

use common::server::{Server, http_get, listen_addrs};
use common::webdriver::{Browser, browser};
use lachesis_serve::proto;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::Duration;

const TOKEN: &str = "dashboard-test-token";
const WAIT: Duration = Duration::from_secs(30);

/// Six nodes of three GPU models, four tenants: whole-GPU and fractional jobs running, a queue
/// with jobs that cannot start now.
fn opening() -> Value {
    let node = |name: &str, model: &str, gpus: u32| {
        json!({"name": name, "gpu_model": model, "gpus": gpus, "cpu_milli": 96000,
               "mem_mib": 524288, "labels": {"rack": "r1"}})
    };
    let job = |id: &str, tenant: &str, gpus: u32, milli: u32, wait_s: u64| {
        json!({"id": id, "tenant": tenant, "tasks": 1, "gpus_per_task": gpus,
               "gpu_milli": milli, "cpu_milli": 8000, "mem_mib": 32768,
               "wait_ms": wait_s * 1000})
    };
    let running = |j: Value, node: &str, gpus: &[u32]| json!({"job": j, "run_ms": 30000, "tasks": [{"node": node, "gpus": gpus}]});
    json!({
        "now_ms": 3_600_000,
        "nodes": [node("a100-0", "A100", 8), node("a100-1", "A100", 8), node("a100-2", "A100", 8),
                  node("v100-0", "V100", 4), node("v100-1", "V100", 4), node("t4-0", "T4", 4)],
        "running": [
            running(job("llm-pretrain", "nlp", 8, 0, 900), "a100-0", &[0, 1, 2, 3, 4, 5, 6, 7]),
            running(job("vit-large", "vision", 4, 0, 600), "a100-1", &[0, 1, 2, 3]),
            running(job("asr-ft", "speech", 2, 0, 300), "a100-1", &[4, 5]),
            running(job("rl-sweep-1", "research", 1, 0, 200), "a100-2", &[1]),
            running(job("rl-sweep-2", "research", 1, 0, 200), "a100-2", &[3]),
            running(job("rl-sweep-3", "research", 1, 0, 200), "a100-2", &[5]),
            running(job("nb-alice", "vision", 1, 500, 100), "v100-0", &[0]),
            running(job("nb-bob", "nlp", 1, 250, 100), "v100-0", &[0]),
            running(job("eval-7", "speech", 2, 0, 100), "v100-1", &[0, 1]),
            running(job("infer-a", "nlp", 1, 500, 50), "t4-0", &[0]),
            running(job("infer-b", "vision", 1, 500, 50), "t4-0", &[1]),
        ],
        "pending": [
            job("llm-finetune", "nlp", 8, 0, 1200),
            job("vit-huge", "vision", 8, 0, 800),
            job("asr-big", "speech", 4, 0, 400),
        ],
    })
}

/// Decides `request` on the service at `grpc`.
fn decide(grpc: &str, request: Value) -> proto::DecideResponse {
    let request: proto::DecideRequest = serde_json::from_value(request).unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let mut client = lachesis_serve::client::connect(grpc, None, None)
            .await
            .unwrap();
        client.decide(request).await.unwrap().into_inner()
    })
}

/// `GET path` with a bearer token: the status code and the body.
fn get_with_token(addr: &str, path: &str, token: &str) -> (u16, String) {
    common::server::http_get_as(addr, path, Some(token))
}

/// A JS expression, quoted.
fn js(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}

/// A service in shadow mode with the shipped model and a token, its files in `out`; its gRPC
/// and HTTP addresses.
fn start_service(out: &Path) -> (Server, String, String) {
    let _ = std::fs::remove_dir_all(out);
    std::fs::create_dir_all(out).unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let token_file = out.join("token");
    std::fs::write(&token_file, TOKEN).unwrap();
    let config = out.join("serve.toml");
    std::fs::write(
        &config,
        format!(
            "model = {:?}\nbaseline = \"fifo/best-fit\"\ndeadline_ms = 60000.0\n\
             routing = {{ mode = \"shadow\" }}\n\
             [grpc]\naddr = \"127.0.0.1:0\"\n[http]\naddr = \"127.0.0.1:0\"\n\
             [auth]\ntoken_file = {:?}\n",
            root.join("models/default").display().to_string(),
            token_file.display().to_string()
        ),
    )
    .unwrap();
    let (server, line) = Server::start(&config);
    let (grpc, http) = listen_addrs(&line);
    (server, grpc, http.unwrap())
}

/// Without a browser: the token guards every route, and the state a page reads holds the
/// session's nodes and queue with the service's reasons.
#[test]
fn the_dashboard_state_is_the_sessions_and_asks_for_the_token() {
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("dashboard-http");
    let (server, grpc, http) = start_service(&out);
    // The token guards every dashboard route (the gRPC calls need none here).
    for route in [
        "/ui",
        "/ui/app.js",
        "/ui/style.css",
        "/ui/state",
        "/ui/events",
        "/ui/model/card",
    ] {
        assert_eq!(http_get(&http, route).0, 401, "{route}");
    }
    assert_eq!(get_with_token(&http, "/ui/state", "wrong").0, 401);
    let (code, body) = get_with_token(&http, "/ui/state", TOKEN);
    assert_eq!(code, 200);
    let state: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(
        state["cluster"],
        Value::Null,
        "no cluster before any request"
    );

    let first = decide(
        &grpc,
        json!({"session": "cycle", "request_id": "open", "snapshot": opening()}),
    );
    let (code, body) = get_with_token(&http, "/ui/state?source=cycle", TOKEN);
    assert_eq!(code, 200);
    let state: Value = serde_json::from_str(&body).unwrap();
    let nodes: usize = state["cluster"]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["nodes"].as_array().unwrap().len())
        .sum();
    assert_eq!(nodes, 6);
    let queue: Vec<(String, String)> = state["cluster"]["queue"]
        .as_array()
        .unwrap()
        .iter()
        .map(|q| {
            (
                q["job"].as_str().unwrap().into(),
                q["kind"].as_str().unwrap().into(),
            )
        })
        .collect();
    let answered: Vec<(String, String)> = first
        .pending
        .iter()
        .map(|p| (p.job.clone(), p.kind.clone()))
        .collect();
    assert_eq!(queue, answered);
    assert_eq!(state["sources"][0]["id"], "cycle");
    assert_eq!(state["decisions"][0]["request_id"], "open");
    assert_eq!(state["model"]["status"], "serving");
    assert_eq!(state["card"], "/ui/model/card");
    assert_eq!(get_with_token(&http, "/ui/model/card", TOKEN).0, 200);

    // A request without a session: its cluster is shown as the last request's.
    decide(&grpc, json!({"request_id": "plain", "snapshot": opening()}));
    let (_, body) = get_with_token(&http, "/ui/state?source=", TOKEN);
    let state: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(state["cluster"]["source"], "");
    assert_eq!(state["sources"][0]["id"], "", "{}", state["sources"]);
    assert_eq!(state["decisions"][0]["request_id"], "plain");

    // A page that names no cluster follows the most recently answered one.
    let delta = decide(
        &grpc,
        json!({"session": "cycle", "request_id": "delta", "delta": {
            "revision": first.revision, "now_ms": 3_660_000, "finished": ["rl-sweep-2"]}}),
    );
    assert_eq!(delta.revision, first.revision + 1);
    let (_, body) = get_with_token(&http, "/ui/state", TOKEN);
    let state: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(state["sources"][0]["id"], "cycle", "{}", state["sources"]);
    assert_eq!(state["cluster"]["source"], "cycle");
    // The model's training traces by name, not by paths of the machine it was trained on.
    let trained_on = state["model"]["trained_on"].as_str().unwrap();
    assert!(
        trained_on.contains("msft-itp-2021/cluster02.csv") && !trained_on.contains("shared/"),
        "{trained_on}"
    );

    // The service keeps each cluster's history whether or not a page is open: a session no
    // page has looked at has points from before the first look.
    decide(
        &grpc,
        json!({"session": "unseen", "request_id": "u", "snapshot": opening()}),
    );
    std::thread::sleep(Duration::from_millis(6_500));
    let (_, body) = get_with_token(&http, "/ui/state?source=unseen", TOKEN);
    let state: Value = serde_json::from_str(&body).unwrap();
    let series = state["cluster"]["series"].as_array().unwrap();
    assert!(series.len() >= 2, "{series:?}");
    let first_ms = series[0]["unix_ms"].as_u64().unwrap();
    let last_ms = series[series.len() - 1]["unix_ms"].as_u64().unwrap();
    assert!(last_ms >= first_ms + 1_000, "{series:?}");
    drop(server);
}

#[test]
fn the_dashboard_shows_a_session_live_in_a_real_browser() {
    let Some((driver, chromium)) = browser() else {
        return;
    };
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("dashboard");
    let (mut server, grpc, http) = start_service(&out);
    let first = decide(
        &grpc,
        json!({"session": "cycle", "request_id": "open", "snapshot": opening()}),
    );
    let pending: Vec<String> = first.pending.iter().map(|p| p.job.clone()).collect();
    assert!(!pending.is_empty(), "{first:?}");

    let browser = Browser::start(&driver, &chromium, &out.join("profile"));
    // The token once in the address: a cookie, then the page itself.
    browser.goto(&format!("http://{http}/ui?token={TOKEN}"));
    browser.wait_for(
        "return document.querySelectorAll('.node').length === 6",
        WAIT,
        "the six nodes",
    );
    assert_eq!(
        browser.script("return location.pathname + location.search"),
        "/ui",
        "the token is not left in the address"
    );
    let models = browser.script(
        "return [...document.querySelectorAll('.group h3')].map(h => h.textContent.split(' ')[0])",
    );
    assert_eq!(models, json!(["A100", "T4", "V100"]));
    let states = browser.script(
        "const s = {}; for (const g of document.querySelectorAll('.gpu:not(.demo)')) \
         { const k = g.className.split(' ')[1]; if (!g.closest('.states')) s[k] = (s[k] || 0) + 1; } \
         return s",
    );
    assert!(states["busy"].as_u64().unwrap() >= 10, "{states}");
    assert!(states["shared"].as_u64().unwrap() >= 2, "{states}");
    for job in &pending {
        browser.wait_for(
            &format!(
                "return !!document.querySelector('#queue tr[data-job=' + CSS.escape({}) + ']')",
                js(job)
            ),
            WAIT,
            job,
        );
    }
    // Waits read as one or two units, never a zero one ("50 min", not "50 min 0 s").
    let waits = browser.script(
        "return [...document.querySelectorAll('#queue tbody tr')].map(r => r.children[3].textContent)",
    );
    for w in waits.as_array().unwrap() {
        let w = w.as_str().unwrap();
        let words: Vec<&str> = w.split(' ').collect();
        assert!(
            matches!(words.len(), 2 | 4) && !w.contains(" 0 ") && !w.ends_with(" 0"),
            "{waits}"
        );
        assert!(words[0] != "0" || words.len() == 2, "{waits}");
    }
    assert!(
        waits.as_array().unwrap().iter().any(|w| w == "20 min"),
        "llm-finetune waited 1,200 s: {waits}"
    );
    // The queue's reasons are the service's own.
    let reason = browser.script(&format!(
        "return document.querySelector('#queue tr[data-job=' + CSS.escape({}) + '] .badge').textContent",
        js(&pending[0])
    ));
    assert_eq!(reason, first.pending[0].kind.as_str());

    // A request without a session, then a delta on the session: the page, told no cluster,
    // follows the most recent (the session's), without a reload.
    decide(&grpc, json!({"request_id": "plain", "snapshot": opening()}));
    browser.script("window.__before = document.body.dataset.updated; return true");
    let second = decide(
        &grpc,
        json!({"session": "cycle", "request_id": "delta-1", "delta": {
            "revision": first.revision, "now_ms": 3_660_000, "finished": ["rl-sweep-2"],
            "submitted": [{"id": "late-arrival", "tenant": "audio", "tasks": 1,
                           "gpus_per_task": 8, "cpu_milli": 8000, "mem_mib": 32768}]}}),
    );
    assert_eq!(second.revision, first.revision + 1);
    browser.wait_for(
        "return !!document.querySelector('#queue tr[data-job=\"late-arrival\"]') \
         && document.body.dataset.updated !== window.__before",
        WAIT,
        "the delta's job in the queue",
    );
    assert_eq!(
        browser.script("return document.getElementById('source').value"),
        "cycle"
    );
    // The chart's axes: shares on y, the service's clock on x.
    let axes = browser.script(
        "return [[...document.querySelectorAll('.yaxis span')].map(s => s.textContent), \
         [...document.querySelectorAll('#series-x span')].map(s => s.textContent)]",
    );
    assert_eq!(axes[0], json!(["100 %", "50 %", "0 %"]));
    let times = axes[1].as_array().unwrap();
    assert_eq!(times.len(), 3, "{axes}");
    assert!(
        times.iter().all(|t| t.as_str().unwrap().contains(':')),
        "{axes}"
    );
    browser.wait_for(
        "return [...document.querySelectorAll('#decisions tbody tr')].some(r => r.textContent.includes('delta-1'))",
        WAIT,
        "the delta's decision in the stream",
    );
    // Shadow mode: the model's answers count as their own arm, compared with the baseline's.
    browser.wait_for(
        "return [...document.querySelectorAll('#arms tbody tr')].some(r => r.textContent.startsWith('shadow-model'))",
        WAIT,
        "the shadow model's arm",
    );
    // The model's training card, linked from the model view, opens with the cookie.
    let card = browser.script(
        "const a = document.querySelector('#model a'); if (!a) return 'no link'; \
         const r = new XMLHttpRequest(); r.open('GET', a.href, false); r.send(); \
         return r.status + ' ' + r.responseText.slice(0, 200)",
    );
    assert!(card.as_str().unwrap().starts_with("200 "), "{card}");
    let model = browser.script("return document.getElementById('model').textContent");
    assert!(!model.as_str().unwrap().contains("../shared"), "{model}");
    // The tenant filter.
    browser.script(
        "const t = document.getElementById('tenant'); t.value = 'audio'; \
         t.dispatchEvent(new Event('change')); return true",
    );
    let shown = browser.script("return document.querySelectorAll('#queue tbody tr').length");
    assert_eq!(shown, 1);
    browser.script(
        "const t = document.getElementById('tenant'); t.value = ''; \
         t.dispatchEvent(new Event('change')); return true",
    );

    for view in ["cluster", "queue", "decisions", "model"] {
        browser.script(&format!("location.hash = {}; return true", js(view)));
        browser.wait_for(
            &format!(
                "return document.getElementById('view-' + {}).offsetHeight > 0",
                js(view)
            ),
            WAIT,
            view,
        );
        let png = out.join(format!("dashboard-{view}.png"));
        browser.screenshot(&png);
        let bytes = std::fs::read(&png).unwrap();
        assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n"), "{}", png.display());
        println!("screenshot: {}", png.display());
    }

    let errors: Vec<Value> = browser
        .console()
        .into_iter()
        .filter(|e| e["level"] == "SEVERE")
        .collect();
    assert!(errors.is_empty(), "console errors: {errors:?}");
    // An open page (its event stream) does not hold up a graceful shutdown.
    let status = server.terminate(Duration::from_secs(10));
    assert!(status.success(), "{status:?}");
    drop(browser);
}
