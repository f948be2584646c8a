//! The front door: every request on the gRPC port comes through [`Dispatch`], which reads its
//! head once and decides, once, which path answers it:
//!
//! - a plain gRPC `NextId` or `NextUuid` (HTTP/2, `POST`, content type `application/grpc` or
//!   `application/grpc+proto`, no compression): the direct path ([`super::direct`]);
//! - any other gRPC call (`application/grpc...`, gRPC-Web included): tonic's routes (the
//!   `IdService`, counted by [`super::calls`], health and reflection);
//! - anything else: the Connect protocol ([`super::connect`]), which answers what is not a
//!   Connect call with the protocol's errors.
//!
//! It builds the one [`CallContext`] every path reads (the connection's key, the call's
//! arrival and limit), and keeps the one timeout rule of [`super::context`]: a call not
//! answered by its limit ends with `DEADLINE_EXCEEDED`, in its protocol's form, on every
//! path, and is counted so. With a policy it asks the [`Gate`] who the caller is (its
//! `authorization` header, its connection's client certificate) and answers a caller of no
//! tenant `UNAUTHENTICATED` itself, in its protocol's form; gRPC's health checks pass
//! without credentials.

use std::convert::Infallible;
use std::future::Future;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, Version, header};
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use tonic::service::Routes;
use tonic::{Code, Status};
use tower_service::Service as _;

use super::connect::{Connect, ConnectError};
use super::context::{CallContext, parse_connect_timeout, parse_grpc_timeout};
use super::direct::{Direct, DirectBody, DirectMethod};
use super::gate::Gate;
use crate::minter::ConnectionKey;

/// Which path answers a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Path {
    /// A plain gRPC `NextId` or `NextUuid`: [`Direct`].
    Direct(DirectMethod),
    /// Any other gRPC call: tonic's routes.
    Grpc,
    /// Everything else: [`Connect`].
    Connect,
}

/// What the front door reads of a request's head, in one pass over its headers.
struct Head {
    path: Path,
    /// The caller's timeout; `Err` for a Connect timeout header that cannot be read.
    caller: Result<Option<Duration>, String>,
    /// The `authorization` header, when there is one and a gate to read it.
    authorization: Option<http::HeaderValue>,
}

impl Head {
    /// The head of `request`; its `authorization` kept only when `gated` (a policy reads it).
    fn of<B>(request: &Request<B>, gated: bool) -> Head {
        let (mut grpc, mut plain, mut compressed) = (false, false, false);
        let (mut grpc_timeout, mut connect_timeout, mut authorization) = (None, None, None);
        for (name, value) in request.headers() {
            if name == header::AUTHORIZATION {
                if gated {
                    authorization = Some(value.clone());
                }
            } else if name == header::CONTENT_TYPE {
                let bytes = value.as_bytes();
                grpc = bytes.starts_with(b"application/grpc");
                plain = bytes == b"application/grpc" || bytes == b"application/grpc+proto";
            } else if name.as_str() == "grpc-timeout" {
                grpc_timeout = value.to_str().ok().and_then(parse_grpc_timeout);
            } else if name.as_str() == "grpc-encoding" {
                compressed = value.as_bytes() != b"identity";
            } else if name.as_str() == "connect-timeout-ms" {
                connect_timeout = Some(parse_connect_timeout(value.as_bytes()));
            }
        }
        if !grpc {
            return Head { path: Path::Connect, caller: connect_timeout.transpose(), authorization };
        }
        let direct = (plain && !compressed && request.version() == Version::HTTP_2 && request.method() == Method::POST)
            .then(|| DirectMethod::of_path(request.uri().path()))
            .flatten();
        Head { path: direct.map_or(Path::Grpc, Path::Direct), caller: Ok(grpc_timeout), authorization }
    }
}

/// One connection's requests, each to its path.
#[derive(Clone)]
pub struct Dispatch<C> {
    /// The peer's address (and TLS session), as tonic's handlers read it.
    info: C,
    /// The connection's key in the minter's fair queue, read once for the connection.
    connection: ConnectionKey,
    /// The names of the connection's client certificate (mutual TLS), read once.
    certificate: Arc<[String]>,
    paths: Arc<Paths>,
}

/// The three paths, shared by every connection.
pub struct Paths {
    pub direct: Direct,
    pub routes: Routes,
    pub connect: Arc<Connect>,
    /// The longest any call may take (`--request-timeout-ms`).
    pub request_timeout: Duration,
    /// With a policy, who may call.
    pub gate: Option<Arc<Gate>>,
}

impl<C: Clone + Send + Sync + 'static> Dispatch<C> {
    pub fn new(info: C, paths: Arc<Paths>) -> Dispatch<C> {
        // The peer's address as tonic reads it from a request.
        let mut probe = tonic::Request::new(());
        probe.extensions_mut().insert(info.clone());
        let connection = ConnectionKey::of_peer(probe.remote_addr());
        let certificate = match (&paths.gate, probe.peer_certs()) {
            (Some(_), Some(chain)) => chain.first().map_or_else(Vec::new, |leaf| super::tls::certificate_names(leaf)),
            _ => Vec::new(),
        };
        Dispatch { info, connection, certificate: certificate.into(), paths }
    }
}

/// The path prefix of gRPC's health service, which answers without credentials.
const HEALTH: &str = "/grpc.health.v1.Health/";

type Answering = Pin<Box<dyn Future<Output = Result<Response<Answer>, Infallible>> + Send>>;

impl<C: Clone + Send + Sync + 'static> hyper::service::Service<Request<Incoming>> for Dispatch<C> {
    type Response = Response<Answer>;
    type Error = Infallible;
    type Future = Answering;

    fn call(&self, mut request: Request<Incoming>) -> Answering {
        let mut head = Head::of(&request, self.paths.gate.is_some());
        let (caller, bad_timeout) = match head.caller {
            Ok(caller) => (caller, None),
            Err(bad) => (None, Some(bad)),
        };
        let mut context = CallContext::new(self.connection, caller, self.paths.request_timeout);
        context.bad_timeout = bad_timeout;
        if let Some(gate) = &self.paths.gate
            && !request.uri().path().starts_with(HEALTH)
        {
            match gate.identify(head.authorization.take(), &self.certificate) {
                Ok(tenant) => context.tenant = Some(tenant),
                Err(error) => {
                    let message = error.to_string();
                    let refused = match head.path {
                        Path::Direct(_) | Path::Grpc => Status::new(Code::Unauthenticated, message).into_http(),
                        Path::Connect => {
                            super::connect::error_response(&ConnectError::new(Code::Unauthenticated, message))
                                .map(|body| Answer::Connect(Some(body)))
                        }
                    };
                    return Box::pin(async move { Ok(refused) });
                }
            }
        }
        let paths = self.paths.clone();
        if !matches!(head.path, Path::Direct(_)) {
            // Where tonic's handlers and Connect read them. The direct path is handed the
            // context itself: a request's first extension costs allocations the most
            // frequent call does without.
            request.extensions_mut().insert(self.info.clone());
            request.extensions_mut().insert(context.clone());
        }
        match head.path {
            Path::Direct(method) => Box::pin(async move {
                let answer = async { paths.direct.call(method, request, &context).await.map(Answer::Direct) };
                Ok(within_limit(&context, head.path, answer).await)
            }),
            Path::Grpc => Box::pin(async move {
                let routed = paths.routes.clone().call(request);
                let answer = async {
                    match routed.await {
                        Ok(response) => response.map(Answer::Routes),
                        Err(never) => match never {},
                    }
                };
                Ok(within_limit(&context, head.path, answer).await)
            }),
            Path::Connect => Box::pin(async move {
                let answer =
                    async { paths.connect.clone().call(request).await.map(|body| Answer::Connect(Some(body))) };
                Ok(within_limit(&context, head.path, answer).await)
            }),
        }
    }
}

/// `answer`, or once the call's limit has passed, `DEADLINE_EXCEEDED` in the form of `path`'s
/// protocol: the one timeout rule's one outcome.
async fn within_limit(
    context: &CallContext,
    path: Path,
    answer: impl Future<Output = Response<Answer>>,
) -> Response<Answer> {
    let mut answer = pin!(answer);
    match tokio::time::timeout(context.limit, answer.as_mut()).await {
        Ok(response) => response,
        Err(_) => {
            // The path's future is dropped with this function's frame, past the limit: the
            // call it was counting is counted as ended by its deadline, not as cancelled.
            let message = context.deadline_message();
            match path {
                Path::Direct(_) | Path::Grpc => Status::new(Code::DeadlineExceeded, message).into_http(),
                Path::Connect => super::connect::error_response(&ConnectError::new(Code::DeadlineExceeded, message))
                    .map(|body| Answer::Connect(Some(body))),
            }
        }
    }
}

/// A response body: the direct path's, one of tonic's routes, or a Connect answer in one
/// piece (`None` once sent).
pub enum Answer {
    Direct(DirectBody),
    Routes(tonic::body::Body),
    Connect(Option<Bytes>),
}

impl Answer {
    /// A body with nothing in it: a trailers-only gRPC answer carries its status in the
    /// headers.
    fn empty() -> Answer {
        Answer::Connect(None)
    }
}

impl Default for Answer {
    fn default() -> Answer {
        Answer::empty()
    }
}

impl Body for Answer {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        match self.get_mut() {
            Answer::Direct(body) => Pin::new(body).poll_frame(cx),
            Answer::Routes(body) => Pin::new(body).poll_frame(cx),
            Answer::Connect(bytes) => Poll::Ready(bytes.take().map(|bytes| Ok(Frame::data(bytes)))),
        }
    }

    fn is_end_stream(&self) -> bool {
        match self {
            Answer::Direct(body) => body.is_end_stream(),
            Answer::Routes(body) => body.is_end_stream(),
            Answer::Connect(bytes) => bytes.is_none(),
        }
    }

    fn size_hint(&self) -> SizeHint {
        match self {
            Answer::Direct(body) => body.size_hint(),
            Answer::Routes(body) => body.size_hint(),
            Answer::Connect(bytes) => SizeHint::with_exact(bytes.as_ref().map_or(0, |b| b.len() as u64)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(version: Version, content_type: &str, path: &str, headers: &[(&str, &str)]) -> Request<()> {
        let mut builder = Request::builder().method(Method::POST).version(version).uri(path);
        builder = builder.header(header::CONTENT_TYPE, content_type);
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        builder.body(()).unwrap()
    }

    #[test]
    fn each_request_goes_to_one_path_with_its_callers_timeout() {
        let next = "/snowmint.v1.IdService/NextId";
        let uuid = "/snowmint.v1.IdService/NextUuid";
        let batch = "/snowmint.v1.IdService/BatchIds";
        let h2 = Version::HTTP_2;
        let direct = Path::Direct(DirectMethod::NextId);
        let cases = [
            (request(h2, "application/grpc", next, &[("grpc-timeout", "250m")]), direct, Ok(Some(250))),
            (request(h2, "application/grpc+proto", next, &[]), direct, Ok(None)),
            (request(h2, "application/grpc", uuid, &[]), Path::Direct(DirectMethod::NextUuid), Ok(None)),
            (request(h2, "application/grpc", "/snowmint.v1.IdService/BatchUuids", &[]), Path::Grpc, Ok(None)),
            (request(h2, "application/grpc", next, &[("grpc-encoding", "gzip")]), Path::Grpc, Ok(None)),
            (request(h2, "application/grpc-web", next, &[]), Path::Grpc, Ok(None)),
            (request(Version::HTTP_11, "application/grpc", next, &[]), Path::Grpc, Ok(None)),
            (request(h2, "application/grpc", batch, &[("grpc-timeout", "1S")]), Path::Grpc, Ok(Some(1000))),
            (request(h2, "application/grpc", batch, &[("grpc-timeout", "soon")]), Path::Grpc, Ok(None)),
            (request(h2, "application/json", next, &[("connect-timeout-ms", "150")]), Path::Connect, Ok(Some(150))),
            (request(h2, "application/json", next, &[("grpc-timeout", "1S")]), Path::Connect, Ok(None)),
            (request(Version::HTTP_11, "text/plain", batch, &[]), Path::Connect, Ok(None)),
            (request(h2, "application/proto", batch, &[("connect-timeout-ms", "x")]), Path::Connect, Err(())),
        ];
        for (request, path, caller) in cases {
            let head = Head::of(&request, false);
            assert_eq!(head.path, path, "{request:?}");
            let caller_ms = head.caller.map(|c| c.map(|d| d.as_millis() as u64)).map_err(|_| ());
            assert_eq!(caller_ms, caller, "{request:?}");
        }
        // The authorization header is kept only for a gate to read.
        let signed = request(h2, "application/grpc", next, &[("authorization", "Bearer smt_x")]);
        assert_eq!(Head::of(&signed, true).authorization.unwrap(), "Bearer smt_x");
        assert!(Head::of(&signed, false).authorization.is_none());
    }
}
