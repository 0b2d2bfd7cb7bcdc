//! Criterion benches of the group engine, each beside RocksDB doing the same durable work in the
//! same run (see `strata::tools::group_bench`): single and batched appends, reads of hot and of
//! cold bytes (from the object cache, and fetched and checked on every read), and flush
//! throughput to the local cold store.

use std::time::Duration;

mod common;
use common::runtime;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use strata::cold::ColdStore;
use strata::group::{DiskGroupEngine, GroupOptions};
use strata::tools::group_bench::{
    open_engine, strata_appends, strata_batches, strata_flush_all, strata_read, GroupWorkload,
    RocksStreams,
};

const W: GroupWorkload = GroupWorkload {
    appends: 128,
    payload_size: 1024,
    batch: 32,
    read_page: 64 * 1024,
};

/// Sums the time `work` reports over `iters` runs, each in a fresh directory (setup untimed).
fn fresh_runs(iters: u64, mut work: impl FnMut(&std::path::Path) -> Duration) -> Duration {
    (0..iters)
        .map(|_| {
            let dir = tempfile::tempdir().unwrap();
            work(dir.path())
        })
        .sum()
}

fn appends(c: &mut Criterion) {
    let rt = runtime();
    let mut g = c.benchmark_group("group_append");
    g.sample_size(10).measurement_time(Duration::from_secs(8));
    g.throughput(Throughput::Elements(W.appends as u64));
    g.bench_function("strata/one_per_call", |b| {
        b.iter_custom(|iters| {
            fresh_runs(iters, |dir| {
                rt.block_on(async {
                    let (_store, mut engine) = open_engine(dir).await.unwrap();
                    strata_appends(&mut engine, &W).await.unwrap().elapsed
                })
            })
        })
    });
    g.bench_function("rocksdb/one_per_call", |b| {
        b.iter_custom(|iters| {
            fresh_runs(iters, |dir| {
                RocksStreams::open(dir)
                    .unwrap()
                    .appends(&W)
                    .unwrap()
                    .elapsed
            })
        })
    });
    g.bench_function("strata/batch_32", |b| {
        b.iter_custom(|iters| {
            fresh_runs(iters, |dir| {
                rt.block_on(async {
                    let (_store, mut engine) = open_engine(dir).await.unwrap();
                    strata_batches(&mut engine, &W).await.unwrap().elapsed
                })
            })
        })
    });
    g.bench_function("rocksdb/batch_32", |b| {
        b.iter_custom(|iters| {
            fresh_runs(iters, |dir| {
                RocksStreams::open(dir)
                    .unwrap()
                    .batches(&W)
                    .unwrap()
                    .elapsed
            })
        })
    });
    g.finish();
}

fn reads_and_flush(c: &mut Criterion) {
    let rt = runtime();
    let big = GroupWorkload { appends: 4096, ..W };
    let bytes = (big.appends * big.payload_size) as u64;
    let strata_dir = tempfile::tempdir().unwrap();
    let rocks_dir = tempfile::tempdir().unwrap();
    let (_store, mut engine) = rt.block_on(open_engine(strata_dir.path())).unwrap();
    rt.block_on(strata_batches(&mut engine, &big)).unwrap();
    let rocks = RocksStreams::open(rocks_dir.path()).unwrap();
    rocks.batches(&big).unwrap();

    let mut g = c.benchmark_group("group_read_4MiB");
    g.sample_size(10).measurement_time(Duration::from_secs(6));
    g.throughput(Throughput::Bytes(bytes));
    g.bench_function("strata/hot", |b| {
        b.iter(|| rt.block_on(strata_read(&mut engine, &big, 0)).unwrap())
    });
    g.bench_function("rocksdb", |b| b.iter(|| rocks.read(&big).unwrap()));
    let flush = rt.block_on(strata_flush_all(&mut engine)).unwrap();
    assert_eq!(flush.bytes, bytes);
    g.bench_function("strata/cold_local", |b| {
        b.iter(|| rt.block_on(strata_read(&mut engine, &big, 0)).unwrap())
    });
    // Without the object cache every read fetches, decodes and checks each chunk's digest.
    drop(engine);
    let cold = ColdStore::local(&strata_dir.path().join("cold"))
        .unwrap()
        .with_cache_bytes(0);
    let mut engine =
        DiskGroupEngine::open(&_store, "bench", cold, GroupOptions::default()).unwrap();
    g.bench_function("strata/cold_local_uncached", |b| {
        b.iter(|| rt.block_on(strata_read(&mut engine, &big, 0)).unwrap())
    });
    g.finish();

    let mut g = c.benchmark_group("cold_flush_4MiB");
    g.sample_size(10).measurement_time(Duration::from_secs(8));
    g.throughput(Throughput::Bytes(bytes));
    g.bench_function("strata/local_1MiB_objects", |b| {
        b.iter_custom(|iters| {
            fresh_runs(iters, |dir| {
                rt.block_on(async {
                    let (_store, mut engine) = open_engine(dir).await.unwrap();
                    strata_batches(&mut engine, &big).await.unwrap();
                    strata_flush_all(&mut engine).await.unwrap().duration
                })
            })
        })
    });
    g.finish();
}

criterion_group!(benches, appends, reads_and_flush);
criterion_main!(benches);
