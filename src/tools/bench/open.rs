//! What opening a fresh store costs (a test suite opens one per test): a store with an event log
//! of 4 partitions, then one group engine, on durable and on temporary stores, beside RocksDB
//! opening a fresh database.

use std::time::{Duration, Instant};

use crate::group::DiskGroupEngine;
use crate::{LogOptions, Store, StoreResult, TemporaryStore};

/// Median times of [`OPEN_PASSES`] fresh opens.
#[derive(Debug, Clone, Copy, Default)]
pub struct OpenTimes {
    /// `Store::open` of a new directory plus a 4-partition log.
    pub durable_log: Duration,
    /// The same plus `DiskGroupEngine::open_local`.
    pub durable_group: Duration,
    /// `TemporaryStore::new` plus a 4-partition log.
    pub temporary_log: Duration,
    /// The same plus `DiskGroupEngine::open_local`.
    pub temporary_group: Duration,
    /// RocksDB opening a new database (create_if_missing).
    pub rocksdb: Duration,
}

/// Fresh opens measured per kind; the median counts.
pub const OPEN_PASSES: usize = 5;

/// Measures [`OpenTimes`] under `root` (a scratch directory).
pub fn open_times(root: &std::path::Path) -> Result<OpenTimes, String> {
    let e = |e: crate::StoreError| e.to_string();
    let mut samples: [Vec<Duration>; 5] = Default::default();
    for pass in 0..OPEN_PASSES {
        let dir = root.join(format!("open-{pass}"));
        let (log, group) = timed(|| Store::open(&dir), |s| s).map_err(e)?;
        samples[0].push(log);
        samples[1].push(group);
        let (log, group) = timed(|| TemporaryStore::new_in(root), |s| s).map_err(e)?;
        samples[2].push(log);
        samples[3].push(group);
        let rocks = root.join(format!("rocks-{pass}"));
        let start = Instant::now();
        let mut options = rocksdb::Options::default();
        options.create_if_missing(true);
        drop(rocksdb::DB::open(&options, &rocks).map_err(|e| e.to_string())?);
        samples[4].push(start.elapsed());
    }
    let [a, b, c, d, r] = samples.map(median);
    Ok(OpenTimes {
        durable_log: a,
        durable_group: b,
        temporary_log: c,
        temporary_group: d,
        rocksdb: r,
    })
}

/// Opens a store with `open`, then a 4-partition log, then a group engine; returns the time to
/// the log and the time to the engine.
fn timed<S>(
    open: impl FnOnce() -> StoreResult<S>,
    store: fn(&S) -> &Store,
) -> StoreResult<(Duration, Duration)> {
    let start = Instant::now();
    let opened = open()?;
    let store = store(&opened);
    let _log = store.open_log("events", 4, LogOptions::default())?;
    let log = start.elapsed();
    let engine = DiskGroupEngine::open_local(store, "g")
        .map_err(|e| crate::StoreError::Invalid(e.to_string()))?;
    let group = start.elapsed();
    drop(engine);
    Ok((log, group))
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples.get(samples.len() / 2).copied().unwrap_or_default()
}
