//! The calls of an ordered sequence that another instance serves, forwarded to it: one hop
//! over gRPC, to the address it published with its hold ([`crate::sequence::HeldBy`]),
//! within what is left of the caller's deadline.
//!
//! A forwarded call carries [`FORWARDED`]: an instance that does not serve the sequence (any
//! more) answers it `UNAVAILABLE` rather than forwarding it again, so a call never goes round
//! while the holder changes. The holder's answer goes back as it came, its code included; an
//! instance that cannot be reached is `UNAVAILABLE`, retriable. One channel per address is
//! kept (HTTP/2, its calls multiplexed).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tonic::Status;
use tonic::metadata::MetadataValue;
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};

use crate::proto::id_service_client::IdServiceClient;
use crate::proto::{BatchValuesRequest, BatchValuesResponse, NextValueRequest, NextValueResponse};

/// The header that marks a forwarded call.
pub const FORWARDED: &str = "snowmint-forwarded";

/// How long a connection to the holder may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);

/// Forwards calls to the instances that serve ordered sequences.
pub struct Forwarder {
    /// With TLS, how the holder is checked and this instance shows itself.
    tls: Option<ClientTlsConfig>,
    channels: Mutex<HashMap<String, Channel>>,
}

impl Forwarder {
    pub fn new(tls: Option<ClientTlsConfig>) -> Forwarder {
        Forwarder { tls, channels: Mutex::new(HashMap::new()) }
    }

    /// The channel to `address`, made on first use (it connects on its first call).
    fn channel(&self, address: &str) -> Result<Channel, Status> {
        if let Some(channel) = self.channels.lock().unwrap().get(address) {
            return Ok(channel.clone());
        }
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        let unreachable = |e: &dyn std::fmt::Display| {
            Status::unavailable(format!(
                "the instance serving the ordered sequence, at {address}, cannot be reached: {e}"
            ))
        };
        let mut endpoint = Endpoint::from_shared(format!("{scheme}://{address}"))
            .map_err(|e| unreachable(&e))?
            .connect_timeout(CONNECT_TIMEOUT)
            .tcp_nodelay(true);
        if let Some(tls) = &self.tls {
            endpoint = endpoint.tls_config(tls.clone()).map_err(|e| unreachable(&e))?;
        }
        let channel = endpoint.connect_lazy();
        self.channels.lock().unwrap().insert(address.to_string(), channel.clone());
        Ok(channel)
    }

    /// A call to `address`, marked forwarded, within `timeout`, with the caller's
    /// `authorization` header (the instance it goes to admits it by the same policy).
    fn request<T>(
        message: T,
        timeout: Option<Duration>,
        authorization: Option<&http::HeaderValue>,
    ) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        request.metadata_mut().insert(FORWARDED, MetadataValue::from_static("1"));
        if let Some(value) = authorization.and_then(|v| MetadataValue::try_from(v.as_bytes()).ok()) {
            request.metadata_mut().insert("authorization", value);
        }
        if let Some(timeout) = timeout {
            request.set_timeout(timeout);
        }
        request
    }

    /// The holder's answers as they are; a failure to reach it (which snowmint never answers
    /// as `UNKNOWN`) said as what it means here.
    fn answer<T>(address: &str, result: Result<tonic::Response<T>, Status>) -> Result<T, Status> {
        match result {
            Ok(response) => Ok(response.into_inner()),
            Err(status) if matches!(status.code(), tonic::Code::Unknown | tonic::Code::Unavailable) => {
                Err(Status::unavailable(format!(
                    "the instance serving the ordered sequence, at {address}: {}",
                    status.message()
                )))
            }
            Err(status) => Err(status),
        }
    }

    pub async fn next_value(
        &self,
        address: &str,
        request: NextValueRequest,
        timeout: Option<Duration>,
        authorization: Option<&http::HeaderValue>,
    ) -> Result<NextValueResponse, Status> {
        let mut client = IdServiceClient::new(self.channel(address)?);
        Self::answer(address, client.next_value(Self::request(request, timeout, authorization)).await)
    }

    pub async fn batch_values(
        &self,
        address: &str,
        request: BatchValuesRequest,
        timeout: Option<Duration>,
        authorization: Option<&http::HeaderValue>,
    ) -> Result<BatchValuesResponse, Status> {
        let mut client = IdServiceClient::new(self.channel(address)?);
        Self::answer(address, client.batch_values(Self::request(request, timeout, authorization)).await)
    }
}
