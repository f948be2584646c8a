//! Bearer tokens: how they are made, and the token file that holds their hashes.
//!
//! A token is `smt_` and 43 characters of URL-safe base64 (32 random bytes). The server never
//! keeps one: the token file (`--token-file`) holds one line per token, its name (what the
//! policy's tenants list) and its SHA-256, as `snowmint token new|hash` print them:
//!
//! ```text
//! # name        hash
//! billing-prod  sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08
//! ```
//!
//! A presented token is hashed once and looked up by its hash; the hash found is compared
//! whole, in constant time, with the one computed. A file with any bad line is refused whole,
//! naming the line, and a line that holds what looks like a raw token is refused without
//! showing it.

use std::collections::HashMap;

use base64::Engine as _;
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq as _;

/// What every token starts with: a token pasted where it should not be is easy to find.
pub const TOKEN_PREFIX: &str = "smt_";

/// The prefix of a hash in the token file.
pub const HASH_PREFIX: &str = "sha256:";

/// The longest token name, in bytes.
pub const MAX_NAME_LEN: usize = 64;

/// A token's SHA-256.
pub type TokenHash = [u8; 32];

/// Why a token file cannot be used: the first bad line, by number (from 1).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {reason}")]
pub struct TokenFileError {
    pub line: usize,
    pub reason: String,
}

/// A new token, from the system's random source.
pub fn new_token() -> String {
    let mut bytes = [0u8; 32];
    rand::fill(&mut bytes);
    format!("{TOKEN_PREFIX}{}", base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes))
}

/// A token's hash.
pub fn hash(token: &str) -> TokenHash {
    Sha256::digest(token.as_bytes()).into()
}

/// The token file's line for token `token` named `name`.
pub fn line(name: &str, token: &str) -> String {
    format!("{name} {HASH_PREFIX}{}", hex(&hash(token)))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Checks a token's name: a short plain word, as the policy names it.
pub fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() || name.len() > MAX_NAME_LEN {
        return Err(format!("a token name has 1 to {MAX_NAME_LEN} bytes; this one has {}", name.len()));
    }
    match name
        .char_indices()
        .find(|&(at, c)| !(c.is_ascii_alphanumeric() || (at > 0 && matches!(c, '.' | '_' | '-' | ':' | '@' | '/'))))
    {
        Some((at, c)) => Err(format!(
            "a token name is made of letters, digits, '.', '_', '-', ':', '@' and '/', starting with a letter or a digit; {name:?} has {c:?} at byte {at}"
        )),
        None => Ok(()),
    }
}

/// A token file, read: token hashes and their names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TokenFile {
    by_hash: HashMap<TokenHash, String>,
}

impl TokenFile {
    /// Reads a token file's text: every line a name and a hash, or blank, or a `#` comment.
    pub fn parse(text: &str) -> Result<TokenFile, TokenFileError> {
        let mut by_hash = HashMap::new();
        let mut names: HashMap<String, usize> = HashMap::new();
        for (index, raw) in text.lines().enumerate() {
            let line = index + 1;
            let error = |reason: String| TokenFileError { line, reason };
            let content = raw.split_once('#').map_or(raw, |(before, _)| before).trim();
            if content.is_empty() {
                continue;
            }
            if content.split_whitespace().any(|word| word.starts_with(TOKEN_PREFIX)) {
                return Err(error(format!(
                    "this line holds what looks like a raw token (it starts with {TOKEN_PREFIX:?}; not shown): the file keeps only hashes, made by `snowmint token hash NAME`"
                )));
            }
            let words: Vec<&str> = content.split_whitespace().collect();
            let [name, hash] = words[..] else {
                return Err(error(format!(
                    "a line is a token name and its hash ({HASH_PREFIX}<64 hex digits>); this one has {} words",
                    words.len()
                )));
            };
            check_name(name).map_err(error)?;
            let hash = parse_hash(hash).map_err(error)?;
            if let Some(first) = names.insert(name.to_string(), line) {
                return Err(error(format!("token name {name:?} is on line {first} already")));
            }
            if let Some(other) = by_hash.insert(hash, name.to_string()) {
                return Err(error(format!("this hash is token {other:?}'s already: one token, one name")));
            }
        }
        Ok(TokenFile { by_hash })
    }

    /// The name of the token `token`, if the file has it.
    pub fn name_of(&self, token: &str) -> Option<&str> {
        let presented = hash(token);
        let (stored, name) = self.by_hash.get_key_value(&presented)?;
        bool::from(stored.ct_eq(&presented)).then_some(name.as_str())
    }

    /// Whether the file names a token `name`.
    pub fn has_name(&self, name: &str) -> bool {
        self.by_hash.values().any(|n| n == name)
    }

    pub fn len(&self) -> usize {
        self.by_hash.len()
    }

    pub fn is_empty(&self) -> bool {
        self.by_hash.is_empty()
    }
}

fn parse_hash(word: &str) -> Result<TokenHash, String> {
    let bad = || format!("a hash is {HASH_PREFIX} and 64 lowercase hex digits");
    let digits = word.strip_prefix(HASH_PREFIX).ok_or_else(bad)?;
    if digits.len() != 64 || !digits.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        return Err(bad());
    }
    let mut hash = [0u8; 32];
    for (i, byte) in hash.iter_mut().enumerate() {
        *byte = u8::from_str_radix(&digits[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
    }
    Ok(hash)
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn a_token_is_found_by_its_line_and_no_other_is() {
        let token = new_token();
        assert!(token.starts_with(TOKEN_PREFIX) && token.len() == TOKEN_PREFIX.len() + 43, "{token}");
        assert_ne!(new_token(), token);
        let text =
            format!("# tokens\n\n{}  # billing\nother {HASH_PREFIX}{}\n", line("billing-prod", &token), "0".repeat(64));
        let file = TokenFile::parse(&text).unwrap();
        assert_eq!(file.len(), 2);
        assert_eq!(file.name_of(&token), Some("billing-prod"));
        assert!(file.has_name("other") && !file.has_name("billing"));
        assert_eq!(file.name_of(&new_token()), None);
        assert_eq!(file.name_of(""), None);
        assert_eq!(file.name_of(&token[..token.len() - 1]), None);
    }

    #[test]
    fn the_hash_is_sha256_in_lowercase_hex() {
        assert_eq!(line("t", "test"), "t sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08");
    }

    #[test]
    fn a_bad_line_is_named_and_a_raw_token_never_shown() {
        let good = line("a", "x");
        let zeros = format!("{HASH_PREFIX}{}", "0".repeat(64));
        let cases = [
            (format!("{good}\nb"), 2, "this one has 1 words"),
            (format!("{good}\nb {zeros} extra"), 2, "3 words"),
            (format!("b sha256:{}", "0".repeat(63)), 1, "64 lowercase hex"),
            (format!("b sha256:{}", "A".repeat(64)), 1, "64 lowercase hex"),
            (format!("b md5:{}", "0".repeat(64)), 1, "64 lowercase hex"),
            (format!("-b {zeros}"), 1, "starting with a letter"),
            (format!("{good}\n\n{good}"), 3, "line 1 already"),
            (format!("{good}\nb {}", good.split_once(' ').unwrap().1), 2, "token \"a\"'s already"),
        ];
        for (text, at, says) in cases {
            let error = TokenFile::parse(&text).unwrap_err();
            assert_eq!(error.line, at, "{text:?}: {error}");
            assert!(error.to_string().contains(says), "{text:?}: {error}");
        }
        let token = new_token();
        for text in [format!("billing {token}"), token.clone(), format!("{good}\n  {token} # pasted")] {
            let error = TokenFile::parse(&text).unwrap_err().to_string();
            assert!(error.contains("raw token") && !error.contains(&token[4..]), "{error}");
        }
    }

    proptest! {
        /// Any text is read or refused, never half: a refusal names a line of the text.
        #[test]
        fn any_text_is_read_or_refused_with_its_line(text in "(([a-z0-9_ #:-]{0,12}|sha256:[0-9a-f]{64}|smt_[A-Za-z0-9]{4})[ \t]{0,2}){0,4}(\n(([a-z0-9_ #:-]{0,12}|sha256:[0-9a-f]{64})[ \t]{0,2}){0,3}){0,6}") {
            match TokenFile::parse(&text) {
                Ok(file) => prop_assert!(file.len() <= text.lines().count()),
                Err(error) => prop_assert!(error.line >= 1 && error.line <= text.lines().count().max(1), "{error}"),
            }
        }

        /// Lines made by `line` are read back, each token found by its name.
        #[test]
        fn lines_made_are_read_back(names in proptest::collection::btree_set("[a-z][a-z0-9-]{0,10}", 1..8)) {
            let tokens: Vec<(String, String)> = names.into_iter().map(|n| (n, new_token())).collect();
            let text: String = tokens.iter().map(|(n, t)| line(n, t) + "\n").collect();
            let file = TokenFile::parse(&text).unwrap();
            for (name, token) in &tokens {
                prop_assert_eq!(file.name_of(token), Some(name.as_str()));
            }
        }
    }
}
