//! Side-by-side workloads: Strata and RocksDB doing the same appends and reads in one run.
//!
//! Used by `strata bench` and by the criterion benches. Absolute times on a shared machine are
//! noise; the ratio of the two engines measured back to back is the number to read.

use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::error::{StoreError, StoreResult};
use crate::log::{Durability, Log, LogOptions};
use crate::segment::NewRecord;
use crate::store::Store;

/// Partitions (and RocksDB key prefixes) the workloads spread records over.
pub const BENCH_PARTITIONS: u32 = 4;

/// An append workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AppendWorkload {
    /// Records appended in all.
    pub records: usize,
    /// Bytes of each value.
    pub value_size: usize,
    /// Concurrent writers.
    pub writers: usize,
    /// Whether every append waits for fdatasync (RocksDB: `WriteOptions::set_sync(true)`).
    pub sync: bool,
}

/// Timings of one workload on both engines.
#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    /// What was measured.
    pub name: String,
    /// Operations per engine.
    pub operations: usize,
    /// Strata's wall time.
    pub strata: Duration,
    /// RocksDB's wall time.
    pub rocksdb: Duration,
}

impl Comparison {
    /// RocksDB time over Strata time: above 1 means Strata was faster.
    pub fn speedup(&self) -> f64 {
        self.rocksdb.as_secs_f64() / self.strata.as_secs_f64().max(1e-9)
    }

    /// Strata operations per second.
    pub fn strata_ops_per_sec(&self) -> f64 {
        self.operations as f64 / self.strata.as_secs_f64().max(1e-9)
    }

    /// RocksDB operations per second.
    pub fn rocksdb_ops_per_sec(&self) -> f64 {
        self.operations as f64 / self.rocksdb.as_secs_f64().max(1e-9)
    }
}

/// Log options for a workload.
pub fn strata_options(w: &AppendWorkload) -> LogOptions {
    LogOptions {
        durability: if w.sync {
            Durability::Sync
        } else {
            Durability::Interval(Duration::from_millis(200))
        },
        ..LogOptions::default()
    }
}

/// Appends the workload to a fresh Strata log in `dir`; returns the log and the wall time.
pub async fn strata_append(dir: &Path, w: &AppendWorkload) -> StoreResult<(Log, Duration)> {
    let store = Store::open(dir)?;
    let log = store.open_log("bench", BENCH_PARTITIONS, strata_options(w))?;
    let value = Bytes::from(vec![0x5au8; w.value_size]);
    let per_writer = w.records / w.writers.max(1);
    let start = Instant::now();
    let mut tasks = Vec::new();
    for writer in 0..w.writers.max(1) {
        let log = log.clone();
        let value = value.clone();
        tasks.push(tokio::spawn(async move {
            let partition = writer as u32 % BENCH_PARTITIONS;
            for _ in 0..per_writer {
                log.append(partition, vec![NewRecord::value(0, value.clone())])
                    .await?;
            }
            Ok::<(), StoreError>(())
        }));
    }
    for task in tasks {
        task.await
            .map_err(|e| StoreError::Invalid(e.to_string()))??;
    }
    Ok((log, start.elapsed()))
}

/// Reads every record of every partition of `log` in pages; returns the count and wall time.
pub fn strata_read_all(log: &Log) -> StoreResult<(usize, Duration)> {
    let start = Instant::now();
    let mut count = 0;
    for p in 0..log.partition_count() {
        log.for_each_record(p, 0, |_| {
            count += 1;
            Ok::<(), StoreError>(())
        })?;
    }
    Ok((count, start.elapsed()))
}

#[cfg(feature = "rocksdb")]
mod baseline {
    use super::*;
    use std::sync::Arc;

    fn key(partition: u32, seq: u64) -> [u8; 12] {
        let mut k = [0u8; 12];
        k[..4].copy_from_slice(&partition.to_be_bytes());
        k[4..].copy_from_slice(&seq.to_be_bytes());
        k
    }

    /// Appends the workload to a fresh RocksDB in `dir` (one put per record, WAL on).
    pub fn rocksdb_append(
        dir: &Path,
        w: &AppendWorkload,
    ) -> Result<(Arc<rocksdb::DB>, Duration), String> {
        let mut opts = rocksdb::Options::default();
        opts.create_if_missing(true);
        let db = Arc::new(rocksdb::DB::open(&opts, dir).map_err(|e| e.to_string())?);
        let value = vec![0x5au8; w.value_size];
        let per_writer = w.records / w.writers.max(1);
        let start = Instant::now();
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..w.writers.max(1))
                .map(|writer| {
                    let db = db.clone();
                    let value = &value;
                    s.spawn(move || {
                        let mut wo = rocksdb::WriteOptions::default();
                        wo.set_sync(w.sync);
                        for seq in 0..per_writer {
                            let k = key(writer as u32, seq as u64);
                            db.put_opt(k, value, &wo).map_err(|e| e.to_string())?;
                        }
                        Ok::<(), String>(())
                    })
                })
                .collect();
            handles
                .into_iter()
                .try_for_each(|h| h.join().map_err(|_| "writer thread panicked".to_string())?)
        })?;
        Ok((db, start.elapsed()))
    }

    /// Iterates over every key of `db`; returns the count and wall time.
    pub fn rocksdb_read_all(db: &rocksdb::DB) -> Result<(usize, Duration), String> {
        let start = Instant::now();
        let mut count = 0;
        for item in db.iterator(rocksdb::IteratorMode::Start) {
            let (_, v) = item.map_err(|e| e.to_string())?;
            std::hint::black_box(&v);
            count += 1;
        }
        Ok((count, start.elapsed()))
    }

    /// Runs each workload on both engines, back to back, in fresh directories under `root`.
    pub async fn compare(
        root: &Path,
        workloads: &[AppendWorkload],
    ) -> Result<Vec<Comparison>, String> {
        let mut out = Vec::new();
        for (i, w) in workloads.iter().enumerate() {
            let sdir = root.join(format!("strata-{i}"));
            let rdir = root.join(format!("rocksdb-{i}"));
            let (log, strata) = strata_append(&sdir, w).await.map_err(|e| e.to_string())?;
            let (db, rocks) = rocksdb_append(&rdir, w)?;
            let ops = (w.records / w.writers.max(1)) * w.writers.max(1);
            out.push(Comparison {
                name: format!(
                    "append {} B x {} writers, {}",
                    w.value_size,
                    w.writers,
                    if w.sync { "sync" } else { "buffered" }
                ),
                operations: ops,
                strata,
                rocksdb: rocks,
            });
            let (n_strata, strata_read) = strata_read_all(&log).map_err(|e| e.to_string())?;
            let (n_rocks, rocks_read) = rocksdb_read_all(&db)?;
            if n_strata != n_rocks {
                return Err(format!(
                    "read {n_strata} records from Strata, {n_rocks} from RocksDB"
                ));
            }
            out.push(Comparison {
                name: format!("sequential read of {} B records", w.value_size),
                operations: n_strata,
                strata: strata_read,
                rocksdb: rocks_read,
            });
            log.close().await.map_err(|e| e.to_string())?;
        }
        Ok(out)
    }
}

#[cfg(feature = "rocksdb")]
pub use baseline::{compare, rocksdb_append, rocksdb_read_all};
