//! A small WebDriver client (W3C, JSON over HTTP/1.1 on loopback) for Debian's chromedriver
//! driving headless Chromium: new session, navigate, run a script, screenshot, the browser's
//! console log. std and serde_json only: a WebDriver crate (fantoccini, thirtyfour) would
//! bring hyper's client with TLS and a second async stack for five calls.

#![allow(clippy::unwrap_used)]

use serde_json::{Value, json};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// `chromedriver` and `chromium` if both are installed; `None` (with a reason printed) to
/// skip, except where `CI` is set: there the test must run.
pub fn browser() -> Option<(PathBuf, PathBuf)> {
    let find = |names: &[&str]| {
        names.iter().find_map(|n| {
            std::env::var_os("PATH").and_then(|paths| {
                std::env::split_paths(&paths)
                    .map(|d| d.join(n))
                    .find(|p| p.is_file())
            })
        })
    };
    match (
        find(&["chromedriver"]),
        find(&["chromium", "chromium-browser"]),
    ) {
        (Some(d), Some(c)) => Some((d, c)),
        _ if std::env::var_os("CI").is_some() => {
            panic!("CI is set but chromium or chromedriver is missing: .ci/run installs them")
        }
        _ => {
            eprintln!(
                "skipped: no chromium/chromedriver on PATH \
                 (apt-get install chromium chromium-driver)"
            );
            None
        }
    }
}

/// A running chromedriver with one headless Chromium session; both end on drop.
pub struct Browser {
    driver: Child,
    addr: String,
    session: String,
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// One HTTP/1.1 exchange: the status and the body as JSON.
fn exchange(addr: &str, method: &str, path: &str, body: Option<&Value>) -> (u16, Value) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(120))).unwrap();
    let body = body.map(Value::to_string).unwrap_or_default();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    // chromedriver keeps the connection open whatever the request says: read the head, then
    // exactly the body it announces.
    let mut raw = Vec::new();
    let mut buf = [0u8; 64 * 1024];
    let complete = |raw: &[u8]| -> bool {
        let text = String::from_utf8_lossy(raw);
        let Some((head, rest)) = text.split_once("\r\n\r\n") else {
            return false;
        };
        let head = head.to_ascii_lowercase();
        if head.contains("transfer-encoding: chunked") {
            return rest.ends_with("0\r\n\r\n");
        }
        let length = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .map_or(0, |n| n.trim().parse::<usize>().unwrap());
        rest.len() >= length
    };
    while !complete(&raw) {
        let n = s.read(&mut buf).unwrap();
        assert!(n > 0, "chromedriver closed the connection mid-answer");
        raw.extend_from_slice(&buf[..n]);
    }
    let text = String::from_utf8_lossy(&raw);
    let (head, rest) = text.split_once("\r\n\r\n").unwrap();
    let code = head[9..12].parse().unwrap();
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    let body = if chunked {
        dechunk(rest)
    } else {
        rest.to_string()
    };
    (code, serde_json::from_str(&body).unwrap_or(Value::Null))
}

fn dechunk(mut rest: &str) -> String {
    let mut out = String::new();
    while let Some((size, tail)) = rest.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 {
            break;
        }
        out.push_str(&tail[..n]);
        rest = &tail[n + 2..];
    }
    out
}

impl Browser {
    /// Starts chromedriver on a free loopback port and a headless Chromium with a fresh
    /// profile in `profile`.
    pub fn start(driver: &Path, chromium: &Path, profile: &Path) -> Browser {
        let port = free_port();
        let child = Command::new(driver)
            .args([format!("--port={port}"), "--allowed-ips=127.0.0.1".into()])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let addr = format!("127.0.0.1:{port}");
        let started = Instant::now();
        while TcpStream::connect(&addr).is_err() {
            assert!(
                started.elapsed() < Duration::from_secs(20),
                "chromedriver did not listen"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = std::fs::remove_dir_all(profile);
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:loggingPrefs": {"browser": "ALL"},
            "goog:chromeOptions": {
                "binary": chromium.to_str().unwrap(),
                "args": ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
                         "--no-first-run", "--disable-background-networking",
                         "--disable-component-update", "--disable-sync",
                         "--disable-dev-shm-usage", "--window-size=1280,900",
                         format!("--user-data-dir={}", profile.display())],
            },
        }}});
        let mut browser = Browser {
            driver: child,
            addr,
            session: String::new(),
        };
        let (code, v) = exchange(&browser.addr, "POST", "/session", Some(&caps));
        assert_eq!(code, 200, "new session: {v}");
        browser.session = v["value"]["sessionId"].as_str().unwrap().to_string();
        browser
    }

    fn call(&self, method: &str, what: &str, body: Option<Value>) -> Value {
        let path = format!("/session/{}{what}", self.session);
        let (code, v) = exchange(&self.addr, method, &path, body.as_ref());
        assert_eq!(code, 200, "{method} {what}: {v}");
        v["value"].clone()
    }

    pub fn goto(&self, url: &str) {
        self.call("POST", "/url", Some(json!({ "url": url })));
    }

    /// Runs `script` (a function body; `return` gives the value) in the page.
    pub fn script(&self, script: &str) -> Value {
        self.call(
            "POST",
            "/execute/sync",
            Some(json!({"script": script, "args": []})),
        )
    }

    /// Waits until `script` returns `true`; panics with `what` after `bound`.
    pub fn wait_for(&self, script: &str, bound: Duration, what: &str) {
        let started = Instant::now();
        loop {
            if self.script(script) == Value::Bool(true) {
                return;
            }
            assert!(started.elapsed() < bound, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// A PNG of the window, written to `path`.
    pub fn screenshot(&self, path: &Path) {
        let b64 = self.call("GET", "/screenshot", None);
        std::fs::write(path, base64_decode(b64.as_str().unwrap())).unwrap();
    }

    /// The console messages logged since the last call (chromedriver's log endpoint).
    pub fn console(&self) -> Vec<Value> {
        let v = self.call("POST", "/se/log", Some(json!({"type": "browser"})));
        v.as_array().cloned().unwrap_or_default()
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        if !self.session.is_empty() {
            let path = format!("/session/{}", self.session);
            let _ = std::panic::catch_unwind(|| exchange(&self.addr, "DELETE", &path, None));
        }
        let _ = self.driver.kill();
        let _ = self.driver.wait();
    }
}

/// Standard base64 (the screenshot's encoding).
fn base64_decode(text: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => panic!("not base64: {c}"),
    };
    let digits: Vec<u8> = text
        .bytes()
        .filter(|c| !c.is_ascii_whitespace() && *c != b'=')
        .map(value)
        .collect();
    let mut out = Vec::with_capacity(digits.len() * 3 / 4);
    for chunk in digits.chunks(4) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |acc, (i, d)| acc | u32::from(*d) << (18 - 6 * i));
        let bytes = n.to_be_bytes();
        out.extend_from_slice(&bytes[1..chunk.len()]);
    }
    out
}
