//! Named sequences under load, for the tests that hammer them: the requests, a caller that
//! calls `NextValue` and `BatchValues` on its own connection and keeps every value and every
//! call's outcome, and the checks of what the server promises
//! (docs/design/guarantees.md#named-sequences): no value twice anywhere, the values one
//! instance answers increasing in the order it answers them, refusals only `UNAVAILABLE`
//! (or the caller's own deadline).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use snowmint::proto::id_service_client::IdServiceClient;
use snowmint::proto::{BatchValuesRequest, NextValueRequest};
use tonic::Code;

use super::HammerLog;

pub fn next(name: &str) -> NextValueRequest {
    NextValueRequest { sequence: name.into() }
}

pub fn batch(name: &str, count: u32) -> BatchValuesRequest {
    BatchValuesRequest { sequence: name.into(), count }
}

/// Whether a failed sequence call ended as the server may end it when it cannot answer:
/// `UNAVAILABLE` a little before the call's deadline; on a loaded machine (or an instance
/// paused) the caller's own timer may fire first (`CANCELLED` or `DEADLINE_EXCEEDED`, the
/// client's doing). No other code.
pub fn is_retriable_refusal(code: Code) -> bool {
    matches!(code, Code::Unavailable | Code::Cancelled | Code::DeadlineExceeded)
}

/// The deadline of each call a value caller makes.
pub const DEADLINE: Duration = Duration::from_millis(500);

/// How long past [`DEADLINE`] a caller waits before it gives a call up itself.
const CALLER_GRACE: Duration = Duration::from_millis(50);

/// One `NextValue` or `BatchValues` call, as its caller saw it.
#[derive(Debug, Clone)]
pub struct ValueCall {
    pub sequence: &'static str,
    /// When the call was sent, and when its answer (or its refusal) arrived.
    pub start: Instant,
    pub end: Instant,
    pub code: Code,
    /// The values it was given, in the order given; none when refused.
    pub values: Vec<i64>,
}

/// The batch sizes a value caller asks for in turn, between single `NextValue` calls.
const BATCHES: [u32; 4] = [5, 1, 16, 9];

/// Calls, on a connection of its own and each with a [`DEADLINE`], `NextValue` and
/// `BatchValues` in turn on each of `sequences` in turn, until `stop` is set, pausing `pace`
/// between calls (20 ms after a refusal); records every call into `log.values` as it goes.
pub fn hammer_values_into(
    addr: SocketAddr,
    sequences: &'static [&'static str],
    stop: Arc<AtomicBool>,
    log: Arc<Mutex<HammerLog>>,
    pace: Duration,
) -> tokio::task::JoinHandle<()> {
    let endpoint = tonic::transport::Endpoint::from_shared(format!("http://{addr}")).unwrap().connect_timeout(DEADLINE);
    let mut client = IdServiceClient::new(endpoint.connect_lazy());
    tokio::spawn(async move {
        let mut round = 0usize;
        while !stop.load(Ordering::Relaxed) {
            let sequence = sequences[round % sequences.len()];
            let single = (round / sequences.len()).is_multiple_of(2);
            let count = BATCHES[(round / (2 * sequences.len())) % BATCHES.len()];
            round += 1;
            let start = Instant::now();
            let call = async {
                if single {
                    let mut request = tonic::Request::new(next(sequence));
                    request.set_timeout(DEADLINE);
                    client.next_value(request).await.map(|r| vec![r.into_inner().value])
                } else {
                    let mut request = tonic::Request::new(batch(sequence, count));
                    request.set_timeout(DEADLINE);
                    client.batch_values(request).await.map(|r| r.into_inner().values)
                }
            };
            // tonic's own timer does not cover a call waiting for its connection, as it may
            // while the server is stopped (SIGSTOP): seen taking 2.8 s. The caller keeps its
            // deadline itself.
            let answer = tokio::time::timeout(DEADLINE + CALLER_GRACE, call)
                .await
                .unwrap_or_else(|_| Err(tonic::Status::deadline_exceeded("the caller's own deadline")));
            let (code, values) = match answer {
                Ok(values) => {
                    assert_eq!(values.len(), if single { 1 } else { count as usize }, "{sequence}: a short answer");
                    (Code::Ok, values)
                }
                Err(status) => (status.code(), Vec::new()),
            };
            log.lock().unwrap().values.push(ValueCall { sequence, start, end: Instant::now(), code, values });
            tokio::time::sleep(if code == Code::Ok { pace } else { Duration::from_millis(20) }).await;
        }
    })
}

/// Asserts that every call in `calls` (of one process) was answered or refused as
/// [`is_retriable_refusal`] allows, within its deadline (with slack for a loaded machine).
pub fn assert_refusals_retriable_and_prompt(who: &str, calls: &[ValueCall]) {
    for call in calls {
        assert!(
            call.code == Code::Ok || is_retriable_refusal(call.code),
            "{who}: a {} call ended {:?}",
            call.sequence,
            call.code
        );
        let took = call.end - call.start;
        assert!(took <= DEADLINE + Duration::from_millis(200), "{who}: a {} call took {took:?}", call.sequence);
    }
}

/// Asserts what one instance promises of the answers it gave during one lifetime (`calls`,
/// from all its callers): each answer's values increase, and an answer that reached its
/// caller before another call was sent holds only values below that call's. (Calls that
/// overlap in time may be answered in either order.)
pub fn assert_answer_order(who: &str, calls: &[ValueCall]) {
    let mut by_sequence: BTreeMap<&str, Vec<&ValueCall>> = BTreeMap::new();
    for call in calls.iter().filter(|c| !c.values.is_empty()) {
        if let Some(i) = call.values.windows(2).position(|w| w[0] >= w[1]) {
            panic!("{who}: {} answered {} then {} in one batch", call.sequence, call.values[i], call.values[i + 1]);
        }
        by_sequence.entry(call.sequence).or_default().push(call);
    }
    for (sequence, mut by_start) in by_sequence {
        let mut by_end = by_start.clone();
        by_start.sort_by_key(|c| c.start);
        by_end.sort_by_key(|c| c.end);
        // The highest value answered (and the call that got it) by calls that ended before
        // the current call was sent.
        let mut answered: Option<&ValueCall> = None;
        let mut ended = by_end.iter().peekable();
        for call in by_start {
            while let Some(before) = ended.next_if(|c| c.end < call.start) {
                if answered.is_none_or(|a| a.values.last() < before.values.last()) {
                    answered = Some(before);
                }
            }
            if let Some(before) = answered {
                assert!(
                    before.values.last() < call.values.first(),
                    "{who}: {sequence}: {:?} answered after {:?} had been (values not increasing in answer order)",
                    call.values,
                    before.values,
                );
            }
        }
    }
}

/// Every value of every sequence a fleet (instances sharing a store) handed out, gathered
/// from its callers' calls, to be checked for a value given twice.
#[derive(Debug, Default)]
pub struct AllValues(BTreeMap<&'static str, Vec<i64>>);

impl AllValues {
    pub fn add(&mut self, calls: &[ValueCall]) {
        for call in calls {
            self.0.entry(call.sequence).or_default().extend(&call.values);
        }
    }

    /// Asserts that no sequence's value was handed out twice; returns how many were checked.
    pub fn assert_no_value_twice(self) -> usize {
        let mut total = 0;
        for (sequence, mut all) in self.0 {
            let count = all.len();
            all.sort_unstable();
            let twice: Vec<i64> = all.windows(2).filter(|w| w[0] == w[1]).map(|w| w[0]).take(10).collect();
            assert!(twice.is_empty(), "{sequence}: values handed out twice among {count}, e.g. {twice:?}");
            total += count;
        }
        total
    }
}
