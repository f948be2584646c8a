//! A named sequence as its store keeps it: the next value no segment has taken yet, the
//! largest value it may reach, and which claim moved it last.
//!
//! The record is the sequence's high-water mark. Every segment is taken by a compare-and-set
//! that moves `next` up past the segment and names the claim that did it ([`ClaimId`]), so a
//! claimant whose reply was lost can read the record and tell whether the write was its own.

use serde::{Deserialize, Serialize};

/// The longest name a sequence may have, in bytes.
pub const MAX_NAME_LEN: usize = 64;

/// The largest value any sequence reaches: values are positive 64-bit signed integers, so
/// every language's clients hold them as they are.
pub const MAX_VALUE: u64 = i64::MAX as u64;

/// Who took a segment: the taking instance's session (an etcd lease, the state dir's lock)
/// and a number it never uses twice under that session.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ClaimId {
    pub session: i64,
    pub number: u64,
}

/// A sequence's stored record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// The first value no segment has taken: every value below it may have been issued.
    pub next: u64,
    /// The largest value the sequence may issue.
    pub max: u64,
    /// Strictly increasing fleet-wide, in the order calls are answered: one instance at a time
    /// serves it.
    #[serde(default)]
    pub ordered: bool,
    /// The claim that moved `next` last; `None` for a sequence no segment was taken of yet,
    /// or moved last by a fence.
    #[serde(default)]
    pub claim: Option<ClaimId>,
    /// How many times `snowmint fence` moved the sequence up (after a restore of its store):
    /// an instance that meets a higher count than it saw takes the record as fenced, not as
    /// gone back, when `next` stands above every value it took.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub fenced: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

/// Why a name or a record cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RecordError {
    #[error("a sequence name must not be empty")]
    EmptyName,
    #[error("a sequence name is at most {MAX_NAME_LEN} bytes; this one has {0}")]
    NameTooLong(usize),
    #[error(
        "a sequence name is made of lowercase letters, digits, '.', '_' and '-', and starts with a letter or a digit; {name:?} has {found:?} at byte {at}"
    )]
    NameCharacter { name: String, found: char, at: usize },
    #[error("a sequence starts at 1 or more and at most {MAX_VALUE}; {0} is out of range")]
    Start(u64),
    #[error("a sequence's maximum must be at least its start ({start}) and at most {MAX_VALUE}; {max} is out of range")]
    Max { start: u64, max: u64 },
    #[error("the stored record of sequence {name:?} is not one: {reason}")]
    Corrupt { name: String, reason: String },
}

/// Checks a sequence's name: what the store keys it by, the metrics label it by and callers
/// type, so a short plain word.
pub fn check_name(name: &str) -> Result<(), RecordError> {
    if name.is_empty() {
        return Err(RecordError::EmptyName);
    }
    if name.len() > MAX_NAME_LEN {
        return Err(RecordError::NameTooLong(name.len()));
    }
    for (at, c) in name.char_indices() {
        let allowed = c.is_ascii_lowercase() || c.is_ascii_digit() || (at > 0 && matches!(c, '.' | '_' | '-'));
        if !allowed {
            return Err(RecordError::NameCharacter { name: name.into(), found: c, at });
        }
    }
    Ok(())
}

impl Record {
    /// A new sequence's record: its first value `start`, its last `max`.
    pub fn new(start: u64, max: u64, ordered: bool) -> Result<Record, RecordError> {
        if start == 0 || start > MAX_VALUE {
            return Err(RecordError::Start(start));
        }
        if max < start || max > MAX_VALUE {
            return Err(RecordError::Max { start, max });
        }
        Ok(Record { next: start, max, ordered, claim: None, fenced: 0 })
    }

    /// The record as `snowmint fence` leaves it after a restore: `skip` values further on (at
    /// most one past the maximum), counted as fenced once more, naming no claim, so no claim
    /// made before the fence is taken for one that landed.
    pub fn fence(&self, skip: u64) -> Record {
        Record {
            next: self.next.saturating_add(skip).min(self.max + 1),
            claim: None,
            fenced: self.fenced + 1,
            ..self.clone()
        }
    }

    /// How many values the sequence has left to give out, in segments not yet taken.
    pub fn left(&self) -> u64 {
        (self.max + 1).saturating_sub(self.next)
    }

    /// The stored form. etcd compares it byte for byte on every write
    /// ([`crate::sequence::Op::Write`]): a record reads back and encodes to the same bytes, in
    /// every release (a change here must keep the bytes of every record already stored).
    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a record always serializes")
    }

    /// Reads a stored record of sequence `name`, checked as [`Record::new`] checks a new one
    /// (`next` may be one past `max`: the sequence is used up).
    pub fn decode(name: &str, bytes: &[u8]) -> Result<Record, RecordError> {
        let corrupt = |reason: String| RecordError::Corrupt { name: name.into(), reason };
        let record: Record = serde_json::from_slice(bytes).map_err(|e| corrupt(e.to_string()))?;
        if record.next == 0 || record.max > MAX_VALUE || record.next > record.max + 1 {
            return Err(corrupt(format!("next {} and max {} are out of range", record.next, record.max)));
        }
        Ok(record)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_short_plain_words() {
        for good in ["orders", "invoice-2026", "a", "eu.orders_v2", "x..", &"x".repeat(MAX_NAME_LEN)] {
            assert_eq!(check_name(good), Ok(()), "{good}");
        }
        assert_eq!(check_name(""), Err(RecordError::EmptyName));
        assert_eq!(check_name(&"x".repeat(MAX_NAME_LEN + 1)), Err(RecordError::NameTooLong(MAX_NAME_LEN + 1)));
        for (bad, found, at) in [("Orders", 'O', 0), ("-x", '-', 0), ("a/b", '/', 1), ("a b", ' ', 1), ("café", 'é', 3)]
        {
            assert_eq!(check_name(bad), Err(RecordError::NameCharacter { name: bad.into(), found, at }));
        }
    }

    #[test]
    fn a_record_round_trips_and_a_bad_one_is_refused_with_its_reason() {
        let mut record = Record::new(1000, MAX_VALUE, true).unwrap();
        record.claim = Some(ClaimId { session: 7, number: 3 });
        assert_eq!(Record::decode("orders", &record.encode()), Ok(record.clone()));
        assert_eq!(record.left(), MAX_VALUE - 999);
        let used_up = Record { next: 11, max: 10, ordered: false, claim: None, fenced: 0 };
        assert_eq!(used_up.left(), 0);
        assert!(Record::decode("orders", &used_up.encode()).is_ok());
        for bad in
            [&b"{"[..], br#"{"next":0,"max":5}"#, br#"{"next":7,"max":5}"#, br#"{"next":1,"max":9223372036854775808}"#]
        {
            let error = Record::decode("orders", bad).unwrap_err();
            assert!(error.to_string().contains("\"orders\""), "{error}");
        }
        assert!(!String::from_utf8(Record::new(1, 5, false).unwrap().encode()).unwrap().contains("fenced"));
        assert_eq!(Record::new(0, 5, false), Err(RecordError::Start(0)));
        assert_eq!(Record::new(6, 5, false), Err(RecordError::Max { start: 6, max: 5 }));
        assert_eq!(Record::new(1, MAX_VALUE + 1, false), Err(RecordError::Max { start: 1, max: MAX_VALUE + 1 }));
    }

    #[test]
    fn the_stored_form_stays_byte_for_byte_the_same() {
        let claimed =
            Record { next: 42, max: 100, ordered: false, claim: Some(ClaimId { session: -5, number: 3 }), fenced: 0 };
        let golden = br#"{"next":42,"max":100,"ordered":false,"claim":{"session":-5,"number":3}}"#;
        assert_eq!(claimed.encode(), golden.to_vec());
        let fenced = Record { next: 9, max: 9, ordered: true, claim: None, fenced: 2 };
        let golden = br#"{"next":9,"max":9,"ordered":true,"claim":null,"fenced":2}"#;
        assert_eq!(fenced.encode(), golden.to_vec());
        for record in [claimed, fenced] {
            assert_eq!(Record::decode("orders", &record.encode()).unwrap().encode(), record.encode());
        }
    }

    #[test]
    fn a_fence_moves_the_sequence_up_to_one_past_its_maximum_and_counts() {
        let mut record = Record::new(10, 1000, true).unwrap();
        record.claim = Some(ClaimId { session: 7, number: 3 });
        let fenced = record.fence(500);
        assert_eq!((fenced.next, fenced.claim, fenced.fenced, fenced.ordered), (510, None, 1, true));
        assert_eq!(Record::decode("orders", &fenced.encode()), Ok(fenced.clone()));
        let again = fenced.fence(u64::MAX);
        assert_eq!((again.next, again.fenced, again.left()), (1001, 2, 0));
    }
}
