//! `NextId` and `NextUuid` over gRPC, served without tonic's generic machinery: the calls that
//! most callers make most often, and whose cost is nearly all in the layers around them.
//!
//! tonic serves a unary call through its router, a request stream and decoder, an encoder
//! with its own state machine and compression negotiation, and a body boxed and wrapped once
//! per layer. A `NextId` request is five bytes (an empty message) and its answer fourteen (a
//! `NextUuid`'s 61), so here the request body is read whole, its one message decoded with
//! prost, and the answer sent as one data frame and the trailers. Only the plain form of a call takes this path
//! (the front door's decision, [`super::dispatch`]): HTTP/2, `POST`, content type
//! `application/grpc` or `application/grpc+proto`, no compression. Anything else (gRPC-Web, a
//! compressed request) goes to tonic's generated server, so every form is still answered.
//!
//! It keeps what tonic's path guarantees: the request size limit (`OUT_OF_RANGE`), the same
//! handlers and error mapping ([`Service::next_id_within`], [`Service::next_uuid_within`],
//! [`status_of`]), and the counting of
//! every call by its final code ([`Call`]), recorded when the trailers go out, or when the
//! call is dropped first. The call's time is the front door's ([`super::context`]): the
//! minter is given what is left of it, less the margin that lets a refusal travel back in
//! time, and refuses past it with `UNAVAILABLE` and the reason it could not mint; the front
//! door ends a call not answered by then with `DEADLINE_EXCEEDED`, as on every path.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::{BufMut, Bytes, BytesMut};
use http::{HeaderMap, HeaderValue, Request, Response, header};
use http_body::{Body, Frame, SizeHint};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use prost::Message;
use tonic::{Code, Status};

use super::calls::Call;
use super::context::CallContext;
use super::service::{Service, status_of};
use crate::metrics::{MethodMetrics, Metrics, PROTOCOL_GRPC};
use crate::proto::{NextIdRequest, NextUuidRequest};

/// A gRPC message's prefix: a compression flag and a 4-byte big-endian length.
const PREFIX: usize = 5;

/// A call the direct path answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DirectMethod {
    NextId,
    NextUuid,
}

impl DirectMethod {
    const ALL: [DirectMethod; 2] = [DirectMethod::NextId, DirectMethod::NextUuid];

    /// The call a request path names, if the direct path answers it.
    pub fn of_path(path: &str) -> Option<DirectMethod> {
        match path {
            "/snowmint.v1.IdService/NextId" => Some(DirectMethod::NextId),
            "/snowmint.v1.IdService/NextUuid" => Some(DirectMethod::NextUuid),
            _ => None,
        }
    }

    fn name(self) -> &'static str {
        match self {
            DirectMethod::NextId => "NextId",
            DirectMethod::NextUuid => "NextUuid",
        }
    }
}

/// `NextId` and `NextUuid` over gRPC, for every connection of the server.
pub struct Direct {
    service: Arc<Service>,
    /// In the order of [`DirectMethod::ALL`].
    calls: [Arc<MethodMetrics>; 2],
    max_request_bytes: usize,
}

impl Direct {
    pub fn new(service: Arc<Service>, metrics: &Metrics, max_request_bytes: usize) -> Direct {
        let grpc = metrics.calls(PROTOCOL_GRPC);
        let calls = DirectMethod::ALL.map(|method| grpc.of(method.name()).clone());
        Direct { service, calls, max_request_bytes }
    }

    /// Answers one plain gRPC call of `method` (the front door's decision), in `context`.
    pub async fn call<B>(
        &self,
        method: DirectMethod,
        request: Request<B>,
        context: &CallContext,
    ) -> Response<DirectBody>
    where
        B: Body<Data = Bytes> + Unpin,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let mut call = Call::start(self.calls[method as usize].clone(), Some(context));
        let answer = async {
            let message = self.message(request.into_body()).await?;
            let undecodable =
                |e: prost::DecodeError| Status::internal(format!("failed to decode the {}Request: {e}", method.name()));
            let frame = match method {
                DirectMethod::NextId => {
                    let request = NextIdRequest::decode(message).map_err(undecodable)?;
                    framed(&self.service.next_id_within(request, context.asker()).await.map_err(status_of)?)
                }
                DirectMethod::NextUuid => {
                    let request = NextUuidRequest::decode(message).map_err(undecodable)?;
                    let response = self.service.next_uuid_within(request, context.asker()).await;
                    framed(&response.map_err(status_of)?)
                }
            };
            Ok::<_, Status>(frame)
        };
        match answer.await {
            Ok(frame) => {
                let mut response = Response::new(DirectBody { frame: Some(frame), trailers: true, call: Some(call) });
                response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
                response
            }
            Err(status) => {
                call.finish(status.code());
                status.into_http()
            }
        }
    }

    /// The one message of a request body, within `--max-request-bytes`.
    async fn message<B>(&self, mut body: B) -> Result<Bytes, Status>
    where
        B: Body<Data = Bytes> + Unpin,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let limit = self.max_request_bytes;
        let broken = |e: B::Error| Status::cancelled(format!("the request body did not arrive whole: {}", e.into()));
        // A request this small nearly always comes in one frame, already here.
        let first = match body.frame().await {
            None => Bytes::new(),
            Some(Ok(frame)) => frame.into_data().unwrap_or_default(),
            Some(Err(e)) => return Err(broken(e)),
        };
        let body = if body.is_end_stream() || first.len() > PREFIX + limit {
            first
        } else {
            let rest = match Limited::new(body, PREFIX + limit - first.len()).collect().await {
                Ok(rest) => rest.to_bytes(),
                Err(e) if e.is::<LengthLimitError>() => return Err(too_large(None, limit)),
                Err(e) => return Err(Status::cancelled(format!("the request body did not arrive whole: {e}"))),
            };
            let mut whole = BytesMut::with_capacity(first.len() + rest.len());
            whole.extend_from_slice(&first);
            whole.extend_from_slice(&rest);
            whole.freeze()
        };
        if body.len() < PREFIX {
            return Err(Status::internal("Missing request message."));
        }
        match body[0] {
            0 => {}
            1 => {
                return Err(Status::internal(
                    "the request's message is compressed, but the call names no grpc-encoding",
                ));
            }
            flag => return Err(Status::internal(format!("invalid compression flag {flag} (valid flags are 0 and 1)"))),
        }
        let length = u32::from_be_bytes([body[1], body[2], body[3], body[4]]) as usize;
        if length > limit {
            return Err(too_large(Some(length), limit));
        }
        if body.len() != PREFIX + length {
            return Err(Status::internal(format!(
                "a unary call carries one whole message: its prefix gives {length} bytes, and {} follow",
                body.len() - PREFIX
            )));
        }
        Ok(body.slice(PREFIX..))
    }
}

/// The refusal of a request message over `--max-request-bytes`, worded as tonic's.
fn too_large(length: Option<usize>, limit: usize) -> Status {
    let found = length.map_or_else(|| format!("more than {limit} bytes"), |n| format!("{n} bytes"));
    Status::out_of_range(format!("Error, decoded message length too large: found {found}, the limit is: {limit} bytes"))
}

/// `message` as one gRPC message: the prefix, then its encoding.
fn framed(message: &impl Message) -> Bytes {
    let length = message.encoded_len();
    let mut frame = BytesMut::with_capacity(PREFIX + length);
    frame.put_u8(0);
    frame.put_u32(length as u32);
    message.encode(&mut frame).expect("the buffer holds the message");
    frame.freeze()
}

/// An answer's body: the response message, then trailers with `grpc-status: 0`; empty when
/// the answer is an error carried in the headers (a trailers-only response).
#[derive(Default)]
pub struct DirectBody {
    frame: Option<Bytes>,
    trailers: bool,
    /// Recorded when the trailers go out; dropped before that, the call is `CANCELLED`.
    call: Option<Call>,
}

impl Body for DirectBody {
    type Data = Bytes;
    type Error = Status;

    fn poll_frame(mut self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Status>>> {
        if let Some(frame) = self.frame.take() {
            return Poll::Ready(Some(Ok(Frame::data(frame))));
        }
        if !std::mem::take(&mut self.trailers) {
            return Poll::Ready(None);
        }
        if let Some(mut call) = self.call.take() {
            call.finish(Code::Ok);
        }
        let mut trailers = HeaderMap::with_capacity(1);
        trailers.insert(Status::GRPC_STATUS, HeaderValue::from_static("0"));
        Poll::Ready(Some(Ok(Frame::trailers(trailers))))
    }

    fn is_end_stream(&self) -> bool {
        self.frame.is_none() && !self.trailers
    }

    /// Not exact on purpose: hyper would add a `content-length` header, which gRPC does not
    /// need, to be encoded into every answer.
    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}
