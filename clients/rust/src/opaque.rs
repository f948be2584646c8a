//! The string form of opaque IDs, read and written with no key.
//!
//! A server started with `--opaque-key-file` hands out opaque IDs: the ID put through a keyed
//! permutation (a value below 2^63) and the version of the key (0 to 31). Only the server's key
//! maps one back to its ID; the string form, 14 characters of Crockford base32 (the key version,
//! then the value in 13 characters, most significant first), needs none. Values are unique per
//! key version; strings carry the version, so they stay unique across key rotations.
//!
//! ```
//! use snowmint_client::opaque::OpaqueId;
//! let opaque: OpaqueId = "1-7bcd-efgh-0jk1m".parse().unwrap();
//! assert_eq!(opaque.key_version, 1);
//! assert_eq!(opaque.to_string(), "17BCDEFGH0JK1M");
//! ```

use std::fmt;
use std::str::FromStr;

/// Crockford's base32: digits and capitals without I, L, O and U.
pub const ALPHABET: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";

/// The length of the string form: a key version and 13 characters of value.
pub const TEXT_LEN: usize = 14;

const VALUE_LIMIT: u64 = 1 << 63;

/// An opaque ID: the version of its key and its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct OpaqueId {
    pub key_version: u32,
    pub value: u64,
}

/// Why a string or a pair is not an opaque ID, as the shared test vectors name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpaqueErrorKind {
    /// A character outside Crockford base32 (its aliases and hyphens aside).
    Character,
    /// Not 14 characters without its hyphens.
    Length,
    /// A value of 2^63 or more.
    Range,
    /// A key version above 31.
    Version,
}

/// Not an opaque ID: [`OpaqueIdError::kind`] says why, the message says what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpaqueIdError {
    kind: OpaqueErrorKind,
    message: String,
}

impl OpaqueIdError {
    pub fn kind(&self) -> OpaqueErrorKind {
        self.kind
    }
}

impl fmt::Display for OpaqueIdError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for OpaqueIdError {}

fn error(kind: OpaqueErrorKind, message: String) -> OpaqueIdError {
    OpaqueIdError { kind, message }
}

impl OpaqueId {
    /// The opaque ID of `value` under `key_version`, both checked.
    pub fn new(key_version: u32, value: u64) -> Result<OpaqueId, OpaqueIdError> {
        if key_version > 31 {
            return Err(error(OpaqueErrorKind::Version, format!("key version {key_version} is not between 0 and 31")));
        }
        if value >= VALUE_LIMIT {
            return Err(error(
                OpaqueErrorKind::Range,
                format!("{value} is not a 63-bit value: opaque values are below 2^63"),
            ));
        }
        Ok(OpaqueId { key_version, value })
    }

    /// Reads a string form. Lower case reads as upper case, O as 0, I and L as 1, and hyphens
    /// anywhere are ignored; then, in this order, any other character, a length other than 14
    /// without hyphens, and a value of 2^63 or more are refused.
    pub fn parse(text: &str) -> Result<OpaqueId, OpaqueIdError> {
        let mut symbols = [0u8; TEXT_LEN];
        let mut len = 0;
        for (at, c) in text.chars().enumerate() {
            if c == '-' {
                continue;
            }
            let upper = match c.to_ascii_uppercase() {
                'O' => '0',
                'I' | 'L' => '1',
                upper => upper,
            };
            let Some(symbol) = ALPHABET.iter().position(|&a| char::from(a) == upper) else {
                let message = format!("opaque ID {text:?}: {c:?} (character {}) is not Crockford base32", at + 1);
                return Err(error(OpaqueErrorKind::Character, message));
            };
            if len < TEXT_LEN {
                symbols[len] = symbol as u8;
            }
            len += 1;
        }
        if len != TEXT_LEN {
            let message = format!("opaque ID {text:?} has {len} characters without its hyphens, not 14");
            return Err(error(OpaqueErrorKind::Length, message));
        }
        if symbols[1] >= 8 {
            return Err(error(OpaqueErrorKind::Range, format!("opaque ID {text:?} holds a value of 2^63 or more")));
        }
        let value = symbols[1..].iter().fold(0u64, |value, &s| (value << 5) | u64::from(s));
        Ok(OpaqueId { key_version: u32::from(symbols[0]), value })
    }
}

/// The string form. An `OpaqueId` made by [`OpaqueId::new`] or [`OpaqueId::parse`] always has
/// one; the fields of any other are cut to their widths.
impl fmt::Display for OpaqueId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut text = [0u8; TEXT_LEN];
        text[0] = ALPHABET[(self.key_version & 31) as usize];
        for (i, c) in text[1..].iter_mut().enumerate() {
            *c = ALPHABET[((self.value >> (5 * (12 - i))) & 31) as usize];
        }
        f.write_str(std::str::from_utf8(&text).expect("the alphabet is ASCII"))
    }
}

impl FromStr for OpaqueId {
    type Err = OpaqueIdError;

    fn from_str(text: &str) -> Result<OpaqueId, OpaqueIdError> {
        OpaqueId::parse(text)
    }
}
