//! UUIDv7s from the real server over gRPC: made by the same minter as IDs (a UUID and an ID
//! never come from the same ID, and together they increase in the order they were answered),
//! strictly increasing within a response and across responses, at every batch size from one
//! to the largest; read back by `Decode` from bytes or text with the slot and the holder that
//! minted them; a UUID snowmint did not mint refused with its reason; plain gRPC `NextUuid`
//! answered by the direct path and counted under its own name.

mod common;

use std::collections::HashSet;

use common::ServerBuilder;
use snowmint::layout::Layout;
use snowmint::proto::{BatchIdsRequest, BatchUuidsRequest, DecodeRequest, NextIdRequest, NextUuidRequest};
use snowmint::uuid7;
use tonic::Code;

fn bytes16(bytes: &[u8]) -> [u8; 16] {
    bytes.try_into().unwrap_or_else(|_| panic!("a UUID of {} bytes", bytes.len()))
}

/// Single UUIDs, batches of every size up to the server's largest, and IDs, asked for in
/// turn: every UUID is version 7 and decodes to this server's slot, its text is its bytes',
/// and the IDs beneath the UUIDs and the IDs themselves, in the order they were answered,
/// strictly increase.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uuids_and_ids_come_from_one_minter_in_one_order() {
    let max_batch = 65_536;
    let server = ServerBuilder::new().slot(5).config(|c| c.max_batch = max_batch).start().await;
    let mut client = server.client().await;
    let layout = Layout::default_snowmint();
    let mut ids_in_order = Vec::new();
    let take = |bytes: &[u8], text: &str| {
        let uuid = bytes16(bytes);
        assert_eq!(uuid7::to_text(uuid), text);
        let decoded = uuid7::decode(&layout, uuid).unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(decoded.slot, 5, "{text}");
        decoded.id
    };
    for count in [1, 2, 1_000, max_batch] {
        let one = client.next_uuid(NextUuidRequest {}).await.unwrap().into_inner();
        ids_in_order.push(take(&one.uuid, &one.text));
        ids_in_order.push(client.next_id(NextIdRequest::default()).await.unwrap().into_inner().id);
        let batch = client.batch_uuids(BatchUuidsRequest { count }).await.unwrap().into_inner();
        assert_eq!((batch.uuids.len(), batch.texts.len()), (count as usize, count as usize));
        for (bytes, text) in batch.uuids.iter().zip(&batch.texts) {
            ids_in_order.push(take(bytes, text));
        }
        let ids = client.batch_ids(BatchIdsRequest { count: 3, ..Default::default() }).await.unwrap().into_inner();
        ids_in_order.extend(ids.ids);
    }
    let late = ids_in_order.windows(2).position(|w| w[0] >= w[1]);
    assert_eq!(late, None, "IDs and UUIDs not in one increasing order");
    assert_eq!(ids_in_order.iter().collect::<HashSet<_>>().len(), ids_in_order.len());
    server.stop().await;
}

/// `Decode` reads a UUID from its bytes or its text (either case) into the ID beneath, with
/// provenance; it refuses a UUID of another version or variant, a random v7, a request that
/// names two things, and bytes of another length, each with `INVALID_ARGUMENT` and why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn decode_reads_a_uuid_back_and_refuses_others_with_the_reason() {
    let server = ServerBuilder::new().slot(12).start().await;
    let mut client = server.client().await;
    let minted = client.next_uuid(NextUuidRequest {}).await.unwrap().into_inner();
    let by_bytes = DecodeRequest { uuid: minted.uuid.clone(), provenance: true, ..Default::default() };
    let decoded = client.decode(by_bytes).await.unwrap().into_inner();
    assert_eq!((decoded.worker_id, decoded.uuid_text.as_str()), (12, minted.text.as_str()));
    let provenance = decoded.provenance.unwrap();
    assert!(provenance.found, "{provenance:?}");
    assert_eq!((provenance.worker_id, provenance.pid), (12, std::process::id()));
    let by_text = DecodeRequest { uuid_text: minted.text.to_uppercase(), ..Default::default() };
    let again = client.decode(by_text).await.unwrap().into_inner();
    assert_eq!((again.id, again.unix_ms), (decoded.id, decoded.unix_ms));
    assert_eq!(uuid7::decode(&Layout::default_snowmint(), bytes16(&minted.uuid)).unwrap().id, decoded.id);

    let mut v4 = bytes16(&minted.uuid);
    v4[6] = (v4[6] & 0x0f) | 0x40;
    let mut ncs = bytes16(&minted.uuid);
    ncs[8] &= 0x3f;
    // A random v7: its minted field's high bits set, where the default layout has none.
    let mut random = bytes16(&minted.uuid);
    random[6] |= 0x0f;
    let refused = [
        (DecodeRequest { uuid: v4.to_vec(), ..Default::default() }, "version is 4"),
        (DecodeRequest { uuid: ncs.to_vec(), ..Default::default() }, "variant bits are 0b00"),
        (DecodeRequest { uuid: random.to_vec(), ..Default::default() }, "does not fit the layout's fields"),
        (DecodeRequest { uuid: minted.uuid[..15].to_vec(), ..Default::default() }, "got 15 bytes"),
        (DecodeRequest { uuid_text: "{".to_string() + &minted.text + "}", ..Default::default() }, "not 36 characters"),
        (DecodeRequest { uuid: minted.uuid.clone(), uuid_text: minted.text.clone(), ..Default::default() }, "not both"),
        (DecodeRequest { uuid: minted.uuid.clone(), id: 5, ..Default::default() }, "decoded alone"),
    ];
    for (request, why) in refused {
        let status = client.decode(request.clone()).await.unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument, "{request:?}: {status:?}");
        assert!(status.message().contains(why), "{request:?}: {}", status.message());
    }
    server.stop().await;
}

/// Counts out of range are refused before anything is minted; a plain gRPC `NextUuid` is
/// answered by the direct path and counted under `NextUuid`, a `BatchUuids` under its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_counts_are_refused_and_every_call_is_counted_under_its_name() {
    let server = ServerBuilder::new().config(|c| c.max_batch = 10).start().await;
    let mut client = server.client().await;
    for count in [0, 11, u32::MAX] {
        let status = client.batch_uuids(BatchUuidsRequest { count }).await.unwrap_err();
        assert_eq!(status.code(), Code::InvalidArgument, "{count}");
        assert!(status.message().contains("--max-batch"), "{}", status.message());
    }
    assert_eq!(client.batch_uuids(BatchUuidsRequest { count: 10 }).await.unwrap().into_inner().uuids.len(), 10);
    for _ in 0..3 {
        client.next_uuid(NextUuidRequest {}).await.unwrap();
    }
    let series = |method: &str, code: &str| {
        format!(r#"snowmint_requests_total{{code="{code}",method="{method}",protocol="grpc"}}"#)
    };
    assert_eq!(server.metric(&series("NextUuid", "OK")).await, 3.0);
    assert_eq!(server.metric(&series("BatchUuids", "OK")).await, 1.0);
    assert_eq!(server.metric(&series("BatchUuids", "InvalidArgument")).await, 3.0);
    assert_eq!(server.metric(&series("NextId", "OK")).await, 0.0);
    server.stop().await;
}
