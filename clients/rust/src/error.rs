//! The one error type of the client.

use std::fmt;
use std::time::Duration;

use tonic_types::StatusExt as _;

/// Why the client could not get IDs.
#[derive(Debug, Clone)]
pub enum ClientError {
    /// An endpoint that is not a valid URL or `host:port`.
    Endpoint { endpoint: String, message: String },
    /// The builder was given no endpoint.
    NoEndpoints,
    /// A builder setting out of its range (the message names it and the range).
    InvalidSetting(String),
    /// Every attempt was refused or failed, or an empty buffer got no IDs in time. Retriable:
    /// try again later. Carries the last attempt's status (`UNAVAILABLE` when the servers
    /// refused or could not be reached).
    Unavailable(tonic::Status),
    /// The server answered with an error that would be the same on every server (say,
    /// `INVALID_ARGUMENT` for a batch of 0, or `RESOURCE_EXHAUSTED` over the tenant's quota,
    /// with [`ClientError::retry_delay`]), returned as it is.
    Rejected(tonic::Status),
    /// The caller's own deadline for the call passed.
    DeadlineExceeded,
    /// The client was closed.
    Closed,
}

impl ClientError {
    /// Whether trying again later may succeed: every endpoint refused or failed, the
    /// caller's deadline passed, or the tenant's quota said when to try again.
    pub fn is_retriable(&self) -> bool {
        matches!(self, ClientError::Unavailable(_) | ClientError::DeadlineExceeded) || self.retry_delay().is_some()
    }

    /// How long the server asked to wait before calling again: the `google.rpc.RetryInfo`
    /// of a refusal over the tenant's quota (`RESOURCE_EXHAUSTED`).
    pub fn retry_delay(&self) -> Option<Duration> {
        match self {
            ClientError::Rejected(status) if status.code() == tonic::Code::ResourceExhausted => retry_delay(status),
            _ => None,
        }
    }

    /// The gRPC code of the error, as a caller that speaks gRPC codes sees it.
    pub fn code(&self) -> tonic::Code {
        match self {
            ClientError::Endpoint { .. } | ClientError::NoEndpoints | ClientError::InvalidSetting(_) => {
                tonic::Code::InvalidArgument
            }
            ClientError::Unavailable(_) => tonic::Code::Unavailable,
            ClientError::Rejected(status) => status.code(),
            ClientError::DeadlineExceeded => tonic::Code::DeadlineExceeded,
            ClientError::Closed => tonic::Code::FailedPrecondition,
        }
    }
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientError::Endpoint { endpoint, message } => write!(f, "invalid endpoint {endpoint:?}: {message}"),
            ClientError::NoEndpoints => f.write_str("no endpoints given"),
            ClientError::InvalidSetting(message) => f.write_str(message),
            ClientError::Unavailable(last) => {
                write!(f, "every endpoint refused or failed; the last: {:?}: {}", last.code(), last.message())
            }
            ClientError::Rejected(status) => {
                write!(f, "the server refused the request: {:?}: {}", status.code(), status.message())
            }
            ClientError::DeadlineExceeded => f.write_str("the call's deadline passed"),
            ClientError::Closed => f.write_str("the client is closed"),
        }
    }
}

/// The retry delay of `status`'s `google.rpc.RetryInfo` detail, if it has one that reads.
pub(crate) fn retry_delay(status: &tonic::Status) -> Option<Duration> {
    status.get_details_retry_info()?.retry_delay
}

impl std::error::Error for ClientError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ClientError::Unavailable(status) | ClientError::Rejected(status) => Some(status),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tonic::Code;
    use tonic_types::ErrorDetails;

    #[test]
    fn a_quota_refusal_carries_its_retry_delay_and_nothing_else_does() {
        let wait = Duration::from_millis(1250);
        let details = ErrorDetails::with_retry_info(Some(wait));
        let refused = tonic::Status::with_error_details(Code::ResourceExhausted, "over quota", details.clone());
        assert_eq!(retry_delay(&refused), Some(wait));
        let error = ClientError::Rejected(refused);
        assert_eq!(error.retry_delay(), Some(wait));
        assert!(error.is_retriable());

        // No detail, details that do not read, or another code: no delay.
        let bare = ClientError::Rejected(tonic::Status::resource_exhausted("over quota"));
        assert_eq!(bare.retry_delay(), None);
        assert!(!bare.is_retriable());
        let garbage = tonic::Status::with_details(
            Code::ResourceExhausted,
            "x",
            tonic::codegen::Bytes::from_static(b"\xff\x01junk"),
        );
        assert_eq!(retry_delay(&garbage), None);
        let other = tonic::Status::with_error_details(Code::Unauthenticated, "who?", details);
        assert_eq!(ClientError::Rejected(other).retry_delay(), None);
    }
}
