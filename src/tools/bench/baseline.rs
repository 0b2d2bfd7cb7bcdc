//! The RocksDB side of the log workloads, and the side-by-side comparison.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::{
    best_read, run_writers, strata_append, strata_read_all, strata_seal, AppendRun, AppendWorkload,
    Comparison,
};

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
) -> Result<(Arc<rocksdb::DB>, AppendRun), String> {
    let mut opts = rocksdb::Options::default();
    opts.create_if_missing(true);
    let db = Arc::new(rocksdb::DB::open(&opts, dir).map_err(|e| e.to_string())?);
    let value = vec![0x5au8; w.value_size];
    let mut wo = rocksdb::WriteOptions::default();
    wo.set_sync(w.sync);
    let run = run_writers(w.writers, w.per_writer(), w.sync, |writer, seq| {
        db.put_opt(key(writer as u32, seq as u64), &value, &wo)
            .map_err(|e| e.to_string())
    })?;
    Ok((db, run))
}

/// Walks every key of `db` with a raw iterator, borrowing each value; returns the count and
/// wall time.
pub fn rocksdb_read_all(db: &rocksdb::DB) -> Result<(usize, Duration), String> {
    let start = Instant::now();
    let mut count = 0;
    let mut it = db.raw_iterator();
    it.seek_to_first();
    while it.valid() {
        std::hint::black_box(it.value());
        count += 1;
        it.next();
    }
    it.status().map_err(|e| e.to_string())?;
    Ok((count, start.elapsed()))
}

/// Flushes the memtable, so later reads walk SST files.
pub fn rocksdb_seal(db: &rocksdb::DB) -> Result<(), String> {
    db.flush().map_err(|e| e.to_string())
}

fn append_row(w: &AppendWorkload, strata: &AppendRun, rocks: &AppendRun) -> Comparison {
    let size = (w.total(), (w.total() * w.value_size) as u64);
    Comparison::of_runs(format!("append {}", w.label()), size, strata, rocks)
}

fn read_row(w: &AppendWorkload, what: &str, strata: Duration, rocks: Duration) -> Comparison {
    Comparison {
        name: format!("read {} B, {what}", w.value_size),
        operations: w.total(),
        bytes: (w.total() * w.value_size) as u64,
        strata,
        rocksdb: rocks,
        latency: None,
        cpu: None,
    }
}

/// The faster of two runs.
fn faster(best: Option<AppendRun>, run: AppendRun) -> Option<AppendRun> {
    match best {
        Some(b) if b.elapsed <= run.elapsed => Some(b),
        _ => Some(run),
    }
}

/// Runs each workload on both engines, back to back, `passes` times (alternating engines, each
/// pass in fresh directories under `root`; the faster pass of each engine counts). After each
/// buffered workload, both engines read everything back, before and after sealing.
pub fn compare(
    root: &Path,
    workloads: &[AppendWorkload],
    passes: usize,
) -> Result<Vec<Comparison>, String> {
    let mut out = Vec::new();
    for (i, w) in workloads.iter().enumerate() {
        let (mut strata, mut rocks, mut reads) = (None, None, Vec::new());
        for pass in 0..passes.max(1) {
            let dir = |engine: &str| root.join(format!("{engine}-{i}-{pass}"));
            let (log, run) = strata_append(&dir("strata"), w).map_err(|e| e.to_string())?;
            strata = faster(strata, run);
            let (db, run) = rocksdb_append(&dir("rocksdb"), w)?;
            rocks = faster(rocks, run);
            if pass + 1 == passes.max(1) && !w.sync {
                reads = compare_reads(w, &log, &db)?;
            }
            log.close_blocking().map_err(|e| e.to_string())?;
            drop(db);
            for engine in ["strata", "rocksdb"] {
                std::fs::remove_dir_all(dir(engine)).map_err(|e| e.to_string())?;
            }
        }
        let (Some(strata), Some(rocks)) = (strata, rocks) else {
            continue;
        };
        out.push(append_row(w, &strata, &rocks));
        out.append(&mut reads);
    }
    Ok(out)
}

/// Both engines read what the workload wrote, from the active segment (memtable), then again
/// after sealing (SST files).
fn compare_reads(
    w: &AppendWorkload,
    log: &crate::log::Log,
    db: &rocksdb::DB,
) -> Result<Vec<Comparison>, String> {
    let strata_read = || strata_read_all(log).map_err(|e| e.to_string());
    let s = best_read(w.total(), strata_read)?;
    let r = best_read(w.total(), || rocksdb_read_all(db))?;
    let active = read_row(w, "active segment / memtable", s, r);
    strata_seal(log).map_err(|e| e.to_string())?;
    rocksdb_seal(db)?;
    let s = best_read(w.total(), strata_read)?;
    let r = best_read(w.total(), || rocksdb_read_all(db))?;
    Ok(vec![
        active,
        read_row(w, "sealed segments / SST files", s, r),
    ])
}
