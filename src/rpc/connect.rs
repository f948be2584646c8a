//! The Connect protocol (connectrpc.com's published protocol) for the unary calls of the
//! `IdService`, on the gRPC port, over HTTP/1.1 and HTTP/2: so `curl` can mint an ID.
//!
//! A call is a `POST` to `/snowmint.v1.IdService/<Method>` whose body is the request message,
//! as proto3 JSON (`application/json`, by pbjson's mapping: 64-bit integers as strings) or
//! binary protobuf (`application/proto`). The answer is `200` with the response message in the
//! same encoding, or an error: a JSON body `{"code": "unavailable", "message": "..."}` and the
//! protocol's HTTP status for the code (`unavailable` 503, `invalid_argument` 400,
//! `resource_exhausted` 429, ...: [`http_status`]). The calls are the ones gRPC makes
//! ([`Service`]), with the same mapping of errors to codes ([`status_of`]) and the same limits:
//! a body over `--max-request-bytes` gets `out_of_range` as gRPC's does, and every call keeps
//! the front door's one timeout rule ([`super::context`]), with `Connect-Timeout-Ms` as the
//! caller's timeout (one that is not a number of milliseconds is `invalid_argument`). Each
//! call is counted under `protocol="connect"`.
//!
//! Only what the unary calls need is spoken: no compression (a request that names an encoding
//! other than `identity` gets `unimplemented`, and no answer is compressed), no `GET` form (it
//! is for methods marked free of side effects, and minting is not), no streaming.

use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use http_body_util::{BodyExt, Limited};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tonic::Code;

use super::SERVICE_NAME;
use super::calls::{Call, method_in};
use super::context::{Asker, CallContext};
use super::service::{Service, ServiceError, status_of};
use crate::metrics::{CallMetrics, METHODS, Metrics, PROTOCOL_CONNECT};
use crate::minter::ConnectionKey;
use crate::proto::{
    BatchIdsRequest, BatchUuidsRequest, BatchValuesRequest, DecodeRequest, NextIdRequest, NextUuidRequest,
    NextValueRequest, RevealRequest,
};
use crate::tenant::Refusal;
/// The header naming the protocol's version, `1`; optional for unary calls.
const VERSION_HEADER: &str = "connect-protocol-version";

/// How a message travels: the request's content type, and the response's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Codec {
    /// Proto3 JSON, `application/json`.
    Json,
    /// Binary protobuf, `application/proto`.
    Proto,
}

impl Codec {
    /// The codec of a `Content-Type` (its parameters, such as `charset=utf-8`, aside).
    fn of(content_type: &str) -> Option<Codec> {
        let media = content_type.split(';').next().unwrap_or_default().trim();
        if media.eq_ignore_ascii_case("application/json") {
            Some(Codec::Json)
        } else if media.eq_ignore_ascii_case("application/proto") {
            Some(Codec::Proto)
        } else {
            None
        }
    }

    fn content_type(self) -> HeaderValue {
        HeaderValue::from_static(match self {
            Codec::Json => "application/json",
            Codec::Proto => "application/proto",
        })
    }

    fn decode<T: prost::Message + Default + DeserializeOwned>(self, body: &[u8]) -> Result<T, ConnectError> {
        let invalid = |e: &dyn std::fmt::Display| {
            ConnectError::new(Code::InvalidArgument, format!("cannot decode the request: {e}"))
        };
        match self {
            Codec::Proto => T::decode(body).map_err(|e| invalid(&e)),
            // An empty body is the empty message, as in binary protobuf.
            Codec::Json if body.iter().all(u8::is_ascii_whitespace) => Ok(T::default()),
            Codec::Json => serde_json::from_slice(body).map_err(|e| invalid(&e)),
        }
    }

    fn encode<T: prost::Message + Serialize>(self, message: &T) -> Bytes {
        match self {
            Codec::Proto => message.encode_to_vec().into(),
            Codec::Json => serde_json::to_vec(message).expect("a message always serializes").into(),
        }
    }
}

/// Why a call failed: its code and message, as the error body carries them.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct ConnectError {
    code: Code,
    message: String,
    /// An HTTP status other than the code's own, for a request that is not a Connect call at
    /// all (a wrong method or content type).
    http: Option<StatusCode>,
    /// How long the caller should wait before it retries (a tenant over its quota): sent as
    /// the error's `google.rpc.RetryInfo` detail and as `Retry-After`.
    retry_after: Option<std::time::Duration>,
}

impl ConnectError {
    pub fn new(code: Code, message: impl Into<String>) -> ConnectError {
        ConnectError { code, message: message.into(), http: None, retry_after: None }
    }

    fn with_http(self, http: StatusCode) -> ConnectError {
        ConnectError { http: Some(http), ..self }
    }
}

impl From<ServiceError> for ConnectError {
    fn from(error: ServiceError) -> ConnectError {
        let retry_after = match &error {
            ServiceError::Tenant(Refusal::OverQuota { wait, .. }) => Some(*wait),
            _ => None,
        };
        let status = status_of(error);
        ConnectError { retry_after, ..ConnectError::new(status.code(), status.message()) }
    }
}

/// The Connect protocol's name of a code.
pub fn code_name(code: Code) -> &'static str {
    match code {
        Code::Ok => "ok",
        Code::Cancelled => "canceled",
        Code::Unknown => "unknown",
        Code::InvalidArgument => "invalid_argument",
        Code::DeadlineExceeded => "deadline_exceeded",
        Code::NotFound => "not_found",
        Code::AlreadyExists => "already_exists",
        Code::PermissionDenied => "permission_denied",
        Code::ResourceExhausted => "resource_exhausted",
        Code::FailedPrecondition => "failed_precondition",
        Code::Aborted => "aborted",
        Code::OutOfRange => "out_of_range",
        Code::Unimplemented => "unimplemented",
        Code::Internal => "internal",
        Code::Unavailable => "unavailable",
        Code::DataLoss => "data_loss",
        Code::Unauthenticated => "unauthenticated",
    }
}

/// The HTTP status the Connect protocol answers a code with.
pub fn http_status(code: Code) -> StatusCode {
    let status = match code {
        Code::Ok => 200,
        Code::Cancelled => 499,
        Code::Unknown | Code::Internal | Code::DataLoss => 500,
        Code::InvalidArgument | Code::FailedPrecondition | Code::OutOfRange => 400,
        Code::DeadlineExceeded => 504,
        Code::NotFound => 404,
        Code::AlreadyExists | Code::Aborted => 409,
        Code::PermissionDenied => 403,
        Code::ResourceExhausted => 429,
        Code::Unimplemented => 501,
        Code::Unavailable => 503,
        Code::Unauthenticated => 401,
    };
    StatusCode::from_u16(status).expect("every status above is valid")
}

/// The Connect protocol's side of the `IdService`.
pub struct Connect {
    service: Arc<Service>,
    metrics: CallMetrics,
    /// The largest request body accepted: `--max-request-bytes`, as for gRPC.
    max_request_bytes: usize,
}

impl Connect {
    pub fn new(service: Arc<Service>, metrics: &Metrics, max_request_bytes: usize) -> Connect {
        Connect { service, metrics: metrics.calls(PROTOCOL_CONNECT), max_request_bytes }
    }

    /// Answers one request, counting it by its final code. Its [`CallContext`] is the front
    /// door's, in its extensions.
    pub async fn call<B>(self: Arc<Self>, request: http::Request<B>) -> http::Response<Bytes>
    where
        B: http_body::Body<Data = Bytes>,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let method = method_in(request.uri().path(), SERVICE_NAME).to_string();
        let context = request.extensions().get::<CallContext>().cloned();
        let mut call = Call::start(self.metrics.of(&method).clone(), context.as_ref());
        let (response, code) = match self.answer(&method, request, context).await {
            Ok((codec, body)) => {
                let mut response = http::Response::new(body);
                response.headers_mut().insert(header::CONTENT_TYPE, codec.content_type());
                (response, Code::Ok)
            }
            Err(error) => (error_response(&error), error.code),
        };
        call.finish(code);
        response
    }

    /// The encoded response to `request`, a call of `method`.
    async fn answer<B>(
        &self,
        method: &str,
        request: http::Request<B>,
        context: Option<CallContext>,
    ) -> Result<(Codec, Bytes), ConnectError>
    where
        B: http_body::Body<Data = Bytes>,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        if request.method() != Method::POST {
            let message = format!("{} is not a Connect call: unary calls are POSTs", request.method());
            return Err(ConnectError::new(Code::Unimplemented, message).with_http(StatusCode::METHOD_NOT_ALLOWED));
        }
        let headers = request.headers();
        let content_type = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default();
        let codec = Codec::of(content_type).ok_or_else(|| {
            let message = format!(
                "content type {content_type:?} is neither gRPC (application/grpc) nor Connect (application/json, application/proto)"
            );
            ConnectError::new(Code::Unimplemented, message).with_http(StatusCode::UNSUPPORTED_MEDIA_TYPE)
        })?;
        check_version(headers)?;
        check_encoding(headers)?;
        if let Some(bad) = context.as_ref().and_then(|c| c.bad_timeout.clone()) {
            return Err(ConnectError::new(Code::InvalidArgument, bad));
        }
        let unimplemented = {
            let message = format!("no method {}", request.uri().path());
            move || ConnectError::new(Code::Unimplemented, message.clone())
        };
        // Refused before the body is read.
        if !METHODS.contains(&method) {
            return Err(unimplemented());
        }
        let connection = context.as_ref().map_or_else(|| ConnectionKey::of_peer(None), |c| c.connection);
        let work = async {
            let body = self.read_body(request).await?;
            // What is left of the call's time, less the margin that lets a refusal travel back
            // in time (the front door ends the call at its limit).
            let asker = || context.as_ref().map_or_else(|| Asker::unlimited(connection), CallContext::asker);
            let message = match method {
                "NextId" => {
                    let request: NextIdRequest = codec.decode(&body)?;
                    codec.encode(&self.service.next_id_within(request, asker()).await?)
                }
                "BatchIds" => {
                    let request: BatchIdsRequest = codec.decode(&body)?;
                    codec.encode(&self.service.batch_within(request, asker()).await?)
                }
                "Decode" => {
                    let request: DecodeRequest = codec.decode(&body)?;
                    codec.encode(&self.service.decode_request(request, asker()).await?)
                }
                "Reveal" => {
                    let request: RevealRequest = codec.decode(&body)?;
                    codec.encode(&self.service.reveal_request(request, asker())?)
                }
                "NextUuid" => {
                    let request: NextUuidRequest = codec.decode(&body)?;
                    codec.encode(&self.service.next_uuid_within(request, asker()).await?)
                }
                "BatchUuids" => {
                    let request: BatchUuidsRequest = codec.decode(&body)?;
                    codec.encode(&self.service.batch_uuids_within(request, asker()).await?)
                }
                "NextValue" => {
                    let request: NextValueRequest = codec.decode(&body)?;
                    codec.encode(&self.service.next_value_within(request, asker(), false).await?)
                }
                "BatchValues" => {
                    let request: BatchValuesRequest = codec.decode(&body)?;
                    codec.encode(&self.service.batch_values_within(request, asker(), false).await?)
                }
                _ => return Err(unimplemented()),
            };
            Ok::<_, ConnectError>(message)
        };
        Ok((codec, work.await?))
    }

    /// The request's body, refused past `--max-request-bytes`.
    async fn read_body<B>(&self, request: http::Request<B>) -> Result<Bytes, ConnectError>
    where
        B: http_body::Body<Data = Bytes>,
        B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    {
        let too_large = || {
            let message =
                format!("the request is larger than the server's --max-request-bytes {}", self.max_request_bytes);
            ConnectError::new(Code::OutOfRange, message)
        };
        let declared = request.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        if declared.is_some_and(|length| length > self.max_request_bytes as u64) {
            return Err(too_large());
        }
        match Limited::new(request.into_body(), self.max_request_bytes).collect().await {
            Ok(collected) => Ok(collected.to_bytes()),
            Err(e) if e.is::<http_body_util::LengthLimitError>() => Err(too_large()),
            Err(e) => Err(ConnectError::new(Code::Internal, format!("cannot read the request: {e}"))),
        }
    }
}

/// `Connect-Protocol-Version`, when given, must be `1`.
fn check_version(headers: &HeaderMap) -> Result<(), ConnectError> {
    match headers.get(VERSION_HEADER) {
        Some(version) if version != "1" => Err(ConnectError::new(
            Code::InvalidArgument,
            format!("{VERSION_HEADER} {version:?} is not supported; this server speaks version 1"),
        )),
        _ => Ok(()),
    }
}

/// Requests are not compressed: `Content-Encoding` may only be `identity`.
fn check_encoding(headers: &HeaderMap) -> Result<(), ConnectError> {
    match headers.get(header::CONTENT_ENCODING) {
        Some(encoding) if !encoding.as_bytes().eq_ignore_ascii_case(b"identity") => Err(ConnectError::new(
            Code::Unimplemented,
            format!("content encoding {encoding:?} is not supported; send requests uncompressed (identity)"),
        )),
        _ => Ok(()),
    }
}

/// The Connect error response: the code's HTTP status and a JSON body.
pub fn error_response(error: &ConnectError) -> http::Response<Bytes> {
    #[derive(Serialize)]
    struct Detail {
        #[serde(rename = "type")]
        kind: &'static str,
        /// The detail's protobuf message, base64 without padding.
        value: String,
        /// The same message in its JSON form, for people reading the error.
        debug: serde_json::Value,
    }
    #[derive(Serialize)]
    struct Body<'a> {
        code: &'a str,
        message: &'a str,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        details: Vec<Detail>,
    }
    let details = error
        .retry_after
        .map(|wait| {
            use base64::Engine as _;
            use prost::Message as _;
            let delay = tonic_types::pb::RetryInfo { retry_delay: Some(prost_types_duration(wait)) };
            Detail {
                kind: "google.rpc.RetryInfo",
                value: base64::engine::general_purpose::STANDARD_NO_PAD.encode(delay.encode_to_vec()),
                debug: serde_json::json!({ "retryDelay": duration_json(wait) }),
            }
        })
        .into_iter()
        .collect();
    let body = serde_json::to_vec(&Body { code: code_name(error.code), message: &error.message, details })
        .expect("an error body always serializes");
    let mut response = http::Response::new(Bytes::from(body));
    *response.status_mut() = error.http.unwrap_or_else(|| http_status(error.code));
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if error.http == Some(StatusCode::METHOD_NOT_ALLOWED) {
        headers.insert(header::ALLOW, HeaderValue::from_static("POST"));
    }
    if error.http == Some(StatusCode::UNSUPPORTED_MEDIA_TYPE) {
        headers.insert("accept-post", HeaderValue::from_static("application/json, application/proto"));
    }
    if let Some(wait) = error.retry_after {
        // Whole seconds, rounded up: HTTP says no finer.
        let seconds = wait.as_millis().div_ceil(1000).max(1);
        headers.insert(header::RETRY_AFTER, HeaderValue::from(seconds as u64));
    }
    response
}

/// A wait in protobuf's JSON form of a `Duration`: seconds with 0, 3, 6 or 9 decimals and `s`.
fn duration_json(wait: std::time::Duration) -> String {
    let (seconds, nanos) = (wait.as_secs(), wait.subsec_nanos());
    match nanos {
        0 => format!("{seconds}s"),
        n if n % 1_000_000 == 0 => format!("{seconds}.{:03}s", n / 1_000_000),
        n if n % 1_000 == 0 => format!("{seconds}.{:06}s", n / 1_000),
        n => format!("{seconds}.{n:09}s"),
    }
}

/// A wait as protobuf's `Duration`.
fn prost_types_duration(wait: std::time::Duration) -> prost_types::Duration {
    prost_types::Duration { seconds: wait.as_secs() as i64, nanos: wait.subsec_nanos() as i32 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_is_written_as_protobufs_json_duration() {
        let cases = [(0, "0s"), (2_000_000_000, "2s"), (200_000_000, "0.200s"), (1_500_000, "0.001500s")];
        for (nanos, text) in cases {
            assert_eq!(duration_json(std::time::Duration::from_nanos(nanos)), text);
        }
        assert_eq!(duration_json(std::time::Duration::new(3, 7)), "3.000000007s");
    }

    #[test]
    fn every_code_has_the_protocols_name_and_status() {
        let expected = [
            (Code::Cancelled, "canceled", 499),
            (Code::Unknown, "unknown", 500),
            (Code::InvalidArgument, "invalid_argument", 400),
            (Code::DeadlineExceeded, "deadline_exceeded", 504),
            (Code::NotFound, "not_found", 404),
            (Code::AlreadyExists, "already_exists", 409),
            (Code::PermissionDenied, "permission_denied", 403),
            (Code::ResourceExhausted, "resource_exhausted", 429),
            (Code::FailedPrecondition, "failed_precondition", 400),
            (Code::Aborted, "aborted", 409),
            (Code::OutOfRange, "out_of_range", 400),
            (Code::Unimplemented, "unimplemented", 501),
            (Code::Internal, "internal", 500),
            (Code::Unavailable, "unavailable", 503),
            (Code::DataLoss, "data_loss", 500),
            (Code::Unauthenticated, "unauthenticated", 401),
        ];
        for (code, name, status) in expected {
            assert_eq!((code_name(code), http_status(code).as_u16()), (name, status), "{code:?}");
        }
    }

    #[test]
    fn content_types_name_their_codec() {
        assert_eq!(Codec::of("application/json"), Some(Codec::Json));
        assert_eq!(Codec::of("application/json; charset=utf-8"), Some(Codec::Json));
        assert_eq!(Codec::of("Application/Proto"), Some(Codec::Proto));
        for other in ["", "text/plain", "application/grpc", "application/connect+json", "application/jsonx"] {
            assert_eq!(Codec::of(other), None, "{other}");
        }
    }

    #[test]
    fn json_reads_both_spellings_and_writes_ids_as_strings() {
        let request: BatchIdsRequest = Codec::Json.decode(br#"{"count": "3", "unknown": 1}"#).unwrap();
        assert_eq!(request.count, 3);
        let request: DecodeRequest = Codec::Json.decode(br#"{"id": 175928847299117063}"#).unwrap();
        assert_eq!(request.id, 175_928_847_299_117_063);
        let empty: NextIdRequest = Codec::Json.decode(b"").unwrap();
        assert_eq!(empty, NextIdRequest::default());
        let response = crate::proto::BatchIdsResponse { ids: vec![1, u64::MAX], ..Default::default() };
        assert_eq!(Codec::Json.encode(&response), r#"{"ids":["1","18446744073709551615"]}"#);
        let decoded = crate::proto::DecodeResponse { unix_ms: 5, worker_id: 7, ..Default::default() };
        assert_eq!(Codec::Json.encode(&decoded), r#"{"unixMs":"5","workerId":7}"#);
        let bad = Codec::Json.decode::<BatchIdsRequest>(b"{\"count\": -1}").unwrap_err();
        assert_eq!(bad.code, Code::InvalidArgument);
    }
}
