//! The `IdService`: thin handlers that validate requests, ask the minter, and map errors to
//! gRPC status codes in one place ([`status_of`]). The calls themselves ([`Service::next_id_within`],
//! [`Service::batch_within`], [`Service::next_uuid_within`], [`Service::batch_uuids_within`],
//! [`Service::decode_request`], [`Service::reveal_request`], [`Service::next_value_within`],
//! [`Service::batch_values_within`]) serve gRPC and the Connect protocol
//! ([`super::connect`]) alike. Opaque IDs ([`crate::opaque`]) and UUIDs ([`crate::uuid7`]) are
//! made here, after minting, from the IDs the minter issued, and read back here, before
//! decoding: the minter never sees them. Named sequences' values come from the sequences'
//! task ([`crate::node::sequences`]), not the minter. Calls are counted and timed around the service, by
//! [`super::calls`], so that calls no handler sees are counted too.

use std::sync::Arc;

use prometheus::IntCounter;
use rand::Rng as _;
use tonic::{Request, Response, Status};

use super::context::{Asker, CallContext};
use super::forward::{FORWARDED, Forwarder};
use crate::history::{self, Book, Entry, HistoryError};
use crate::layout::{Layout, LayoutError, Slot, rfc3339_ms};
use crate::metrics::{Metrics, OPAQUE_ENCODED, OPAQUE_REVEALED};
use crate::minter::{ConnectionKey, MintError};
use crate::node::{MintHandle, SequenceCallError, SequencesHandle};
use crate::opaque::{Keyring, OpaqueError, OpaqueId};
use crate::proto::id_service_server::IdService;
use crate::proto::{
    BatchIdsRequest, BatchIdsResponse, BatchUuidsRequest, BatchUuidsResponse, BatchValuesRequest, BatchValuesResponse,
    DecodeRequest, DecodeResponse, NextIdRequest, NextIdResponse, NextUuidRequest, NextUuidResponse, NextValueRequest,
    NextValueResponse, Provenance, RevealRequest, RevealResponse,
};
use crate::tenant::{Need, Refusal};
use crate::uuid7::{self, UuidError};

/// Errors of the service layer.
#[derive(Debug, thiserror::Error)]
pub enum ServiceError {
    #[error(transparent)]
    Mint(#[from] MintError),
    #[error(transparent)]
    Layout(#[from] LayoutError),
    #[error("count must be between 1 and {max} (the server's --max-batch), got {got}")]
    BadCount { got: u32, max: u32 },
    #[error("id {id} has bits set above the {bits} bits of layout {layout}")]
    NotThisLayout { id: u64, bits: u32, layout: String },
    #[error("slot history: {0}")]
    History(#[from] HistoryError),
    /// Opaque IDs asked of a server without keys: the same on every call until an operator
    /// restarts it with a key file.
    #[error(
        "this server has no opaque keys: opaque IDs (opaque, text, Reveal) need a server started with --opaque-key-file"
    )]
    NoOpaqueKeys,
    #[error(transparent)]
    Opaque(#[from] OpaqueError),
    #[error("{0}")]
    OpaqueRequest(&'static str),
    /// UUIDs asked of a server whose layout cannot make them.
    #[error("this server mints no UUIDs: {0}")]
    NoUuids(UuidError),
    /// A UUID to decode that snowmint did not mint, or not with this layout.
    #[error(transparent)]
    Uuid(#[from] UuidError),
    #[error("{0}")]
    UuidRequest(String),
    #[error(transparent)]
    Sequence(#[from] SequenceCallError),
    /// The answer of the instance an ordered sequence's call was forwarded to, as it came.
    #[error("{}", .0.message())]
    Forwarded(Status),
    /// The caller's tenant may not make this call, or not now.
    #[error(transparent)]
    Tenant(#[from] Refusal),
}

/// The one mapping from snowmint's errors to gRPC status.
pub fn status_of(error: ServiceError) -> Status {
    match &error {
        // Too much asked for at once, server-wide: retriable, but not by failing over at once.
        ServiceError::Mint(MintError::Overloaded { .. }) => Status::resource_exhausted(error.to_string()),
        // Every other minting failure is retriable, here later or on another instance.
        ServiceError::Mint(_) => Status::unavailable(error.to_string()),
        ServiceError::NoOpaqueKeys | ServiceError::NoUuids(_) => Status::failed_precondition(error.to_string()),
        ServiceError::Layout(_)
        | ServiceError::BadCount { .. }
        | ServiceError::NotThisLayout { .. }
        | ServiceError::Opaque(_)
        | ServiceError::OpaqueRequest(_)
        | ServiceError::Uuid(_)
        | ServiceError::UuidRequest(_) => Status::invalid_argument(error.to_string()),
        // The history could not be read now: ask again.
        ServiceError::History(_) => Status::unavailable(error.to_string()),
        ServiceError::Forwarded(status) => status.clone(),
        ServiceError::Tenant(refusal) => match refusal {
            Refusal::Denied { .. } => Status::permission_denied(error.to_string()),
            // Never served as asked: a smaller call is.
            Refusal::OverMaxBatch { .. } | Refusal::OverBurst { .. } => Status::invalid_argument(error.to_string()),
            // Served after the wait, which the answer carries as `google.rpc.RetryInfo`.
            Refusal::OverQuota { wait, .. } => {
                let details = tonic_types::ErrorDetails::with_retry_info(Some(*wait));
                <Status as tonic_types::StatusExt>::with_error_details(
                    tonic::Code::ResourceExhausted,
                    error.to_string(),
                    details,
                )
            }
        },
        ServiceError::Sequence(sequence) => match sequence {
            SequenceCallError::Name(_) => Status::invalid_argument(error.to_string()),
            SequenceCallError::NotFound(_) => Status::not_found(error.to_string()),
            // Used up: no retry brings more values.
            SequenceCallError::Exhausted { .. } => Status::out_of_range(error.to_string()),
            SequenceCallError::Saturated => Status::resource_exhausted(error.to_string()),
            // Served elsewhere, to a call that was forwarded here already (one hop only), or
            // not servable here now: retriable.
            SequenceCallError::HeldElsewhere { .. } | SequenceCallError::NotHolding { .. } => {
                Status::unavailable(error.to_string())
            }
            // The store slow or gone back, the server stopping: retriable, here later or on
            // another instance.
            SequenceCallError::Stopped(_) | SequenceCallError::Deadline { .. } | SequenceCallError::ShuttingDown => {
                Status::unavailable(error.to_string())
            }
        },
    }
}

/// Whether another instance forwarded the call here ([`FORWARDED`]).
fn forwarded<T>(request: &Request<T>) -> bool {
    request.metadata().contains_key(FORWARDED)
}

/// A gRPC call's message, the front door's [`CallContext`] (in its extensions), and whether
/// another instance forwarded it here.
fn parts<T>(request: Request<T>) -> (T, Option<CallContext>, bool) {
    let forwarded = forwarded(&request);
    let (_, mut extensions, message) = request.into_parts();
    (message, extensions.remove::<CallContext>(), forwarded)
}

/// A call as the service's calls take it: from its context, or without one (a call that did
/// not come through the front door) on a shared share, with no limit.
fn asker(context: &Option<CallContext>) -> Asker<'_> {
    context.as_ref().map_or_else(|| Asker::unlimited(ConnectionKey::of_peer(None)), CallContext::asker)
}

/// How many opaque IDs of a batch are encoded between two yields to the runtime: a batch of
/// 65,536 takes milliseconds of FF1, which no other call on this thread should wait behind.
const ENCODE_CHUNK: usize = 1024;

/// How many UUIDs of a batch are made between two yields to the runtime (each costs tens of
/// nanoseconds, its text form most of them).
const UUID_CHUNK: usize = 8192;

/// The `IdService` implementation.
pub struct Service {
    minter: MintHandle,
    layout: Layout,
    max_batch: u32,
    metrics: Metrics,
    /// The slot history, for provenance; `None` when none is kept.
    history: Option<Arc<dyn Book>>,
    /// The keys of opaque IDs, from `--opaque-key-file`; without them, opaque requests get
    /// `FAILED_PRECONDITION`.
    opaque: Option<Arc<Keyring>>,
    /// `snowmint_opaque_ids_total`'s two series, looked up once.
    encoded: IntCounter,
    revealed: IntCounter,
    /// Whether the layout can make UUIDs, checked once.
    uuids: Result<(), UuidError>,
    sequences: Sequences,
}

/// How the service reaches named sequences: the sequences' task, and the instances that
/// serve the ordered sequences this one does not.
pub struct Sequences {
    pub handle: SequencesHandle,
    pub forwarder: Forwarder,
}

impl Service {
    pub fn new(
        minter: MintHandle,
        layout: Layout,
        max_batch: u32,
        metrics: Metrics,
        opaque: Option<Arc<Keyring>>,
        history: Option<Arc<dyn Book>>,
        sequences: Sequences,
    ) -> Service {
        let encoded = metrics.opaque_ids.with_label_values(&[OPAQUE_ENCODED]);
        let revealed = metrics.opaque_ids.with_label_values(&[OPAQUE_REVEALED]);
        let uuids = uuid7::check_layout(&layout);
        Service { minter, layout, max_batch, metrics, opaque, encoded, revealed, history, uuids, sequences }
    }

    /// `Ok` when this server's layout can make UUIDs, or the error that says why not.
    fn can_make_uuids(&self) -> Result<(), ServiceError> {
        self.uuids.clone().map_err(ServiceError::NoUuids)
    }

    /// `count`, when it is a batch size this server takes.
    fn batch_count(&self, count: u32) -> Result<usize, ServiceError> {
        if count == 0 || count > self.max_batch {
            return Err(ServiceError::BadCount { got: count, max: self.max_batch });
        }
        Ok(count as usize)
    }

    /// The opaque keys, or the error that says how to configure them.
    fn keys(&self) -> Result<&Keyring, ServiceError> {
        self.opaque.as_deref().ok_or(ServiceError::NoOpaqueKeys)
    }

    /// Lets the call through its tenant's policy ([`super::gate`]), if the server has one:
    /// it needs `needs` and takes `count`. Checked before anything is minted or taken.
    fn admit(asker: Asker<'_>, needs: &[Need<'_>], count: u64) -> Result<(), ServiceError> {
        match asker.tenant {
            Some(tenant) => Ok(tenant.admit(needs, count)?),
            None => Ok(()),
        }
    }

    /// `NextId`: one ID, or with `opaque` its opaque form, answered within `timeout` if one is
    /// given.
    pub async fn next_id_within(
        &self,
        request: NextIdRequest,
        asker: Asker<'_>,
    ) -> Result<NextIdResponse, ServiceError> {
        // Checked before minting: an ID minted for a call that then fails is a gap for nothing.
        let keys = if request.opaque { Some(self.keys()?) } else { None };
        Self::admit(asker, &[Need::Ids], 1)?;
        let id = self.minter.next_id(asker.connection, asker.share(), asker.timeout).await?;
        let Some(keys) = keys else { return Ok(NextIdResponse { id, ..Default::default() }) };
        let opaque = keys.encode(id)?;
        self.encoded.inc();
        Ok(NextIdResponse { id: opaque.value, text: opaque.to_string(), key_version: opaque.key_version })
    }

    /// `BatchIds`: `count` IDs, or with `opaque` their opaque forms, answered within `timeout`
    /// if one is given.
    pub async fn batch_within(
        &self,
        request: BatchIdsRequest,
        asker: Asker<'_>,
    ) -> Result<BatchIdsResponse, ServiceError> {
        let count = self.batch_count(request.count)?;
        let keys = if request.opaque { Some(self.keys()?) } else { None };
        Self::admit(asker, &[Need::Ids], count as u64)?;
        self.metrics.batch_size.observe(count as f64);
        let mut ids = self.minter.batch(count, asker.connection, asker.share(), asker.timeout).await?;
        let Some(keys) = keys else { return Ok(BatchIdsResponse { ids, ..Default::default() }) };
        // One key for the whole batch, so that the one `key_version` of the answer is every
        // value's.
        let key = keys.current();
        let mut texts = Vec::with_capacity(ids.len());
        for chunk in ids.chunks_mut(ENCODE_CHUNK) {
            for id in chunk {
                *id = key.encode(*id)?;
                texts.push(OpaqueId { key_version: key.version(), value: *id }.to_string());
            }
            if texts.len() < count {
                tokio::task::yield_now().await;
            }
        }
        self.encoded.inc_by(count as u64);
        Ok(BatchIdsResponse { ids, texts, key_version: key.version() })
    }

    /// `NextUuid`: one UUIDv7 made from one newly minted ID, answered within `timeout` if one
    /// is given.
    pub async fn next_uuid_within(
        &self,
        _request: NextUuidRequest,
        asker: Asker<'_>,
    ) -> Result<NextUuidResponse, ServiceError> {
        self.can_make_uuids()?;
        Self::admit(asker, &[Need::Uuids], 1)?;
        let id = self.minter.next_id(asker.connection, asker.share(), asker.timeout).await?;
        let uuid = uuid7::from_id(&self.layout, id, rand::rng().next_u32());
        Ok(NextUuidResponse { uuid: uuid.to_vec(), text: uuid7::to_text(uuid) })
    }

    /// `BatchUuids`: `count` UUIDv7s, strictly increasing as the IDs they are made from,
    /// answered within `timeout` if one is given.
    pub async fn batch_uuids_within(
        &self,
        request: BatchUuidsRequest,
        asker: Asker<'_>,
    ) -> Result<BatchUuidsResponse, ServiceError> {
        let count = self.batch_count(request.count)?;
        self.can_make_uuids()?;
        Self::admit(asker, &[Need::Uuids], count as u64)?;
        self.metrics.batch_size.observe(count as f64);
        let ids = self.minter.batch(count, asker.connection, asker.share(), asker.timeout).await?;
        let (mut uuids, mut texts) = (Vec::with_capacity(count), Vec::with_capacity(count));
        for ids in ids.chunks(UUID_CHUNK) {
            // The random tails come from the thread's CSPRNG (seeded from the system's
            // source, and reseeded from it as it goes), taken anew after each yield: the
            // task may resume on another thread.
            {
                let mut rng = rand::rng();
                for &id in ids {
                    let uuid = uuid7::from_id(&self.layout, id, rng.next_u32());
                    texts.push(uuid7::to_text(uuid));
                    uuids.push(uuid.to_vec());
                }
            }
            if uuids.len() < count {
                tokio::task::yield_now().await;
            }
        }
        Ok(BatchUuidsResponse { uuids, texts })
    }

    /// `NextValue`: the next value of a named sequence, answered within `timeout` if one is
    /// given. An ordered sequence served by another instance is asked of it, unless the call
    /// was `forwarded` here already.
    pub async fn next_value_within(
        &self,
        request: NextValueRequest,
        asker: Asker<'_>,
        forwarded: bool,
    ) -> Result<NextValueResponse, ServiceError> {
        Self::admit(asker, &[Need::Sequence(&request.sequence)], 1)?;
        let timeout = asker.timeout;
        let taken = match self.sequences.handle.take(&request.sequence, 1, timeout).await {
            Err(SequenceCallError::HeldElsewhere { address, .. }) if !forwarded => {
                let authorization = asker.tenant.and_then(|t| t.authorization());
                return self
                    .sequences
                    .forwarder
                    .next_value(&address, request, timeout, authorization)
                    .await
                    .map_err(ServiceError::Forwarded);
            }
            taken => taken?,
        };
        let value = taken.values.first().map(|range| range.start).expect("a take of one answers one value");
        Ok(NextValueResponse { value: value as i64, ordered: taken.ordered })
    }

    /// `BatchValues`: `count` values of one named sequence, increasing, answered within
    /// `timeout` if one is given.
    pub async fn batch_values_within(
        &self,
        request: BatchValuesRequest,
        asker: Asker<'_>,
        forwarded: bool,
    ) -> Result<BatchValuesResponse, ServiceError> {
        let count = self.batch_count(request.count)?;
        Self::admit(asker, &[Need::Sequence(&request.sequence)], count as u64)?;
        self.metrics.batch_size.observe(count as f64);
        let timeout = asker.timeout;
        let taken = match self.sequences.handle.take(&request.sequence, count as u64, timeout).await {
            Err(SequenceCallError::HeldElsewhere { address, .. }) if !forwarded => {
                let authorization = asker.tenant.and_then(|t| t.authorization());
                return self
                    .sequences
                    .forwarder
                    .batch_values(&address, request, timeout, authorization)
                    .await
                    .map_err(ServiceError::Forwarded);
            }
            taken => taken?,
        };
        let values: Vec<i64> = taken.values.into_iter().flat_map(|range| range.map(|value| value as i64)).collect();
        debug_assert_eq!(values.len(), count);
        Ok(BatchValuesResponse { values, ordered: taken.ordered })
    }

    /// `Decode`: the ID's parts, with the server's layout or a named one; an opaque ID
    /// (`text`, or `id` with `opaque` and `key_version`) is revealed first, and a UUID
    /// (`uuid` or `uuid_text`) read back into the ID it was made from. With `provenance`, the
    /// slot history's record of the holder that minted it.
    pub async fn decode_request(
        &self,
        request: DecodeRequest,
        asker: Asker<'_>,
    ) -> Result<DecodeResponse, ServiceError> {
        let DecodeRequest { id, layout, provenance, text, opaque, key_version, uuid, uuid_text } = request;
        let reveals = opaque || !text.is_empty();
        let needs: &[Need<'_>] = match (provenance, reveals) {
            (false, false) => &[Need::Decode],
            (true, false) => &[Need::Decode, Need::Provenance],
            (false, true) => &[Need::Decode, Need::Reveal],
            (true, true) => &[Need::Decode, Need::Reveal, Need::Provenance],
        };
        Self::admit(asker, needs, 0)?;
        let own = matches!(layout.as_str(), "" | "snowmint");
        let named;
        let layout_used = if own {
            &self.layout
        } else {
            named = Layout::named(&layout)?;
            &named
        };
        let uuid = uuid_of(&uuid, &uuid_text)?;
        let mut decoded = if let Some(uuid) = uuid {
            if id != 0 || opaque || !text.is_empty() || key_version.is_some() {
                return Err(ServiceError::UuidRequest(
                    "a UUID is decoded alone: leave `id`, `text`, `opaque` and `key_version` unset".into(),
                ));
            }
            uuid7::check_layout(layout_used)?;
            let read = uuid7::decode(layout_used, uuid)?;
            DecodeResponse { uuid_text: uuid7::to_text(uuid), ..decode(read.id, layout_used)? }
        } else {
            let id = if opaque || !text.is_empty() {
                self.reveal(opaque_of(id, key_version, &text)?)?
            } else if key_version.is_some() {
                return Err(ServiceError::OpaqueRequest("`key_version` is for an opaque `id`: set `opaque` as well"));
            } else {
                id
            };
            decode(id, layout_used)?
        };
        if provenance {
            let found = match (&self.history, own) {
                (None, _) => Err("this server keeps no slot history (--history-retention 0)".to_string()),
                (Some(_), false) => Err(format!(
                    "decoded with layout {layout}, not this server's: its worker ID is none of this fleet's slots"
                )),
                (Some(book), true) => lookup(&**book, decoded.worker_id, decoded.unix_ms).await?,
            };
            decoded.provenance = Some(provenance_of(found));
        }
        Ok(decoded)
    }

    /// `Reveal`: the ID beneath an opaque one, given as `text`, or as `id` and `key_version`.
    pub fn reveal_request(&self, request: RevealRequest, asker: Asker<'_>) -> Result<RevealResponse, ServiceError> {
        Self::admit(asker, &[Need::Reveal], 0)?;
        let RevealRequest { id, key_version, text } = request;
        let opaque = opaque_of(id, key_version, &text)?;
        Ok(RevealResponse { id: self.reveal(opaque)?, key_version: opaque.key_version })
    }

    /// The ID beneath `opaque`, counted.
    fn reveal(&self, opaque: OpaqueId) -> Result<u64, ServiceError> {
        let id = self.keys()?.reveal(opaque)?;
        self.revealed.inc();
        Ok(id)
    }
}

/// The opaque ID a request names: its `text`, or its `id` with `key_version`, never both.
///
/// A value is taken only with its version, as the string form carries it: values are unique
/// per key version only, so a value revealed with a version guessed (the default 0) could be
/// revealed into another ID, and nothing would say so.
fn opaque_of(id: u64, key_version: Option<u32>, text: &str) -> Result<OpaqueId, ServiceError> {
    if text.is_empty() {
        let Some(key_version) = key_version else {
            return Err(ServiceError::OpaqueRequest(
                "an opaque `id` needs its `key_version` (NextId and BatchIds answer it beside the value): a value is unique only within its key version; or give the opaque ID's `text`",
            ));
        };
        return Ok(OpaqueId::new(key_version, id)?);
    }
    if id != 0 || key_version.is_some() {
        return Err(ServiceError::OpaqueRequest("give an opaque ID's `text` alone, or its `id` and `key_version`"));
    }
    Ok(OpaqueId::parse(text).map_err(OpaqueError::from)?)
}

/// The UUID a `Decode` request names: its 16 bytes or its text form, not both; `None` when
/// it names none.
fn uuid_of(bytes: &[u8], text: &str) -> Result<Option<[u8; 16]>, ServiceError> {
    match (bytes.is_empty(), text.is_empty()) {
        (true, true) => Ok(None),
        (false, true) => <[u8; 16]>::try_from(bytes).map(Some).map_err(|_| {
            ServiceError::UuidRequest(format!("`uuid` must be a UUID's 16 bytes, got {} bytes", bytes.len()))
        }),
        (true, false) => Ok(Some(uuid7::parse_text(text)?)),
        (false, false) => {
            Err(ServiceError::UuidRequest("give a UUID's `uuid` bytes or its `uuid_text`, not both".into()))
        }
    }
}

/// The record of `book` that covers an ID of `slot` minted at `unix_ms`, or why none does.
pub async fn lookup(book: &dyn Book, slot: Slot, unix_ms: i64) -> Result<Result<Entry, String>, HistoryError> {
    let (entries, _) = book.list(Some(slot)).await?;
    Ok(history::covering(&entries, slot, unix_ms).cloned().ok_or_else(|| {
        format!(
            "no record of worker {slot} covers {}: older than the history kept (--history-retention), minted under another etcd prefix or state dir, or its claim was never recorded (snowmint_history_writes_total)",
            rfc3339_ms(unix_ms)
        )
    }))
}

/// A history record, or why there is none, as `Decode` answers it.
pub fn provenance_of(found: Result<Entry, String>) -> Provenance {
    match found {
        Err(reason) => Provenance { found: false, reason, ..Default::default() },
        Ok(Entry { location, record }) => Provenance {
            found: true,
            reason: String::new(),
            record: location,
            worker_id: record.slot,
            hostname: record.holder.hostname,
            pod: record.holder.pod.unwrap_or_default(),
            pid: record.holder.pid,
            version: record.holder.version,
            started_at_ms: record.holder.started_at_ms,
            lease: record.lease,
            claimed_at_ms: record.claimed_at_ms,
            floor_ms: record.floor_ms,
            last_reservation_ms: record.last_reservation_ms.unwrap_or(0),
            closed_at_ms: record.closed_at_ms.unwrap_or(0),
        },
    }
}

/// A handler's result as a response, or an error mapped to its status.
fn respond<T>(result: Result<T, ServiceError>) -> Result<Response<T>, Status> {
    result.map(Response::new).map_err(status_of)
}

/// Decodes `id` with `layout`.
pub fn decode(id: u64, layout: &Layout) -> Result<DecodeResponse, ServiceError> {
    if layout.has_excess_bits(id) {
        return Err(ServiceError::NotThisLayout { id, bits: layout.total_bits(), layout: layout.name.clone() });
    }
    let parts = layout.unpack(id);
    let unix_ms = layout.tick_start_ms(parts.tick);
    Ok(DecodeResponse {
        id,
        unix_ms,
        worker_id: parts.worker as u32,
        sequence: parts.sequence as u32,
        time: rfc3339_ms(unix_ms),
        layout: layout.name.clone(),
        provenance: None,
        uuid_text: String::new(),
    })
}

#[tonic::async_trait]
impl IdService for Service {
    async fn next_id(&self, request: Request<NextIdRequest>) -> Result<Response<NextIdResponse>, Status> {
        let (message, context, _) = parts(request);
        respond(self.next_id_within(message, asker(&context)).await)
    }

    async fn batch_ids(&self, request: Request<BatchIdsRequest>) -> Result<Response<BatchIdsResponse>, Status> {
        let (message, context, _) = parts(request);
        respond(self.batch_within(message, asker(&context)).await)
    }

    async fn decode(&self, request: Request<DecodeRequest>) -> Result<Response<DecodeResponse>, Status> {
        let (message, context, _) = parts(request);
        respond(self.decode_request(message, asker(&context)).await)
    }

    async fn reveal(&self, request: Request<RevealRequest>) -> Result<Response<RevealResponse>, Status> {
        let (message, context, _) = parts(request);
        respond(self.reveal_request(message, asker(&context)))
    }

    async fn next_uuid(&self, request: Request<NextUuidRequest>) -> Result<Response<NextUuidResponse>, Status> {
        let (message, context, _) = parts(request);
        respond(self.next_uuid_within(message, asker(&context)).await)
    }

    async fn batch_uuids(&self, request: Request<BatchUuidsRequest>) -> Result<Response<BatchUuidsResponse>, Status> {
        let (message, context, _) = parts(request);
        respond(self.batch_uuids_within(message, asker(&context)).await)
    }

    async fn next_value(&self, request: Request<NextValueRequest>) -> Result<Response<NextValueResponse>, Status> {
        let (message, context, forwarded) = parts(request);
        respond(self.next_value_within(message, asker(&context), forwarded).await)
    }

    async fn batch_values(
        &self,
        request: Request<BatchValuesRequest>,
    ) -> Result<Response<BatchValuesResponse>, Status> {
        let (message, context, forwarded) = parts(request);
        respond(self.batch_values_within(message, asker(&context), forwarded).await)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn errors_map_to_their_codes() {
        let unavailable = status_of(MintError::LeaseExpired(3).into());
        assert_eq!(unavailable.code(), tonic::Code::Unavailable);
        let overloaded = status_of(MintError::Overloaded { outstanding: 10, limit: 5 }.into());
        assert_eq!(overloaded.code(), tonic::Code::ResourceExhausted);
        let bad = status_of(ServiceError::BadCount { got: 0, max: 65_536 });
        assert_eq!(bad.code(), tonic::Code::InvalidArgument);
        assert!(bad.message().contains("65536"), "{}", bad.message());
        let keyless = status_of(ServiceError::NoOpaqueKeys);
        assert_eq!(keyless.code(), tonic::Code::FailedPrecondition);
        assert!(keyless.message().contains("--opaque-key-file"), "{}", keyless.message());
        let retired = status_of(OpaqueError::UnknownVersion { version: 0, known: "1".into() }.into());
        assert_eq!(retired.code(), tonic::Code::InvalidArgument);
        let malformed = status_of(OpaqueError::from(OpaqueId::parse("nope").unwrap_err()).into());
        assert_eq!(malformed.code(), tonic::Code::InvalidArgument);
        let mut wide = Layout::default_snowmint();
        wide.worker_bits = 21;
        let no_uuids = status_of(ServiceError::NoUuids(uuid7::check_layout(&wide).unwrap_err()));
        assert_eq!(no_uuids.code(), tonic::Code::FailedPrecondition);
        let foreign = status_of(uuid7::decode(&Layout::default_snowmint(), [0; 16]).unwrap_err().into());
        assert_eq!(foreign.code(), tonic::Code::InvalidArgument);
        assert!(foreign.message().contains("version is 0"), "{}", foreign.message());
    }

    #[test]
    fn own_layout_rejects_the_sign_bit() {
        let layout = Layout::default_snowmint();
        assert!(matches!(decode(1 << 63, &layout), Err(ServiceError::NotThisLayout { .. })));
        // Discord IDs use all 64 bits.
        decode(u64::MAX, &Layout::named("discord").unwrap()).unwrap();
    }
}
