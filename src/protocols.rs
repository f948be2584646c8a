//! The two protocols of the `IdService` on the gRPC port, told apart by content type: gRPC
//! (`application/grpc...`, but for a plain `NextId`, which [`crate::next_path`] answers before
//! this) goes to tonic's generated server, counted by [`crate::calls`];
//! everything else to the Connect protocol ([`crate::connect`]), which answers what is not a
//! Connect call with the protocol's errors.
//!
//! On the gRPC path this costs one header lookup per call: the response future and body are
//! enums around gRPC's own, so no extra allocation.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tonic::server::NamedService;
use tower_service::Service;

use crate::connect::Connect;

/// The `IdService` over gRPC (`G`) and the Connect protocol.
pub struct Protocols<G> {
    grpc: G,
    connect: Arc<Connect>,
}

impl<G> Protocols<G> {
    pub fn new(grpc: G, connect: Connect) -> Protocols<G> {
        Protocols { grpc, connect: Arc::new(connect) }
    }
}

impl<G: Clone> Clone for Protocols<G> {
    fn clone(&self) -> Self {
        Protocols { grpc: self.grpc.clone(), connect: self.connect.clone() }
    }
}

impl<G: NamedService> NamedService for Protocols<G> {
    const NAME: &'static str = G::NAME;
}

/// Whether a request is a gRPC call (gRPC-Web included, which tonic answers as it does).
fn is_grpc(headers: &http::HeaderMap) -> bool {
    headers.get(http::header::CONTENT_TYPE).is_some_and(|value| value.as_bytes().starts_with(b"application/grpc"))
}

type ConnectFuture = Pin<Box<dyn Future<Output = http::Response<Bytes>> + Send>>;

impl<G, B, GB> Service<http::Request<B>> for Protocols<G>
where
    G: Service<http::Request<B>, Response = http::Response<GB>>,
    G::Future: Unpin,
    B: Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    GB: Body<Data = Bytes>,
{
    type Response = http::Response<ProtocolBody<GB>>;
    type Error = G::Error;
    type Future = ProtocolFuture<G::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), G::Error>> {
        self.grpc.poll_ready(cx)
    }

    fn call(&mut self, request: http::Request<B>) -> Self::Future {
        if is_grpc(request.headers()) {
            ProtocolFuture::Grpc(self.grpc.call(request))
        } else {
            ProtocolFuture::Connect(Box::pin(self.connect.clone().call(request)))
        }
    }
}

/// The response future of [`Protocols`].
pub enum ProtocolFuture<F> {
    Grpc(F),
    Connect(ConnectFuture),
}

impl<F, GB, E> Future for ProtocolFuture<F>
where
    F: Future<Output = Result<http::Response<GB>, E>> + Unpin,
{
    type Output = Result<http::Response<ProtocolBody<GB>>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.get_mut() {
            ProtocolFuture::Grpc(future) => {
                let response = ready!(Pin::new(future).poll(cx));
                Poll::Ready(response.map(|response| response.map(ProtocolBody::Grpc)))
            }
            ProtocolFuture::Connect(future) => {
                let response = ready!(future.as_mut().poll(cx));
                Poll::Ready(Ok(response.map(|bytes| ProtocolBody::Connect(Some(bytes)))))
            }
        }
    }
}

/// A response body: gRPC's, or a Connect answer in one piece (`None` once sent).
pub enum ProtocolBody<B> {
    Grpc(B),
    Connect(Option<Bytes>),
}

impl<B: Body<Data = Bytes> + Unpin> Body for ProtocolBody<B> {
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        match self.get_mut() {
            ProtocolBody::Grpc(body) => Pin::new(body).poll_frame(cx),
            ProtocolBody::Connect(bytes) => Poll::Ready(bytes.take().map(|bytes| Ok(Frame::data(bytes)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            ProtocolBody::Grpc(body) => body.is_end_stream(),
            ProtocolBody::Connect(bytes) => bytes.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            ProtocolBody::Grpc(body) => body.size_hint(),
            ProtocolBody::Connect(bytes) => SizeHint::with_exact(bytes.as_ref().map_or(0, |b| b.len() as u64)),
        }
    }
}
