//! One call's context, built once by the front door ([`super::dispatch`]) for every request
//! whatever its protocol, and read by every path: whose share of the minter the call takes
//! (its connection), when its time runs out, and with a policy, which tenant it is for
//! ([`super::gate`]).
//!
//! The one timeout rule: a call may take `limit`, the shorter of the caller's timeout
//! (`grpc-timeout`, or Connect's `Connect-Timeout-Ms`) and `--request-timeout-ms`, counted
//! from its arrival. The minter is given that time less a margin ([`answer_within`]), so that
//! its refusal (`UNAVAILABLE`, saying why it could not mint) reaches the caller before the
//! caller's own timer fires; a call not answered by `limit` (its body never came, or a handler
//! did not answer) ends with `DEADLINE_EXCEEDED` on every path, counted as such.

use std::time::{Duration, Instant};

use super::gate::Admitted;
use crate::minter::{ConnectionKey, Share};

/// What every path knows of a call.
#[derive(Debug, Clone)]
pub struct CallContext {
    /// Whose share of the minter the call takes.
    pub connection: ConnectionKey,
    /// When the call arrived.
    pub arrived: Instant,
    /// How long it may take: the shorter of its caller's timeout and `--request-timeout-ms`.
    pub limit: Duration,
    /// What was wrong with the caller's timeout header, where the protocol refuses a call
    /// for it (Connect's `Connect-Timeout-Ms`; a gRPC server ignores a bad `grpc-timeout`).
    pub bad_timeout: Option<String>,
    /// The caller's tenant, when the server has a policy.
    pub tenant: Option<Admitted>,
}

/// What a call of the service needs of its context: whose share of the minter it takes, the
/// time the minter may take (`None`: no limit), and its tenant, if the server has a policy.
#[derive(Debug, Clone, Copy)]
pub struct Asker<'a> {
    pub connection: ConnectionKey,
    pub timeout: Option<Duration>,
    pub tenant: Option<&'a Admitted>,
}

impl Asker<'_> {
    /// A call with no limit and no tenant, on `connection`.
    pub fn unlimited(connection: ConnectionKey) -> Asker<'static> {
        Asker { connection, timeout: None, tenant: None }
    }

    /// Its tenant's share of a busy minter; without a policy, every call's is one.
    pub fn share(&self) -> Share {
        self.tenant.map_or(Share::NONE, |tenant| tenant.share())
    }
}

impl CallContext {
    /// A call arriving now on `connection`, whose caller allowed `caller` (if it said) and
    /// the server `request_timeout`.
    pub fn new(connection: ConnectionKey, caller: Option<Duration>, request_timeout: Duration) -> CallContext {
        let limit = caller.map_or(request_timeout, |caller| caller.min(request_timeout));
        CallContext { connection, arrived: Instant::now(), limit, bad_timeout: None, tenant: None }
    }

    /// The call as the service's calls take it, the minter's time counted from now.
    pub fn asker(&self) -> Asker<'_> {
        Asker { connection: self.connection, timeout: Some(self.left_for_minter()), tenant: self.tenant.as_ref() }
    }

    /// The time the minter may still take for the call: the rest of `limit` less the margin
    /// of [`answer_within`], so that the time before a handler ran (waiting for the request's
    /// body, for a worker thread) is not given a second time.
    pub fn left_for_minter(&self) -> Duration {
        answer_within(self.limit).saturating_sub(self.arrived.elapsed())
    }

    /// The message of a call ended by its `limit`, the same on every path.
    pub fn deadline_message(&self) -> String {
        format!(
            "the call did not finish within its deadline of {} ms (the shorter of the caller's timeout and --request-timeout-ms)",
            self.limit.as_millis()
        )
    }
}

/// How long a call the caller allowed `timeout` may take here: a tenth less (at most 20 ms),
/// so a refusal travels back before the caller's own timer fires.
pub fn answer_within(timeout: Duration) -> Duration {
    timeout - (timeout / 10).min(Duration::from_millis(20))
}

/// Parses a `grpc-timeout` header value: up to 8 digits and a unit (H, M, S, m, u, n).
pub fn parse_grpc_timeout(value: &str) -> Option<Duration> {
    if value.len() < 2 || value.len() > 9 {
        return None;
    }
    let (digits, unit) = value.split_at(value.len() - 1);
    let n: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(n.checked_mul(3600)?),
        "M" => Duration::from_secs(n.checked_mul(60)?),
        "S" => Duration::from_secs(n),
        "m" => Duration::from_millis(n),
        "u" => Duration::from_micros(n),
        "n" => Duration::from_nanos(n),
        _ => return None,
    })
}

/// Parses a `Connect-Timeout-Ms` header value: a positive integer of at most 10 digits, in
/// milliseconds. `Err` says what is wrong with it.
pub fn parse_connect_timeout(value: &[u8]) -> Result<Duration, String> {
    let text = std::str::from_utf8(value).unwrap_or_default();
    match text.parse::<u64>() {
        Ok(ms) if !text.is_empty() && text.len() <= 10 && text.bytes().all(|b| b.is_ascii_digit()) => {
            Ok(Duration::from_millis(ms))
        }
        _ => Err(format!("connect-timeout-ms {text:?} is not a number of milliseconds (at most 10 digits)")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grpc_timeouts_parse() {
        assert_eq!(parse_grpc_timeout("100m"), Some(Duration::from_millis(100)));
        assert_eq!(parse_grpc_timeout("2S"), Some(Duration::from_secs(2)));
        assert_eq!(parse_grpc_timeout("1H"), Some(Duration::from_secs(3600)));
        assert_eq!(parse_grpc_timeout("99999999n"), Some(Duration::from_nanos(99_999_999)));
        assert_eq!(parse_grpc_timeout("m"), None);
        assert_eq!(parse_grpc_timeout("123456789S"), None);
        assert_eq!(parse_grpc_timeout("10x"), None);
    }

    #[test]
    fn connect_timeouts_parse() {
        assert_eq!(parse_connect_timeout(b"250"), Ok(Duration::from_millis(250)));
        assert_eq!(parse_connect_timeout(b"9999999999"), Ok(Duration::from_millis(9_999_999_999)));
        for bad in [&b""[..], b"-1", b"+5", b"1.5", b"12345678901", b"ten"] {
            assert!(parse_connect_timeout(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn the_limit_is_the_shorter_and_the_minter_gets_it_less_the_margin() {
        let connection = ConnectionKey::of_peer(None);
        let server = Duration::from_millis(300);
        assert_eq!(CallContext::new(connection, None, server).limit, server);
        assert_eq!(CallContext::new(connection, Some(Duration::from_secs(5)), server).limit, server);
        let short = CallContext::new(connection, Some(Duration::from_millis(100)), server);
        assert_eq!(short.limit, Duration::from_millis(100));
        assert!(short.left_for_minter() <= Duration::from_millis(90));
        assert_eq!(answer_within(Duration::from_secs(10)), Duration::from_millis(9_980));
    }
}
