//! UUIDv7s in a real database: three snowmint servers (the binary, standalone, each with its
//! own slot) mint UUIDs, by NextUuid and by BatchUuids, in rounds interleaved across them; a
//! real PostgreSQL (Debian's `postgresql`, started by the test on a free loopback port) takes
//! every one into a `uuid` primary key, which refuses a duplicate. Then `ORDER BY id` must be
//! each instance's minting order, for the UUIDs of each instance, and time order across
//! instances within the clock bound: a UUID's time is that of its minting, from the moment
//! its call started (less a small tolerance) to the moment its answer came (plus the
//! servers' `--max-clock-drift-ms`, as far as a standalone server mints ahead of its clock).
//! PostgreSQL's order of `uuid`s is also checked to be the order of their bytes, and its text
//! form to be the servers'.

mod common;

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::postgres::Postgres;
use common::{Process, ServerBuilder};
use snowmint::proto::id_service_client::IdServiceClient;
use snowmint::proto::{BatchUuidsRequest, NextUuidRequest};
use tonic::transport::Channel;
use uuid::Uuid;

/// The slot (worker ID) of each instance.
const SLOTS: [u64; 3] = [1, 2, 3];
/// Rounds of minting; in each, every instance in turn (starting with another each round)
/// answers a few NextUuid calls and one BatchUuids.
const ROUNDS: usize = 6;
const BATCH: u32 = 1_000;
/// The servers' `--max-clock-drift-ms` (the default, stated here): a standalone server mints
/// at most this far ahead of its wall clock, on time borrowed after the clock stepped back.
const MAX_CLOCK_DRIFT_MS: i64 = 10_000;
/// How far a UUID's time may be below the wall clock read before its call: the server's
/// clock and the test's are the same host's, read in that order, so this is only slack for
/// rounding and for the minting time following the boot-time clock between its readings of
/// the wall clock.
const CLOCK_TOLERANCE_MS: i64 = 50;
/// The longest any statement may take.
const DB_LIMIT: Duration = Duration::from_secs(30);

/// One UUID as the test received it.
struct Minted {
    uuid: [u8; 16],
    /// The server's text form of it.
    text: String,
    instance: usize,
    /// Its place in its instance's minting order: the order of the answers, and within a
    /// batch that of the list.
    seq: usize,
    /// The wall clock (Unix ms) read before the call was made, and after its answer came.
    before_ms: i64,
    after_ms: i64,
}

fn unix_ms_now() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_millis() as i64
}

/// The UUID's 48-bit time field: the Unix ms at which its ID's tick starts.
fn unix_ms(uuid: &[u8; 16]) -> i64 {
    (u128::from_be_bytes(*uuid) >> 80) as i64
}

/// The slot in the UUID's minted field (20 bits of slot, 22 of sequence, split around the
/// variant bits; src/uuid7.rs).
fn slot(uuid: &[u8; 16]) -> u64 {
    let value = u128::from_be_bytes(*uuid);
    let minted = (((value >> 64) & 0xfff) << 30) | ((value >> 32) & ((1 << 30) - 1));
    (minted >> 22) as u64
}

/// Asks `client` (instance `instance`) for one UUID, or a batch of `count`, recorded in the
/// instance's minting order from `next_seq` on.
async fn mint(
    client: &mut IdServiceClient<Channel>,
    instance: usize,
    batch: Option<u32>,
    next_seq: &mut usize,
) -> Vec<Minted> {
    let before_ms = unix_ms_now();
    // Every call has the common client's deadline (CALL_LIMIT).
    let answers: Vec<(Vec<u8>, String)> = match batch {
        None => {
            let response = client.next_uuid(NextUuidRequest {}).await.expect("NextUuid").into_inner();
            vec![(response.uuid, response.text)]
        }
        Some(count) => {
            let response = client.batch_uuids(BatchUuidsRequest { count }).await.expect("BatchUuids").into_inner();
            assert_eq!(response.uuids.len(), count as usize, "BatchUuids({count}) answered a list of another length");
            assert_eq!(response.texts.len(), response.uuids.len(), "BatchUuids: one text per UUID");
            response.uuids.into_iter().zip(response.texts).collect()
        }
    };
    let after_ms = unix_ms_now();
    answers
        .into_iter()
        .map(|(bytes, text)| {
            let uuid: [u8; 16] = bytes.try_into().unwrap_or_else(|b: Vec<u8>| panic!("a UUID of {} bytes", b.len()));
            *next_seq += 1;
            Minted { uuid, text, instance, seq: *next_seq - 1, before_ms, after_ms }
        })
        .collect()
}

/// Inserts `minted` into `ids` in one statement.
async fn insert(db: &tokio_postgres::Client, minted: &[Minted]) {
    let ids: Vec<Uuid> = minted.iter().map(|m| Uuid::from_bytes(m.uuid)).collect();
    let instances: Vec<i32> = minted.iter().map(|m| m.instance as i32).collect();
    let seqs: Vec<i64> = minted.iter().map(|m| m.seq as i64).collect();
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 3] = [&ids, &instances, &seqs];
    let insert = db.execute(
        "INSERT INTO ids (id, instance, seq) SELECT * FROM unnest($1::uuid[], $2::int[], $3::bigint[])",
        &params,
    );
    let inserted = tokio::time::timeout(DB_LIMIT, insert)
        .await
        .unwrap_or_else(|_| panic!("INSERT of {} rows did not finish within {DB_LIMIT:?}", minted.len()))
        .unwrap_or_else(|e| panic!("INSERT of {} UUIDs: {e}", minted.len()));
    assert_eq!(inserted, minted.len() as u64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uuids_from_three_instances_sort_in_postgres_in_minting_and_time_order() {
    let started = std::time::Instant::now();
    // The servers start (each listening within 30 s, or the test fails) while PostgreSQL does.
    let servers = tokio::task::spawn_blocking(|| -> Vec<Process> {
        SLOTS
            .iter()
            .map(|slot| {
                ServerBuilder::new()
                    .args(["--worker-id", &slot.to_string(), "--max-clock-drift-ms", &MAX_CLOCK_DRIFT_MS.to_string()])
                    .spawn()
            })
            .collect()
    });
    let postgres = Postgres::start().await;
    let servers = common::join_within(servers, Duration::from_secs(100), "starting the servers").await;
    let mut clients = Vec::new();
    for server in &servers {
        clients.push(server.client().await);
    }
    let db = postgres.client().await;
    tokio::time::timeout(
        DB_LIMIT,
        db.batch_execute("CREATE TABLE ids (id uuid PRIMARY KEY, instance int, seq bigint)"),
    )
    .await
    .expect("CREATE TABLE within the limit")
    .expect("CREATE TABLE");
    eprintln!("PostgreSQL and {} servers up in {:?}", servers.len(), started.elapsed());
    let minting = std::time::Instant::now();

    // Rounds interleaved across the instances; each instance's turn mixes single calls with a
    // batch, in either order, and goes into the table before the next turn.
    let mut minted: Vec<Minted> = Vec::new();
    let mut next_seq = [0usize; SLOTS.len()];
    for round in 0..ROUNDS {
        for k in 0..SLOTS.len() {
            let i = (round + k) % SLOTS.len();
            let singles = 1 + (round + i) % 3;
            let mut asks = vec![None; singles];
            let at = if (round + i).is_multiple_of(2) { 0 } else { singles };
            asks.insert(at, Some(BATCH));
            let mut turn = Vec::new();
            for ask in asks {
                turn.extend(mint(&mut clients[i], i, ask, &mut next_seq[i]).await);
            }
            insert(&db, &turn).await;
            minted.extend(turn);
        }
    }
    let minting_took = minting.elapsed();

    // The primary key refused no UUID: all are there, none twice.
    let count: i64 = tokio::time::timeout(DB_LIMIT, db.query_one("SELECT count(*) FROM ids", &[]))
        .await
        .expect("count within the limit")
        .expect("count")
        .get(0);
    assert_eq!(count, minted.len() as i64, "rows in the table, of UUIDs minted");

    let rows = tokio::time::timeout(
        DB_LIMIT,
        db.query("SELECT id, id::text AS text, instance, seq FROM ids ORDER BY id", &[]),
    )
    .await
    .expect("SELECT within the limit")
    .expect("SELECT ... ORDER BY id");
    assert_eq!(rows.len(), minted.len());
    let by_uuid: HashMap<[u8; 16], &Minted> = minted.iter().map(|m| (m.uuid, m)).collect();
    assert_eq!(by_uuid.len(), minted.len(), "a UUID was answered twice");
    let ordered: Vec<&Minted> = rows
        .iter()
        .map(|row| {
            let id: Uuid = row.get(0);
            let text: String = row.get(1);
            let (instance, seq): (i32, i64) = (row.get(2), row.get(3));
            let m = *by_uuid.get(id.as_bytes()).unwrap_or_else(|| panic!("{id} in the table was never minted"));
            assert_eq!((m.instance, m.seq), (instance as usize, seq as usize), "{id}'s row");
            assert_eq!(text, m.text, "PostgreSQL's text form of {id}, and the server's");
            m
        })
        .collect();

    // PostgreSQL orders `uuid`s as Rust orders their bytes (most significant first).
    let mut sorted: Vec<[u8; 16]> = minted.iter().map(|m| m.uuid).collect();
    sorted.sort_unstable();
    let postgres_order: Vec<[u8; 16]> = ordered.iter().map(|m| m.uuid).collect();
    assert!(sorted == postgres_order, "ORDER BY id differs from the order of the UUIDs' bytes");

    // Every one a UUIDv7 of the RFC 9562 variant, carrying its instance's slot.
    for m in &minted {
        let value = u128::from_be_bytes(m.uuid);
        let uuid = Uuid::from_bytes(m.uuid);
        assert_eq!((value >> 76) & 0xf, 7, "{uuid}: version");
        assert_eq!((value >> 62) & 0b11, 0b10, "{uuid}: variant");
        assert_eq!(slot(&m.uuid), SLOTS[m.instance], "{uuid} from instance {}: slot", m.instance);
    }

    // (a) Per instance, ORDER BY id is the minting order, exactly.
    for (i, &count) in next_seq.iter().enumerate() {
        let seqs: Vec<usize> = ordered.iter().filter(|m| m.instance == i).map(|m| m.seq).collect();
        assert_eq!(seqs.len(), count, "instance {i}'s rows");
        if let Some(at) = seqs.iter().enumerate().position(|(place, &seq)| place != seq) {
            panic!(
                "instance {i}: ORDER BY id puts its UUID number {} at place {at} of its {count} (minting order broken)",
                seqs[at]
            );
        }
    }

    // (b) Across instances: the time field never goes down in ORDER BY id order (it is the top
    // field), each UUID's time is that of its minting, within the clock bound, and so no UUID
    // sorts before one received more than the bound before its own call started.
    // The tightest the bounds were: the least (time - call start), the most (time - answer).
    let (mut after_start, mut after_answer) = (i64::MAX, i64::MIN);
    for m in &minted {
        let (ms, uuid) = (unix_ms(&m.uuid), Uuid::from_bytes(m.uuid));
        assert!(
            ms >= m.before_ms - CLOCK_TOLERANCE_MS,
            "{uuid} (instance {}): its time {ms} is {} ms before its call started at {}",
            m.instance,
            m.before_ms - ms,
            m.before_ms
        );
        assert!(
            ms <= m.after_ms + MAX_CLOCK_DRIFT_MS,
            "{uuid} (instance {}): its time {ms} is {} ms after its answer came at {}, beyond the {MAX_CLOCK_DRIFT_MS} ms bound",
            m.instance,
            ms - m.after_ms,
            m.after_ms
        );
        after_start = after_start.min(ms - m.before_ms);
        after_answer = after_answer.max(ms - m.after_ms);
    }
    let mut latest_start: Option<&Minted> = None;
    for pair in ordered.windows(2) {
        let (earlier, later) = (pair[0], pair[1]);
        assert!(
            unix_ms(&earlier.uuid) <= unix_ms(&later.uuid),
            "ORDER BY id puts {} (time {}) before {} (time {})",
            Uuid::from_bytes(earlier.uuid),
            unix_ms(&earlier.uuid),
            Uuid::from_bytes(later.uuid),
            unix_ms(&later.uuid)
        );
    }
    for m in &ordered {
        if let Some(first) = latest_start
            && first.before_ms - CLOCK_TOLERANCE_MS > m.after_ms + MAX_CLOCK_DRIFT_MS
        {
            panic!(
                "{} (instance {}, call started at {}) sorts before {} (instance {}, answered at {}): \
                 more than the {MAX_CLOCK_DRIFT_MS} ms clock bound out of time order",
                Uuid::from_bytes(first.uuid),
                first.instance,
                first.before_ms,
                Uuid::from_bytes(m.uuid),
                m.instance,
                m.after_ms
            );
        }
        if latest_start.is_none_or(|first| m.before_ms > first.before_ms) {
            latest_start = Some(m);
        }
    }
    // Runs of one instance's UUIDs in ORDER BY id order: the instances' turns, interleaved.
    let runs = 1 + ordered.windows(2).filter(|w| w[0].instance != w[1].instance).count();
    eprintln!(
        "{} UUIDs from {} instances in {minting_took:?} (minted and inserted); ORDER BY id in {runs} runs of one instance; \
         each time >= its call's start {after_start:+} ms, <= its answer {after_answer:+} ms; {:?} in all",
        minted.len(),
        SLOTS.len(),
        started.elapsed()
    );
    drop(db);
    drop(servers);
    drop(postgres);
}
