//! The status page: the plans, each plan's graph and phases, and for a
//! running phase its progress, rates, ETA, a throughput chart against the
//! projection band, the servers' own figures, failures by class and the
//! schedule firings and drift events; live through server-sent events.
//!
//! Rendered on the server (`render`, with maud: every client string
//! escaped), charts drawn as SVG (`chart`), one small script that swaps in
//! the fragments the server sends. Nothing is fetched from elsewhere, and
//! the Content-Security-Policy says so to the browser: no inline script, no
//! other origin, so even markup that slipped through could run nothing.
//!
//! Access follows the API: on a listener where the API needs the token,
//! the page needs it too, as `authorization: Bearer` or as the session
//! cookie a one-time login (`todoctl open`) sets.
mod chart;
mod render;
mod series;
mod view;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use serde::Deserialize;
use tokio::sync::watch;
use tokio_stream::wrappers::ReceiverStream;

use crate::api::auth::BearerAuth;
use crate::api::logins::{self, percent_encode, Logins, COOKIE, SESSION_TTL};
use todod_domain::TaskId;
use todod_engine::phase::PhaseStore;
use todod_store::Store;

/// What every listener's page shares: the logins (which the API mints) and
/// the progress series.
#[derive(Default)]
pub struct Shared {
    pub logins: Arc<Logins>,
    series: series::SeriesCache,
}

/// The page on one listener.
#[derive(Clone)]
pub struct Page {
    store: Store,
    /// The API's rule on this listener.
    auth: BearerAuth,
    shared: Arc<Shared>,
    /// Ends the event streams when the daemon stops.
    stop: watch::Receiver<bool>,
}

/// At most one update a second per viewer, and one at least every few
/// seconds (ETAs and "ago" move on without a write).
const MIN_UPDATE: Duration = Duration::from_secs(1);
const MAX_QUIET: Duration = Duration::from_secs(5);

const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
                   img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

impl Page {
    pub fn new(
        store: Store,
        auth: BearerAuth,
        shared: Arc<Shared>,
        stop: watch::Receiver<bool>,
    ) -> Page {
        Page {
            store,
            auth,
            shared,
            stop,
        }
    }

    pub fn router(self) -> axum::Router {
        axum::Router::new()
            .route("/", get(overview))
            .route("/plans/{name}", get(plan))
            .route("/events", get(events))
            .route("/login", get(login))
            .route("/tasks/{id}/report", get(report))
            .route("/page.css", get(css))
            .route("/page.js", get(js))
            .with_state(self)
    }

    /// Whether the request carries the API's token or a live session.
    fn admits(&self, headers: &HeaderMap) -> bool {
        let given = headers.get(header::AUTHORIZATION).map(|v| v.as_bytes());
        if self.auth.admits(given) {
            return true;
        }
        headers
            .get_all(header::COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .filter_map(logins::session_cookie)
            .any(|session| self.shared.logins.admits(session))
    }
}

/// The headers every page answer carries.
fn guarded(status: StatusCode, content_type: &'static str, body: String) -> Response {
    let mut response = (status, body).into_response();
    let h = response.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

const HTML: &str = "text/html; charset=utf-8";

fn refused() -> Response {
    let mut response = guarded(StatusCode::UNAUTHORIZED, HTML, render::login_needed());
    response
        .headers_mut()
        .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    response
}

fn unavailable(error: &todod_store::Error) -> Response {
    tracing::warn!(%error, "the status page could not read the store");
    guarded(
        StatusCode::SERVICE_UNAVAILABLE,
        "text/plain; charset=utf-8",
        "the store could not be read; try again\n".into(),
    )
}

fn not_found(what: &str) -> Response {
    guarded(
        StatusCode::NOT_FOUND,
        "text/plain; charset=utf-8",
        format!("{what}\n"),
    )
}

/// The live part of a page: the overview, or one plan.
async fn fragment(page: &Page, plan: Option<&str>) -> Result<String, todod_store::Error> {
    Ok(match plan {
        None => render::overview(&view::overview(&page.store).await?).into_string(),
        Some(name) => render::plan(&view::plan_page(&page.store, &page.shared.series, name).await?)
            .into_string(),
    })
}

fn is_not_found(error: &todod_store::Error) -> bool {
    matches!(
        error,
        todod_store::Error::Rule(todod_domain::Error::NotFound { .. })
    )
}

async fn overview(State(page): State<Page>, headers: HeaderMap) -> Response {
    if !page.admits(&headers) {
        return refused();
    }
    match fragment(&page, None).await {
        Ok(live) => guarded(
            StatusCode::OK,
            HTML,
            render::page("plans", "/events", maud::PreEscaped(live)),
        ),
        Err(e) => unavailable(&e),
    }
}

async fn plan(State(page): State<Page>, Path(name): Path<String>, headers: HeaderMap) -> Response {
    if !page.admits(&headers) {
        return refused();
    }
    match fragment(&page, Some(&name)).await {
        Ok(live) => {
            let events = format!("/events?plan={}", percent_encode(&name));
            guarded(
                StatusCode::OK,
                HTML,
                render::page(&name, &events, maud::PreEscaped(live)),
            )
        }
        Err(e) if is_not_found(&e) => not_found("no such plan"),
        Err(e) => unavailable(&e),
    }
}

#[derive(Deserialize)]
struct EventsQuery {
    plan: Option<String>,
}

/// Server-sent events: `update` with the live part, re-rendered after each
/// change to the graph (at most once a second) and every few seconds.
async fn events(
    State(page): State<Page>,
    Query(query): Query<EventsQuery>,
    headers: HeaderMap,
) -> Response {
    if !page.admits(&headers) {
        return refused();
    }
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<Event, std::convert::Infallible>>(2);
    tokio::spawn(async move {
        let mut changes = page.store.subscribe();
        let mut stop = page.stop.clone();
        let mut last = String::new();
        loop {
            match fragment(&page, query.plan.as_deref()).await {
                Ok(html) if html != last => {
                    if tx
                        .send(Ok(Event::default().event("update").data(&html)))
                        .await
                        .is_err()
                    {
                        return;
                    }
                    last = html;
                }
                Ok(_) => {}
                Err(error) => tracing::debug!(%error, "a page update could not be read"),
            }
            tokio::select! {
                _ = tokio::time::sleep(MIN_UPDATE) => {}
                _ = stop.wait_for(|s| *s) => return,
                _ = tx.closed() => return,
            }
            tokio::select! {
                _ = changes.changed() => {}
                _ = tokio::time::sleep(MAX_QUIET - MIN_UPDATE) => {}
                _ = stop.wait_for(|s| *s) => return,
                _ = tx.closed() => return,
            }
        }
    });
    let mut response = Sse::new(ReceiverStream::new(rx))
        .keep_alive(KeepAlive::default())
        .into_response();
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

#[derive(Deserialize)]
struct LoginQuery {
    code: Option<String>,
    next: Option<String>,
}

/// Spends a one-time code for a session cookie and goes on to `next` (a
/// path of this site only: never a redirect elsewhere).
async fn login(State(page): State<Page>, Query(query): Query<LoginQuery>) -> Response {
    let Some(session) = query
        .code
        .as_deref()
        .and_then(|c| page.shared.logins.redeem(c))
    else {
        return guarded(
            StatusCode::UNAUTHORIZED,
            "text/plain; charset=utf-8",
            "this login link was used already or has expired: run `todoctl open` for a new one\n"
                .into(),
        );
    };
    let next = query
        .next
        .filter(|n| {
            n.starts_with('/')
                && !n.starts_with("//")
                && n.bytes().all(|b| b.is_ascii_graphic() && b != b'\\')
        })
        .unwrap_or_else(|| "/".into());
    let cookie = format!(
        "{COOKIE}={session}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}",
        SESSION_TTL.as_secs()
    );
    let mut response = Redirect::to(&next).into_response();
    if let Ok(value) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
        .headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    response
}

/// A feasibility task's HTML report, rendered from its result in the
/// store (the same bytes as the file its run wrote, with how the
/// generations held to it went), served in a sandbox: it runs no script
/// and reaches nothing. Never read from the spec's path: a client that
/// named a file it may not read gets nothing through the page.
async fn report(State(page): State<Page>, Path(id): Path<String>, headers: HeaderMap) -> Response {
    if !page.admits(&headers) {
        return refused();
    }
    let Ok(id) = TaskId::parse("id", &id) else {
        return not_found("no such task");
    };
    let task = match page.store.get_task(id).await {
        Ok(task) => task,
        Err(e) if is_not_found(&e) => return not_found("no such task"),
        Err(e) => return unavailable(&e),
    };
    let Some(kind) = todod_engine::phase::kinds::get(task.kind) else {
        return not_found("this task writes no report");
    };
    match kind.report(&PhaseStore::new(page.store.clone()), id).await {
        Ok(Some(html)) => {
            let mut response = guarded(StatusCode::OK, HTML, html);
            response.headers_mut().insert(
                header::CONTENT_SECURITY_POLICY,
                HeaderValue::from_static("sandbox; default-src 'none'; style-src 'unsafe-inline'"),
            );
            response
        }
        Ok(None) if task.result.is_none() => not_found("the report is not written yet"),
        Ok(None) => not_found("this task writes no report"),
        Err(error) => {
            tracing::warn!(%error, "the status page could not render a report");
            guarded(
                StatusCode::SERVICE_UNAVAILABLE,
                "text/plain; charset=utf-8",
                "the store could not be read; try again\n".into(),
            )
        }
    }
}

async fn css() -> Response {
    asset("text/css; charset=utf-8", include_str!("page.css"))
}

async fn js() -> Response {
    asset("text/javascript; charset=utf-8", include_str!("page.js"))
}

fn asset(content_type: &'static str, body: &'static str) -> Response {
    let mut response = guarded(StatusCode::OK, content_type, body.into());
    response.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=300"),
    );
    response
}
