//! Side-by-side workloads: Strata and RocksDB doing the same appends and reads in one run.
//!
//! Used by `strata bench` and by the criterion benches. Absolute times on a shared machine are
//! noise; the ratio of the two engines measured back to back is the number to read.
//!
//! Both engines are driven the same way: `writers` OS threads, each appending one record per
//! call (Strata: [`Log::append_blocking`]; RocksDB: `put_opt` with the WAL on and
//! `sync = true` for Sync rows). Reads walk everything written, borrowing each value (Strata:
//! [`Log::visit`]; RocksDB: a raw iterator), first while the data sits in the active segment /
//! memtable, then again after both sealed it (roll / flush to SST files).
//!
//! Each timed run also reads the process's CPU clock ([`process_cpu`]) before and after: CPU
//! per operation (every thread of the process, the engine's background threads included) is
//! far steadier than wall time on a shared host, and is what an embedding application gives up.

use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::error::{StoreError, StoreResult};
use crate::log::{Durability, Log, LogOptions};
use crate::segment::NewRecord;
use crate::store::Store;

/// Partitions (and RocksDB key prefixes) the workloads spread records over.
pub const BENCH_PARTITIONS: u32 = 4;

/// Passes of each read workload; the fastest counts (for both engines alike).
pub const READ_PASSES: usize = 3;

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

impl AppendWorkload {
    /// Records each writer appends.
    pub fn per_writer(&self) -> usize {
        self.records / self.writers.max(1)
    }

    /// Records appended in all (a multiple of the writer count).
    pub fn total(&self) -> usize {
        self.per_writer() * self.writers.max(1)
    }

    /// A short label: `100 B x 64 writers, sync`.
    pub fn label(&self) -> String {
        let mode = if self.sync { "sync" } else { "buffered" };
        format!("{} B x {} writers, {mode}", self.value_size, self.writers)
    }
}

/// Latency percentiles of single operations.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Latency {
    /// Median.
    pub p50: Duration,
    /// 99th percentile.
    pub p99: Duration,
    /// 99.9th percentile.
    pub p999: Duration,
}

/// CPU time the whole process has used so far: every thread, live or exited.
pub fn process_cpu() -> Duration {
    cpu_clock(rustix::time::ClockId::ProcessCPUTime)
}

/// The reading of CPU-time clock `id`.
fn cpu_clock(id: rustix::time::ClockId) -> Duration {
    let t = rustix::time::clock_gettime(id);
    let nanos = u32::try_from(t.tv_nsec).unwrap_or(0).min(999_999_999);
    Duration::new(u64::try_from(t.tv_sec).unwrap_or(0), nanos)
}

/// Wall time, process CPU time and per-operation latencies of a run.
#[derive(Debug)]
pub struct Timer {
    samples: Vec<Duration>,
    started: Instant,
    /// [`process_cpu`] at the start.
    cpu_started: Duration,
    /// End of the last [`Timer::lap`] (or the start).
    last: Instant,
}

impl Timer {
    /// A run starting now.
    pub fn start() -> Self {
        let now = Instant::now();
        Self {
            samples: Vec::new(),
            started: now,
            cpu_started: process_cpu(),
            last: now,
        }
    }

    /// Records one operation as the time since the last lap (or the start), for a loop whose
    /// operations are not calls (a page assembled from an iterator).
    pub fn lap(&mut self) {
        let now = Instant::now();
        self.samples.push(now - self.last);
        self.last = now;
    }

    /// Runs and times one operation.
    pub fn time<T>(&mut self, op: impl FnOnce() -> T) -> T {
        let began = Instant::now();
        let out = op();
        self.samples.push(began.elapsed());
        out
    }

    /// Runs and times one asynchronous operation.
    pub async fn time_async<T>(&mut self, op: impl std::future::Future<Output = T>) -> T {
        let began = Instant::now();
        let out = op.await;
        self.samples.push(began.elapsed());
        out
    }

    /// The wall time and process CPU time since the start, and the operations' percentiles.
    pub fn finish(mut self) -> AppendRun {
        AppendRun {
            elapsed: self.started.elapsed(),
            latency: Latency::of(&mut self.samples),
            cpu: process_cpu().saturating_sub(self.cpu_started),
        }
    }
}

impl Latency {
    /// Percentiles of `samples` (sorted here); zero when there are none.
    pub fn of(samples: &mut [Duration]) -> Self {
        samples.sort_unstable();
        let at = |q: f64| {
            let last = samples.len().saturating_sub(1);
            samples
                .get(((last as f64) * q).round() as usize)
                .copied()
                .unwrap_or_default()
        };
        Self {
            p50: at(0.50),
            p99: at(0.99),
            p999: at(0.999),
        }
    }
}

/// What one engine's run of an append workload took.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AppendRun {
    /// Wall time of all appends.
    pub elapsed: Duration,
    /// Per-append latency percentiles (of every Sync append, of a sample of buffered ones).
    pub latency: Latency,
    /// CPU time of the whole process during the run ([`process_cpu`]).
    pub cpu: Duration,
}

/// Timings of one workload on both engines.
#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    /// What was measured.
    pub name: String,
    /// Operations per engine.
    pub operations: usize,
    /// Value bytes moved per engine.
    pub bytes: u64,
    /// Strata's wall time.
    pub strata: Duration,
    /// RocksDB's wall time.
    pub rocksdb: Duration,
    /// Per-operation latency (Strata, RocksDB) where it was measured (appends, group commands
    /// and read pages; not whole-log scans, whose unit is a record).
    pub latency: Option<(Latency, Latency)>,
    /// Process CPU time of each engine's run (Strata, RocksDB), where latency was measured.
    pub cpu: Option<(Duration, Duration)>,
}

impl Comparison {
    /// The row of two timed runs of `operations` operations moving `bytes` value bytes each.
    pub fn of_runs(
        name: String,
        (operations, bytes): (usize, u64),
        strata: &AppendRun,
        rocksdb: &AppendRun,
    ) -> Self {
        Self {
            name,
            operations,
            bytes,
            strata: strata.elapsed,
            rocksdb: rocksdb.elapsed,
            latency: Some((strata.latency, rocksdb.latency)),
            cpu: Some((strata.cpu, rocksdb.cpu)),
        }
    }

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

    /// CPU per operation of each engine (Strata, RocksDB), where it was measured.
    pub fn cpu_per_op(&self) -> Option<(Duration, Duration)> {
        let per_op = |d: Duration| d / u32::try_from(self.operations.max(1)).unwrap_or(u32::MAX);
        self.cpu.map(|(s, r)| (per_op(s), per_op(r)))
    }

    /// Strata value bytes per second, in MB/s.
    pub fn strata_megabytes_per_sec(&self) -> f64 {
        self.bytes as f64 / 1e6 / self.strata.as_secs_f64().max(1e-9)
    }
}

/// Log options for a workload.
pub fn strata_options(w: &AppendWorkload) -> LogOptions {
    LogOptions::default().with_durability(if w.sync {
        Durability::Sync
    } else {
        Durability::Interval(Duration::from_millis(200))
    })
}

/// Every how many buffered appends one is timed (two clock reads cost about as much as a tenth
/// of a buffered append; every Sync append is timed).
const BUFFERED_SAMPLE: usize = 16;

/// Runs `writers` threads of `per_writer` calls of `append(writer)`; returns the wall time and
/// the latency of every call (`every_call`) or of every [`BUFFERED_SAMPLE`]th.
pub(crate) fn run_writers<E: Send>(
    writers: usize,
    per_writer: usize,
    every_call: bool,
    append: impl Fn(usize, usize) -> Result<(), E> + Sync,
) -> Result<AppendRun, E> {
    let stride = if every_call { 1 } else { BUFFERED_SAMPLE };
    let (start, cpu_started) = (Instant::now(), process_cpu());
    let mut samples = std::thread::scope(|s| {
        let handles: Vec<_> = (0..writers.max(1))
            .map(|writer| {
                let append = &append;
                s.spawn(move || {
                    let mut samples = Vec::with_capacity(per_writer / stride + 1);
                    for seq in 0..per_writer {
                        let began = seq.is_multiple_of(stride).then(Instant::now);
                        append(writer, seq)?;
                        if let Some(began) = began {
                            samples.push(began.elapsed());
                        }
                    }
                    Ok(samples)
                })
            })
            .collect();
        let mut all = Vec::new();
        for handle in handles {
            match handle.join() {
                Ok(samples) => all.extend(samples?),
                Err(panic) => std::panic::resume_unwind(panic),
            }
        }
        Ok(all)
    })?;
    Ok(AppendRun {
        elapsed: start.elapsed(),
        latency: Latency::of(&mut samples),
        cpu: process_cpu().saturating_sub(cpu_started),
    })
}

/// Appends the workload to a fresh Strata log in `dir` (blocking); returns the log and the run.
pub fn strata_append(dir: &Path, w: &AppendWorkload) -> StoreResult<(Log, AppendRun)> {
    let store = Store::open(dir)?;
    let log = store.open_log("bench", BENCH_PARTITIONS, strata_options(w))?;
    let value = Bytes::from(vec![0x5au8; w.value_size]);
    let run = run_writers(w.writers, w.per_writer(), w.sync, |writer, _| {
        let partition = writer as u32 % BENCH_PARTITIONS;
        log.append_blocking(partition, vec![NewRecord::value(0, value.clone())])
            .map(|_| ())
    })?;
    Ok((log, run))
}

/// Visits every record of every partition of `log`, borrowing each value; returns the count
/// and wall time.
pub fn strata_read_all(log: &Log) -> StoreResult<(usize, Duration)> {
    let start = Instant::now();
    let mut count = 0;
    for p in 0..log.partition_count() {
        let mut visit = |r: crate::segment::RecordRef<'_>| {
            std::hint::black_box(r.value);
            count += 1;
            Ok::<(), StoreError>(())
        };
        log.visit(p, 0, i64::MAX, &mut visit)?;
    }
    Ok((count, start.elapsed()))
}

/// Seals every partition's active segment, so later reads walk sealed segments.
pub fn strata_seal(log: &Log) -> StoreResult<()> {
    (0..log.partition_count()).try_for_each(|p| log.roll_blocking(p))
}

/// The fastest of [`READ_PASSES`] passes of `read`, checking each pass saw `expected` records.
pub fn best_read<E: From<String>>(
    expected: usize,
    mut read: impl FnMut() -> Result<(usize, Duration), E>,
) -> Result<Duration, E> {
    let mut best = Duration::MAX;
    for _ in 0..READ_PASSES {
        let (count, took) = read()?;
        if count != expected {
            return Err(format!("read {count} records, expected {expected}").into());
        }
        best = best.min(took);
    }
    Ok(best)
}

#[cfg(feature = "rocksdb")]
mod baseline;
mod open;
mod scale;
#[cfg(feature = "rocksdb")]
mod seams;
mod shard_runtime;
#[cfg(feature = "rocksdb")]
mod tail;

pub use open::{open_times, OpenTimes, OPEN_PASSES};
pub use scale::{
    concurrent_groups, group_scale, partition_scale, ConcurrentGroups, Footprint, GroupScale,
    PartitionScale,
};
pub use shard_runtime::{shard_runtime, RuntimeComparison, RuntimeRun, RUNTIME_CORES};

#[cfg(feature = "rocksdb")]
pub use baseline::{compare, rocksdb_append, rocksdb_read_all, rocksdb_seal};
#[cfg(feature = "rocksdb")]
pub use seams::seam_rows;

#[cfg(test)]
mod tests {
    use super::*;

    /// CPU time the calling thread has used so far (other tests running beside this one do
    /// not count, unlike in [`process_cpu`]).
    fn thread_cpu() -> Duration {
        cpu_clock(rustix::time::ClockId::ThreadCPUTime)
    }

    #[test]
    fn a_run_counts_the_cpu_of_every_thread_it_started_even_after_they_exited() {
        // Busy work the optimizer cannot drop: CRCs of a buffer, on the threads of the run.
        let buf = vec![7u8; 1 << 20];
        let spin = || {
            let mut crc = 0;
            for _ in 0..8 {
                crc ^= crc32fast::hash(std::hint::black_box(&buf));
            }
            std::hint::black_box(crc);
        };
        let timer = Timer::start();
        let before = thread_cpu();
        spin();
        let first = thread_cpu().saturating_sub(before);
        let timed = timer.finish().cpu;
        assert!(first > Duration::ZERO, "the thread clock counts the work");
        assert!(
            timed >= first,
            "{timed:?}: a timer counts its own thread's work ({first:?})"
        );
        // The reference for one spin is the least of several: a single reading can be
        // inflated several times over by a cold cache or time the hypervisor stole (seen
        // on a loaded 2-core CI machine: 592 us against 160-210 us here).
        let one = (0..5)
            .map(|_| {
                let before = thread_cpu();
                spin();
                thread_cpu().saturating_sub(before)
            })
            .fold(first, Duration::min);
        let run = run_writers(4, 2, true, |_, _| {
            spin();
            Ok::<(), ()>(())
        })
        .unwrap();
        // Eight times that work ran on four threads that have exited by now; their CPU counts
        // (wall time may be shorter than it on several cores, the CPU cannot be).
        assert!(run.cpu >= one * 4, "{:?} against {one:?} for one", run.cpu);
        assert!(process_cpu() >= run.cpu);
    }
}
