//! Criterion benches of the partition log, each beside RocksDB doing the same work in the same run:
//! append (Sync and buffered; 100 B and 1 KiB; one writer, 4 and 64 concurrent writers, each an
//! OS thread), sequential read of active and sealed segments (RocksDB: memtable and SST files),
//! visit_range, and compaction. Compare the two lines of each group; absolute numbers on a
//! shared machine are noise.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
mod common;
use common::runtime;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use strata::event_log::{DiskEventLog, MetadataEventLog};
use strata::log::CompactionPolicy;
use strata::tools::bench::{
    rocksdb_append, rocksdb_read_all, rocksdb_seal, strata_append, strata_read_all, strata_seal,
    AppendWorkload,
};
use strata::{LogOptions, NewRecord, Store};

/// Each iteration appends `workload.records` records into a fresh directory; the time of the
/// appends alone is reported (setup and teardown excluded).
fn append(c: &mut Criterion) {
    let mut group = c.benchmark_group("append");
    group
        .sample_size(10)
        .measurement_time(Duration::from_secs(8));
    for (value_size, writers, sync, records) in [
        (100, 64, true, 4_000),
        (1024, 64, true, 4_000),
        (100, 1, true, 200),
        (100, 4, false, 20_000),
        (1024, 4, false, 20_000),
    ] {
        let w = AppendWorkload {
            records,
            value_size,
            writers,
            sync,
        };
        let label = format!(
            "{value_size}B/{writers}w/{}",
            if sync { "sync" } else { "buffered" }
        );
        group.throughput(Throughput::Elements(w.total() as u64));
        group.bench_function(BenchmarkId::new("strata", &label), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let dir = tempfile::tempdir().unwrap();
                    let (log, run) = strata_append(dir.path(), &w).unwrap();
                    total += run.elapsed;
                    log.close_blocking().unwrap();
                }
                total
            })
        });
        group.bench_function(BenchmarkId::new("rocksdb", &label), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let dir = tempfile::tempdir().unwrap();
                    let (_db, run) = rocksdb_append(dir.path(), &w).unwrap();
                    total += run.elapsed;
                }
                total
            })
        });
    }
    group.finish();
}

/// Reads everything back: first from the active segment (RocksDB: its memtable), then, after
/// both sealed it (a roll; a flush to SST files), from sealed segments.
fn sequential_read(c: &mut Criterion) {
    let mut group = c.benchmark_group("sequential_read");
    group.sample_size(10);
    for value_size in [100usize, 1024] {
        let w = AppendWorkload {
            records: 50_000,
            value_size,
            writers: 4,
            sync: false,
        };
        let sdir = tempfile::tempdir().unwrap();
        let rdir = tempfile::tempdir().unwrap();
        let (log, _) = strata_append(sdir.path(), &w).unwrap();
        let (db, _) = rocksdb_append(rdir.path(), &w).unwrap();
        group.throughput(Throughput::Elements(w.total() as u64));
        for sealed in [false, true] {
            if sealed {
                strata_seal(&log).unwrap();
                rocksdb_seal(&db).unwrap();
            }
            let (s, r) = match sealed {
                false => ("strata/active", "rocksdb/memtable"),
                true => ("strata/sealed", "rocksdb/sst"),
            };
            group.bench_function(BenchmarkId::new(s, value_size), |b| {
                b.iter(|| assert_eq!(strata_read_all(&log).unwrap().0, w.total()))
            });
            group.bench_function(BenchmarkId::new(r, value_size), |b| {
                b.iter(|| assert_eq!(rocksdb_read_all(&db).unwrap().0, w.total()))
            });
        }
        log.close_blocking().unwrap();
    }
    group.finish();
}

fn visit_range(c: &mut Criterion) {
    let rt = runtime();
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(dir.path()).unwrap();
    let log = store
        .open_log(
            "v",
            1,
            LogOptions::default()
                .with_durability(strata::Durability::Interval(Duration::from_millis(100))),
        )
        .unwrap();
    let value = Bytes::from(vec![1u8; 256]);
    rt.block_on(async {
        for chunk in 0..100 {
            let records = (0..1000)
                .map(|_| NewRecord::value(chunk, value.clone()))
                .collect();
            log.append(0, records).await.unwrap();
        }
    });
    let events = DiskEventLog::new(log.clone());
    let mut group = c.benchmark_group("visit_range");
    group
        .sample_size(10)
        .throughput(Throughput::Elements(100_000));
    group.bench_function("strata/100k x 256B", |b| {
        b.iter(|| {
            rt.block_on(async {
                let mut n = 0u64;
                let mut visit = |_r| {
                    n += 1;
                    Ok(())
                };
                events.visit_range(0, 0, 100_000, &mut visit).await.unwrap();
                assert_eq!(n, 100_000);
            })
        })
    });
    group.finish();
    log.close_blocking().unwrap();
}

/// 20 000 keyed records over 500 keys: compaction keeps 500.
fn compaction(c: &mut Criterion) {
    let rt = runtime();
    let mut group = c.benchmark_group("compaction");
    group
        .sample_size(10)
        .throughput(Throughput::Elements(20_000));
    group.bench_function("strata/20k records 500 keys", |b| {
        b.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let dir = tempfile::tempdir().unwrap();
                let store = Store::open(dir.path()).unwrap();
                let options = LogOptions::default()
                    .with_durability(strata::Durability::Interval(Duration::from_millis(100)))
                    .with_segment_bytes(256 << 10)
                    .with_compaction(
                        CompactionPolicy::default().with_delete_retention(Duration::ZERO),
                    );
                let log = store.open_log("c", 1, options).unwrap();
                let log = Arc::new(log);
                rt.block_on(async {
                    for chunk in 0..20 {
                        let records = (0..1000)
                            .map(|i| {
                                NewRecord::keyed(
                                    0,
                                    Bytes::from(format!("key-{}", (chunk * 1000 + i) % 500)),
                                    Some(Bytes::from(vec![3u8; 100])),
                                )
                            })
                            .collect();
                        log.append(0, records).await.unwrap();
                    }
                });
                let start = Instant::now();
                let report = log.compact_blocking(strata::now_ms()).unwrap();
                total += start.elapsed();
                assert_eq!(report.records_removed, 19_500);
                log.close_blocking().unwrap();
            }
            total
        })
    });
    group.finish();
}

criterion_group!(benches, append, sequential_read, visit_range, compaction);
criterion_main!(benches);
