//! Opaque public IDs: a keyed permutation of the 63-bit ID space, and the IDs' string form.
//!
//! A snowmint ID tells anyone who sees it when it was minted, by which worker, and (from two
//! of them) how many IDs were minted in between. An opaque ID hides all three: it is the ID
//! put through a keyed permutation of `[0, 2^63)` onto itself, so opaque values are exactly as
//! unique as the IDs beneath them, and only the key's holder maps them back ([`Keyring::reveal`]).
//!
//! The permutation is FF1 (NIST SP 800-38G, format-preserving encryption) with AES-256, over
//! radix 2 and numeral strings of 63 numerals (the ID's bits, most significant first), with an
//! empty tweak: the `fpe` crate runs the algorithm (its Feistel rounds and its PRF), and
//! [`Bits63`] is the numeral string, kept in one `u64` so that no round allocates or needs
//! big integers. Anyone holding the key can reproduce it with any FF1 implementation; the
//! tests check it against `fpe`'s own big-integer numeral strings.
//!
//! Keys rotate. A [`Keyring`] holds several keys, each with a version from 0 to 31: the
//! highest version encodes, every version listed reveals. Opaque values are unique per key
//! version (the same ID under two keys gives two unrelated values, which may equal other IDs'
//! values under the other key), so the string form carries the version: [`OpaqueId`]'s text
//! is 14 characters of Crockford base32, the key version and then the 63-bit value, and two
//! strings are equal only when both are. Strings stay unique across rotations; numeric
//! values need their version beside them.
//!
//! Pure: no I/O here. The key file is read (and its permissions checked) by the command line;
//! [`Keyring::parse`] reads its text. No key is ever formatted: the `Debug` forms here show
//! versions only, and no error quotes a key.

use std::fmt;
use std::ops::RangeInclusive;
use std::str::FromStr;

use aes::Aes256Enc;
use fpe::ff1::{FF1, NumeralString, Operations};
use zeroize::Zeroizing;

/// The key versions a keyring may hold: one character of base32.
pub const KEY_VERSIONS: RangeInclusive<u32> = 0..=31;

/// Opaque values, as the IDs beneath them, are below 2^63 (the sign bit stays 0).
pub const VALUE_LIMIT: u64 = 1 << 63;

/// The length of an opaque ID's string form: the key version, then 13 characters of value.
pub const TEXT_LEN: usize = 14;

/// Crockford's base32 alphabet: digits and capitals without I, L, O and U.
pub const ALPHABET: &[u8; 32] = b"0123456789ABCDEFGHJKMNPQRSTVWXYZ";

/// The length of an AES-256 key, in bytes.
pub const KEY_BYTES: usize = 32;

/// Why an opaque value or string could not be made or revealed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OpaqueError {
    #[error(transparent)]
    Text(#[from] TextError),
    #[error(
        "key version {version} is not among the opaque keys (versions {known}): an ID of a retired key, or of another key file"
    )]
    UnknownVersion { version: u32, known: String },
    #[error("key version {version} is not between 0 and 31")]
    VersionOutOfRange { version: u32 },
    #[error("{value} is not a 63-bit value: opaque values, as IDs, are below 2^63")]
    ValueOutOfRange { value: u64 },
}

/// Why a string is not an opaque ID's string form.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TextError {
    #[error(
        "opaque ID {text:?}: {got:?} (character {at}) is not Crockford base32 (the digits, and A to Z but U; I and L read as 1, O as 0; hyphens are ignored)"
    )]
    Character { text: String, at: usize, got: char },
    #[error(
        "opaque ID {text:?} has {len} characters without its hyphens, not 14 (one for the key version, 13 for the value)"
    )]
    Length { text: String, len: usize },
    #[error("opaque ID {text:?} holds a value of 2^63 or more: the character after the key version must be 0 to 7")]
    Range { text: String },
}

impl TextError {
    /// The kind of the error, as the shared test vectors name it: `character`, `length` or
    /// `range` (checked in that order).
    pub fn kind(&self) -> &'static str {
        match self {
            TextError::Character { .. } => "character",
            TextError::Length { .. } => "length",
            TextError::Range { .. } => "range",
        }
    }
}

/// Why a key file's text (or a list of keys) makes no keyring. Never quotes a key.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("line {line}: expected `<version> <64 hex digits>` (a key version and an AES-256 key), or a # comment")]
    Syntax { line: usize },
    #[error("line {line}: key version {version:?} is not a number from 0 to 31")]
    Version { line: usize, version: String },
    #[error("line {line}: the key has {digits} hex digits; an AES-256 key has 64")]
    KeyLength { line: usize, digits: usize },
    #[error("line {line}: the key is not hexadecimal")]
    KeyNotHex { line: usize },
    #[error("line {line}: key version {version} again (first on line {first})")]
    DuplicateVersion { line: usize, version: u32, first: usize },
    #[error(
        "line {line}: the key of version {version} is also the key of version {other}; each version needs its own key"
    )]
    ReusedKey { line: usize, version: u32, other: u32 },
    #[error("no keys: every line is blank or a comment")]
    Empty,
}

/// The 63 numerals of an FF1 numeral string in radix 2, the bits of one `u64` below its top
/// bit: numeral 0, the most significant, is bit 62.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bits63(pub u64);

/// How FF1 splits 63 numerals: `u = floor(63 / 2)` numerals in A, `v = 32` in B.
const U: u32 = 31;
const V: u32 = 32;

impl NumeralString for Bits63 {
    type Ops = Half;

    fn is_valid(&self, radix: u32) -> bool {
        radix == 2 && self.0 < VALUE_LIMIT
    }

    fn numeral_count(&self) -> usize {
        63
    }

    fn split(&self) -> (Half, Half) {
        (Half { value: self.0 >> V, bits: U }, Half { value: self.0 & mask(V), bits: V })
    }

    fn concat(a: Half, b: Half) -> Bits63 {
        debug_assert_eq!(a.bits + b.bits, 63);
        Bits63((a.value << b.bits) | b.value)
    }
}

/// One half of a [`Bits63`] in FF1's rounds: `bits` numerals, `value` their number in radix 2.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Half {
    value: u64,
    bits: u32,
}

/// Up to 8 big-endian bytes, without an allocation.
pub struct BeBytes {
    bytes: [u8; 8],
    len: usize,
}

impl AsRef<[u8]> for BeBytes {
    fn as_ref(&self) -> &[u8] {
        &self.bytes[8 - self.len..]
    }
}

/// The low `bits` bits set, for `bits` up to 64.
fn mask(bits: u32) -> u64 {
    if bits >= 64 { u64::MAX } else { (1 << bits) - 1 }
}

/// `NUM(S)` modulo 2^64 from big-endian bytes: enough for any result modulo 2^m, m <= 64.
fn number_mod_2_64(bytes: impl Iterator<Item = u8>) -> u64 {
    bytes.fold(0u64, |n, byte| (n << 8) | u64::from(byte))
}

impl Operations for Half {
    type Bytes = BeBytes;

    fn numeral_count(&self) -> usize {
        self.bits as usize
    }

    fn to_be_bytes(&self, radix: u32, b: usize) -> BeBytes {
        // b = ceil(v / 8) = 4 bytes; both halves fit.
        debug_assert!(radix == 2 && b <= 8 && u128::from(self.value) < 1u128 << (8 * b));
        BeBytes { bytes: self.value.to_be_bytes(), len: b }
    }

    // (A + y) mod 2^m: the sum's low m bits, whatever the bits of y above them.
    fn add_mod_exp(self, other: impl Iterator<Item = u8>, radix: u32, m: usize) -> Half {
        debug_assert_eq!(radix, 2);
        let m = m as u32;
        Half { value: self.value.wrapping_add(number_mod_2_64(other)) & mask(m), bits: m }
    }

    fn sub_mod_exp(self, other: impl Iterator<Item = u8>, radix: u32, m: usize) -> Half {
        debug_assert_eq!(radix, 2);
        let m = m as u32;
        Half { value: self.value.wrapping_sub(number_mod_2_64(other)) & mask(m), bits: m }
    }
}

/// FF1's tweak: none. The key and its version are all that tell two permutations apart.
const TWEAK: &[u8] = &[];

/// One key: a permutation of `[0, 2^63)` and its version.
pub struct OpaqueKey {
    version: u32,
    /// AES-256's encryption alone: FF1 runs the block cipher forward both ways, and the
    /// algorithm clones it for each of its ten rounds.
    ff1: FF1<Aes256Enc>,
}

impl OpaqueKey {
    /// The permutation of AES-256 key `key`, as version `version`.
    pub fn new(version: u32, key: &[u8; KEY_BYTES]) -> Result<OpaqueKey, OpaqueError> {
        if !KEY_VERSIONS.contains(&version) {
            return Err(OpaqueError::VersionOutOfRange { version });
        }
        let ff1 = FF1::<Aes256Enc>::new(key, 2).expect("radix 2 is a valid radix");
        Ok(OpaqueKey { version, ff1 })
    }

    pub fn version(&self) -> u32 {
        self.version
    }

    /// The opaque value of `id`.
    pub fn encode(&self, id: u64) -> Result<u64, OpaqueError> {
        if id >= VALUE_LIMIT {
            return Err(OpaqueError::ValueOutOfRange { value: id });
        }
        let value = self.ff1.encrypt(TWEAK, &Bits63(id)).expect("63 numerals of radix 2 are valid for FF1").0;
        debug_assert!(value < VALUE_LIMIT);
        Ok(value)
    }

    /// The ID beneath opaque value `value`.
    pub fn reveal(&self, value: u64) -> Result<u64, OpaqueError> {
        if value >= VALUE_LIMIT {
            return Err(OpaqueError::ValueOutOfRange { value });
        }
        Ok(self.ff1.decrypt(TWEAK, &Bits63(value)).expect("63 numerals of radix 2 are valid for FF1").0)
    }
}

impl fmt::Debug for OpaqueKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpaqueKey").field("version", &self.version).field("key", &"<redacted>").finish()
    }
}

/// An opaque ID: its value and the version of the key it was made with. Its string form
/// ([`fmt::Display`], [`OpaqueId::parse`]) is 14 characters of Crockford base32: the key
/// version, then the value in 13 characters, most significant first (the first of them 0 to
/// 7, as the value is below 2^63).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct OpaqueId {
    pub key_version: u32,
    pub value: u64,
}

impl OpaqueId {
    /// `value` of key version `key_version`, both checked against their ranges.
    pub fn new(key_version: u32, value: u64) -> Result<OpaqueId, OpaqueError> {
        if !KEY_VERSIONS.contains(&key_version) {
            return Err(OpaqueError::VersionOutOfRange { version: key_version });
        }
        if value >= VALUE_LIMIT {
            return Err(OpaqueError::ValueOutOfRange { value });
        }
        Ok(OpaqueId { key_version, value })
    }

    /// Reads a string form. Lower case is read as upper case, O as 0, I and L as 1, and
    /// hyphens anywhere are ignored; anything else is refused, as is a length other than 14
    /// (hyphens aside) or a value of 2^63 or more. Checked in that order.
    pub fn parse(text: &str) -> Result<OpaqueId, TextError> {
        let mut symbols = [0u8; TEXT_LEN];
        let mut len = 0;
        for (at, got) in text.chars().enumerate() {
            if got == '-' {
                continue;
            }
            let Some(symbol) = symbol_of(got) else {
                return Err(TextError::Character { text: shown(text), at: at + 1, got });
            };
            if len < TEXT_LEN {
                symbols[len] = symbol;
            }
            len += 1;
        }
        if len != TEXT_LEN {
            return Err(TextError::Length { text: shown(text), len });
        }
        if symbols[1] >= 8 {
            return Err(TextError::Range { text: shown(text) });
        }
        let value = symbols[1..].iter().fold(0u64, |value, &symbol| (value << 5) | u64::from(symbol));
        Ok(OpaqueId { key_version: u32::from(symbols[0]), value })
    }
}

/// The value of one character of Crockford base32, with its aliases; `None` for any other.
fn symbol_of(c: char) -> Option<u8> {
    let c = c.to_ascii_uppercase();
    let c = match c {
        'O' => '0',
        'I' | 'L' => '1',
        c => c,
    };
    ALPHABET.iter().position(|&a| char::from(a) == c).map(|i| i as u8)
}

/// A string as an error shows it: at most 40 characters, so that a long request does not
/// make a long message.
fn shown(text: &str) -> String {
    const MAX: usize = 40;
    match text.char_indices().nth(MAX) {
        None => text.to_string(),
        Some((end, _)) => format!("{}…", &text[..end]),
    }
}

impl fmt::Display for OpaqueId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut text = [0u8; TEXT_LEN];
        text[0] = ALPHABET[(self.key_version & 31) as usize];
        for (i, c) in text[1..].iter_mut().enumerate() {
            let shift = 5 * (12 - i);
            *c = ALPHABET[((self.value >> shift) & 31) as usize];
        }
        f.write_str(std::str::from_utf8(&text).expect("the alphabet is ASCII"))
    }
}

impl FromStr for OpaqueId {
    type Err = TextError;

    fn from_str(text: &str) -> Result<OpaqueId, TextError> {
        OpaqueId::parse(text)
    }
}

/// The keys a server encodes and reveals with: the highest version encodes, every version
/// reveals. Immutable once made; a rotation is a restart with a new key file.
pub struct Keyring {
    /// Ascending by version; never empty.
    keys: Vec<OpaqueKey>,
}

impl Keyring {
    /// A keyring of `(version, key)` pairs, checked as a key file is (errors number the pairs
    /// from 1, as lines).
    pub fn new(keys: impl IntoIterator<Item = (u32, [u8; KEY_BYTES])>) -> Result<Keyring, KeyError> {
        let entries = keys
            .into_iter()
            .enumerate()
            .map(|(i, (version, key))| {
                if !KEY_VERSIONS.contains(&version) {
                    return Err(KeyError::Version { line: i + 1, version: version.to_string() });
                }
                Ok(Entry { line: i + 1, version, key: Zeroizing::new(key) })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Keyring::of(entries)
    }

    /// The keyring a key file's text describes: one key a line, `<version> <64 hex digits>`
    /// (the version 0 to 31, the AES-256 key in hex), blank lines and `#` comments aside.
    /// Every version and every key at most once; at least one key.
    pub fn parse(text: &str) -> Result<Keyring, KeyError> {
        let mut entries = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let line_number = i + 1;
            let content = line.split('#').next().unwrap_or_default().trim();
            if content.is_empty() {
                continue;
            }
            let mut words = content.split_whitespace();
            let (Some(version), Some(hex), None) = (words.next(), words.next(), words.next()) else {
                return Err(KeyError::Syntax { line: line_number });
            };
            let version_number = version
                .parse::<u32>()
                .ok()
                .filter(|v| KEY_VERSIONS.contains(v))
                .ok_or_else(|| KeyError::Version { line: line_number, version: version.to_string() })?;
            entries.push(Entry { line: line_number, version: version_number, key: parse_key(hex, line_number)? });
        }
        Keyring::of(entries)
    }

    fn of(mut entries: Vec<Entry>) -> Result<Keyring, KeyError> {
        for (i, entry) in entries.iter().enumerate() {
            for earlier in &entries[..i] {
                if earlier.version == entry.version {
                    return Err(KeyError::DuplicateVersion {
                        line: entry.line,
                        version: entry.version,
                        first: earlier.line,
                    });
                }
                if *earlier.key == *entry.key {
                    return Err(KeyError::ReusedKey {
                        line: entry.line,
                        version: entry.version,
                        other: earlier.version,
                    });
                }
            }
        }
        if entries.is_empty() {
            return Err(KeyError::Empty);
        }
        entries.sort_by_key(|entry| entry.version);
        let keys = entries
            .iter()
            .map(|entry| OpaqueKey::new(entry.version, &entry.key).expect("the version was checked"))
            .collect();
        Ok(Keyring { keys })
    }

    /// The key new opaque IDs are made with: the highest version.
    pub fn current(&self) -> &OpaqueKey {
        self.keys.last().expect("a keyring is never empty")
    }

    /// The versions held, ascending.
    pub fn versions(&self) -> Vec<u32> {
        self.keys.iter().map(OpaqueKey::version).collect()
    }

    /// The key of `version`.
    pub fn key(&self, version: u32) -> Result<&OpaqueKey, OpaqueError> {
        self.keys.iter().find(|key| key.version == version).ok_or_else(|| OpaqueError::UnknownVersion {
            version,
            known: self.versions().iter().map(u32::to_string).collect::<Vec<_>>().join(", "),
        })
    }

    /// The opaque ID of `id`, made with the current key.
    pub fn encode(&self, id: u64) -> Result<OpaqueId, OpaqueError> {
        let key = self.current();
        Ok(OpaqueId { key_version: key.version, value: key.encode(id)? })
    }

    /// The ID beneath `opaque`, with the key of its version.
    pub fn reveal(&self, opaque: OpaqueId) -> Result<u64, OpaqueError> {
        self.key(opaque.key_version)?.reveal(opaque.value)
    }

    /// The ID beneath an opaque ID's string form, and the version it was made with.
    pub fn reveal_text(&self, text: &str) -> Result<(u64, u32), OpaqueError> {
        let opaque = OpaqueId::parse(text)?;
        Ok((self.reveal(opaque)?, opaque.key_version))
    }
}

impl fmt::Debug for Keyring {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Keyring")
            .field("versions", &self.versions())
            .field("current", &self.current().version)
            .finish_non_exhaustive()
    }
}

/// A key as read, before it becomes a permutation; wiped when dropped.
struct Entry {
    line: usize,
    version: u32,
    key: Zeroizing<[u8; KEY_BYTES]>,
}

/// An AES-256 key from 64 hex digits.
fn parse_key(hex: &str, line: usize) -> Result<Zeroizing<[u8; KEY_BYTES]>, KeyError> {
    if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(KeyError::KeyNotHex { line });
    }
    if hex.len() != 2 * KEY_BYTES {
        return Err(KeyError::KeyLength { line, digits: hex.len() });
    }
    let mut key = Zeroizing::new([0u8; KEY_BYTES]);
    for (byte, pair) in key.iter_mut().zip(hex.as_bytes().chunks(2)) {
        let digit = |b: u8| (b as char).to_digit(16).expect("checked as hex") as u8;
        *byte = (digit(pair[0]) << 4) | digit(pair[1]);
    }
    Ok(key)
}

#[cfg(test)]
mod tests {
    use aes::Aes256;
    use fpe::ff1::FlexibleNumeralString;
    use proptest::prelude::*;

    use super::*;

    const KEY_A: [u8; 32] = [0x2b; 32];
    const KEY_B: [u8; 32] = [0x7e; 32];

    fn key(version: u32, key: &[u8; 32]) -> OpaqueKey {
        OpaqueKey::new(version, key).unwrap()
    }

    /// The permutation by `fpe`'s own numeral string of radix 2 (one `u16` a bit, big
    /// integers in every round): the reference [`Bits63`] must agree with.
    fn reference_encrypt(key: &[u8; 32], id: u64) -> u64 {
        let ff1 = FF1::<Aes256>::new(key, 2).unwrap();
        let bits: Vec<u16> = (0..63).rev().map(|i| ((id >> i) & 1) as u16).collect();
        let out: Vec<u16> = ff1.encrypt(TWEAK, &FlexibleNumeralString::from(bits)).unwrap().into();
        assert_eq!(out.len(), 63);
        out.iter().fold(0, |n, &bit| (n << 1) | u64::from(bit))
    }

    #[test]
    fn the_u64_numeral_string_agrees_with_the_crates_reference_numeral_string() {
        let k = key(0, &KEY_A);
        for id in [0, 1, 2, 0x7fff_ffff, 0x8000_0000, 0xffff_ffff, 1 << 62, VALUE_LIMIT - 2, VALUE_LIMIT - 1] {
            assert_eq!(k.encode(id).unwrap(), reference_encrypt(&KEY_A, id), "id {id}");
        }
    }

    #[test]
    fn the_permutation_is_fixed_for_a_key() {
        // Pinned, so that a change of the construction (the tweak, the bit order, the split)
        // cannot pass unnoticed: IDs already handed out would stop revealing.
        let k = key(0, &[0; 32]);
        let pinned: Vec<u64> = [0u64, 1, 1 << 62].iter().map(|&id| k.encode(id).unwrap()).collect();
        let reference: Vec<u64> = [0u64, 1, 1 << 62].iter().map(|&id| reference_encrypt(&[0; 32], id)).collect();
        assert_eq!(pinned, reference);
        assert_eq!(pinned, PINNED_ZERO_KEY);
    }

    /// FF1-AES256 of 0, 1 and 2^62 under the all-zero key (see the vectors in
    /// `clients/testdata/opaque-strings.json`).
    const PINNED_ZERO_KEY: [u64; 3] = [8_112_219_858_643_243_494, 3_778_535_892_626_069_236, 273_989_991_174_183_595];

    #[test]
    fn values_of_2_to_the_63_and_above_are_refused() {
        let k = key(0, &KEY_A);
        assert_eq!(k.encode(VALUE_LIMIT), Err(OpaqueError::ValueOutOfRange { value: VALUE_LIMIT }));
        assert_eq!(k.reveal(u64::MAX), Err(OpaqueError::ValueOutOfRange { value: u64::MAX }));
    }

    #[test]
    fn small_ids_are_spread_over_the_whole_space() {
        let k = key(0, &KEY_A);
        let values: Vec<u64> = (0..1000).map(|id| k.encode(id).unwrap()).collect();
        // Consecutive IDs land in unrelated places: about half of them above 2^62.
        let high = values.iter().filter(|&&v| v >= 1 << 62).count();
        assert!((400..=600).contains(&high), "{high} of 1000 above 2^62");
        assert!(values.windows(2).filter(|w| w[0] < w[1]).count() < 600);
    }

    #[test]
    fn strings_have_the_version_first_and_fourteen_characters() {
        let text = OpaqueId::new(31, VALUE_LIMIT - 1).unwrap().to_string();
        assert_eq!(text, "Z7ZZZZZZZZZZZZ");
        assert_eq!(OpaqueId::new(0, 0).unwrap().to_string(), "00000000000000");
        assert_eq!(OpaqueId::new(1, 32).unwrap().to_string(), "10000000000010");
        assert_eq!(OpaqueId::parse("Z7ZZZZZZZZZZZZ").unwrap(), OpaqueId { key_version: 31, value: VALUE_LIMIT - 1 });
    }

    #[test]
    fn strings_are_read_leniently_but_nothing_else_is_accepted() {
        let canonical = OpaqueId::parse("17BCDEFGH0JK1M").unwrap();
        for alias in ["17bcdefgh0jk1m", "1-7BCD-EFGH-0JK1M", "17BCDEFGHOJKIM", "17BCDEFGHoJKlM", "-17BCDEFGH0JK1M-"] {
            assert_eq!(OpaqueId::parse(alias).unwrap(), canonical, "{alias}");
        }
        let kind = |text: &str| OpaqueId::parse(text).unwrap_err().kind();
        assert_eq!(kind(""), "length");
        assert_eq!(kind("1ABCDEFGH0JK1"), "length");
        assert_eq!(kind("1ABCDEFGH0JK1MM"), "length");
        assert_eq!(kind("1ABCDEFGH0JK1U"), "character");
        assert_eq!(kind("1ABCDEFGH0JK1 "), "character");
        assert_eq!(kind("1ABCDEFGH0JK1é"), "character");
        assert_eq!(kind("1ABCDE_GH0JK1M"), "character");
        assert_eq!(kind("18000000000000"), "range");
        assert_eq!(kind("1Z000000000000"), "range");
        let error = OpaqueId::parse("1ABCDEFGH0JK1U").unwrap_err().to_string();
        assert!(error.contains("'U' (character 14)"), "{error}");
    }

    #[test]
    fn a_long_string_is_shown_cut_short_in_its_error() {
        let long = "0".repeat(10_000);
        let error = OpaqueId::parse(&long).unwrap_err().to_string();
        assert!(error.len() < 200, "{error}");
        assert!(error.contains("10000 characters"), "{error}");
    }

    #[test]
    fn the_highest_version_encodes_and_every_version_reveals() {
        let ring = Keyring::new([(1, KEY_B), (0, KEY_A)]).unwrap();
        assert_eq!(ring.versions(), [0, 1]);
        let id = 123_456_789;
        let opaque = ring.encode(id).unwrap();
        assert_eq!(opaque.key_version, 1);
        assert_eq!(ring.reveal(opaque).unwrap(), id);
        let old = OpaqueId { key_version: 0, value: key(0, &KEY_A).encode(id).unwrap() };
        assert_eq!(ring.reveal(old).unwrap(), id);
        assert_ne!(old.value, opaque.value);
        assert_eq!(ring.reveal_text(&old.to_string()).unwrap(), (id, 0));
    }

    #[test]
    fn strings_of_two_keys_never_collide_and_each_reveals_with_its_own_version() {
        let old = Keyring::new([(0, KEY_A)]).unwrap();
        let new = Keyring::new([(0, KEY_A), (1, KEY_B)]).unwrap();
        let mut texts = std::collections::HashSet::new();
        for id in 0..5_000u64 {
            let (a, b) = (old.encode(id).unwrap(), new.encode(id).unwrap());
            assert!(texts.insert(a.to_string()) && texts.insert(b.to_string()), "id {id}");
            assert_eq!(new.reveal_text(&a.to_string()).unwrap(), (id, 0));
            assert_eq!(new.reveal_text(&b.to_string()).unwrap(), (id, 1));
        }
    }

    #[test]
    fn a_retired_version_fails_clearly() {
        let old = Keyring::new([(0, KEY_A)]).unwrap();
        let rotated = Keyring::new([(1, KEY_B)]).unwrap();
        let text = old.encode(42).unwrap().to_string();
        let error = rotated.reveal_text(&text).unwrap_err();
        assert_eq!(error, OpaqueError::UnknownVersion { version: 0, known: "1".into() });
        assert!(error.to_string().contains("retired"), "{error}");
    }

    const HEX_A: &str = "2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b2b";
    const HEX_B: &str = "7E7E7E7E7E7E7E7E7E7E7E7E7E7E7E7E7E7E7E7E7E7E7E7E7E7E7E7E7E7E7E7E";

    #[test]
    fn a_key_file_is_versions_and_hex_keys_with_comments() {
        let text = format!("# keys of the public IDs\n\n0 {HEX_A}\n  1\t{HEX_B}   # since the rotation\n");
        let ring = Keyring::parse(&text).unwrap();
        assert_eq!(ring.versions(), [0, 1]);
        assert_eq!(ring.current().version(), 1);
        assert_eq!(ring.encode(7).unwrap().value, key(1, &KEY_B).encode(7).unwrap());
    }

    #[test]
    fn bad_key_files_are_refused_by_line_without_quoting_a_key() {
        let cases = [
            (String::new(), KeyError::Empty),
            ("# nothing\n\n".to_string(), KeyError::Empty),
            (format!("0 {HEX_A} extra\n"), KeyError::Syntax { line: 1 }),
            (format!("{HEX_A}\n"), KeyError::Syntax { line: 1 }),
            (format!("32 {HEX_A}\n"), KeyError::Version { line: 1, version: "32".into() }),
            (format!("-1 {HEX_A}\n"), KeyError::Version { line: 1, version: "-1".into() }),
            (format!("0 {}\n", &HEX_A[..62]), KeyError::KeyLength { line: 1, digits: 62 }),
            (format!("0 {}zz\n", &HEX_A[..62]), KeyError::KeyNotHex { line: 1 }),
            (format!("0 {HEX_A}\n# c\n0 {HEX_B}\n"), KeyError::DuplicateVersion { line: 3, version: 0, first: 1 }),
            (format!("0 {HEX_A}\n1 {HEX_A}\n"), KeyError::ReusedKey { line: 2, version: 1, other: 0 }),
        ];
        for (text, expected) in cases {
            let error = Keyring::parse(&text).unwrap_err();
            assert_eq!(error, expected, "{text:?}");
            let message = error.to_string();
            assert!(!message.contains("2b2b") && !message.contains("7E7E"), "{message}");
        }
    }

    #[test]
    fn debug_forms_show_no_key() {
        let ring = Keyring::new([(3, KEY_A)]).unwrap();
        let shown = format!("{ring:?} {:?}", ring.current());
        assert!(shown.contains("versions: [3]") && shown.contains("<redacted>"), "{shown}");
        assert!(!shown.contains("43") && !shown.contains("2b"), "{shown}");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        #[test]
        fn every_id_reveals_to_itself(id in 0..VALUE_LIMIT, seed in any::<[u8; 32]>()) {
            let k = key(5, &seed);
            let value = k.encode(id).unwrap();
            prop_assert!(value < VALUE_LIMIT);
            prop_assert_eq!(k.reveal(value).unwrap(), id);
            prop_assert_eq!(k.encode(k.reveal(id).unwrap()).unwrap(), id);
        }

        #[test]
        fn the_u64_numeral_string_agrees_with_the_reference(id in 0..VALUE_LIMIT, seed in any::<[u8; 32]>()) {
            prop_assert_eq!(key(0, &seed).encode(id).unwrap(), reference_encrypt(&seed, id));
        }

        #[test]
        fn every_string_form_reads_back(version in KEY_VERSIONS, value in 0..VALUE_LIMIT) {
            let opaque = OpaqueId::new(version, value).unwrap();
            let text = opaque.to_string();
            prop_assert_eq!(text.len(), TEXT_LEN);
            prop_assert!(text[1..2] <= *"7");
            prop_assert_eq!(OpaqueId::parse(&text).unwrap(), opaque);
            prop_assert_eq!(OpaqueId::parse(&text.to_lowercase()).unwrap(), opaque);
            let hyphenated = format!("{}-{}-{}", &text[..1], &text[1..7], &text[7..]);
            prop_assert_eq!(OpaqueId::parse(&hyphenated).unwrap(), opaque);
        }

        #[test]
        fn no_other_string_is_read(text in "\\PC{0,20}") {
            let read = OpaqueId::parse(&text);
            let cleaned: String = text.chars().filter(|&c| c != '-').collect();
            let plausible = cleaned.chars().count() == TEXT_LEN && cleaned.chars().all(|c| symbol_of(c).is_some());
            prop_assert_eq!(read.is_ok(), plausible && symbol_of(cleaned.chars().nth(1).unwrap()).unwrap() < 8);
        }
    }
}
