//! Named layouts decode other systems' IDs to the creation times their owners published,
//! through the gRPC Decode call and through the offline `snowmint decode`.

mod common;

use common::{ServerBuilder, run_binary};
use snowmint::proto::DecodeRequest;

/// (layout, id, published creation time, worker, sequence, where it was published).
const PUBLISHED: &[(&str, u64, &str, u32, u32, &str)] = &[
    // Tweet-object example in X/Twitter's API docs: "created_at": "Wed Oct 10 20:19:24 +0000 2018".
    ("twitter", 1050118621198921728, "2018-10-10T20:19:24", 347, 0, "developer.x.com Tweet object"),
    // X API post-lookup example: "Wed Jan 06 18:40:40 +0000 2021".
    ("twitter", 1346889436626259968, "2021-01-06T18:40:40", 345, 0, "docs.x.com post lookup"),
    // Discord's developer docs, "Snowflakes": 2016-04-30 11:18:25.796 UTC, worker 1,
    // process 0 (read together: 1 << 5 = 32), increment 7.
    (
        "discord",
        175928847299117063,
        "2016-04-30T11:18:25.796Z",
        32,
        7,
        "discord.com/developers/docs/reference#snowflakes",
    ),
    // Instagram post IDs with their posts' published times (to the second).
    ("instagram", 2384288897814875714, "2020-08-26T13:43:27", 2675, 578, "Stack Overflow q. 63683015"),
    ("instagram", 3597631270905977008, "2025-03-27T15:58:09", 3078, 176, "Instagram API taken_at 1743091089"),
    // Sonyflake 0x45eec4a4600041b: 2020-08-12 17:35:29.98, machine 4.27 (0x041b).
    ("sonyflake", 0x45eec4a4600041b, "2020-08-12T17:35:29.980Z", 0x041b, 0, "obsidianforensics/unfurl tests"),
];

#[tokio::test]
async fn published_ids_decode_to_their_published_times() {
    let server = ServerBuilder::new().start().await;
    let mut client = server.client().await;
    for &(layout, id, time, worker, sequence, source) in PUBLISHED {
        let decoded = client
            .decode(DecodeRequest { id, layout: layout.into(), ..Default::default() })
            .await
            .unwrap()
            .into_inner();
        assert!(decoded.time.starts_with(time), "{layout} {id} ({source}): {} is not {time}", decoded.time);
        assert_eq!((decoded.worker_id, decoded.sequence), (worker, sequence), "{layout} {id}");
        assert_eq!(decoded.layout, layout);
        assert_eq!(decoded.id, id);
    }
    server.stop().await;
}

#[test]
fn offline_decode_prints_text_and_json_with_string_ids() {
    let (code, out, _) = run_binary(&["decode", "175928847299117063", "--layout", "discord"]);
    assert_eq!(code, 0);
    assert_eq!(
        out.trim(),
        "id=175928847299117063 time=2016-04-30T11:18:25.796Z unix_ms=1462015105796 worker_id=32 sequence=7 layout=discord"
    );
    let (code, out, _) = run_binary(&["decode", "0x45eec4a4600041b", "--layout", "sonyflake", "--json"]);
    assert_eq!(code, 0);
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(json["id"], "314948827708654619");
    assert_eq!(json["unix_ms"], "1597253729980");
    assert_eq!(json["time"], "2020-08-12T17:35:29.980Z");

    // snowmint's own layout by default: 2026-01-01 + 1 ms, worker 3, sequence 4.
    let id = (1u64 << 22) | (3 << 12) | 4;
    let (code, out, _) = run_binary(&["decode", &id.to_string(), "--json"]);
    assert_eq!(code, 0);
    let json: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(json["time"], "2026-01-01T00:00:00.001Z");
    assert_eq!((json["worker_id"].as_u64(), json["sequence"].as_u64()), (Some(3), Some(4)));

    let (code, _, err) = run_binary(&["decode", "12", "--layout", "uuid"]);
    assert_ne!(code, 0);
    assert!(err.contains("twitter, discord, instagram, sonyflake"), "{err}");
}
