//! UUIDv7 (RFC 9562) made from snowmint IDs: unique by construction, not by chance.
//!
//! Pure, as the layout is. A UUID is made from one 64-bit ID the minter issued, so it is
//! minted under the same reservations, clock rules and fairness, and two UUIDs are equal
//! only if their IDs are, which the one promise rules out. Its 128 bits, most significant
//! first:
//!
//! | bits | field |
//! |---:|---|
//! | 48 | `unix_ts_ms`: the Unix millisecond at which the ID's tick starts |
//! | 4 | `ver`, 7 |
//! | 12 | the top 12 bits of the 42-bit *minted field* |
//! | 2 | `var`, binary 10 |
//! | 30 | the rest of the minted field |
//! | 32 | random, from a cryptographic generator |
//!
//! The minted field is the slot in 20 bits then the sequence in 22 (the widest a layout that
//! snowmint mints with may give them), so it reads the same whatever the layout, and its
//! unused high bits are zero. RFC 9562 lets a distributed generator put a node ID and a
//! counter in the bits after the timestamp (sections 6.2 and 6.4); ordering by the
//! timestamp, then the slot, then the sequence is the order in which one instance mints, so
//! the UUIDs of one instance (and of one response) strictly increase, as its IDs do, and
//! sort so in a database's `uuid` column.
//!
//! The 32 random bits promise nothing about uniqueness (the other 96 bits do): they only make
//! a UUID unguessable from its neighbours within one millisecond. [`decode`] tells a UUID
//! snowmint did not mint (another version, another variant) by its bits; a random v7 is
//! refused unless its minted field happens to fit the layout (about one in a million for the
//! default layout), and then its provenance is not found.

use crate::layout::{Layout, Slot};

/// The width of the slot in the minted field.
pub const SLOT_BITS: u32 = 20;
/// The width of the sequence in the minted field.
pub const SEQUENCE_BITS: u32 = 22;
/// The width of the random tail.
pub const RANDOM_BITS: u32 = 32;

const VERSION: u128 = 7;
const VARIANT: u128 = 0b10;

/// Why a UUID, or an ID, has no snowmint UUIDv7 form.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UuidError {
    #[error("not a UUIDv7: its version is {0}")]
    NotVersion7(u8),
    #[error("not an RFC 9562 UUID: its variant bits are {0:#04b}, not 0b10")]
    WrongVariant(u8),
    #[error(
        "not minted by snowmint with layout {layout}: its slot {slot} or sequence {sequence} does not fit the layout's fields"
    )]
    FieldsOutOfLayout { layout: String, slot: u64, sequence: u64 },
    #[error(
        "not minted by snowmint with layout {layout}: its time {unix_ms} is not the start of one of the layout's ticks"
    )]
    NotOnATick { layout: String, unix_ms: i64 },
    #[error("layout {layout} cannot make UUIDs: {reason}")]
    Layout { layout: String, reason: String },
    #[error("{text:?} is not a UUID's text form (36 characters: hex digits in groups of 8-4-4-4-12): {reason}")]
    Text { text: String, reason: &'static str },
}

impl UuidError {
    /// The kind of refusal, as the clients' shared vectors name it: `version`, `variant`,
    /// `fields`, `tick`, `layout` or `text`.
    pub fn kind(&self) -> &'static str {
        match self {
            UuidError::NotVersion7(_) => "version",
            UuidError::WrongVariant(_) => "variant",
            UuidError::FieldsOutOfLayout { .. } => "fields",
            UuidError::NotOnATick { .. } => "tick",
            UuidError::Layout { .. } => "layout",
            UuidError::Text { .. } => "text",
        }
    }
}

/// What a snowmint UUID carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decoded {
    /// The 64-bit ID the UUID was made from.
    pub id: u64,
    /// The Unix millisecond at which the ID's tick starts.
    pub unix_ms: i64,
    pub slot: Slot,
    pub sequence: u64,
    /// The random tail.
    pub random: u32,
}

/// Whether `layout` can make UUIDs: its fields fit the minted field and its ticks start on
/// Unix milliseconds that fit 48 bits.
pub fn check_layout(layout: &Layout) -> Result<(), UuidError> {
    let refuse = |reason: String| Err(UuidError::Layout { layout: layout.name.clone(), reason });
    if u32::from(layout.worker_bits) > SLOT_BITS || u32::from(layout.sequence_bits) > SEQUENCE_BITS {
        return refuse(format!(
            "its {} worker and {} sequence bits do not fit a UUID's {SLOT_BITS} and {SEQUENCE_BITS}",
            layout.worker_bits, layout.sequence_bits
        ));
    }
    if layout.epoch_ms < 0 || layout.expiry_ms() > (1 << 48) {
        return refuse("its time range does not fit 48 bits of Unix milliseconds".into());
    }
    Ok(())
}

/// The UUID of `id`, minted under `layout` (checked with [`check_layout`]), with `random` as
/// its tail: 16 bytes in network order.
pub fn from_id(layout: &Layout, id: u64, random: u32) -> [u8; 16] {
    let parts = layout.unpack(id);
    let unix_ms = layout.tick_start_ms(parts.tick) as u128 & ((1 << 48) - 1);
    let minted = (u128::from(parts.worker) << SEQUENCE_BITS) | u128::from(parts.sequence);
    let value = (unix_ms << 80)
        | (VERSION << 76)
        | ((minted >> 30) << 64)
        | (VARIANT << 62)
        | ((minted & ((1 << 30) - 1)) << RANDOM_BITS)
        | u128::from(random);
    value.to_be_bytes()
}

/// The Unix millisecond and the minted bits ([`SLOT_BITS`] of slot above [`SEQUENCE_BITS`] of sequence) of a
/// UUIDv7, checked for its version and variant only: what makes it unique, read without a
/// layout.
pub fn minted_fields(uuid: [u8; 16]) -> Result<(i64, u64), UuidError> {
    let value = u128::from_be_bytes(uuid);
    let version = ((value >> 76) & 0xf) as u8;
    if u128::from(version) != VERSION {
        return Err(UuidError::NotVersion7(version));
    }
    let variant = ((value >> 62) & 0b11) as u8;
    if u128::from(variant) != VARIANT {
        return Err(UuidError::WrongVariant(variant));
    }
    let minted = (((value >> 64) & 0xfff) << 30) | ((value >> RANDOM_BITS) & ((1 << 30) - 1));
    Ok(((value >> 80) as i64, minted as u64))
}

/// What `uuid` carries, when snowmint could have minted it with `layout`.
pub fn decode(layout: &Layout, uuid: [u8; 16]) -> Result<Decoded, UuidError> {
    let (unix_ms, minted) = minted_fields(uuid)?;
    let value = u128::from_be_bytes(uuid);
    let slot = minted >> SEQUENCE_BITS;
    let sequence = minted & ((1 << SEQUENCE_BITS) - 1);
    if slot > layout.max_worker() || sequence > layout.max_sequence() {
        return Err(UuidError::FieldsOutOfLayout { layout: layout.name.clone(), slot, sequence });
    }
    let not_on_a_tick = || UuidError::NotOnATick { layout: layout.name.clone(), unix_ms };
    let tick = layout.tick_at(unix_ms).filter(|&t| t <= layout.max_tick()).ok_or_else(not_on_a_tick)?;
    if layout.tick_start_ms(tick) != unix_ms {
        return Err(not_on_a_tick());
    }
    let id = layout.pack(crate::layout::Parts { tick, worker: slot, sequence });
    Ok(Decoded { id, unix_ms, slot: slot as Slot, sequence, random: value as u32 })
}

/// The canonical text form: 32 lowercase hex digits in groups of 8-4-4-4-12.
pub fn to_text(uuid: [u8; 16]) -> String {
    let mut text = [0u8; uuid::fmt::Hyphenated::LENGTH];
    uuid::Uuid::from_bytes(uuid).hyphenated().encode_lower(&mut text).to_owned()
}

/// Where the hyphens of the text form stand.
const HYPHENS: [usize; 4] = [8, 13, 18, 23];

/// Reads a UUID's text form: 32 hex digits, either case, in groups of 8-4-4-4-12, and nothing
/// else (no braces, no `urn:uuid:`, no spaces), so every client reads exactly what the server
/// reads.
pub fn parse_text(text: &str) -> Result<[u8; 16], UuidError> {
    let refuse = |reason| Err(UuidError::Text { text: text.chars().take(64).collect(), reason });
    let bytes = text.as_bytes();
    if bytes.len() != 36 {
        return refuse("not 36 characters long");
    }
    for (i, &b) in bytes.iter().enumerate() {
        let hyphen = HYPHENS.contains(&i);
        if hyphen && b != b'-' {
            return refuse("no hyphen after a group");
        }
        if !hyphen && !b.is_ascii_hexdigit() {
            return refuse("a character that is not a hex digit");
        }
    }
    Ok(uuid::Uuid::try_parse(text).expect("checked above").into_bytes())
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::layout::Parts;

    fn mintable() -> impl Strategy<Value = Layout> {
        (0u8..=20, 1u8..=22, 1u64..=10).prop_map(|(worker, sequence, tick_ms)| {
            let mut layout = Layout::snowmint(crate::layout::DEFAULT_EPOCH_MS, worker, sequence);
            layout.tick_ms = tick_ms;
            layout
        })
    }

    fn id_in(layout: &Layout, tick: u64, slot: u64, sequence: u64) -> u64 {
        let tick = tick % (layout.max_tick().min(1 << 36) + 1);
        layout.pack(Parts { tick, worker: slot & layout.max_worker(), sequence: sequence & layout.max_sequence() })
    }

    #[test]
    fn the_version_variant_and_time_sit_where_rfc_9562_puts_them() {
        let layout = Layout::default_snowmint();
        let id = layout.pack(Parts { tick: 1_000, worker: 5, sequence: 3 });
        let uuid = from_id(&layout, id, 0xdead_beef);
        let text = to_text(uuid);
        assert_eq!(text.len(), 36);
        assert_eq!(&text[14..15], "7", "{text}");
        assert!("89ab".contains(&text[19..20]), "{text}");
        let parsed = uuid::Uuid::from_bytes(uuid);
        assert_eq!(parsed.get_version_num(), 7);
        assert_eq!(parsed.get_variant(), uuid::Variant::RFC4122);
        let (seconds, nanos) = parsed.get_timestamp().unwrap().to_unix();
        assert_eq!(seconds as i64 * 1000 + i64::from(nanos / 1_000_000), layout.tick_start_ms(1_000));
        assert_eq!(text, text.to_lowercase());
    }

    proptest! {
        #[test]
        fn a_uuid_decodes_to_the_id_it_was_made_from(
            layout in mintable(), tick: u64, slot: u64, sequence: u64, random: u32,
        ) {
            let id = id_in(&layout, tick, slot, sequence);
            let uuid = from_id(&layout, id, random);
            let decoded = decode(&layout, uuid).unwrap();
            let parts = layout.unpack(id);
            prop_assert_eq!(decoded.id, id);
            prop_assert_eq!(decoded.unix_ms, layout.tick_start_ms(parts.tick));
            prop_assert_eq!((u64::from(decoded.slot), decoded.sequence, decoded.random), (parts.worker, parts.sequence, random));
            prop_assert_eq!(parse_text(&to_text(uuid)), Ok(uuid));
            prop_assert_eq!(parse_text(&to_text(uuid).to_uppercase()), Ok(uuid));
        }

        /// IDs in minting order give UUIDs in the same order, whatever their random tails: a
        /// response's UUIDs, and one instance's, strictly increase.
        #[test]
        fn uuids_sort_as_their_ids(
            layout in mintable(), a: (u64, u64, u64), b: (u64, u64, u64), ra: u32, rb: u32,
        ) {
            let (x, y) = (id_in(&layout, a.0, a.1, a.2), id_in(&layout, b.0, b.1, b.2));
            let (ux, uy) = (from_id(&layout, x, ra), from_id(&layout, y, rb));
            prop_assert_eq!(x.cmp(&y), ux.cmp(&uy));
            prop_assert_eq!(to_text(ux).cmp(&to_text(uy)), x.cmp(&y));
        }

        /// A random v7 is refused by its minted field nearly always (the default layout
        /// leaves 20 of its 42 bits zero).
        #[test]
        fn a_uuid_of_another_kind_is_refused(bytes: [u8; 16]) {
            let layout = Layout::default_snowmint();
            let value = u128::from_be_bytes(bytes);
            match decode(&layout, bytes) {
                Err(UuidError::NotVersion7(v)) => prop_assert_ne!(v, 7),
                Err(UuidError::WrongVariant(_)) => prop_assert_eq!((value >> 76) & 0xf, 7),
                Err(UuidError::FieldsOutOfLayout { .. } | UuidError::NotOnATick { .. }) => {}
                Ok(decoded) => prop_assert_eq!(from_id(&layout, decoded.id, decoded.random), bytes),
                Err(other) => prop_assert!(false, "{other}"),
            }
        }
    }

    #[test]
    fn only_the_hyphenated_text_form_is_read() {
        let uuid = parse_text("0190163D-8694-739b-aea5-6d2a3f0b1c4e").unwrap();
        assert_eq!(to_text(uuid), "0190163d-8694-739b-aea5-6d2a3f0b1c4e");
        for text in [
            "",
            "0190163d8694739baea56d2a3f0b1c4e",
            "{0190163d-8694-739b-aea5-6d2a3f0b1c4e}",
            "urn:uuid:0190163d-8694-739b-aea5-6d2a3f0b1c4e",
            " 0190163d-8694-739b-aea5-6d2a3f0b1c4e",
            "0190163d-8694-739b-aea5-6d2a3f0b1c4",
            "0190163d-8694-739b-aea5-6d2a3f0b1c4g",
            "0190163d-8694-739b-aea56-d2a3f0b1c4e",
            "0190163d-8694-739b-aea5-6d2a3f0b1c4\u{e9}",
            "+190163d-8694-739b-aea5-6d2a3f0b1c4e",
        ] {
            assert_eq!(parse_text(text).map_err(|e| e.kind()), Err("text"), "{text:?}");
        }
    }

    #[test]
    fn random_v7s_are_refused_by_their_minted_field() {
        let layout = Layout::default_snowmint();
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state
        };
        let mut accepted = 0;
        for _ in 0..10_000 {
            let random = (u128::from(next()) << 64) | u128::from(next());
            let v7 = (random & !(0xf << 76) & !(0b11 << 62)) | (VERSION << 76) | (VARIANT << 62);
            if decode(&layout, v7.to_be_bytes()).is_ok() {
                accepted += 1;
            }
        }
        assert_eq!(accepted, 0, "random v7s taken for snowmint's");
    }

    #[test]
    fn a_layout_whose_fields_or_time_do_not_fit_cannot_make_uuids() {
        assert!(check_layout(&Layout::default_snowmint()).is_ok());
        let mut wide = Layout::default_snowmint();
        wide.worker_bits = 21;
        assert!(matches!(check_layout(&wide), Err(UuidError::Layout { .. })));
        let mut long = Layout::default_snowmint();
        long.tick_ms = 1_000_000;
        assert!(matches!(check_layout(&long), Err(UuidError::Layout { .. })));
        for name in crate::layout::NAMED_LAYOUTS {
            let layout = Layout::named(name).unwrap();
            if check_layout(&layout).is_ok() {
                let id = layout.pack(Parts { tick: 7, worker: 1, sequence: 2 });
                assert_eq!(decode(&layout, from_id(&layout, id, 9)).unwrap().id, id, "{name}");
            }
        }
    }
}
