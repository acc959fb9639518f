//! `lachesis serve` as a child process for the end-to-end tests: started on a config, stopped
//! by signal within a bound, killed if a test fails midway; and a bare HTTP GET for its
//! metrics and health endpoints.

#![allow(clippy::unwrap_used)]

use std::io::{BufRead, BufReader, Read, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Kills the server if a test fails midway.
pub struct Server(pub Child);

impl Server {
    /// `lachesis serve --config CONFIG`, and the line it prints once it listens.
    pub fn start(config: &Path) -> (Server, String) {
        Server::start_with(config, &[], Stdio::null())
    }

    /// `lachesis serve --config CONFIG ARGS...` with its log (stderr) going to `log`.
    pub fn start_with(config: &Path, args: &[&str], log: Stdio) -> (Server, String) {
        let child = Command::new(env!("CARGO_BIN_EXE_lachesis"))
            .args(["serve", "--config", config.to_str().unwrap()])
            .args(args)
            .stdout(Stdio::piped())
            .stderr(log)
            .spawn()
            .unwrap();
        let mut server = Server(child);
        let mut line = String::new();
        BufReader::new(server.0.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        (server, line)
    }

    pub fn signal(&self, name: &str) {
        let pid = self.0.id().to_string();
        assert!(
            Command::new("kill")
                .args([name, &pid])
                .status()
                .unwrap()
                .success()
        );
    }

    /// SIGTERM, then the exit status, which must come within `bound`.
    pub fn terminate(&mut self, bound: Duration) -> std::process::ExitStatus {
        let started = Instant::now();
        self.signal("-TERM");
        loop {
            if let Some(s) = self.0.try_wait().unwrap() {
                return s;
            }
            assert!(
                started.elapsed() < bound,
                "still running {bound:?} after SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `GET path` over HTTP/1.0: the status code and the body.
pub fn http_get(addr: &str, path: &str) -> (u16, String) {
    http_get_as(addr, path, None)
}

/// `http_get`, presenting `token` as a bearer token when given.
pub fn http_get_as(addr: &str, path: &str, token: Option<&str>) -> (u16, String) {
    let auth = token.map_or_else(String::new, |t| format!("Authorization: Bearer {t}\r\n"));
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    write!(s, "GET {path} HTTP/1.0\r\nHost: {addr}\r\n{auth}\r\n").unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    let code = text[9..12].parse().unwrap();
    let body = text.split("\r\n\r\n").nth(1).unwrap_or("").to_string();
    (code, body)
}

/// The gRPC and HTTP addresses in the line `lachesis serve` prints once it listens:
/// "lachesis serve: gRPC on 127.0.0.1:PORT, HTTP on 127.0.0.1:PORT; model V (serving)" (HTTP
/// empty when it has none).
pub fn listen_addrs(line: &str) -> (String, Option<String>) {
    let words: Vec<&str> = line.split_whitespace().collect();
    let grpc = words
        .get(4)
        .map(|w| w.trim_end_matches([',', ';']).to_string())
        .unwrap_or_else(|| panic!("no gRPC address in {line:?}"));
    let http = (words.get(5) == Some(&"HTTP")).then(|| {
        words
            .get(7)
            .map(|w| w.trim_end_matches(';').to_string())
            .unwrap_or_else(|| panic!("no HTTP address in {line:?}"))
    });
    (grpc, http)
}
