//! Every Prometheus metric snowmint exports, in one registry per server.
//!
//! Each label value a dashboard or alert uses is initialized at start, so a scrape shows
//! zeros rather than gaps. A registry per [`Metrics`] (not the global one) lets tests run
//! several servers in one process without their counters mixing.

use std::sync::Arc;
use std::time::Duration;

use prometheus::{
    Encoder, Gauge, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts,
    Registry, TextEncoder,
};

/// The RPC methods of the `IdService`, as they appear in the `method` label.
pub const METHODS: [&str; 8] =
    ["NextId", "BatchIds", "Decode", "Reveal", "NextUuid", "BatchUuids", "NextValue", "BatchValues"];

/// The methods that ask the minter for IDs, as they appear in the `method` label of the
/// minter's queue metrics: the minter sees a `NextUuid` as the one ID it asks for
/// (`NextId`), and a `BatchUuids` as a batch (`BatchIds`).
pub const NEXT_ID: &str = METHODS[0];
pub const BATCH_IDS: &str = METHODS[1];

/// The `method` label of a call to a method the `IdService` does not have. Such calls are
/// counted (they are answered `UNIMPLEMENTED`), but under one label: a label per name a
/// client sends would let any client grow the registry without bound.
pub const OTHER_METHOD: &str = "other";

/// The `protocol` label of a call: gRPC, or the Connect protocol (HTTP/1.1 or HTTP/2, JSON or
/// binary) on the same port.
pub const PROTOCOL_GRPC: &str = "grpc";
pub const PROTOCOL_CONNECT: &str = "connect";
pub const PROTOCOLS: [&str; 2] = [PROTOCOL_GRPC, PROTOCOL_CONNECT];

/// Every gRPC code, as it appears in the `code` label, in the order of the codes' numbers
/// (so `CODES[code as usize]` is the label of `code`).
pub const CODES: [&str; 17] = [
    "OK",
    "Cancelled",
    "Unknown",
    "InvalidArgument",
    "DeadlineExceeded",
    "NotFound",
    "AlreadyExists",
    "PermissionDenied",
    "ResourceExhausted",
    "FailedPrecondition",
    "Aborted",
    "OutOfRange",
    "Unimplemented",
    "Internal",
    "Unavailable",
    "DataLoss",
    "Unauthenticated",
];

/// The `result` label of store operations.
pub const RESULT_OK: &str = "ok";
pub const RESULT_FAILED: &str = "failed";
/// Slot history events dropped because the recorder fell behind.
pub const RESULT_DROPPED: &str = "dropped";

/// The `action` label of clock steps back: waited out, refused, or minted through on borrowed
/// time (the hybrid policy).
pub const ACTION_WAITED: &str = "waited";
pub const ACTION_REFUSED: &str = "refused";
pub const ACTION_BORROWED: &str = "borrowed";

/// The `operation` label of opaque IDs: made for a caller, or revealed (by `Reveal`, or by
/// `Decode` before it decodes).
pub const OPAQUE_ENCODED: &str = "encoded";
pub const OPAQUE_REVEALED: &str = "revealed";

/// The `reason` label of connections closed on arrival: `--max-connections` were open, or
/// `--max-connections-per-peer` from the same address.
pub const REFUSED_MAX_CONNECTIONS: &str = "max_connections";
pub const REFUSED_PER_PEER: &str = "per_peer";

/// The `stage` label of connections closed for not finishing their handshake within
/// `--handshake-timeout-ms`: still in TLS, or (TLS done, or none) without the HTTP/2 preface
/// or a first HTTP/1.1 request line.
pub const HANDSHAKE_TLS: &str = "tls";
pub const HANDSHAKE_PROTOCOL: &str = "protocol";

/// The `reason` label of calls the minter refused on arrival: it could not mint them by their
/// deadline with the work queued before them, or their deadline had passed.
pub const REFUSED_SATURATED: &str = "saturated";
pub const REFUSED_DEADLINE: &str = "deadline";

/// The `result` label of etcd compactions: this instance compacted etcd's history, found the
/// revision compacted already (by etcd's own `--auto-compaction-*` or an operator: harmless),
/// or failed (a round or a compaction; retried the next round).
pub const COMPACTED: &str = "compacted";
pub const ALREADY_COMPACTED: &str = "already_compacted";
pub const COMPACTION_RESULTS: [&str; 3] = [COMPACTED, ALREADY_COMPACTED, RESULT_FAILED];

/// The `alarm` label of `snowmint_etcd_alarm`: etcd's names of its alarms.
pub const ALARM_NOSPACE: &str = "NOSPACE";
pub const ALARM_CORRUPT: &str = "CORRUPT";

/// What became of a named sequence's segment: claimed (confirmed this instance's), lost (a
/// claim of unknown outcome given up: a gap) or given back at a clean close.
pub const SEGMENT_CLAIMED: &str = "claimed";
pub const SEGMENT_LOST: &str = "lost";
pub const SEGMENT_GIVEN_BACK: &str = "given_back";
pub const SEGMENT_RESULTS: [&str; 3] = [SEGMENT_CLAIMED, SEGMENT_LOST, SEGMENT_GIVEN_BACK];

/// All of snowmint's metrics.
#[derive(Clone)]
pub struct Metrics {
    registry: Registry,
    pub ids_issued: IntCounter,
    pub requests: IntCounterVec,
    pub request_duration: HistogramVec,
    pub batch_size: Histogram,
    pub queue_wait_seconds: HistogramVec,
    pub queue_length: IntGauge,
    pub clock_backward: IntCounterVec,
    pub clock_backward_seconds: Histogram,
    pub clock_forward_jumps: IntCounter,
    pub clock_forward_jumps_adopted: IntCounter,
    pub clock_drift_seconds: Gauge,
    pub clock_drift_bound_seconds: Gauge,
    pub sequence_exhausted: IntCounter,
    pub refused_on_arrival: IntCounterVec,
    pub ids_discarded: IntCounter,
    pub sequence_wait_seconds: prometheus::Counter,
    pub lease_renewals: IntCounterVec,
    pub lease_lost: IntCounter,
    /// Times the store was found gone back in time (a restored snapshot).
    pub store_went_back: IntCounter,
    /// Claims whose floor a fence raised past the stored reservation.
    pub slots_fenced: IntCounter,
    pub lease_valid: IntGauge,
    pub minting: IntGauge,
    pub worker_id: IntGauge,
    pub slots_held: IntGauge,
    pub reservation_headroom_seconds: Gauge,
    pub reservation_writes: IntCounterVec,
    pub layout_expiry_timestamp_seconds: Gauge,
    pub fleet_slots_in_use: IntGauge,
    pub fleet_slots: IntGauge,
    pub fleet_clock_skew: Gauge,
    /// gRPC connections open now (under `--max-connections`).
    pub connections_open: IntGauge,
    /// gRPC connections closed on arrival, by [`REFUSED_MAX_CONNECTIONS`] /
    /// [`REFUSED_PER_PEER`].
    pub connections_refused: IntCounterVec,
    /// gRPC connections closed for not finishing their handshake in time, by
    /// [`HANDSHAKE_TLS`] / [`HANDSHAKE_PROTOCOL`].
    pub connections_handshake_timeouts: IntCounterVec,
    /// History writes (slot records appended and closed, segment records written) by result.
    pub history_writes: IntCounterVec,
    pub history_pruned: IntCounter,
    /// Opaque IDs encoded for callers and revealed, by [`OPAQUE_ENCODED`] / [`OPAQUE_REVEALED`].
    pub opaque_ids: IntCounterVec,
    /// The key version opaque IDs are made with, -1 without `--opaque-key-file`: during a
    /// rotation, which instances have the new key.
    pub opaque_key_version: IntGauge,
    /// etcd mode: compactions of etcd's history this instance ran, by [`COMPACTION_RESULTS`].
    pub etcd_compactions: IntCounterVec,
    /// etcd mode: the revision etcd's history was last compacted to by the fleet, as this
    /// instance last learnt it (its own compaction, or the compaction key another wrote).
    pub etcd_compacted_revision: IntGauge,
    /// etcd mode: 1 while etcd has the alarm (`NOSPACE`, `CORRUPT`) raised, as this instance
    /// last saw it.
    pub etcd_alarm: IntGaugeVec,
    /// Named sequences: values handed to callers, by sequence.
    pub named_sequence_values: IntCounterVec,
    /// Named sequences: segments by sequence and [`SEGMENT_RESULTS`].
    pub named_sequence_segments: IntCounterVec,
    /// Named sequences: the size of the last segment claimed, by sequence.
    pub named_sequence_segment_size: IntGaugeVec,
    /// Named sequences: values left before the sequence's maximum, as last read or written.
    pub named_sequence_values_left: IntGaugeVec,
    /// Tenants: calls of a known tenant answered, by tenant and code (of [`CODES`]).
    pub tenant_calls: IntCounterVec,
    /// Tenants: IDs, UUIDs and sequence values let through, by tenant.
    pub tenant_ids: IntCounterVec,
    /// Tenants: calls of a known tenant refused, by tenant and [`TENANT_REFUSALS`].
    pub tenant_refusals: IntCounterVec,
    /// Tenants: what a tenant's quota would let through now, as its last call left it.
    pub tenant_quota_available: IntGaugeVec,
    /// Calls refused `UNAUTHENTICATED`, by [`UNAUTHENTICATED_REASONS`].
    pub unauthenticated_calls: IntCounterVec,
    /// Reloads of the policy and token files, by [`RESULT_OK`] or [`RESULT_FAILED`].
    pub tenant_reloads: IntCounterVec,
    pub build_info: IntGaugeVec,
}

/// The `reason` label of a known tenant's refused call.
pub const TENANT_REFUSALS: [&str; 4] = ["permission", "max_batch", "burst", "quota"];

/// The `reason` label of a call refused `UNAUTHENTICATED`.
pub const UNAUTHENTICATED_REASONS: [&str; 5] = ["missing", "bad_header", "unknown_token", "no_tenant", "two_tenants"];

impl Metrics {
    pub fn new() -> Metrics {
        let registry = Registry::new();
        let ids_issued = IntCounter::new("snowmint_ids_issued_total", "IDs handed to callers.").unwrap();
        let requests = IntCounterVec::new(
            Opts::new(
                "snowmint_requests_total",
                "IdService calls by method, final status code and protocol (grpc or connect).",
            ),
            &["method", "code", "protocol"],
        )
        .unwrap();
        let request_duration = HistogramVec::new(
            HistogramOpts::new(
                "snowmint_request_duration_seconds",
                "Time to answer an IdService call, by method and protocol.",
            )
            .buckets(vec![
                0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002_5, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                2.5,
            ]),
            &["method", "protocol"],
        )
        .unwrap();
        let batch_size = Histogram::with_opts(
            HistogramOpts::new(
                "snowmint_batch_size",
                "IDs asked for per BatchIds or BatchUuids call, values per BatchValues call.",
            )
            .buckets(prometheus::exponential_buckets(1.0, 4.0, 9).unwrap()),
        )
        .unwrap();
        let queue_wait_seconds = HistogramVec::new(
            HistogramOpts::new(
                "snowmint_queue_wait_seconds",
                "Time a request spent in the minter's queue, from asking to its answer, by method (a batch larger than a tick's sequence spans several ticks).",
            )
            .buckets(vec![
                0.000_05, 0.000_1, 0.000_25, 0.000_5, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
            ]),
            &["method"],
        )
        .unwrap();
        let queue_length = IntGauge::new(
            "snowmint_queue_length",
            "Requests waiting in the minter's queue (NextId and BatchIds calls not yet answered), after its last pass.",
        )
        .unwrap();
        let clock_backward = IntCounterVec::new(
            Opts::new(
                "snowmint_clock_backward_total",
                "Wall-clock steps back seen while minting, by what was done: waited out, refused, or minted through on borrowed time.",
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
            "Wall-clock jumps forward larger than --forward-jump-threshold-ms, seen (not followed until confirmed).",
        )
        .unwrap();
        let clock_forward_jumps_adopted = IntCounter::new(
            "snowmint_clock_forward_jumps_adopted_total",
            "Forward jumps of the wall clock that lasted --forward-jump-confirm-ms and were followed.",
        )
        .unwrap();
        let clock_drift_seconds = Gauge::new(
            "snowmint_clock_drift_seconds",
            "How far the minting time is ahead of the wall clock (borrowed time); refused beyond --max-clock-drift-ms.",
        )
        .unwrap();
        let clock_drift_bound_seconds = Gauge::new(
            "snowmint_clock_drift_bound_seconds",
            "--max-clock-drift-ms: how far the minting time may run ahead of the wall clock (0: the strict policy).",
        )
        .unwrap();
        let sequence_exhausted = IntCounter::new(
            "snowmint_sequence_exhausted_total",
            "Times every sequence number of a tick was used and minting waited for the next tick.",
        )
        .unwrap();
        let refused_on_arrival = IntCounterVec::new(
            Opts::new(
                "snowmint_refused_on_arrival_total",
                "NextId and BatchIds calls the minter refused when they reached it, before minting anything for them, by reason: saturated (the IDs queued for large asks and theirs would not be minted by the earliest of their deadlines) or deadline (it had passed).",
            ),
            &["reason"],
        )
        .unwrap();
        let ids_discarded = IntCounter::new(
            "snowmint_ids_discarded_total",
            "IDs minted for a call that was then refused (its deadline came before its batch was full, the server stopped) or whose caller had gone: never issued, a gap in the sequence.",
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
            "Worker slots lost (the lease expired, or a slot's key is no longer this instance's), each claimed again.",
        )
        .unwrap();
        let store_went_back = IntCounter::new(
            "snowmint_store_went_back_total",
            "Times etcd was found gone back in time (a revision below one it gave before, another cluster, a reservation below this instance's own): a restored snapshot. Every claim's floor is fenced after it.",
        )
        .unwrap();
        let slots_fenced = IntCounter::new(
            "snowmint_slots_fenced_total",
            "Claims whose floor a fence raised past the stored reservation (the store went back in time, or the reservation was missing): minting on them waits past anything anyone could have minted.",
        )
        .unwrap();
        let lease_valid = IntGauge::new(
            "snowmint_lease_valid",
            "1 while this instance holds its worker ID (always 1 in standalone mode).",
        )
        .unwrap();
        let minting =
            IntGauge::new("snowmint_minting", "1 while this instance would mint now, 0 while it refuses.").unwrap();
        let worker_id =
            IntGauge::new("snowmint_worker_id", "The (lowest) worker ID held, or -1 while none is held.").unwrap();
        let slots_held = IntGauge::new(
            "snowmint_slots_held",
            "Worker slots this instance holds and mints on (--slots, or the --worker-id list).",
        )
        .unwrap();
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
        let fleet_clock_skew = Gauge::new(
            "snowmint_fleet_clock_skew_seconds",
            "This instance's wall clock minus the median of other instances' clocks (etcd mode), as last sampled.",
        )
        .unwrap();
        let connections_open = IntGauge::new("snowmint_connections_open", "gRPC client connections open now.").unwrap();
        let connections_refused = IntCounterVec::new(
            Opts::new(
                "snowmint_connections_refused_total",
                "gRPC client connections closed on arrival, by reason: --max-connections were open (max_connections), or --max-connections-per-peer from the same address (per_peer).",
            ),
            &["reason"],
        )
        .unwrap();
        let connections_handshake_timeouts = IntCounterVec::new(
            Opts::new(
                "snowmint_connections_handshake_timeouts_total",
                "gRPC client connections closed for not finishing their handshake within --handshake-timeout-ms, by stage: TLS (tls), or the HTTP/2 preface or first HTTP/1.1 request line (protocol).",
            ),
            &["stage"],
        )
        .unwrap();
        let history_writes = IntCounterVec::new(
            Opts::new(
                "snowmint_history_writes_total",
                "History writes (slot claims recorded, records closed, sequence segments recorded and given back) by result; failed and dropped ones leave a gap in the history, never in minting.",
            ),
            &["result"],
        )
        .unwrap();
        let history_pruned = IntCounter::new(
            "snowmint_history_pruned_total",
            "History records (slots', segments') deleted after --history-retention.",
        )
        .unwrap();
        let opaque_ids = IntCounterVec::new(
            Opts::new(
                "snowmint_opaque_ids_total",
                "Opaque IDs made for NextId and BatchIds calls that asked for them (encoded), and opaque IDs revealed by Reveal and Decode (revealed).",
            ),
            &["operation"],
        )
        .unwrap();
        let opaque_key_version = IntGauge::new(
            "snowmint_opaque_key_version",
            "The key version new opaque IDs are made with (the highest in --opaque-key-file), or -1 without opaque keys.",
        )
        .unwrap();
        let etcd_compactions = IntCounterVec::new(
            Opts::new(
                "snowmint_etcd_compactions_total",
                "Compactions of etcd's history this instance ran (etcd mode; one instance a round, chosen through etcd), by result: compacted, already_compacted (by etcd's own auto-compaction or an operator: harmless), failed (a round or a compaction; retried the next round).",
            ),
            &["result"],
        )
        .unwrap();
        let etcd_compacted_revision = IntGauge::new(
            "snowmint_etcd_compacted_revision",
            "The revision etcd's history was last compacted to by the fleet, as this instance last learnt it (0: not yet).",
        )
        .unwrap();
        let etcd_alarm = IntGaugeVec::new(
            Opts::new(
                "snowmint_etcd_alarm",
                "1 while etcd has the alarm raised (NOSPACE: its database is full and every write is refused; CORRUPT), as this instance last saw it (etcd mode).",
            ),
            &["alarm"],
        )
        .unwrap();
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
            queue_wait_seconds,
            queue_length,
            clock_backward,
            clock_backward_seconds,
            clock_forward_jumps,
            clock_forward_jumps_adopted,
            clock_drift_seconds,
            clock_drift_bound_seconds,
            sequence_exhausted,
            refused_on_arrival,
            ids_discarded,
            sequence_wait_seconds,
            lease_renewals,
            lease_lost,
            store_went_back,
            slots_fenced,
            lease_valid,
            minting,
            worker_id,
            slots_held,
            reservation_headroom_seconds,
            reservation_writes,
            layout_expiry_timestamp_seconds,
            fleet_slots_in_use,
            fleet_slots,
            fleet_clock_skew,
            connections_open,
            connections_refused,
            connections_handshake_timeouts,
            history_writes,
            history_pruned,
            opaque_ids,
            opaque_key_version,
            etcd_compactions,
            etcd_compacted_revision,
            etcd_alarm,
            named_sequence_values: IntCounterVec::new(
                Opts::new("snowmint_named_sequence_values_issued_total", "Values of named sequences handed to callers."),
                &["sequence"],
            )
            .unwrap(),
            named_sequence_segments: IntCounterVec::new(
                Opts::new(
                    "snowmint_named_sequence_segments_total",
                    "Segments of named sequences: claimed, lost (a claim of unknown outcome given up, a gap) or given back at a clean close.",
                ),
                &["sequence", "result"],
            )
            .unwrap(),
            named_sequence_segment_size: IntGaugeVec::new(
                Opts::new("snowmint_named_sequence_segment_size", "Values in the last segment this instance claimed of a named sequence."),
                &["sequence"],
            )
            .unwrap(),
            named_sequence_values_left: IntGaugeVec::new(
                Opts::new(
                    "snowmint_named_sequence_values_left",
                    "Values a named sequence has left before its maximum, not yet in any segment, as this instance last saw it.",
                ),
                &["sequence"],
            )
            .unwrap(),
            tenant_calls: IntCounterVec::new(
                Opts::new("snowmint_tenant_calls_total", "Calls of a known tenant answered, by tenant and code."),
                &["tenant", "code"],
            )
            .unwrap(),
            tenant_ids: IntCounterVec::new(
                Opts::new("snowmint_tenant_ids_total", "IDs, UUIDs and sequence values let through to a tenant's calls."),
                &["tenant"],
            )
            .unwrap(),
            tenant_refusals: IntCounterVec::new(
                Opts::new(
                    "snowmint_tenant_refusals_total",
                    "Calls of a known tenant refused: permission, max_batch, burst or quota.",
                ),
                &["tenant", "reason"],
            )
            .unwrap(),
            tenant_quota_available: IntGaugeVec::new(
                Opts::new(
                    "snowmint_tenant_quota_available_ids",
                    "IDs a tenant's quota would let through now, as its last call left it.",
                ),
                &["tenant"],
            )
            .unwrap(),
            unauthenticated_calls: IntCounterVec::new(
                Opts::new("snowmint_unauthenticated_calls_total", "Calls refused UNAUTHENTICATED, by reason."),
                &["reason"],
            )
            .unwrap(),
            tenant_reloads: IntCounterVec::new(
                Opts::new("snowmint_tenant_policy_reloads_total", "Reloads of the policy and token files, by result."),
                &["result"],
            )
            .unwrap(),
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
            Box::new(self.queue_wait_seconds.clone()),
            Box::new(self.queue_length.clone()),
            Box::new(self.clock_backward.clone()),
            Box::new(self.clock_backward_seconds.clone()),
            Box::new(self.clock_forward_jumps.clone()),
            Box::new(self.clock_forward_jumps_adopted.clone()),
            Box::new(self.clock_drift_seconds.clone()),
            Box::new(self.clock_drift_bound_seconds.clone()),
            Box::new(self.sequence_exhausted.clone()),
            Box::new(self.refused_on_arrival.clone()),
            Box::new(self.ids_discarded.clone()),
            Box::new(self.sequence_wait_seconds.clone()),
            Box::new(self.lease_renewals.clone()),
            Box::new(self.lease_lost.clone()),
            Box::new(self.store_went_back.clone()),
            Box::new(self.slots_fenced.clone()),
            Box::new(self.lease_valid.clone()),
            Box::new(self.minting.clone()),
            Box::new(self.worker_id.clone()),
            Box::new(self.slots_held.clone()),
            Box::new(self.reservation_headroom_seconds.clone()),
            Box::new(self.reservation_writes.clone()),
            Box::new(self.layout_expiry_timestamp_seconds.clone()),
            Box::new(self.fleet_slots_in_use.clone()),
            Box::new(self.fleet_slots.clone()),
            Box::new(self.fleet_clock_skew.clone()),
            Box::new(self.connections_open.clone()),
            Box::new(self.connections_refused.clone()),
            Box::new(self.connections_handshake_timeouts.clone()),
            Box::new(self.history_writes.clone()),
            Box::new(self.history_pruned.clone()),
            Box::new(self.opaque_ids.clone()),
            Box::new(self.opaque_key_version.clone()),
            Box::new(self.etcd_compactions.clone()),
            Box::new(self.etcd_compacted_revision.clone()),
            Box::new(self.etcd_alarm.clone()),
            Box::new(self.named_sequence_values.clone()),
            Box::new(self.named_sequence_segments.clone()),
            Box::new(self.named_sequence_segment_size.clone()),
            Box::new(self.named_sequence_values_left.clone()),
            Box::new(self.tenant_calls.clone()),
            Box::new(self.tenant_ids.clone()),
            Box::new(self.tenant_refusals.clone()),
            Box::new(self.tenant_quota_available.clone()),
            Box::new(self.unauthenticated_calls.clone()),
            Box::new(self.tenant_reloads.clone()),
            Box::new(self.build_info.clone()),
        ];
        for collector in collectors {
            self.registry.register(collector).expect("metric names are unique");
        }
    }

    fn initialize_labels(&self) {
        for protocol in PROTOCOLS {
            for method in METHODS.into_iter().chain([OTHER_METHOD]) {
                self.method(method, protocol);
            }
        }
        for method in [NEXT_ID, BATCH_IDS] {
            self.queue_wait_seconds.with_label_values(&[method]);
        }
        for action in [ACTION_WAITED, ACTION_REFUSED, ACTION_BORROWED] {
            self.clock_backward.with_label_values(&[action]);
        }
        for reason in [REFUSED_SATURATED, REFUSED_DEADLINE] {
            self.refused_on_arrival.with_label_values(&[reason]);
        }
        for result in [RESULT_OK, RESULT_FAILED] {
            self.lease_renewals.with_label_values(&[result]);
            self.reservation_writes.with_label_values(&[result]);
        }
        for result in [RESULT_OK, RESULT_FAILED, RESULT_DROPPED] {
            self.history_writes.with_label_values(&[result]);
        }
        for reason in [REFUSED_MAX_CONNECTIONS, REFUSED_PER_PEER] {
            self.connections_refused.with_label_values(&[reason]);
        }
        for stage in [HANDSHAKE_TLS, HANDSHAKE_PROTOCOL] {
            self.connections_handshake_timeouts.with_label_values(&[stage]);
        }
        for operation in [OPAQUE_ENCODED, OPAQUE_REVEALED] {
            self.opaque_ids.with_label_values(&[operation]);
        }
        for result in COMPACTION_RESULTS {
            self.etcd_compactions.with_label_values(&[result]);
        }
        for alarm in [ALARM_NOSPACE, ALARM_CORRUPT] {
            self.etcd_alarm.with_label_values(&[alarm]);
        }
        for reason in UNAUTHENTICATED_REASONS {
            self.unauthenticated_calls.with_label_values(&[reason]);
        }
        for result in [RESULT_OK, RESULT_FAILED] {
            self.tenant_reloads.with_label_values(&[result]);
        }
        self.worker_id.set(-1);
        self.opaque_key_version.set(-1);
        self.build_info.with_label_values(&[env!("CARGO_PKG_VERSION")]).set(1);
    }

    /// The metrics of one RPC method over one protocol, every series a call can touch
    /// resolved once.
    pub fn method(&self, method: &str, protocol: &str) -> MethodMetrics {
        MethodMetrics {
            by_code: CODES.map(|code| self.requests.with_label_values(&[method, code, protocol])),
            duration: self.request_duration.with_label_values(&[method, protocol]),
        }
    }

    /// The metrics of every `IdService` method over `protocol` (one of [`PROTOCOLS`]), for
    /// the layers that count calls.
    pub fn calls(&self, protocol: &str) -> CallMetrics {
        CallMetrics {
            methods: METHODS.map(|method| Arc::new(self.method(method, protocol))),
            other: Arc::new(self.method(OTHER_METHOD, protocol)),
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
/// here every series a call can touch (one per code, and the latency) is looked up once,
/// instead of on every call.
#[derive(Clone)]
pub struct MethodMetrics {
    /// `snowmint_requests_total` of this method, indexed by the code's number.
    by_code: [IntCounter; CODES.len()],
    duration: Histogram,
}

impl MethodMetrics {
    /// Records one finished call.
    pub fn record(&self, code: tonic::Code, elapsed: Duration) {
        // Codes are numbered 0 to 16, as `CODES` is indexed; tonic maps any other number it
        // reads to `Unknown`.
        self.by_code[code as usize].inc();
        self.duration.observe(elapsed.as_secs_f64());
    }
}

/// The call metrics of every method of the `IdService`, and of calls to methods it does not
/// have. Each behind an `Arc`, so a call in flight holds its method's metrics for one atomic
/// increment.
pub struct CallMetrics {
    /// In the order of [`METHODS`].
    methods: [Arc<MethodMetrics>; METHODS.len()],
    other: Arc<MethodMetrics>,
}

impl CallMetrics {
    /// The metrics of the method named `name` (as in the request path), or of
    /// [`OTHER_METHOD`] for a name the service does not have.
    pub fn of(&self, name: &str) -> &Arc<MethodMetrics> {
        METHODS.iter().position(|&method| method == name).map_or(&self.other, |i| &self.methods[i])
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_label_set_is_present_from_the_start() {
        let text = Metrics::new().render();
        for needle in [
            r#"snowmint_requests_total{code="Unavailable",method="NextId",protocol="grpc"} 0"#,
            r#"snowmint_requests_total{code="OutOfRange",method="Decode",protocol="grpc"} 0"#,
            r#"snowmint_requests_total{code="Unimplemented",method="other",protocol="grpc"} 0"#,
            r#"snowmint_requests_total{code="Unavailable",method="BatchIds",protocol="connect"} 0"#,
            r#"snowmint_requests_total{code="Unimplemented",method="other",protocol="connect"} 0"#,
            r#"snowmint_request_duration_seconds_count{method="other",protocol="grpc"} 0"#,
            r#"snowmint_request_duration_seconds_count{method="Decode",protocol="connect"} 0"#,
            r#"snowmint_requests_total{code="InvalidArgument",method="Reveal",protocol="grpc"} 0"#,
            r#"snowmint_requests_total{code="FailedPrecondition",method="Reveal",protocol="connect"} 0"#,
            r#"snowmint_opaque_ids_total{operation="encoded"} 0"#,
            r#"snowmint_opaque_ids_total{operation="revealed"} 0"#,
            "snowmint_opaque_key_version -1",
            r#"snowmint_connections_refused_total{reason="max_connections"} 0"#,
            r#"snowmint_connections_refused_total{reason="per_peer"} 0"#,
            r#"snowmint_connections_handshake_timeouts_total{stage="tls"} 0"#,
            r#"snowmint_connections_handshake_timeouts_total{stage="protocol"} 0"#,
            r#"snowmint_clock_backward_total{action="refused"} 0"#,
            r#"snowmint_queue_wait_seconds_count{method="NextId"} 0"#,
            r#"snowmint_queue_wait_seconds_count{method="BatchIds"} 0"#,
            "snowmint_queue_length 0",
            r#"snowmint_refused_on_arrival_total{reason="saturated"} 0"#,
            "snowmint_ids_discarded_total 0",
            r#"snowmint_lease_renewals_total{result="failed"} 0"#,
            "snowmint_ids_issued_total 0",
            "snowmint_worker_id -1",
            r#"snowmint_etcd_compactions_total{result="compacted"} 0"#,
            r#"snowmint_etcd_compactions_total{result="already_compacted"} 0"#,
            r#"snowmint_etcd_compactions_total{result="failed"} 0"#,
            "snowmint_etcd_compacted_revision 0",
            r#"snowmint_etcd_alarm{alarm="NOSPACE"} 0"#,
            r#"snowmint_etcd_alarm{alarm="CORRUPT"} 0"#,
            "snowmint_build_info{version=",
        ] {
            assert!(text.contains(needle), "missing {needle} in\n{text}");
        }
    }

    #[test]
    fn code_labels_follow_the_code_numbers() {
        for (number, label) in CODES.iter().enumerate() {
            let code = tonic::Code::from_i32(number as i32);
            assert_eq!(code as usize, number);
            // tonic's name of the code, but for OK, spelt as gRPC spells it.
            let name = if code == tonic::Code::Ok { "OK".to_string() } else { format!("{code:?}") };
            assert_eq!(name, *label);
        }
    }

    #[test]
    fn every_method_of_the_service_has_its_own_label() {
        use prost::Message;
        let set = prost_types::FileDescriptorSet::decode(crate::proto::FILE_DESCRIPTOR_SET).unwrap();
        let service = set
            .file
            .iter()
            .flat_map(|file| &file.service)
            .find(|service| service.name() == "IdService")
            .expect("the IdService is in the descriptor set");
        let methods: Vec<&str> = service.method.iter().map(|method| method.name()).collect();
        assert_eq!(methods, METHODS, "METHODS lists the methods of the proto, in its order");
        let calls = Metrics::new().calls(PROTOCOL_GRPC);
        for (i, method) in METHODS.iter().enumerate() {
            assert!(Arc::ptr_eq(calls.of(method), &calls.methods[i]));
        }
        assert!(Arc::ptr_eq(calls.of("Mint"), &calls.other));
    }
}
