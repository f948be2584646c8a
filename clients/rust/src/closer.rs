//! Whether the client was closed, for every call and background task to watch: a call in
//! progress races its work against [`Closer::closed`], so `close()` ends it at once.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::sync::Notify;

use crate::error::ClientError;

/// Set once by `close()`; never unset.
#[derive(Default)]
pub(crate) struct Closer {
    closed: AtomicBool,
    notify: Notify,
}

impl Closer {
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Closes, and wakes everything waiting in [`Closer::closed`].
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Release);
        self.notify.notify_waiters();
    }

    /// Resolves once the client is closed (at once if it already is).
    pub(crate) async fn closed(&self) {
        let notified = self.notify.notified();
        tokio::pin!(notified);
        // Registered before the flag is read, so a close() in between still wakes it.
        notified.as_mut().enable();
        if self.is_closed() {
            return;
        }
        notified.await;
    }

    /// `work`, or [`ClientError::Closed`] as soon as the client is closed.
    pub(crate) async fn or_closed<T>(
        &self,
        work: impl Future<Output = Result<T, ClientError>>,
    ) -> Result<T, ClientError> {
        if self.is_closed() {
            return Err(ClientError::Closed);
        }
        tokio::select! {
            biased;
            () = self.closed() => Err(ClientError::Closed),
            result = work => result,
        }
    }
}
