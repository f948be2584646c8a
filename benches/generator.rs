//! Criterion benches of the pure core: one mint, and a batch mint per ID.

use std::hint::black_box;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use snowmint::generator::{Generator, Window};
use snowmint::layout::Layout;

fn generator() -> Generator {
    let mut generator = Generator::new(Layout::default_snowmint(), 5, 10_000).expect("the default layout is mintable");
    generator.set_windows(&[Window { slot: 7, floor: None, reserved: u64::MAX }]);
    generator
}

fn single(c: &mut Criterion) {
    let mut group = c.benchmark_group("mint");
    group.throughput(Throughput::Elements(1));
    group.bench_function("next_id", |b| {
        let mut g = generator();
        let mut tick = 0u64;
        let mut n = 0u32;
        b.iter(|| {
            // A new tick every 4,096 IDs, as under full load.
            n += 1;
            if n == 4096 {
                n = 0;
                tick += 1;
            }
            black_box(g.next_id(black_box(tick)).unwrap())
        })
    });
    group.finish();
}

fn batch(c: &mut Criterion) {
    let mut group = c.benchmark_group("mint");
    group.throughput(Throughput::Elements(4096));
    group.bench_function("fill_4096_per_batch", |b| {
        let mut g = generator();
        let mut tick = 0u64;
        b.iter_batched_ref(
            || Vec::with_capacity(4096),
            |out| {
                tick += 1;
                g.fill(black_box(tick), out, 4096).unwrap();
            },
            BatchSize::SmallInput,
        )
    });
    group.finish();
}

criterion_group!(benches, single, batch);
criterion_main!(benches);
