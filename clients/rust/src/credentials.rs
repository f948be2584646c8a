//! The caller's credentials: a bearer token, checked once when the client is made and sent
//! as `authorization: Bearer <token>` with every attempt of every call. The token is never
//! printed: not in the builder's `Debug`, nor in an error (clients/README.md, "Credentials").

use std::fmt;

use tonic::metadata::AsciiMetadataValue;
use tonic::service::Interceptor;
use tonic::{Request, Status};

use crate::error::ClientError;

/// The longest token a client takes.
pub const MAX_TOKEN_LEN: usize = 4096;

/// A bearer token, as the `authorization` header it makes. Its `Debug` shows no part of it.
#[derive(Clone)]
pub(crate) struct Token(AsciiMetadataValue);

impl Token {
    /// `token` if it is 1 to [`MAX_TOKEN_LEN`] visible ASCII characters (`!` to `~`); the
    /// error names the rule, never the token.
    pub(crate) fn new(token: &str) -> Result<Token, ClientError> {
        let visible = token.bytes().all(|b| b.is_ascii_graphic());
        if token.is_empty() || token.len() > MAX_TOKEN_LEN || !visible {
            return Err(ClientError::InvalidSetting(format!(
                "a token is 1 to {MAX_TOKEN_LEN} visible ASCII characters (! to ~); this one is not (not shown)"
            )));
        }
        let mut header = AsciiMetadataValue::try_from(format!("Bearer {token}"))
            .map_err(|_| ClientError::InvalidSetting("the token cannot be sent in a header (not shown)".into()))?;
        header.set_sensitive(true);
        Ok(Token(header))
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Token(<redacted>)")
    }
}

/// What every request carries: the token's header, if the client has one.
#[derive(Clone, Debug, Default)]
pub(crate) struct Credentials(pub(crate) Option<Token>);

impl Interceptor for Credentials {
    fn call(&mut self, mut request: Request<()>) -> Result<Request<()>, Status> {
        if let Some(Token(header)) = &self.0 {
            request.metadata_mut().insert("authorization", header.clone());
        }
        Ok(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_of_visible_ascii_within_the_limit_is_taken_and_any_other_refused_unshown() {
        assert!(Token::new("smt_abc-DEF_123").is_ok());
        assert!(Token::new(&"x".repeat(MAX_TOKEN_LEN)).is_ok());
        for bad in ["", "with space", "tab\there", "new\nline", "é-accent", &"y".repeat(MAX_TOKEN_LEN + 1)] {
            let error = Token::new(bad).expect_err(bad).to_string();
            assert!(matches!(Token::new(bad), Err(ClientError::InvalidSetting(_))));
            if !bad.is_empty() {
                assert!(!error.contains(bad), "{error:?} shows the token");
            }
        }
    }

    #[test]
    fn every_request_carries_the_header_and_debug_shows_none_of_it() {
        let mut credentials = Credentials(Some(Token::new("smt_secret").unwrap()));
        let request = credentials.call(Request::new(())).unwrap();
        assert_eq!(request.metadata().get("authorization").unwrap(), "Bearer smt_secret");
        assert!(!format!("{credentials:?}").contains("secret"));
        let request = Credentials::default().call(Request::new(())).unwrap();
        assert!(request.metadata().get("authorization").is_none());
    }
}
