//! The operators' dashboard on the HTTP listener, read-only: `/ui` (one page, its script and
//! style embedded in the binary: no CDN, works air-gapped), `/ui/state` (everything it shows,
//! as JSON), `/ui/events` (the same, pushed as Server-Sent Events when decisions arrive) and
//! `/ui/model/card` (the model's `MODEL_CARD.md`). What it shows is `crate::dashboard`'s.
//!
//! With a service token configured (`auth.token_file` or `LACHESIS_TOKEN`) every route asks
//! for it: `Authorization: Bearer TOKEN`, or once as `/ui?token=TOKEN`, which sets an
//! HTTP-only cookie for `/ui` (an `EventSource` cannot send headers) and redirects to `/ui`.
//! Reload stays an admin gRPC call.

use crate::config::Secret;
use crate::dashboard::{self, ArmRow, ClusterView, DecisionRow, ReloadRow, Routing, SourceRow};
use crate::engine::Engine;
use axum::Router;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::get;
use serde::Serialize;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// The page, its script and its style (`serve/ui/`).
pub const INDEX_HTML: &str = include_str!("../ui/index.html");
pub const APP_JS: &str = include_str!("../ui/app.js");
/// Shared with `lachesis report`'s page for a compare directory.
pub const STYLE_CSS: &str = include_str!("../ui/style.css");

/// Decisions sent with each state.
const DECISIONS_SHOWN: usize = 50;
/// At most this often per open page, however fast decisions come.
const MIN_PUSH_INTERVAL: Duration = Duration::from_millis(250);
/// Wait times and ages move on without decisions: a state at least this often.
const MAX_PUSH_INTERVAL: Duration = Duration::from_secs(5);
const COOKIE: &str = "lachesis_token";

#[derive(Debug, Clone)]
struct UiState {
    engine: Arc<Engine>,
    token: Option<Secret>,
    /// Turns true when the service shuts down: event streams end then, or the listener's
    /// graceful shutdown would wait for every open page.
    stop: watch::Receiver<bool>,
}

/// The dashboard's routes; `token` (the service's, if any) guards them all; `stop` ends the
/// event streams.
pub fn routes(engine: Arc<Engine>, token: Option<Secret>, stop: watch::Receiver<bool>) -> Router {
    Router::new()
        .route("/ui", get(index))
        .route("/ui/", get(index))
        .route("/ui/app.js", get(app_js))
        .route("/ui/style.css", get(style_css))
        .route("/ui/state", get(state))
        .route("/ui/events", get(events))
        .route("/ui/model/card", get(model_card))
        .with_state(UiState {
            engine,
            token,
            stop,
        })
}

#[derive(Debug, Default)]
struct Params {
    /// The cluster to show: a session id, empty for the last request without a session;
    /// absent: the first held.
    source: Option<String>,
    /// A token to present once (sets the cookie).
    token: Option<String>,
}

impl Params {
    fn of(query: &RawQuery) -> Params {
        let mut p = Params::default();
        for (k, v) in form_urlencoded::parse(query.0.as_deref().unwrap_or("").as_bytes()) {
            match &*k {
                "source" => p.source = Some(v.into_owned()),
                "token" => p.token = Some(v.into_owned()),
                _ => {}
            }
        }
        p
    }
}

/// The token a request presents: bearer header first, then the cookie.
fn presented(headers: &HeaderMap) -> Option<&str> {
    let bearer = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim);
    bearer.or_else(|| {
        headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(';'))
            .find_map(|c| c.trim().strip_prefix(COOKIE)?.strip_prefix('='))
    })
}

/// `None` when the request may see the dashboard, else the refusal.
fn refused(s: &UiState, headers: &HeaderMap) -> Option<Response> {
    let token = s.token.as_ref()?;
    if presented(headers).is_some_and(|p| token.matches(p)) {
        return None;
    }
    Some(
        (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer")],
            Html(LOGIN_HTML),
        )
            .into_response(),
    )
}

const LOGIN_HTML: &str = "<!doctype html><meta charset=utf-8><title>Lachesis: token</title>\
<link rel=icon href=\"data:,\"><form action=/ui method=get style=\"font:14px sans-serif;margin:3em\">\
<p>This dashboard needs the service's token.</p><input type=password name=token autofocus> \
<button>Open</button></form>";

async fn index(State(s): State<UiState>, headers: HeaderMap, q: RawQuery) -> Response {
    let q = Params::of(&q);
    if let (Some(token), Some(given)) = (&s.token, &q.token) {
        if !token.matches(given.trim()) {
            return (StatusCode::UNAUTHORIZED, Html(LOGIN_HTML)).into_response();
        }
        let cookie = format!(
            "{COOKIE}={}; Path=/ui; HttpOnly; SameSite=Strict",
            given.trim()
        );
        return ([(header::SET_COOKIE, cookie)], Redirect::to("/ui")).into_response();
    }
    if let Some(r) = refused(&s, &headers) {
        return r;
    }
    Html(INDEX_HTML).into_response()
}

fn asset(s: &UiState, headers: &HeaderMap, kind: &'static str, body: &'static str) -> Response {
    if let Some(r) = refused(s, headers) {
        return r;
    }
    ([(header::CONTENT_TYPE, kind)], body).into_response()
}

async fn app_js(State(s): State<UiState>, headers: HeaderMap) -> Response {
    asset(&s, &headers, "text/javascript; charset=utf-8", APP_JS)
}

async fn style_css(State(s): State<UiState>, headers: HeaderMap) -> Response {
    asset(&s, &headers, "text/css; charset=utf-8", STYLE_CSS)
}

/// Everything the page shows.
#[derive(Debug, Serialize)]
struct PageState {
    unix_ms: u64,
    sources: Vec<SourceRow>,
    /// The cluster shown (none held: `None`).
    cluster: Option<ClusterView>,
    decisions: Vec<DecisionRow>,
    arms: Vec<ArmRow>,
    routing: Routing,
    model: crate::proto::ModelInfoResponse,
    /// Where the model's card is served, when the model directory has one.
    card: Option<&'static str>,
    reload: Option<ReloadRow>,
}

async fn page_state(engine: &Engine, source: Option<&str>) -> PageState {
    let sources = dashboard::sources(engine);
    let wanted = source
        .map(str::to_string)
        .or_else(|| sources.first().map(|s| s.id.clone()));
    let cluster = match &wanted {
        Some(id) => dashboard::cluster(engine, id).await,
        None => None,
    };
    let mut model = engine.info();
    let card = card_path(&model).is_some_and(|p| p.is_file());
    model.trained_on = dashboard::trace_names(&model.trained_on);
    PageState {
        unix_ms: dashboard::unix_ms(),
        sources,
        cluster,
        decisions: engine.dashboard().decisions(DECISIONS_SHOWN),
        arms: engine.dashboard().arms(),
        routing: dashboard::routing(engine),
        card: card.then_some("/ui/model/card"),
        model,
        reload: engine.dashboard().last_reload(),
    }
}

fn card_path(model: &crate::proto::ModelInfoResponse) -> Option<std::path::PathBuf> {
    (!model.path.is_empty()).then(|| std::path::Path::new(&model.path).join("MODEL_CARD.md"))
}

fn json(state: &PageState) -> String {
    serde_json::to_string(state).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
}

async fn state(State(s): State<UiState>, headers: HeaderMap, q: RawQuery) -> Response {
    let q = Params::of(&q);
    if let Some(r) = refused(&s, &headers) {
        return r;
    }
    let state = page_state(&s.engine, q.source.as_deref()).await;
    ([(header::CONTENT_TYPE, "application/json")], json(&state)).into_response()
}

/// A state now, then one after each burst of decisions (at most every
/// `MIN_PUSH_INTERVAL`, at least every `MAX_PUSH_INTERVAL`).
async fn events(State(s): State<UiState>, headers: HeaderMap, q: RawQuery) -> Response {
    let q = Params::of(&q);
    if let Some(r) = refused(&s, &headers) {
        return r;
    }
    let rx = s.engine.dashboard().subscribe();
    let source = q.source;
    let stream = futures_util::stream::unfold(
        (s.engine, rx, s.stop, source, true),
        |(engine, mut rx, mut stop, source, first)| async move {
            if !first {
                let next = async {
                    tokio::time::sleep(MIN_PUSH_INTERVAL).await;
                    // A closed channel or a quiet spell: send anyway.
                    let _ = tokio::time::timeout(MAX_PUSH_INTERVAL, rx.changed()).await;
                };
                tokio::select! {
                    () = next => {}
                    _ = stop.wait_for(|stop| *stop) => return None,
                }
            }
            if *stop.borrow() {
                return None;
            }
            rx.mark_unchanged();
            let state = page_state(&engine, source.as_deref()).await;
            let event = Event::default().event("state").data(json(&state));
            Some((
                Ok::<_, Infallible>(event),
                (engine, rx, stop, source, false),
            ))
        },
    );
    Sse::new(stream)
        .keep_alive(KeepAlive::default())
        .into_response()
}

async fn model_card(State(s): State<UiState>, headers: HeaderMap) -> Response {
    if let Some(r) = refused(&s, &headers) {
        return r;
    }
    let Some(path) = card_path(&s.engine.info()) else {
        return (StatusCode::NOT_FOUND, "no model is configured\n").into_response();
    };
    match tokio::fs::read_to_string(&path).await {
        Ok(text) => ([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], text).into_response(),
        Err(e) => (StatusCode::NOT_FOUND, format!("{}: {e}\n", path.display())).into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_is_read_from_the_bearer_header_or_the_cookie() {
        let mut h = HeaderMap::new();
        assert_eq!(presented(&h), None);
        h.insert(
            header::COOKIE,
            "a=b; lachesis_token=s3cret".parse().unwrap(),
        );
        assert_eq!(presented(&h), Some("s3cret"));
        h.insert(header::AUTHORIZATION, "Bearer other".parse().unwrap());
        assert_eq!(presented(&h), Some("other"));
        let s = UiState {
            engine: Arc::new(
                Engine::new(
                    crate::ServeConfig {
                        model: String::new(),
                        ..Default::default()
                    },
                    Arc::new(crate::Metrics::new()),
                )
                .unwrap(),
            ),
            token: Some(Secret::new("s3cret")),
            stop: watch::channel(false).1,
        };
        assert!(
            refused(&s, &h).is_some(),
            "a wrong bearer token wins over the cookie"
        );
        h.remove(header::AUTHORIZATION);
        assert!(refused(&s, &h).is_none());
    }
}
