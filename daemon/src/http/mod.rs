//! The HTTP routes served beside gRPC on the same listeners: `/metrics` in
//! the OpenMetrics text format, for Prometheus, and the status page
//! (`page`, under `/`).
//!
//! Access: open on a loopback TCP listener and on the Unix socket (what a
//! node-local Prometheus scrapes); on any other address the API's token
//! rule holds, as `authorization: Bearer <token>` (Prometheus'
//! `authorization: { credentials_file: ... }`), and a request without it is
//! answered 401. The page follows the API's own rule instead (see `page`).
pub mod status_page;

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::api::auth::BearerAuth;
use todod_store::Store;
use todod_telemetry::render::Scrape;
use todod_telemetry::{process, Telemetry};

/// What the routes of one listener share.
#[derive(Clone)]
pub struct Http {
    inner: Arc<Shared>,
}

struct Shared {
    store: Store,
    telemetry: Telemetry,
    auth: BearerAuth,
    start_time_seconds: f64,
    page: status_page::Page,
}

/// The content type of the OpenMetrics text format, which Prometheus asks
/// for first and which carries `_created` and units.
const OPENMETRICS: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

impl Http {
    /// `auth` admits everything on a loopback listener or the Unix socket.
    pub fn new(
        store: Store,
        telemetry: Telemetry,
        auth: BearerAuth,
        page: status_page::Page,
    ) -> Http {
        let start_time_seconds = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or_default();
        Http {
            inner: Arc::new(Shared {
                store,
                telemetry,
                auth,
                start_time_seconds,
                page,
            }),
        }
    }

    pub fn router(self) -> axum::Router {
        let page = self.inner.page.clone().router();
        axum::Router::new()
            .route("/metrics", get(metrics))
            .with_state(self)
            .merge(page)
    }

    /// The 401 a request without the token gets, or `None` to go on.
    fn refused(&self, headers: &HeaderMap) -> Option<Response> {
        let given = headers.get(header::AUTHORIZATION).map(|v| v.as_bytes());
        if self.inner.auth.admits(given) {
            return None;
        }
        Some(
            (
                StatusCode::UNAUTHORIZED,
                [(header::WWW_AUTHENTICATE, "Bearer")],
                "missing or wrong bearer token (authorization: Bearer <token>): this listener \
             is not on loopback, so it needs the daemon's token\n",
            )
                .into_response(),
        )
    }
}

async fn metrics(State(http): State<Http>, headers: HeaderMap) -> Response {
    if let Some(refused) = http.refused(&headers) {
        return refused;
    }
    let shared = &http.inner;
    let (tasks, phases) = match shared.store.telemetry_rows().await {
        Ok(rows) => rows,
        Err(error) => {
            tracing::warn!(%error, "a /metrics scrape could not read the store");
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                "the store could not be read; try again\n",
            )
                .into_response();
        }
    };
    let scrape = Scrape {
        tasks,
        phases,
        process: process::usage(),
        start_time_seconds: shared.start_time_seconds,
    };
    let text = shared
        .telemetry
        .render(&scrape, shared.store.write_latencies());
    ([(header::CONTENT_TYPE, OPENMETRICS)], text).into_response()
}

/// Any other path: gRPC's UNIMPLEMENTED for a gRPC call, 404 for a person.
pub async fn not_found(headers: HeaderMap) -> Response {
    let grpc = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/grpc"));
    if grpc {
        return tonic::Status::unimplemented("no such method").into_http();
    }
    (
        StatusCode::NOT_FOUND,
        "not found: todod serves gRPC, /metrics and its status page at /\n",
    )
        .into_response()
}
