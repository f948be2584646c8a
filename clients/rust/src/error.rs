//! The one error type of the client.

use std::fmt;

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
    /// `INVALID_ARGUMENT` for a batch of 0), returned as it is.
    Rejected(tonic::Status),
    /// The caller's own deadline for the call passed.
    DeadlineExceeded,
    /// The client was closed.
    Closed,
}

impl ClientError {
    /// Whether trying again later may succeed.
    pub fn is_retriable(&self) -> bool {
        matches!(self, ClientError::Unavailable(_) | ClientError::DeadlineExceeded)
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

impl std::error::Error for ClientError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ClientError::Unavailable(status) | ClientError::Rejected(status) => Some(status),
            _ => None,
        }
    }
}
