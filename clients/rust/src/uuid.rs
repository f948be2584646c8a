//! UUIDv7s that snowmint minted: their text form, read and written, and their fields read
//! back locally with a [`Layout`], by the rule `clients/README.md` writes and the server's
//! `Decode` keeps. Pure: nothing here reads a clock.
//!
//! A snowmint UUID is made from one 64-bit ID: bits 127–80 hold the Unix millisecond at which
//! the ID's tick starts, 79–76 the version 7, then the 42-bit minted field (the slot in 20
//! bits, then the sequence in 22) split around the variant bits 63–62 (`0b10`), and bits
//! 31–0 are random. The random bits promise nothing about uniqueness: the other 96 do.

use std::fmt;
use std::str::FromStr;

use crate::layout::{FieldOrder, Layout};

/// The width of the sequence in the minted field.
const SEQUENCE_BITS: u32 = 22;
/// Where the hyphens of the text form stand.
const HYPHENS: [usize; 4] = [8, 13, 18, 23];

/// A UUID's 16 bytes, most significant first; ordered as `uuid` columns order them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Uuid(pub [u8; 16]);

impl Uuid {
    /// The UUID of 16 bytes, or `None` for another length.
    pub fn from_slice(bytes: &[u8]) -> Option<Uuid> {
        <[u8; 16]>::try_from(bytes).ok().map(Uuid)
    }

    pub fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }

    fn value(&self) -> u128 {
        u128::from_be_bytes(self.0)
    }
}

/// The canonical text form: lowercase hex digits in groups of 8-4-4-4-12.
impl fmt::Display for Uuid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, byte) in self.0.iter().enumerate() {
            if matches!(i, 4 | 6 | 8 | 10) {
                f.write_str("-")?;
            }
            write!(f, "{byte:02x}")?;
        }
        Ok(())
    }
}

/// Reads the text form: 36 characters, hex digits of either case in groups of 8-4-4-4-12,
/// and nothing else (no braces, no `urn:uuid:`, no spaces), as the server reads it.
impl FromStr for Uuid {
    type Err = UuidError;

    fn from_str(text: &str) -> Result<Uuid, UuidError> {
        let refuse = |reason| Err(UuidError::Text { reason });
        let chars = text.as_bytes();
        if chars.len() != 36 {
            return refuse("not 36 characters long");
        }
        let mut digits = [0u8; 32];
        let mut n = 0;
        for (i, &c) in chars.iter().enumerate() {
            if HYPHENS.contains(&i) {
                if c != b'-' {
                    return refuse("no hyphen after a group");
                }
                continue;
            }
            digits[n] = match c {
                b'0'..=b'9' => c - b'0',
                b'a'..=b'f' => c - b'a' + 10,
                b'A'..=b'F' => c - b'A' + 10,
                _ => return refuse("a character that is not a hex digit"),
            };
            n += 1;
        }
        Ok(Uuid(std::array::from_fn(|i| digits[2 * i] << 4 | digits[2 * i + 1])))
    }
}

/// What a snowmint UUID carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecodedUuid {
    /// The 64-bit ID the UUID was made from.
    pub id: u64,
    /// The Unix millisecond at which the ID's tick starts.
    pub unix_ms: i64,
    /// The worker slot that minted it.
    pub slot: u32,
    pub sequence: u32,
    /// The random tail.
    pub random: u32,
}

/// Why text is not a UUID, or a UUID not one snowmint minted with a layout.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UuidError {
    /// The text is not the 8-4-4-4-12 form.
    Text { reason: &'static str },
    /// Not a UUIDv7.
    Version(u8),
    /// Not an RFC 9562 UUID.
    Variant(u8),
    /// Its slot or sequence does not fit the layout's fields.
    Fields { slot: u64, sequence: u64 },
    /// Its time is not the start of one of the layout's ticks.
    Tick { unix_ms: i64 },
}

impl UuidError {
    /// The kind of refusal, as the shared vectors name it: `text`, `version`, `variant`,
    /// `fields` or `tick`.
    pub fn kind(&self) -> &'static str {
        match self {
            UuidError::Text { .. } => "text",
            UuidError::Version(_) => "version",
            UuidError::Variant(_) => "variant",
            UuidError::Fields { .. } => "fields",
            UuidError::Tick { .. } => "tick",
        }
    }
}

impl fmt::Display for UuidError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            UuidError::Text { reason } => write!(f, "not a UUID's text form (8-4-4-4-12 hex digits): {reason}"),
            UuidError::Version(v) => write!(f, "not a UUIDv7: its version is {v}"),
            UuidError::Variant(v) => write!(f, "not an RFC 9562 UUID: its variant bits are {v:#04b}, not 0b10"),
            UuidError::Fields { slot, sequence } => {
                write!(f, "not minted with this layout: slot {slot} or sequence {sequence} does not fit its fields")
            }
            UuidError::Tick { unix_ms } => {
                write!(f, "not minted with this layout: time {unix_ms} is not the start of one of its ticks")
            }
        }
    }
}

impl std::error::Error for UuidError {}

fn mask(bits: u32) -> u64 {
    if bits >= 64 { u64::MAX } else { (1 << bits) - 1 }
}

impl Layout {
    /// What `uuid` carries, when snowmint could have minted it with this layout: checked in
    /// this order, its version, its variant, its slot and sequence against the layout's
    /// fields, and its time against the layout's ticks.
    pub fn decode_uuid(&self, uuid: Uuid) -> Result<DecodedUuid, UuidError> {
        let value = uuid.value();
        let version = ((value >> 76) & 0xf) as u8;
        if version != 7 {
            return Err(UuidError::Version(version));
        }
        let variant = ((value >> 62) & 0b11) as u8;
        if variant != 0b10 {
            return Err(UuidError::Variant(variant));
        }
        let unix_ms = (value >> 80) as i64;
        let minted = (((value >> 64) & 0xfff) << 30) | ((value >> 32) & ((1 << 30) - 1));
        let (slot, sequence) = ((minted >> SEQUENCE_BITS) as u64, (minted as u64) & mask(SEQUENCE_BITS));
        if slot > mask(self.worker_bits) || sequence > mask(self.sequence_bits) {
            return Err(UuidError::Fields { slot, sequence });
        }
        let since = i128::from(unix_ms) - i128::from(self.epoch_ms);
        let tick_ms = i128::from(self.tick_ms.max(1));
        if since < 0 || since % tick_ms != 0 || since / tick_ms > i128::from(mask(self.time_bits)) {
            return Err(UuidError::Tick { unix_ms });
        }
        let tick = (since / tick_ms) as u64;
        let (worker_shift, sequence_shift) = match self.order {
            FieldOrder::WorkerSequence => (self.sequence_bits, 0),
            FieldOrder::SequenceWorker => (0, self.worker_bits),
        };
        let low = self.worker_bits + self.sequence_bits;
        let id = tick.checked_shl(low).unwrap_or(0) | slot << worker_shift | sequence << sequence_shift;
        Ok(DecodedUuid { id, unix_ms, slot: slot as u32, sequence: sequence as u32, random: value as u32 })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_text_form_is_read_in_either_case_and_written_in_lower_case() {
        let uuid: Uuid = "0190163D-8694-739b-aea5-6d2a3f0b1c4e".parse().unwrap();
        assert_eq!(uuid.to_string(), "0190163d-8694-739b-aea5-6d2a3f0b1c4e");
        assert_eq!(uuid.0[0], 0x01);
        assert_eq!(uuid.0[15], 0x4e);
        assert_eq!("0190163d8694739baea56d2a3f0b1c4e".parse::<Uuid>().unwrap_err().kind(), "text");
    }
}
