//! Every Prometheus metric snowmint exports, in one registry per server.
//!
//! Each label value a dashboard or alert uses is initialized at start, so a scrape shows
//! zeros rather than gaps. A registry per [`Metrics`] (not the global one) lets tests run
//! several servers in one process without their counters mixing.

use std::time::Duration;

use prometheus::{
    Encoder, Gauge, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};

/// The RPC methods, as they appear in the `method` label.
pub const METHODS: [&str; 3] = ["NextId", "BatchIds", "Decode"];

/// The gRPC codes a call can end with, as they appear in the `code` label.
pub const CODES: [&str; 7] =
    ["OK", "InvalidArgument", "Unavailable", "DeadlineExceeded", "Cancelled", "Internal", "ResourceExhausted"];

/// The `result` label of store operations.
pub const RESULT_OK: &str = "ok";
pub const RESULT_FAILED: &str = "failed";

/// The `action` label of clock steps back: waited out, or refused.
pub const ACTION_WAITED: &str = "waited";
pub const ACTION_REFUSED: &str = "refused";

/// All of snowmint's metrics.
#[derive(Clone)]
pub struct Metrics {
    registry: Registry,
    pub ids_issued: IntCounter,
    pub requests: IntCounterVec,
    pub request_duration: HistogramVec,
    pub batch_size: Histogram,
    pub clock_backward: IntCounterVec,
    pub clock_backward_seconds: Histogram,
    pub clock_forward_jumps: IntCounter,
    pub sequence_exhausted: IntCounter,
    pub sequence_wait_seconds: prometheus::Counter,
    pub lease_renewals: IntCounterVec,
    pub lease_lost: IntCounter,
    pub lease_valid: IntGauge,
    pub minting: IntGauge,
    pub worker_id: IntGauge,
    pub reservation_headroom_seconds: Gauge,
    pub reservation_writes: IntCounterVec,
    pub layout_expiry_timestamp_seconds: Gauge,
    pub fleet_slots_in_use: IntGauge,
    pub fleet_slots: IntGauge,
    pub build_info: IntGaugeVec,
}

impl Metrics {
    pub fn new() -> Metrics {
        let registry = Registry::new();
        let ids_issued = IntCounter::new("snowmint_ids_issued_total", "IDs handed to callers.").unwrap();
        let requests = IntCounterVec::new(
            Opts::new("snowmint_requests_total", "gRPC calls by method and final status code."),
            &["method", "code"],
        )
        .unwrap();
        let request_duration = HistogramVec::new(
            HistogramOpts::new("snowmint_request_duration_seconds", "Time to answer a gRPC call, by method.").buckets(
                vec![
                    0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
                    1.0, 2.5,
                ],
            ),
            &["method"],
        )
        .unwrap();
        let batch_size = Histogram::with_opts(
            HistogramOpts::new("snowmint_batch_size", "IDs asked for per BatchIds call.")
                .buckets(prometheus::exponential_buckets(1.0, 4.0, 9).unwrap()),
        )
        .unwrap();
        let clock_backward = IntCounterVec::new(
            Opts::new(
                "snowmint_clock_backward_total",
                "Wall-clock steps back seen while minting, by what was done: waited out or refused.",
            ),
            &["action"],
        )
        .unwrap();
        let clock_backward_seconds = Histogram::with_opts(
            HistogramOpts::new("snowmint_clock_backward_seconds", "Size of wall-clock steps back seen while minting.")
                .buckets(vec![0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0, 300.0]),
        )
        .unwrap();
        let clock_forward_jumps = IntCounter::new(
            "snowmint_clock_forward_jumps_total",
            "Wall-clock jumps forward larger than the configured threshold.",
        )
        .unwrap();
        let sequence_exhausted = IntCounter::new(
            "snowmint_sequence_exhausted_total",
            "Times every sequence number of a tick was used and minting waited for the next tick.",
        )
        .unwrap();
        let sequence_wait_seconds = prometheus::Counter::new(
            "snowmint_sequence_wait_seconds_total",
            "Time spent waiting for the next tick after the sequence ran out.",
        )
        .unwrap();
        let lease_renewals = IntCounterVec::new(
            Opts::new("snowmint_lease_renewals_total", "Worker lease renewals by result."),
            &["result"],
        )
        .unwrap();
        let lease_lost = IntCounter::new(
            "snowmint_lease_lost_total",
            "Times the worker slot was lost (its lease expired, or its key is no longer this instance's) and a slot had to be claimed again.",
        )
        .unwrap();
        let lease_valid = IntGauge::new(
            "snowmint_lease_valid",
            "1 while this instance holds its worker ID (always 1 in standalone mode).",
        )
        .unwrap();
        let minting =
            IntGauge::new("snowmint_minting", "1 while this instance would mint now, 0 while it refuses.").unwrap();
        let worker_id = IntGauge::new("snowmint_worker_id", "The worker ID held, or -1 while none is held.").unwrap();
        let reservation_headroom_seconds = Gauge::new(
            "snowmint_reservation_headroom_seconds",
            "How far the durable reservation reaches past the wall clock.",
        )
        .unwrap();
        let reservation_writes = IntCounterVec::new(
            Opts::new("snowmint_reservation_writes_total", "Reservation writes by result."),
            &["result"],
        )
        .unwrap();
        let layout_expiry_timestamp_seconds = Gauge::new(
            "snowmint_layout_expiry_timestamp_seconds",
            "Unix time at which the ID layout's time field runs out.",
        )
        .unwrap();
        let fleet_slots_in_use = IntGauge::new(
            "snowmint_fleet_slots_in_use",
            "Worker slots taken across the fleet (etcd mode), as this instance last listed them.",
        )
        .unwrap();
        let fleet_slots =
            IntGauge::new("snowmint_fleet_slots", "Worker slots the layout allows (2^worker_bits).").unwrap();
        let build_info = IntGaugeVec::new(
            Opts::new("snowmint_build_info", "Always 1; labelled with the build's version."),
            &["version"],
        )
        .unwrap();

        let metrics = Metrics {
            registry,
            ids_issued,
            requests,
            request_duration,
            batch_size,
            clock_backward,
            clock_backward_seconds,
            clock_forward_jumps,
            sequence_exhausted,
            sequence_wait_seconds,
            lease_renewals,
            lease_lost,
            lease_valid,
            minting,
            worker_id,
            reservation_headroom_seconds,
            reservation_writes,
            layout_expiry_timestamp_seconds,
            fleet_slots_in_use,
            fleet_slots,
            build_info,
        };
        metrics.register_all();
        metrics.initialize_labels();
        metrics
    }

    fn register_all(&self) {
        let collectors: Vec<Box<dyn prometheus::core::Collector>> = vec![
            Box::new(self.ids_issued.clone()),
            Box::new(self.requests.clone()),
            Box::new(self.request_duration.clone()),
            Box::new(self.batch_size.clone()),
            Box::new(self.clock_backward.clone()),
            Box::new(self.clock_backward_seconds.clone()),
            Box::new(self.clock_forward_jumps.clone()),
            Box::new(self.sequence_exhausted.clone()),
            Box::new(self.sequence_wait_seconds.clone()),
            Box::new(self.lease_renewals.clone()),
            Box::new(self.lease_lost.clone()),
            Box::new(self.lease_valid.clone()),
            Box::new(self.minting.clone()),
            Box::new(self.worker_id.clone()),
            Box::new(self.reservation_headroom_seconds.clone()),
            Box::new(self.reservation_writes.clone()),
            Box::new(self.layout_expiry_timestamp_seconds.clone()),
            Box::new(self.fleet_slots_in_use.clone()),
            Box::new(self.fleet_slots.clone()),
            Box::new(self.build_info.clone()),
        ];
        for collector in collectors {
            self.registry.register(collector).expect("metric names are unique");
        }
    }

    fn initialize_labels(&self) {
        for method in METHODS {
            self.request_duration.with_label_values(&[method]);
            for code in CODES {
                self.requests.with_label_values(&[method, code]);
            }
        }
        for action in [ACTION_WAITED, ACTION_REFUSED] {
            self.clock_backward.with_label_values(&[action]);
        }
        for result in [RESULT_OK, RESULT_FAILED] {
            self.lease_renewals.with_label_values(&[result]);
            self.reservation_writes.with_label_values(&[result]);
        }
        self.worker_id.set(-1);
        self.build_info.with_label_values(&[env!("CARGO_PKG_VERSION")]).set(1);
    }

    /// The metrics of one RPC method, with the series every call touches resolved once.
    pub fn method(&self, method: &'static str) -> MethodMetrics {
        MethodMetrics {
            method,
            ok: self.requests.with_label_values(&[method, "OK"]),
            duration: self.request_duration.with_label_values(&[method]),
            requests: self.requests.clone(),
        }
    }

    /// The text exposition of every metric.
    pub fn render(&self) -> String {
        let mut out = Vec::new();
        TextEncoder::new().encode(&self.registry.gather(), &mut out).expect("text encoding cannot fail");
        String::from_utf8(out).expect("the text format is UTF-8")
    }
}

/// One method's call metrics. Looking a labelled series up hashes its labels under a lock;
/// the series of successful calls and of latency are looked up once, here, instead of on
/// every call.
#[derive(Clone)]
pub struct MethodMetrics {
    method: &'static str,
    ok: IntCounter,
    duration: Histogram,
    requests: IntCounterVec,
}

impl MethodMetrics {
    /// Records one finished call.
    pub fn record(&self, code: tonic::Code, elapsed: Duration) {
        match code {
            tonic::Code::Ok => self.ok.inc(),
            code => self.requests.with_label_values(&[self.method, code_label(code)]).inc(),
        }
        self.duration.observe(elapsed.as_secs_f64());
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

/// The `code` label for a gRPC code.
pub fn code_label(code: tonic::Code) -> &'static str {
    use tonic::Code::*;
    match code {
        Ok => "OK",
        Cancelled => "Cancelled",
        Unknown => "Unknown",
        InvalidArgument => "InvalidArgument",
        DeadlineExceeded => "DeadlineExceeded",
        NotFound => "NotFound",
        AlreadyExists => "AlreadyExists",
        PermissionDenied => "PermissionDenied",
        ResourceExhausted => "ResourceExhausted",
        FailedPrecondition => "FailedPrecondition",
        Aborted => "Aborted",
        OutOfRange => "OutOfRange",
        Unimplemented => "Unimplemented",
        Internal => "Internal",
        Unavailable => "Unavailable",
        DataLoss => "DataLoss",
        Unauthenticated => "Unauthenticated",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_label_set_is_present_from_the_start() {
        let text = Metrics::new().render();
        for needle in [
            r#"snowmint_requests_total{code="Unavailable",method="NextId"} 0"#,
            r#"snowmint_clock_backward_total{action="refused"} 0"#,
            r#"snowmint_lease_renewals_total{result="failed"} 0"#,
            "snowmint_ids_issued_total 0",
            "snowmint_worker_id -1",
            "snowmint_build_info{version=",
        ] {
            assert!(text.contains(needle), "missing {needle} in\n{text}");
        }
    }
}
