//! The string form of opaque IDs against the shared vectors
//! (`clients/testdata/opaque-strings.json`), which the server's own code produced.

use serde_json::Value;
use snowmint_client::opaque::{OpaqueErrorKind, OpaqueId};

fn file() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/opaque-strings.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn section<'a>(file: &'a Value, name: &str) -> &'a Vec<Value> {
    let entries = file[name].as_array().unwrap();
    assert!(!entries.is_empty(), "an empty section {name}");
    entries
}

fn pair(v: &Value) -> (u32, u64) {
    (v["key_version"].as_u64().unwrap() as u32, v["value"].as_str().unwrap().parse().unwrap())
}

#[test]
fn every_valid_string_reads_and_writes() {
    let file = file();
    for v in section(&file, "valid") {
        let (key_version, value) = pair(v);
        let opaque = OpaqueId::new(key_version, value).unwrap();
        assert_eq!(opaque.to_string(), v["text"]);
        assert_eq!(v["text"].as_str().unwrap().parse::<OpaqueId>().unwrap(), opaque);
    }
}

#[test]
fn every_alias_reads_as_its_canonical_string() {
    let file = file();
    for v in section(&file, "aliases") {
        let (key_version, value) = pair(v);
        let opaque = OpaqueId::parse(v["text"].as_str().unwrap()).unwrap();
        assert_eq!(opaque, OpaqueId { key_version, value }, "{v}");
        assert_eq!(opaque.to_string(), v["canonical"]);
    }
}

#[test]
fn every_invalid_string_is_refused_by_the_first_check_it_fails() {
    let file = file();
    for v in section(&file, "invalid") {
        let error = OpaqueId::parse(v["text"].as_str().unwrap()).unwrap_err();
        let kind = match v["kind"].as_str().unwrap() {
            "character" => OpaqueErrorKind::Character,
            "length" => OpaqueErrorKind::Length,
            "range" => OpaqueErrorKind::Range,
            other => panic!("unknown kind {other}"),
        };
        assert_eq!(error.kind(), kind, "{v}: {error}");
    }
}

#[test]
fn every_unencodable_pair_is_refused() {
    let file = file();
    for v in section(&file, "unencodable") {
        let (key_version, value) = pair(v);
        assert!(OpaqueId::new(key_version, value).is_err(), "{v}");
    }
}
