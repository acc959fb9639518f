//! `lachesis decide --session`: one full snapshot opens a session on the service, then each
//! line of a deltas file (or stdin) goes as a `SnapshotDelta` and its answer is printed as it
//! comes. Owns the line protocol only (numbering, parsing, the revision each delta follows);
//! the connection and the wire types are lachesis-serve's.

use anyhow::{Context, Result, anyhow};
use lachesis_serve::client::{self, Client, ClientError};
use lachesis_serve::proto::{DecideRequest, DecideResponse, SnapshotDelta};
use std::io::BufRead;
use std::path::Path;

/// Where the session's parts come from.
#[derive(Debug)]
pub struct SessionInput<'a> {
    /// The service's address.
    pub server: &'a str,
    /// The snapshot (JSON) that opens the session.
    pub snapshot: &'a Path,
    /// Deltas, one JSON object a line; `-` for stdin.
    pub deltas: &'a Path,
    /// Bearer token to present.
    pub token: Option<&'a str>,
    /// CA certificate for TLS.
    pub ca: Option<&'a Path>,
}

/// Opens the session, prints its answer, then sends and answers each delta line in turn. Stops
/// at the first line that is not a delta or that the service refuses, naming the line; the
/// answers before it are already printed.
pub fn run(input: &SessionInput<'_>) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    let snapshot = client::read_snapshot(input.snapshot)?;
    let (deltas_name, deltas) = open_deltas(input.deltas)?;
    let mut client = runtime.block_on(client::connect(input.server, input.ca, None))?;
    let session = session_id();
    let opening = DecideRequest {
        snapshot: Some(snapshot),
        session: session.clone(),
        ..Default::default()
    };
    let answer = runtime
        .block_on(send(&mut client, opening, input.token))
        .with_context(|| format!("opening session {session:?}"))?;
    print_answer(&answer);
    let mut revision = answer.revision;

    for (i, line) in deltas.lines().enumerate() {
        let at = || format!("{deltas_name}, line {}", i + 1);
        let line = line.with_context(|| format!("reading {}", at()))?;
        if line.trim().is_empty() {
            continue;
        }
        let mut delta = parse_delta(&line).with_context(at)?;
        // Revisions start at 1, so 0 is "not given": the delta follows the last answer.
        if delta.revision == 0 {
            delta.revision = revision;
        }
        let request = DecideRequest {
            session: session.clone(),
            delta: Some(delta),
            ..Default::default()
        };
        let answer = runtime
            .block_on(send(&mut client, request, input.token))
            .with_context(at)?;
        print_answer(&answer);
        revision = answer.revision;
    }
    Ok(())
}

/// The deltas' reader and the name errors give it.
fn open_deltas(path: &Path) -> Result<(String, Box<dyn BufRead>)> {
    if path == Path::new("-") {
        return Ok(("stdin".into(), Box::new(std::io::stdin().lock())));
    }
    let file = std::fs::File::open(path)
        .with_context(|| format!("opening the deltas file {}", path.display()))?;
    Ok((
        path.display().to_string(),
        Box::new(std::io::BufReader::new(file)),
    ))
}

/// One line as a `SnapshotDelta` (the proto's field names), a bad one named by its field.
fn parse_delta(line: &str) -> Result<SnapshotDelta> {
    let mut json = serde_json::Deserializer::from_str(line);
    let delta: SnapshotDelta =
        serde_path_to_error::deserialize(&mut json).map_err(|e| match e.path().to_string() {
            // "." is the line itself, "?" a line that is not JSON.
            root if root == "." || root == "?" => anyhow!("not a delta: {}", e.inner()),
            field => anyhow!("{field}: {}", e.inner()),
        })?;
    json.end()
        .map_err(|e| anyhow!("not a delta: {e} (one JSON object a line)"))?;
    Ok(delta)
}

async fn send(
    client: &mut Client,
    request: DecideRequest,
    token: Option<&str>,
) -> Result<DecideResponse, ClientError> {
    Ok(client
        .decide(client::with_token(request, token)?)
        .await?
        .into_inner())
}

/// As plain `decide` prints it.
fn print_answer(answer: &DecideResponse) {
    outln!(
        "{}",
        serde_json::to_string_pretty(answer).expect("proto messages serialize")
    );
}

/// Unique per run on one host: one caller per session.
fn session_id() -> String {
    let since_epoch = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    format!("decide-{}-{}", std::process::id(), since_epoch.as_millis())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_delta_line_names_its_field() {
        let err = parse_delta(r#"{"now_ms": 5, "submitted": [{"id": "a", "tasks": "two"}]}"#)
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("submitted[0].tasks: invalid type"), "{err}");
        let err = parse_delta(r#"{"now_ms": 5, "finshed": []}"#)
            .unwrap_err()
            .to_string();
        assert!(err.contains("finshed"), "{err}");
        for line in [r#"{"now_ms": 5} {}"#, r#"{"now_ms": 5"#] {
            let err = parse_delta(line).unwrap_err().to_string();
            assert!(err.starts_with("not a delta"), "{line}: {err}");
        }
    }

    #[test]
    fn a_delta_line_reads_as_the_proto_names_it() {
        let delta =
            parse_delta(r#"{"now_ms": 60000, "finished": ["r"], "requeued": ["q"]}"#).unwrap();
        assert_eq!(delta.now_ms, 60000);
        assert_eq!(delta.finished, ["r"]);
        assert_eq!(delta.requeued, ["q"]);
        assert_eq!(delta.revision, 0);
    }
}
