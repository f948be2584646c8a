//! The shared test vectors (`clients/testdata/vectors.json`, made from the server's own
//! decode by `tests/vectors.rs` of the workspace): the client decodes every entry to the same
//! fields, and rejects every invalid one.

use serde_json::Value;
use snowmint_client::layout::{FieldOrder, Layout};

fn vectors() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/vectors.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn layout(spec: &Value) -> Layout {
    let bits = |key: &str| spec[key].as_u64().unwrap() as u32;
    Layout {
        name: "vectors".into(),
        epoch_ms: spec["epoch_ms"].as_str().unwrap().parse().unwrap(),
        tick_ms: spec["tick_ms"].as_u64().unwrap(),
        time_bits: bits("time_bits"),
        worker_bits: bits("worker_bits"),
        sequence_bits: bits("sequence_bits"),
        order: match spec["order"].as_str().unwrap() {
            "worker_sequence" => FieldOrder::WorkerSequence,
            _ => FieldOrder::SequenceWorker,
        },
    }
}

#[test]
fn every_vector_decodes_to_the_servers_fields() {
    let data = vectors();
    let entries = data["vectors"].as_array().unwrap();
    assert!(entries.len() > 50);
    for entry in entries {
        let name = entry["layout"].as_str().unwrap();
        let id: u64 = entry["id"].as_str().unwrap().parse().unwrap();
        let d = layout(&data["layouts"][name]).decode(id).unwrap_or_else(|e| panic!("{name} {id}: {e}"));
        let got = (d.unix_ms.to_string(), d.tick.to_string(), d.worker_id, d.sequence, d.rfc3339());
        let want = (
            entry["unix_ms"].as_str().unwrap().to_string(),
            entry["tick"].as_str().unwrap().to_string(),
            entry["worker_id"].as_u64().unwrap(),
            entry["sequence"].as_u64().unwrap(),
            entry["time"].as_str().unwrap().to_string(),
        );
        assert_eq!(got, want, "{name} {id}");
    }
}

#[test]
fn every_invalid_vector_is_rejected() {
    let data = vectors();
    for entry in data["invalid"].as_array().unwrap() {
        let name = entry["layout"].as_str().unwrap();
        let id: u64 = entry["id"].as_str().unwrap().parse().unwrap();
        assert!(layout(&data["layouts"][name]).decode(id).is_err(), "{name} {id} was decoded");
    }
}

#[test]
fn the_presets_are_the_vectors_layouts() {
    let data = vectors();
    for name in snowmint_client::layout::LAYOUT_NAMES {
        let preset = Layout::named(name).unwrap();
        assert_eq!(Layout { name: "vectors".into(), ..preset }, layout(&data["layouts"][name]), "{name}");
    }
    assert!(Layout::named("flake").is_err());
}

fn uuid_vectors() -> Value {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../testdata/uuid-vectors.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn every_uuid_vector_reads_back_to_the_id_it_was_made_from() {
    use snowmint_client::Uuid;
    let (layouts, data) = (vectors(), uuid_vectors());
    let entries = data["vectors"].as_array().unwrap();
    assert!(entries.len() > 50);
    for entry in entries {
        let name = entry["layout"].as_str().unwrap();
        let text = entry["uuid"].as_str().unwrap();
        let uuid: Uuid = text.parse().unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(uuid.to_string(), text);
        assert_eq!(text.to_uppercase().parse::<Uuid>().unwrap(), uuid);
        let d = layout(&layouts["layouts"][name]).decode_uuid(uuid).unwrap_or_else(|e| panic!("{name} {text}: {e}"));
        let got =
            (d.id.to_string(), d.unix_ms.to_string(), u64::from(d.slot), u64::from(d.sequence), u64::from(d.random));
        let want = (
            entry["id"].as_str().unwrap().to_string(),
            entry["unix_ms"].as_str().unwrap().to_string(),
            entry["slot"].as_u64().unwrap(),
            entry["sequence"].as_u64().unwrap(),
            entry["random"].as_u64().unwrap(),
        );
        assert_eq!(got, want, "{name} {text}");
    }
}

#[test]
fn every_uuid_of_another_kind_is_refused_by_its_check_and_malformed_text_is_not_read() {
    use snowmint_client::Uuid;
    let (layouts, data) = (vectors(), uuid_vectors());
    for entry in data["invalid"].as_array().unwrap() {
        let name = entry["layout"].as_str().unwrap();
        let text = entry["uuid"].as_str().unwrap();
        let error = layout(&layouts["layouts"][name]).decode_uuid(text.parse().unwrap()).unwrap_err();
        assert_eq!(error.kind(), entry["kind"].as_str().unwrap(), "{name} {text}: {error}");
    }
    for entry in data["malformed"].as_array().unwrap() {
        let text = entry["text"].as_str().unwrap();
        assert_eq!(text.parse::<Uuid>().map_err(|e| e.kind()), Err("text"), "{text:?}");
    }
}
