//! A client for the CLI (`lachesis decide`, `lachesis probe --push`), the bench and the tests:
//! connect (plaintext or TLS with a CA file), attach a bearer token, send a snapshot read from
//! JSON or a node agent's report.

use crate::proto;
use crate::proto::scheduler_client::SchedulerClient;
use std::path::{Path, PathBuf};
use tonic::Request;
use tonic::metadata::MetadataValue;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};

/// Why a client call failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("{path}: {message}")]
    File { path: PathBuf, message: String },
    #[error("connecting to {addr}: {message}")]
    Connect { addr: String, message: String },
    #[error("the server answered {code:?}: {message}")]
    Status { code: tonic::Code, message: String },
}

impl From<tonic::Status> for ClientError {
    fn from(s: tonic::Status) -> Self {
        ClientError::Status {
            code: s.code(),
            message: s.message().to_string(),
        }
    }
}

/// A connected `lachesis.v1.Scheduler` client.
pub type Client = SchedulerClient<Channel>;

/// Opens a channel to `addr` (`host:port`, or a full `http(s)://` URI). With `ca`, TLS is
/// used and the server's certificate checked against it (`domain` names the certificate's
/// subject; default `localhost`).
pub async fn connect(
    addr: &str,
    ca: Option<&Path>,
    domain: Option<&str>,
) -> Result<Client, ClientError> {
    Ok(SchedulerClient::new(channel(addr, ca, domain).await?)
        .max_decoding_message_size(64 * 1024 * 1024)
        .max_encoding_message_size(64 * 1024 * 1024))
}

/// A channel to `addr` (see `connect`).
pub async fn channel(
    addr: &str,
    ca: Option<&Path>,
    domain: Option<&str>,
) -> Result<Channel, ClientError> {
    let scheme = if ca.is_some() { "https" } else { "http" };
    let uri = if addr.contains("://") {
        addr.to_string()
    } else {
        format!("{scheme}://{addr}")
    };
    let connect_err = |message: String| ClientError::Connect {
        addr: addr.to_string(),
        message,
    };
    let mut endpoint = Endpoint::from_shared(uri)
        .map_err(|e| connect_err(e.to_string()))?
        .tcp_nodelay(true);
    if let Some(ca) = ca {
        let pem = std::fs::read(ca).map_err(|e| ClientError::File {
            path: ca.to_path_buf(),
            message: e.to_string(),
        })?;
        endpoint = endpoint
            .tls_config(
                ClientTlsConfig::new()
                    .ca_certificate(Certificate::from_pem(pem))
                    .domain_name(domain.unwrap_or("localhost")),
            )
            .map_err(|e| connect_err(e.to_string()))?;
    }
    endpoint
        .connect()
        .await
        .map_err(|e| connect_err(format!("{e} ({:?})", std::error::Error::source(&e))))
}

/// `request` with `authorization: Bearer token` when a token is given.
pub fn with_token<T>(body: T, token: Option<&str>) -> Result<Request<T>, ClientError> {
    let mut request = Request::new(body);
    if let Some(t) = token {
        let value: MetadataValue<_> =
            format!("Bearer {t}")
                .parse()
                .map_err(|_| ClientError::Status {
                    code: tonic::Code::InvalidArgument,
                    message: "the token has characters a header cannot carry".into(),
                })?;
        request.metadata_mut().insert("authorization", value);
    }
    Ok(request)
}

/// Reads a bearer token from a file (surrounding whitespace dropped; an empty file is refused).
pub fn read_token(path: &Path) -> Result<String, ClientError> {
    let text = std::fs::read_to_string(path).map_err(|e| ClientError::File {
        path: path.to_path_buf(),
        message: format!("reading the token file: {e}"),
    })?;
    let token = text.trim();
    if token.is_empty() {
        return Err(ClientError::File {
            path: path.to_path_buf(),
            message: "the token file is empty".into(),
        });
    }
    Ok(token.to_string())
}

/// Reads a snapshot from a JSON file (the `Snapshot` message, field names as in the .proto).
pub fn read_snapshot(path: &Path) -> Result<proto::Snapshot, ClientError> {
    let text = std::fs::read_to_string(path).map_err(|e| ClientError::File {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    serde_json::from_str(&text).map_err(|e| ClientError::File {
        path: path.to_path_buf(),
        message: format!("not a snapshot: {e}"),
    })
}

/// Sends the snapshot in `path` to `addr` and returns the answer as pretty JSON.
pub async fn decide_file(
    addr: &str,
    path: &Path,
    token: Option<&str>,
    ca: Option<&Path>,
) -> Result<String, ClientError> {
    let snapshot = read_snapshot(path)?;
    let mut client = connect(addr, ca, None).await?;
    let answer = client
        .decide(with_token(
            proto::DecideRequest {
                snapshot: Some(snapshot),
                ..Default::default()
            },
            token,
        )?)
        .await?
        .into_inner();
    Ok(serde_json::to_string_pretty(&answer).expect("proto messages serialize"))
}

/// Reports `nodes` to the service at `addr` (`ReportNodes`, as `source`) and returns its reply:
/// how many it accepted and how many fresh reports it holds now.
pub async fn report_nodes(
    addr: &str,
    nodes: &[proto::Node],
    source: &str,
    token: Option<&str>,
    ca: Option<&Path>,
) -> Result<proto::ReportNodesResponse, ClientError> {
    let mut client = connect(addr, ca, None).await?;
    let reply = client
        .report_nodes(with_token(
            proto::ReportNodesRequest {
                nodes: nodes.to_vec(),
                source: source.to_string(),
            },
            token,
        )?)
        .await?
        .into_inner();
    Ok(reply)
}
