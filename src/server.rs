//! The server: wires the worker source, the minter, the gRPC service (with health and
//! reflection) and the admin endpoint together, and takes them down in order.
//!
//! The caller hands in bound listeners, a clock and one shutdown token ([`run`]); tests use
//! exactly this seam with `127.0.0.1:0` listeners. On shutdown the gRPC server stops
//! accepting and finishes the calls in flight, the minter stops, and only then is the final
//! reservation saved, so it covers every ID handed out.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tonic::transport::server::{ServerTlsConfig, TcpIncoming};
use tonic::transport::{Certificate, Identity};
use tonic_health::ServingStatus;
use tonic_health::server::HealthReporter;

use crate::calls::Counted;
use crate::clock::Clock;
use crate::layout::{Layout, LayoutError};
use crate::metrics::Metrics;
use crate::minter::{self, MinterConfig, Readiness};
use crate::proto::id_service_server::IdServiceServer;
use crate::service::Service;
use crate::worker::{self, Minted, WorkerError};

/// The gRPC service name reported by the health service.
pub const SERVICE_NAME: &str = "snowmint.v1.IdService";

/// Where the worker ID comes from.
#[derive(Debug, Clone)]
pub enum WorkerConfig {
    Standalone(worker::standalone::StandaloneConfig),
    Etcd(worker::etcd::EtcdConfig),
}

/// Certificates for gRPC over TLS.
#[derive(Debug, Clone)]
pub struct GrpcTls {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// With a client CA, clients must present a certificate it signed (mutual TLS).
    pub client_ca: Option<PathBuf>,
}

impl GrpcTls {
    /// How the transport is described in logs.
    pub fn describe(tls: Option<&GrpcTls>) -> &'static str {
        match tls {
            None => "plain text (no --tls-cert given)",
            Some(GrpcTls { client_ca: None, .. }) => "TLS",
            Some(GrpcTls { client_ca: Some(_), .. }) => "mutual TLS",
        }
    }

    fn server_config(&self) -> Result<ServerTlsConfig, ServeError> {
        let read = |path: &PathBuf| {
            std::fs::read(path).map_err(|e| ServeError::Tls(format!("cannot read {}: {e}", path.display())))
        };
        let mut config = ServerTlsConfig::new().identity(Identity::from_pem(read(&self.cert)?, read(&self.key)?));
        if let Some(ca) = &self.client_ca {
            config = config.client_ca_root(Certificate::from_pem(read(ca)?));
        }
        Ok(config)
    }
}

/// Limits against abuse.
#[derive(Debug, Clone)]
pub struct Limits {
    /// HTTP/2 streams one connection may have open at once.
    pub max_concurrent_streams: u32,
    /// The largest request message accepted.
    pub max_request_bytes: usize,
    /// The longest any call may take, of any service.
    pub request_timeout: Duration,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits { max_concurrent_streams: 1024, max_request_bytes: 16 * 1024, request_timeout: Duration::from_secs(10) }
    }
}

/// Everything `run` needs, validated by the caller's parsing except what needs the clock.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    pub layout: Layout,
    pub worker: WorkerConfig,
    pub max_batch: u32,
    pub max_clock_back: Duration,
    pub max_wait: Duration,
    pub forward_jump_threshold: Duration,
    /// How long calls in flight get to finish once shutdown starts.
    pub shutdown_grace: Duration,
    /// gRPC over TLS; plain text when `None`.
    pub tls: Option<GrpcTls>,
    pub limits: Limits,
}

/// Why the server could not start or run.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("invalid layout: {0}")]
    Layout(#[from] LayoutError),
    #[error(transparent)]
    Worker(#[from] WorkerError),
    #[error("gRPC server: {0}")]
    Transport(#[from] tonic::transport::Error),
    #[error("reflection: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
    #[error("admin endpoint: {0}")]
    Admin(std::io::Error),
    #[error("gRPC TLS: {0}")]
    Tls(String),
}

/// Runs the server until `shutdown` is cancelled, then stops gracefully.
pub async fn run(
    config: ServeConfig,
    grpc: TcpListener,
    admin: TcpListener,
    clock: Arc<dyn Clock>,
    shutdown: CancellationToken,
) -> Result<(), ServeError> {
    config.layout.validate_for_minting(clock.wall_ms())?;
    let metrics = Metrics::new();
    metrics.layout_expiry_timestamp_seconds.set(config.layout.expiry_ms() as f64 / 1000.0);

    let source = match &config.worker {
        WorkerConfig::Standalone(standalone) => {
            worker::standalone::start(standalone.clone(), clock.clone(), metrics.clone()).await?
        }
        WorkerConfig::Etcd(etcd) => worker::etcd::start(etcd.clone(), clock.clone(), metrics.clone()).await?,
    };
    // Stopped only once the gRPC server is done with the calls in flight.
    let stop_minter = CancellationToken::new();
    let (mint, readiness, minter_task) = minter::spawn(
        MinterConfig {
            layout: config.layout.clone(),
            max_clock_back: config.max_clock_back,
            max_wait: config.max_wait,
            forward_jump_threshold: config.forward_jump_threshold,
        },
        clock.clone(),
        metrics.clone(),
        source.state.clone(),
        source.extend_now.clone(),
        stop_minter.clone(),
    );

    let (reporter, health) = tonic_health::server::health_reporter();
    let health_task = tokio::spawn(report_health(reporter, readiness.clone(), shutdown.clone()));
    let admin_task = tokio::spawn(crate::admin::serve(admin, metrics.clone(), readiness, shutdown.clone()));

    let reflection = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(crate::proto::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
    };
    let service = Service::new(mint, config.layout.clone(), config.max_batch, metrics.clone());
    let incoming = TcpIncoming::from(grpc).with_nodelay(Some(true));
    let mut builder = tonic::transport::Server::builder()
        .max_concurrent_streams(config.limits.max_concurrent_streams)
        .timeout(config.limits.request_timeout);
    if let Some(tls) = &config.tls {
        builder = builder.tls_config(tls.server_config()?)?;
    }
    // Counted from outside, so that calls refused before a handler runs are counted too.
    let ids = Counted::new(
        IdServiceServer::new(service).max_decoding_message_size(config.limits.max_request_bytes),
        &metrics,
    );
    let serve = builder
        .add_service(health)
        .add_service(reflection().build_v1()?)
        .add_service(reflection().build_v1alpha()?)
        .add_service(ids)
        .serve_with_incoming_shutdown(incoming, shutdown.clone().cancelled_owned());
    // Calls in flight get `shutdown_grace` to finish; a client that never closes its
    // connection (paused, or gone without a word) does not hold the shutdown up longer.
    let grace = async {
        shutdown.cancelled().await;
        tokio::time::sleep(config.shutdown_grace).await;
    };
    let served = tokio::select! {
        served = serve => served,
        () = grace => {
            tracing::warn!(grace = ?config.shutdown_grace, "connections still open after the shutdown grace; closing them");
            Ok(())
        }
    };
    // Whatever ended the gRPC server, take the rest down in order: the minter first, then
    // the final reservation covering all it minted.
    shutdown.cancel();
    stop_minter.cancel();
    let minted = match minter_task.await {
        Ok(last_minted_ms) => Minted::UpTo(last_minted_ms),
        Err(e) => {
            tracing::error!(error = %e, "minter task failed");
            Minted::Unknown
        }
    };
    source.finish(minted).await;
    let _ = health_task.await;
    let admin = admin_task.await.expect("admin task panicked");
    served?;
    admin.map_err(ServeError::Admin)?;
    tracing::info!("stopped");
    Ok(())
}

/// Mirrors readiness into the gRPC health service (overall and for the ID service).
async fn report_health(
    reporter: HealthReporter,
    mut readiness: watch::Receiver<Readiness>,
    shutdown: CancellationToken,
) {
    loop {
        let status = match &*readiness.borrow_and_update() {
            Readiness::Serving => ServingStatus::Serving,
            Readiness::NotServing(_) => ServingStatus::NotServing,
        };
        reporter.set_service_status("", status).await;
        reporter.set_service_status(SERVICE_NAME, status).await;
        tokio::select! {
            changed = readiness.changed() => if changed.is_err() { break },
            _ = shutdown.cancelled() => break,
        }
    }
    reporter.set_service_status("", ServingStatus::NotServing).await;
    reporter.set_service_status(SERVICE_NAME, ServingStatus::NotServing).await;
}
