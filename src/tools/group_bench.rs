//! Group-engine workloads beside RocksDB doing the same durable work, for `strata bench` and the
//! criterion bench `group`: appends (one per call and batched), reads of hot and of cold bytes,
//! and flush throughput to the local cold store.
//!
//! The RocksDB baseline keeps a stream the obvious way: its tail under `t/<stream>` and each
//! append's bytes under `p/<stream>/<offset BE>`; an append reads the tail and writes both keys in
//! one synced `WriteBatch`. Strata does more per append (payload record, commit record with the
//! stream row, message row, producer, usage, integrity and commit index, one fdatasync of the
//! payload log's journal, then the same changes into RocksDB without its WAL), so the ratio prices
//! that.
//!
//! Each timed run starts with no dirty data left in the page cache by an earlier one (a
//! `sync(2)` first): the rows' stores stay on disk until the bench ends, and writeback of an
//! earlier run's unsynced pages (Strata's segments are synced at checkpoints, not per command)
//! would otherwise land on whichever engine runs next.

use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;
use ursula_runtime::{
    AppendBatchRequest, AppendRequest, ColdWriteAdmission, CreateStreamRequest, GroupEngine,
    ReadStreamRequest,
};
use ursula_shard::{BucketStreamId, CoreId, RaftGroupId, ShardId, ShardPlacement};

use super::bench::{AppendRun, Comparison, Timer, READ_PASSES};
use crate::cold::ColdStore;
use crate::group::{DiskGroupEngine, GroupOptions};
use crate::store::Store;

/// A group workload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupWorkload {
    /// Appends in all.
    pub appends: usize,
    /// Bytes per append.
    pub payload_size: usize,
    /// Payloads per `append_batch` call in the batched run.
    pub batch: usize,
    /// Bytes per read call.
    pub read_page: usize,
}

/// What flushing the whole stream to the cold tier took.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct FlushReport {
    /// Bytes moved.
    pub bytes: u64,
    /// Objects written.
    pub objects: usize,
    /// Wall time of every flush (plan, encode, upload, commit, reclaim).
    pub duration: Duration,
}

impl FlushReport {
    /// MB/s moved.
    pub fn megabytes_per_sec(&self) -> f64 {
        self.bytes as f64 / 1e6 / self.duration.as_secs_f64().max(1e-9)
    }
}

const CT: &str = "application/octet-stream";
const COLD_OBJECT_BYTES: usize = 1 << 20;

fn placement() -> ShardPlacement {
    ShardPlacement {
        core_id: CoreId(0),
        shard_id: ShardId(0),
        raft_group_id: RaftGroupId(0),
    }
}

fn stream() -> BucketStreamId {
    BucketStreamId::new("bench", "stream")
}

fn payload(w: &GroupWorkload, i: usize) -> Bytes {
    Bytes::from(vec![b'a' + (i % 26) as u8; w.payload_size])
}

/// Opens a group engine in `dir` with its cold store in `dir/cold`, with the stream created.
pub async fn open_engine(dir: &Path) -> Result<(Store, DiskGroupEngine), String> {
    let store = Store::open(dir).map_err(|e| e.to_string())?;
    let cold = ColdStore::local(&dir.join("cold")).map_err(|e| e.to_string())?;
    let mut engine = DiskGroupEngine::open(&store, "bench", cold, GroupOptions::default())
        .map_err(|e| e.to_string())?;
    let mut create = CreateStreamRequest::new(stream(), CT);
    create.now_ms = 1;
    engine
        .create_stream(create, placement(), ColdWriteAdmission::default())
        .await
        .map_err(|e| e.to_string())?;
    Ok((store, engine))
}

/// `appends` single appends (each durable before the next).
pub async fn strata_appends(
    engine: &mut DiskGroupEngine,
    w: &GroupWorkload,
) -> Result<AppendRun, String> {
    let mut timer = Timer::start();
    for i in 0..w.appends {
        let mut r = AppendRequest::from_bytes(stream(), payload(w, i));
        r.content_type = CT.into();
        r.now_ms = 2;
        timer
            .time_async(engine.append(r, placement(), ColdWriteAdmission::default()))
            .await
            .map_err(|e| e.to_string())?;
    }
    Ok(timer.finish())
}

/// The same payloads in `append_batch` calls of `batch`.
pub async fn strata_batches(
    engine: &mut DiskGroupEngine,
    w: &GroupWorkload,
) -> Result<AppendRun, String> {
    let mut timer = Timer::start();
    for chunk in (0..w.appends).collect::<Vec<_>>().chunks(w.batch.max(1)) {
        let payloads = chunk.iter().map(|&i| payload(w, i)).collect();
        let mut r = AppendBatchRequest::new(stream(), payloads);
        r.content_type = CT.into();
        r.now_ms = 2;
        let response = timer
            .time_async(engine.append_batch(r, placement(), ColdWriteAdmission::default()))
            .await
            .map_err(|e| e.to_string())?;
        if let Some(Err(e)) = response.items.into_iter().find(|i| i.is_err()) {
            return Err(e.to_string());
        }
    }
    Ok(timer.finish())
}

/// Reads the whole stream from `from` in pages; returns bytes read and the run (per page).
pub async fn strata_read(
    engine: &mut DiskGroupEngine,
    w: &GroupWorkload,
    from: u64,
) -> Result<(u64, AppendRun), String> {
    let mut timer = Timer::start();
    let mut offset = from;
    let mut total = 0;
    loop {
        let r = ReadStreamRequest {
            stream_id: stream(),
            offset,
            max_len: w.read_page,
            now_ms: 3,
            record: None,
            max_records: None,
        };
        let page = timer
            .time_async(engine.read_stream(r, placement()))
            .await
            .map_err(|e| e.to_string())?;
        total += page.payload.len() as u64;
        offset = page.next_offset;
        if page.up_to_date {
            break;
        }
    }
    Ok((total, timer.finish()))
}

/// Flushes every hot byte to the cold store in 1 MiB objects.
pub async fn strata_flush_all(engine: &mut DiskGroupEngine) -> Result<FlushReport, String> {
    let before = engine.backlog_bytes(&stream());
    let start = Instant::now();
    let mut objects = 0;
    while engine
        .flush_stream_cold(&stream(), COLD_OBJECT_BYTES, placement())
        .await
        .map_err(|e| e.to_string())?
        .is_some()
    {
        objects += 1;
    }
    Ok(FlushReport {
        bytes: before - engine.backlog_bytes(&stream()),
        objects,
        duration: start.elapsed(),
    })
}

/// The RocksDB baseline (see the module doc).
pub struct RocksStreams {
    db: rocksdb::DB,
    sync: rocksdb::WriteOptions,
}

impl RocksStreams {
    /// Opens the baseline database in `dir`.
    pub fn open(dir: &Path) -> Result<Self, String> {
        let mut options = rocksdb::Options::default();
        options.create_if_missing(true);
        let mut sync = rocksdb::WriteOptions::default();
        sync.set_sync(true);
        Ok(Self {
            db: rocksdb::DB::open(&options, dir).map_err(|e| e.to_string())?,
            sync,
        })
    }

    fn tail(&self) -> Result<u64, String> {
        Ok(
            match self.db.get(b"t/bench/stream").map_err(|e| e.to_string())? {
                Some(v) => u64::from_be_bytes(v.as_slice().try_into().map_err(|_| "bad tail")?),
                None => 0,
            },
        )
    }

    fn append_many(&self, payloads: &[Bytes]) -> Result<(), String> {
        let mut tail = self.tail()?;
        let mut batch = rocksdb::WriteBatch::default();
        for p in payloads {
            let mut key = b"p/bench/stream/".to_vec();
            key.extend_from_slice(&tail.to_be_bytes());
            batch.put(key, p);
            tail += p.len() as u64;
        }
        batch.put(b"t/bench/stream", tail.to_be_bytes());
        self.db
            .write_opt(batch, &self.sync)
            .map_err(|e| e.to_string())
    }

    /// Waits until RocksDB has no flush or compaction running or queued.
    pub fn settle(&self) -> Result<(), String> {
        self.db
            .wait_for_compact(&rocksdb::WaitForCompactOptions::default())
            .map_err(|e| e.to_string())
    }

    /// Single appends.
    pub fn appends(&self, w: &GroupWorkload) -> Result<AppendRun, String> {
        let mut timer = Timer::start();
        for i in 0..w.appends {
            let payload = [payload(w, i)];
            timer.time(|| self.append_many(&payload))?;
        }
        Ok(timer.finish())
    }

    /// Batched appends.
    pub fn batches(&self, w: &GroupWorkload) -> Result<AppendRun, String> {
        let mut timer = Timer::start();
        for chunk in (0..w.appends).collect::<Vec<_>>().chunks(w.batch.max(1)) {
            let payloads: Vec<Bytes> = chunk.iter().map(|&i| payload(w, i)).collect();
            timer.time(|| self.append_many(&payloads))?;
        }
        Ok(timer.finish())
    }

    /// Reads every payload of the stream in order, copying pages of `read_page` bytes.
    pub fn read(&self, w: &GroupWorkload) -> Result<(u64, AppendRun), String> {
        let mut timer = Timer::start();
        let mut total = 0u64;
        let mut page = Vec::with_capacity(w.read_page);
        let iter = self.db.iterator(rocksdb::IteratorMode::From(
            b"p/bench/stream/",
            rocksdb::Direction::Forward,
        ));
        for item in iter {
            let (key, value) = item.map_err(|e| e.to_string())?;
            if !key.starts_with(b"p/bench/stream/") {
                break;
            }
            page.extend_from_slice(&value);
            if page.len() >= w.read_page {
                total += page.len() as u64;
                page.clear();
                timer.lap();
            }
        }
        if !page.is_empty() {
            total += page.len() as u64;
            timer.lap();
        }
        Ok((total, timer.finish()))
    }
}

/// Runs `w` on both engines in fresh directories under `root`: appends, batched appends, hot
/// reads, the flush, cold reads, and batched appends after a warm-up ([`warm_up_bytes`]); then
/// the disk's floors for batches ([`disk_floor`], prepared and fresh space) beside RocksDB's
/// batch run. Returns the comparisons and the flush report.
pub async fn compare_group(
    root: &Path,
    w: &GroupWorkload,
) -> Result<(Vec<Comparison>, FlushReport), String> {
    let mut out = Vec::new();
    let rocks = RocksStreams::open(&root.join("rocksdb-single"))?;
    let (_store, mut engine) = open_engine(&root.join("strata-single")).await?;
    let strata = strata_appends(&mut engine, quiesced(w)).await?;
    let rocksdb = rocks.appends(quiesced(w))?;
    out.push(row(
        format!("group append {} B, one per call", w.payload_size),
        (w.appends, (w.appends * w.payload_size) as u64),
        strata,
        rocksdb,
    ));
    drop(engine);

    let rocks = RocksStreams::open(&root.join("rocksdb-batch"))?;
    let (_store2, mut engine) = open_engine(&root.join("strata-batch")).await?;
    let strata = strata_batches(&mut engine, quiesced(w)).await?;
    let rocksdb = rocks.batches(quiesced(w))?;
    out.push(row(
        format!("group append_batch {} x {} B", w.batch, w.payload_size),
        (w.appends, (w.appends * w.payload_size) as u64),
        strata,
        rocksdb.clone(),
    ));
    let batch_rocksdb = rocksdb;

    let (hot_bytes, strata) = fastest_strata_read(&mut engine, w).await?;
    let (rocks_bytes, rocksdb) = fastest((0..READ_PASSES).map(|_| rocks.read(w)))?;
    if hot_bytes != rocks_bytes {
        return Err(format!(
            "read {hot_bytes} bytes from Strata, {rocks_bytes} from RocksDB"
        ));
    }
    let pages = (hot_bytes as usize).div_ceil(w.read_page.max(1));
    out.push(row(
        format!("read hot, {} KiB pages", w.read_page / 1024),
        (pages, hot_bytes),
        strata,
        rocksdb,
    ));

    let flush = strata_flush_all(&mut engine).await?;
    let (cold_bytes, strata) = fastest_strata_read(&mut engine, w).await?;
    if cold_bytes != hot_bytes {
        return Err(format!("read {cold_bytes} cold bytes, {hot_bytes} hot"));
    }
    let (_, rocksdb) = fastest((0..READ_PASSES).map(|_| rocks.read(w)))?;
    out.push(row(
        format!("read cold (local store), {} KiB pages", w.read_page / 1024),
        (pages, hot_bytes),
        strata,
        rocksdb,
    ));
    drop(engine);
    out.push(warmed_batches(root, w).await?);
    // Last, so that their writes disturb no other row.
    let ceiling = disk_floor(&root.join("disk-floor"), quiesced(w), Space::Prepared)?;
    out.push(row(
        "ceiling: batch bytes + fdatasync, no engine".into(),
        (w.appends, (w.appends * w.payload_size) as u64),
        ceiling,
        batch_rocksdb.clone(),
    ));
    let fresh = disk_floor(&root.join("disk-floor-fresh"), quiesced(w), Space::Fresh)?;
    out.push(row(
        "floor: batch bytes + fdatasync, fresh file".into(),
        (w.appends, (w.appends * w.payload_size) as u64),
        fresh,
        batch_rocksdb,
    ));
    Ok((out, flush))
}

/// Bytes each engine takes before the warmed batch run: two journal files of the group payload
/// log and 8 MiB more, so that the run writes a recycled journal file (the third and later are
/// written over without zeros ahead: Strata's steady state); RocksDB has flushed two memtables
/// of its default size by then.
pub fn warm_up_bytes() -> usize {
    let journal = GroupOptions::default().payload_log.journal_bytes;
    usize::try_from(2 * journal).unwrap_or(usize::MAX / 2) + (8 << 20)
}

/// `w`'s batched appends into a Strata group and a RocksDB database that have both taken
/// [`warm_up_bytes`] in the same batches first (untimed).
async fn warmed_batches(root: &Path, w: &GroupWorkload) -> Result<Comparison, String> {
    let warm = GroupWorkload {
        appends: warm_up_bytes().div_ceil(w.payload_size.max(1)),
        ..*w
    };
    let rocks = RocksStreams::open(&root.join("rocksdb-warmed"))?;
    let (_store, mut engine) = open_engine(&root.join("strata-warmed")).await?;
    strata_batches(&mut engine, &warm).await?;
    rocks.batches(&warm)?;
    // RocksDB's warm-up leaves a memtable flush running for tens of milliseconds (seen: one,
    // 27 ms): most of Strata's timed run (~35 ms) would share the two cores and the disk with it.
    rocks.settle()?;
    let strata = strata_batches(&mut engine, quiesced(w)).await?;
    let rocksdb = rocks.batches(quiesced(w))?;
    Ok(row(
        format!(
            "group append_batch {} x {} B, after {} MiB",
            w.batch,
            w.payload_size,
            warm_up_bytes() >> 20
        ),
        (w.appends, (w.appends * w.payload_size) as u64),
        strata,
        rocksdb,
    ))
}

/// `w`, once every file system's dirty data is written back (`sync(2)`), for a timed run that
/// pays for no earlier run's writeback.
fn quiesced(w: &GroupWorkload) -> &GroupWorkload {
    rustix::fs::sync();
    w
}

/// Bytes a command adds beyond its payloads in the disk floor (Strata's commit record and batch
/// headers are about this size for a batch of one stream).
const FLOOR_COMMAND_OVERHEAD: usize = 256;

/// Where the disk floor writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Space {
    /// Into a file written (zeros) and synced whole beforehand, as a recycled journal file is.
    Prepared,
    /// At the end of a growing file, as a fresh log's file (RocksDB's WAL, a new journal file
    /// not yet prepared) is: each fdatasync also writes the file's new size and extents.
    Fresh,
}

/// The disk's floor for `append_batch`: each batch's payload bytes (plus
/// `FLOOR_COMMAND_OVERHEAD`, 256 bytes) written at the end of what came before in one file,
/// then fdatasynced, batch after batch. In [`Space::Prepared`] no engine doing one durable
/// write per command can beat it on this disk, so RocksDB's time over it is the highest ratio
/// the `append_batch` row can reach; [`Space::Fresh`] is what writing into new space costs
/// (an engine that prepares it ahead pays about as much again in zeros, once).
pub fn disk_floor(dir: &Path, w: &GroupWorkload, space: Space) -> Result<AppendRun, String> {
    use crate::fs::{FileSystem, OpenMode, RealFs};
    let fs = RealFs;
    let err = |e: std::io::Error| format!("disk floor in {}: {e}", dir.display());
    fs.create_dir(dir).map_err(err)?;
    let file = fs
        .open(&dir.join("floor"), OpenMode::Truncate)
        .map_err(err)?;
    let command = w.batch.max(1) * w.payload_size + FLOOR_COMMAND_OVERHEAD;
    let commands = w.appends.div_ceil(w.batch.max(1));
    if space == Space::Prepared {
        // Written and synced whole first, as Strata's journal is prepared ahead: overwriting
        // written blocks makes fdatasync write no extent or size change.
        let zeros = vec![0u8; 1 << 20];
        let mut at = 0u64;
        while at < (command * commands) as u64 {
            file.write_at(&zeros, at).map_err(err)?;
            at += zeros.len() as u64;
        }
        file.sync_all().map_err(err)?;
    }
    let bytes = vec![0x5au8; command];
    let mut timer = Timer::start();
    for i in 0..commands {
        timer.time(|| -> Result<(), String> {
            file.write_at(&bytes, (i * command) as u64).map_err(err)?;
            file.sync_data().map_err(err)
        })?;
    }
    Ok(timer.finish())
}

/// The fastest of [`READ_PASSES`] whole-stream reads of Strata (as the log's read rows do).
async fn fastest_strata_read(
    engine: &mut DiskGroupEngine,
    w: &GroupWorkload,
) -> Result<(u64, AppendRun), String> {
    let mut runs = Vec::with_capacity(READ_PASSES);
    for _ in 0..READ_PASSES {
        runs.push(strata_read(engine, w, 0).await);
    }
    fastest(runs)
}

/// The run with the least wall time; every run must have read the same bytes.
fn fastest(
    runs: impl IntoIterator<Item = Result<(u64, AppendRun), String>>,
) -> Result<(u64, AppendRun), String> {
    let mut best: Option<(u64, AppendRun)> = None;
    for run in runs {
        let (bytes, run) = run?;
        match &best {
            Some((seen, _)) if *seen != bytes => {
                return Err(format!("one pass read {seen} bytes, another {bytes}"))
            }
            Some((_, fastest)) if fastest.elapsed <= run.elapsed => {}
            _ => best = Some((bytes, run)),
        }
    }
    best.ok_or_else(|| "no read pass ran".to_string())
}

/// A comparison of `(operations, bytes)` from both engines' runs, with their latencies.
fn row(name: String, size: (usize, u64), s: AppendRun, r: AppendRun) -> Comparison {
    Comparison::of_runs(name, size, &s, &r)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_disk_floor_writes_each_command_after_the_last_into_prepared_or_fresh_space() {
        let dir = tempfile::tempdir().unwrap();
        let floor = dir.path().join("floor-dir");
        let w = GroupWorkload {
            appends: 70,
            payload_size: 100,
            batch: 32,
            read_page: 1024,
        };
        let run = disk_floor(&floor, &w, Space::Prepared).unwrap();
        assert!(run.latency.p50 > Duration::ZERO);
        let bytes = std::fs::read(floor.join("floor")).unwrap();
        let command = 32 * 100 + FLOOR_COMMAND_OVERHEAD;
        // Three commands (70 payloads in batches of 32), then the prepared zeros.
        assert!(bytes.len() > 3 * command);
        assert!(bytes[..3 * command].iter().all(|b| *b == 0x5a));
        assert!(bytes[3 * command..].iter().all(|b| *b == 0));
        let again = disk_floor(&floor, &w, Space::Prepared).unwrap_err();
        assert!(again.contains("disk floor in"), "{again}");
        let fresh = dir.path().join("fresh-dir");
        disk_floor(&fresh, &w, Space::Fresh).unwrap();
        let bytes = std::fs::read(fresh.join("floor")).unwrap();
        assert_eq!(
            bytes.len(),
            3 * command,
            "the file grows by each command only"
        );
        assert!(bytes.iter().all(|b| *b == 0x5a));
    }
}
