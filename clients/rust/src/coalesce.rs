//! Coalescing of unbuffered `next_id()` calls: every caller sends a oneshot sender over an
//! mpsc channel to one background task, which takes the callers waiting at that moment (up
//! to the client's `max_coalesced`) and serves them with one `BatchIds` call (`NextId` for a
//! single caller). A burst of callers costs one round trip; callers beyond the cap are served
//! by the next call. A server whose `--max-batch` is below the cap answers `INVALID_ARGUMENT`;
//! the cap then halves until the server accepts it, so callers never see that answer. An
//! optimization beyond the contract: use the buffer for throughput. The shared call's deadline
//! is the latest of its callers' (none if one has none), so a quota wait none of them could
//! use is not waited: they get the refusal at once, as a call of their own would. Closing the
//! client ends the task, and every caller waiting on it gets `Closed` (its sender dropped, or
//! the error of the call in progress).

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

use crate::closer::Closer;
use crate::endpoints::Endpoints;
use crate::error::ClientError;

/// A caller waiting for its ID: where to send it, and the caller's own deadline.
pub(crate) struct Waiter {
    pub(crate) tx: oneshot::Sender<Result<u64, ClientError>>,
    pub(crate) deadline: Option<Instant>,
}

/// The deadline of a call shared by `waiting`: the latest of theirs, none if one has none.
fn shared_deadline(waiting: &[Waiter]) -> Option<Instant> {
    let mut latest = None;
    for waiter in waiting {
        latest = latest.max(Some(waiter.deadline?));
    }
    latest
}

/// The coalescing task: runs until every sender of `rx` is gone. `limit` is the most IDs one
/// call asks for; a server that answers a coalesced call `INVALID_ARGUMENT` has a lower
/// `--max-batch`, so the limit halves and the same callers are served by smaller calls.
pub(crate) async fn run(
    endpoints: Arc<Endpoints>,
    mut rx: mpsc::Receiver<Waiter>,
    mut limit: usize,
    closer: Arc<Closer>,
) {
    let mut waiting = Vec::with_capacity(limit.min(4096));
    loop {
        let received = tokio::select! {
            biased;
            () = closer.closed() => 0,
            n = rx.recv_many(&mut waiting, limit) => n,
        };
        if received == 0 {
            // Closed, or every client handle gone: the callers still queued get `Closed` as
            // their senders drop with the channel.
            return;
        }
        // Callers whose own deadline passed meanwhile.
        waiting.retain(|waiter| !waiter.tx.is_closed());
        while !waiting.is_empty() {
            let n = waiting.len().min(limit);
            let deadline = shared_deadline(&waiting[..n]);
            let result = match n {
                1 => endpoints.next_id(deadline).await.map(|id| vec![id]),
                n => endpoints.batch(n as u32, deadline).await,
            };
            match result {
                Err(ClientError::Rejected(status)) if status.code() == tonic::Code::InvalidArgument && n > 1 => {
                    limit = n / 2;
                }
                Ok(ids) if ids.len() == n => {
                    for (waiter, id) in waiting.drain(..n).zip(ids) {
                        let _ = waiter.tx.send(Ok(id));
                    }
                }
                Ok(ids) => {
                    let wrong = tonic::Status::internal(format!("asked for {n} IDs, got {}", ids.len()));
                    for waiter in waiting.drain(..n) {
                        let _ = waiter.tx.send(Err(ClientError::Rejected(wrong.clone())));
                    }
                }
                Err(error) => {
                    for waiter in waiting.drain(..n) {
                        let _ = waiter.tx.send(Err(error.clone()));
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn waiter(deadline: Option<Instant>) -> Waiter {
        Waiter { tx: oneshot::channel().0, deadline }
    }

    #[test]
    fn a_shared_call_has_its_callers_latest_deadline_or_none_if_one_has_none() {
        let now = Instant::now();
        let (early, late) = (now + Duration::from_millis(10), now + Duration::from_millis(90));
        assert_eq!(shared_deadline(&[waiter(Some(early)), waiter(Some(late))]), Some(late));
        assert_eq!(shared_deadline(&[waiter(Some(late)), waiter(Some(early))]), Some(late));
        assert_eq!(shared_deadline(&[waiter(Some(early)), waiter(None)]), None);
        assert_eq!(shared_deadline(&[waiter(None)]), None);
    }
}
