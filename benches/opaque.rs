//! Criterion benches of opaque IDs, per ID: making one (FF1 encryption, and with its string
//! form as the server answers it), and revealing one (from its value, and from its string).

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use snowmint::opaque::{Keyring, OpaqueId};

fn keyring() -> Keyring {
    Keyring::new([(0, [0x11; 32]), (1, [0x5a; 32])]).expect("two distinct keys")
}

fn opaque(c: &mut Criterion) {
    let ring = keyring();
    let mut group = c.benchmark_group("opaque");
    group.throughput(Throughput::Elements(1));
    // Consecutive IDs, as one worker mints them.
    let mut id = 1u64 << 40;
    group.bench_function("encode", |b| {
        b.iter(|| {
            id += 1;
            black_box(ring.encode(black_box(id)).unwrap())
        })
    });
    group.bench_function("encode_with_text", |b| {
        b.iter(|| {
            id += 1;
            let opaque = ring.encode(black_box(id)).unwrap();
            black_box((opaque.value, opaque.to_string()))
        })
    });
    let opaques: Vec<OpaqueId> = (0..4096u64).map(|i| ring.encode((1 << 40) + i).unwrap()).collect();
    let texts: Vec<String> = opaques.iter().map(OpaqueId::to_string).collect();
    let mut i = 0;
    group.bench_function("reveal", |b| {
        b.iter(|| {
            i = (i + 1) % opaques.len();
            black_box(ring.reveal(black_box(opaques[i])).unwrap())
        })
    });
    group.bench_function("reveal_text", |b| {
        b.iter(|| {
            i = (i + 1) % texts.len();
            black_box(ring.reveal_text(black_box(&texts[i])).unwrap())
        })
    });
    group.finish();
}

criterion_group!(benches, opaque);
criterion_main!(benches);
