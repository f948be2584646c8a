//! The admin HTTP endpoint: `/metrics` (Prometheus text), `/healthz` (the process is up) and
//! `/readyz` (200 while minting would succeed, 503 with the reason otherwise).

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;
use crate::minter::Readiness;

#[derive(Clone)]
struct AdminState {
    metrics: Metrics,
    readiness: watch::Receiver<Readiness>,
}

/// Serves the admin endpoints on `listener` until `shutdown` is cancelled.
pub async fn serve(
    listener: TcpListener,
    metrics: Metrics,
    readiness: watch::Receiver<Readiness>,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let app = Router::new()
        .route("/metrics", get(metrics_text))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/readyz", get(ready))
        .with_state(AdminState { metrics, readiness });
    axum::serve(listener, app).with_graceful_shutdown(shutdown.cancelled_owned()).await
}

async fn metrics_text(State(state): State<AdminState>) -> impl IntoResponse {
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")], state.metrics.render())
}

async fn ready(State(state): State<AdminState>) -> impl IntoResponse {
    match &*state.readiness.borrow() {
        Readiness::Serving => (StatusCode::OK, "ready\n".to_string()),
        Readiness::NotServing(why) => (StatusCode::SERVICE_UNAVAILABLE, format!("not ready: {why}\n")),
    }
}
