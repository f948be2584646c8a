//! Every call to the `IdService` counted by its final code and protocol, and timed.
//!
//! A [`Call`] is one call being counted: it records its code once, or `CANCELLED` when it is
//! dropped before it had one. The Connect protocol's layer ([`super::connect`]) makes one per
//! request it sees, and so does the direct path of a plain gRPC `NextId`
//! ([`super::direct`]). For the other gRPC calls, [`Counted`] is a tower service wrapped
//! around the generated `IdServiceServer`, so it sees the calls that never reach a handler
//! too: a request larger than `--max-request-bytes` (`OUT_OF_RANGE`), one that does not
//! decode (`INTERNAL`), a method the service does not have (`UNIMPLEMENTED`, under the method
//! label `other`). The handlers count nothing themselves.
//!
//! The final code is read where gRPC puts it: in the response headers of a call answered at
//! once with an error (a trailers-only response), otherwise in the trailers that end the
//! response body. A call whose response never ends is counted when it is dropped: as
//! `DEADLINE_EXCEEDED` when the front door ended it at its limit ([`super::context`]), as
//! `CANCELLED` when the client went away.
//!
//! The hot path pays for this with one match of the method name, one `Arc` clone, two clock
//! reads, one counter increment and one histogram observation: every labelled series was
//! looked up once, at start ([`CallMetrics`]). The wrapped body costs no allocation of its
//! own: the router boxes each response body once, whatever its type.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Instant;

use http_body::{Body, Frame, SizeHint};
use tonic::Code;
use tonic::server::NamedService;
use tower_service::Service;

use super::context::CallContext;
use super::gate::TenantState;
use crate::metrics::{CallMetrics, MethodMetrics, Metrics, PROTOCOL_GRPC};

/// A gRPC service whose every call is counted by method and final code, and timed.
#[derive(Clone)]
pub struct Counted<S> {
    inner: S,
    metrics: Arc<CallMetrics>,
}

impl<S: NamedService> Counted<S> {
    pub fn new(inner: S, metrics: &Metrics) -> Counted<S> {
        Counted { inner, metrics: Arc::new(metrics.calls(PROTOCOL_GRPC)) }
    }
}

/// The method a request path names (`/<service>/<method>`), or `""` for a path outside
/// `service`.
pub fn method_in<'a>(path: &'a str, service: &str) -> &'a str {
    path.strip_prefix('/')
        .and_then(|path| path.strip_prefix(service))
        .and_then(|path| path.strip_prefix('/'))
        .unwrap_or_default()
}

impl<S: NamedService> NamedService for Counted<S> {
    const NAME: &'static str = S::NAME;
}

impl<S, B, ResBody> Service<http::Request<B>> for Counted<S>
where
    S: Service<http::Request<B>, Response = http::Response<ResBody>> + NamedService,
    S::Future: Unpin,
    ResBody: Body,
{
    type Response = http::Response<CountedBody<ResBody>>;
    type Error = S::Error;
    type Future = CountedFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        let method = self.metrics.of(method_in(request.uri().path(), S::NAME)).clone();
        let call = Call::start(method, request.extensions().get::<CallContext>());
        CountedFuture { inner: self.inner.call(request), call: Some(call) }
    }
}

/// One call being counted: recorded once, with its final code, or when it is dropped before
/// it had one as `DEADLINE_EXCEEDED` (the front door ended it at its limit) or `CANCELLED`
/// (the client went away).
pub struct Call {
    method: Arc<MethodMetrics>,
    /// The caller's tenant, with a policy: its calls are counted by code too.
    tenant: Option<Arc<TenantState>>,
    start: Instant,
    done: bool,
    /// The end of the call's limit, from its context.
    deadline: Option<Instant>,
}

impl Call {
    /// A call to the method of `method` in `context`, starting at its arrival (now, for a
    /// request that did not come through the front door: `None`).
    pub fn start(method: Arc<MethodMetrics>, context: Option<&CallContext>) -> Call {
        // Timed from the call's arrival at the front door, where it has one.
        let start = context.map_or_else(Instant::now, |c| c.arrived);
        let tenant = context.and_then(|c| c.tenant.as_ref()).map(|t| t.state().clone());
        Call { method, tenant, start, done: false, deadline: context.map(|c| c.arrived + c.limit) }
    }

    /// How long the call has taken so far.
    pub fn elapsed(&self) -> std::time::Duration {
        self.start.elapsed()
    }

    /// Records the call's final code, unless it was recorded already.
    pub fn finish(&mut self, code: Code) {
        if !self.done {
            self.done = true;
            self.method.record(code, self.start.elapsed());
            if let Some(tenant) = &self.tenant {
                tenant.answered(code);
            }
        }
    }
}

impl Drop for Call {
    /// A call dropped unanswered once its limit has passed was ended by the front door's
    /// timer (a client that went away at that very instant is told from it by nothing).
    fn drop(&mut self) {
        let ended_by_deadline = self.deadline.is_some_and(|deadline| Instant::now() >= deadline);
        self.finish(if ended_by_deadline { Code::DeadlineExceeded } else { Code::Cancelled });
    }
}

/// The `grpc-status` in a header map (headers or trailers), if there is one.
fn status_in(headers: &http::HeaderMap) -> Option<Code> {
    headers.get(tonic::Status::GRPC_STATUS).map(|value| Code::from_bytes(value.as_bytes()))
}

/// The response future of a [`Counted`] service.
pub struct CountedFuture<F> {
    inner: F,
    call: Option<Call>,
}

impl<F, ResBody, E> Future for CountedFuture<F>
where
    F: Future<Output = Result<http::Response<ResBody>, E>> + Unpin,
    ResBody: Body,
{
    type Output = Result<http::Response<CountedBody<ResBody>>, E>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let result = ready!(Pin::new(&mut self.inner).poll(cx));
        let mut call = self.call.take();
        Poll::Ready(result.map(|response| {
            // A trailers-only response: the code is in the headers, and the body is empty.
            // Only an empty body is looked at, so an answer with a message (every call that
            // succeeds) costs no header lookup here.
            if let Some(call) = &mut call
                && response.body().is_end_stream()
            {
                call.finish(status_in(response.headers()).unwrap_or(Code::Unknown));
            }
            response.map(|inner| CountedBody { inner, call: call.filter(|call| !call.done) })
        }))
    }
}

/// A response body that records its call's code when the trailers carrying it go out.
pub struct CountedBody<B> {
    inner: B,
    /// `None` once recorded (or when the code was in the headers).
    call: Option<Call>,
}

impl<B: Body + Unpin> Body for CountedBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let frame = ready!(Pin::new(&mut self.inner).poll_frame(cx));
        let code = match &frame {
            // Trailers without a status are a broken response: the client cannot know how
            // the call ended.
            Some(Ok(frame)) => frame.trailers_ref().map(|trailers| status_in(trailers).unwrap_or(Code::Unknown)),
            // The stream is reset: the client sees an internal error.
            Some(Err(_)) => Some(Code::Internal),
            // The body ended without trailers, so without a status.
            None => Some(Code::Unknown),
        };
        if let Some(code) = code
            && let Some(mut call) = self.call.take()
        {
            call.finish(code);
        }
        Poll::Ready(frame)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}
