//! What a tenant may call: the permissions a policy grants, and what each call needs.
//!
//! | permission | lets a tenant call |
//! |---|---|
//! | `ids` | `NextId`, `BatchIds` |
//! | `uuids` | `NextUuid`, `BatchUuids` |
//! | `sequences`, `sequences:NAME`, `sequences:PREFIX*` | `NextValue`, `BatchValues` of every sequence, of one, of those whose name starts so |
//! | `decode` | `Decode` |
//! | `provenance` | `Decode` with `provenance` set (with `decode`): which instance minted an ID |
//! | `reveal` | `Reveal`, and `Decode` of an opaque ID (with `decode`): an opaque ID's number |

use std::fmt;

use crate::sequence::check_name;

/// One permission of a tenant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Permission {
    Ids,
    Uuids,
    Sequences(Names),
    Decode,
    Provenance,
    Reveal,
}

/// Which sequences a `sequences` permission covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Names {
    All,
    One(String),
    Prefix(String),
}

/// What a call needs, one permission at a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need<'a> {
    Ids,
    Uuids,
    Sequence(&'a str),
    Decode,
    Provenance,
    Reveal,
}

impl Permission {
    /// Reads a permission as a policy writes it.
    pub fn parse(text: &str) -> Result<Permission, String> {
        Ok(match text {
            "ids" => Permission::Ids,
            "uuids" => Permission::Uuids,
            "decode" => Permission::Decode,
            "provenance" => Permission::Provenance,
            "reveal" => Permission::Reveal,
            "sequences" | "sequences:*" => Permission::Sequences(Names::All),
            _ => match text.strip_prefix("sequences:") {
                Some(pattern) => match pattern.strip_suffix('*') {
                    Some(prefix) => {
                        check_name(prefix).map_err(|e| format!("permission {text:?}: {e}"))?;
                        Permission::Sequences(Names::Prefix(prefix.into()))
                    }
                    None => {
                        check_name(pattern).map_err(|e| format!("permission {text:?}: {e}"))?;
                        Permission::Sequences(Names::One(pattern.into()))
                    }
                },
                None => {
                    return Err(format!(
                        "unknown permission {text:?}: one of ids, uuids, sequences, sequences:NAME, sequences:PREFIX*, decode, provenance, reveal"
                    ));
                }
            },
        })
    }

    /// Whether this permission covers `need`.
    pub fn allows(&self, need: Need<'_>) -> bool {
        match (self, need) {
            (Permission::Ids, Need::Ids)
            | (Permission::Uuids, Need::Uuids)
            | (Permission::Decode, Need::Decode)
            | (Permission::Provenance, Need::Provenance)
            | (Permission::Reveal, Need::Reveal) => true,
            (Permission::Sequences(names), Need::Sequence(name)) => match names {
                Names::All => true,
                Names::One(one) => one == name,
                Names::Prefix(prefix) => name.starts_with(prefix.as_str()),
            },
            _ => false,
        }
    }
}

impl fmt::Display for Permission {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Permission::Ids => f.write_str("ids"),
            Permission::Uuids => f.write_str("uuids"),
            Permission::Sequences(Names::All) => f.write_str("sequences"),
            Permission::Sequences(Names::One(name)) => write!(f, "sequences:{name}"),
            Permission::Sequences(Names::Prefix(prefix)) => write!(f, "sequences:{prefix}*"),
            Permission::Decode => f.write_str("decode"),
            Permission::Provenance => f.write_str("provenance"),
            Permission::Reveal => f.write_str("reveal"),
        }
    }
}

impl fmt::Display for Need<'_> {
    /// The permission that grants exactly this need.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Need::Ids => f.write_str("ids"),
            Need::Uuids => f.write_str("uuids"),
            Need::Sequence(name) => write!(f, "sequences:{name}"),
            Need::Decode => f.write_str("decode"),
            Need::Provenance => f.write_str("provenance"),
            Need::Reveal => f.write_str("reveal"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_permission_allows_its_own_calls_only() {
        let all =
            ["ids", "uuids", "decode", "provenance", "reveal", "sequences"].map(|p| Permission::parse(p).unwrap());
        let needs = [Need::Ids, Need::Uuids, Need::Decode, Need::Provenance, Need::Reveal, Need::Sequence("orders")];
        for (i, permission) in all.iter().enumerate() {
            for (j, need) in needs.iter().enumerate() {
                assert_eq!(permission.allows(*need), i == j, "{permission} for {need}");
            }
            assert_eq!(Permission::parse(&permission.to_string()).as_ref(), Ok(permission));
        }
    }

    #[test]
    fn sequence_permissions_cover_one_name_a_prefix_or_all() {
        let one = Permission::parse("sequences:orders").unwrap();
        assert!(one.allows(Need::Sequence("orders")) && !one.allows(Need::Sequence("orders-eu")));
        let prefix = Permission::parse("sequences:invoice-*").unwrap();
        assert!(prefix.allows(Need::Sequence("invoice-2026")) && !prefix.allows(Need::Sequence("invoice")));
        assert_eq!(Permission::parse("sequences:*"), Ok(Permission::Sequences(Names::All)));
        for permission in [one, prefix] {
            assert_eq!(Permission::parse(&permission.to_string()), Ok(permission));
        }
        for bad in ["Ids", "ids ", "sequence", "sequences:", "sequences:Orders", "sequences:a/b*", "sequences:-x", "*"]
        {
            let error = Permission::parse(bad).unwrap_err();
            assert!(error.contains(&format!("{bad:?}")), "{bad}: {error}");
        }
    }
}
