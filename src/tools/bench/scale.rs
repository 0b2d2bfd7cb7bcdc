//! What a group and a partition cost: many group engines in one store (each opened, a stream
//! created and one 1 KiB append made) beside RocksDB doing the same durable writes with every
//! group under its own key prefix of one database; and one log of many small partitions. Each
//! reports the time per group or partition, the disk the store takes (allocated blocks), and the
//! descriptors, threads and mappings the process holds with everything open.

use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;
use ursula_runtime::{AppendRequest, ColdWriteAdmission, CreateStreamRequest, GroupEngine};
use ursula_shard::{BucketStreamId, CoreId, RaftGroupId, ShardId, ShardPlacement};

use crate::cold::ColdStore;
use crate::group::{DiskGroupEngine, GroupOptions};
use crate::{LogOptions, NewRecord, Store};

/// What the process holds, and what the store takes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Footprint {
    /// Bytes of disk allocated under the store's directory.
    pub disk_bytes: u64,
    /// Open file descriptors of the process.
    pub fds: usize,
    /// Threads of the process.
    pub threads: usize,
    /// Memory mappings of files under the store's directory.
    pub mappings: usize,
}

/// Many groups in one store, beside RocksDB.
#[derive(Debug, Clone, Default)]
pub struct GroupScale {
    /// Groups opened.
    pub groups: usize,
    /// Time of each group's open, create and append, in order.
    pub strata: Vec<Duration>,
    /// Time of RocksDB's two synced writes per group.
    pub rocksdb: Vec<Duration>,
    /// With every engine open.
    pub footprint: Footprint,
    /// The RocksDB database's disk, once written.
    pub rocksdb_disk_bytes: u64,
}

/// Many groups appending at once, beside RocksDB.
#[derive(Debug, Clone, Default)]
pub struct ConcurrentGroups {
    /// Groups, each appended to by one task (RocksDB: one thread each).
    pub groups: usize,
    /// Single appends per group.
    pub appends: usize,
    /// Strata's latency of each append.
    pub strata: Vec<Duration>,
    /// Wall time of Strata's whole run.
    pub strata_wall: Duration,
    /// RocksDB's latency of each synced append.
    pub rocksdb: Vec<Duration>,
    /// Wall time of RocksDB's whole run.
    pub rocksdb_wall: Duration,
    /// With every engine open, after the appends.
    pub footprint: Footprint,
}

/// One log of many partitions.
#[derive(Debug, Clone, Copy, Default)]
pub struct PartitionScale {
    /// Partitions of the log.
    pub partitions: u32,
    /// Opening the new log (creating its partitions).
    pub create: Duration,
    /// Appending the records (each partition's in one synced call).
    pub append: Duration,
    /// Reopening it in a new process-like store handle.
    pub reopen: Duration,
    /// With the log open and written.
    pub footprint: Footprint,
}

fn placement() -> ShardPlacement {
    ShardPlacement {
        core_id: CoreId(0),
        shard_id: ShardId(0),
        raft_group_id: RaftGroupId(0),
    }
}

/// Opens `groups` group engines in a new store under `root`, each with one stream and one
/// 1 KiB append, then does the same durable writes in one RocksDB.
pub async fn group_scale(root: &Path, groups: usize) -> Result<GroupScale, String> {
    let e = |e: &dyn std::fmt::Display| e.to_string();
    let dir = root.join("strata");
    let store = Store::open(&dir).map_err(|x| e(&x))?;
    let cold = ColdStore::local(&dir.join("cold")).map_err(|x| e(&x))?;
    let id = BucketStreamId::new("tenant", "orders");
    let mut engines = Vec::with_capacity(groups);
    let mut strata = Vec::with_capacity(groups);
    for g in 0..groups {
        let start = Instant::now();
        let mut engine = open_with_stream(&store, &cold, &format!("g{g}"), &id).await?;
        let none = ColdWriteAdmission::default();
        let mut append = AppendRequest::from_bytes(id.clone(), Bytes::from(vec![7u8; 1024]));
        append.content_type = "application/octet-stream".into();
        engine
            .append(append, placement(), none)
            .await
            .map_err(|x| e(&x))?;
        strata.push(start.elapsed());
        engines.push(engine);
    }
    let footprint = footprint(&dir);
    drop(engines);
    drop(store);
    let (rocksdb, rocksdb_disk_bytes) = rocksdb_groups(&root.join("rocksdb"), groups)?;
    Ok(GroupScale {
        groups,
        strata,
        rocksdb,
        footprint,
        rocksdb_disk_bytes,
    })
}

/// Opens group `name` of `store` and creates stream `id` in it.
async fn open_with_stream(
    store: &Store,
    cold: &ColdStore,
    name: &str,
    id: &BucketStreamId,
) -> Result<DiskGroupEngine, String> {
    let options = GroupOptions::default();
    let mut engine =
        DiskGroupEngine::open(store, name, cold.clone(), options).map_err(|e| e.to_string())?;
    let create = CreateStreamRequest::new(id.clone(), "application/octet-stream");
    engine
        .create_stream(create, placement(), ColdWriteAdmission::default())
        .await
        .map_err(|e| e.to_string())?;
    Ok(engine)
}

/// RocksDB doing each group's two durable writes (the stream's row, then the append's bytes
/// and the new tail) as synced `WriteBatch`es, every group under its own key prefix.
fn rocksdb_groups(dir: &Path, groups: usize) -> Result<(Vec<Duration>, u64), String> {
    let mut options = rocksdb::Options::default();
    options.create_if_missing(true);
    let db = rocksdb::DB::open(&options, dir).map_err(|e| e.to_string())?;
    let mut synced = rocksdb::WriteOptions::default();
    synced.set_sync(true);
    let mut times = Vec::with_capacity(groups);
    for g in 0..groups {
        let start = Instant::now();
        let mut create = rocksdb::WriteBatch::default();
        create.put(format!("g{g}/t/orders"), 0u64.to_be_bytes());
        db.write_opt(create, &synced).map_err(|e| e.to_string())?;
        let mut append = rocksdb::WriteBatch::default();
        append.put(format!("g{g}/p/orders/0"), [7u8; 1024]);
        append.put(format!("g{g}/t/orders"), 1024u64.to_be_bytes());
        db.write_opt(append, &synced).map_err(|e| e.to_string())?;
        times.push(start.elapsed());
    }
    drop(db);
    Ok((times, disk_bytes(dir)))
}

/// `groups` group engines of one store under `root`, each appended to by its own task on the
/// caller's (multi-thread) runtime, `appends` single 1 KiB appends each (each durable before the
/// next); then RocksDB with one thread per group, each append one synced `WriteBatch` (the
/// bytes and the stream's tail) under the group's key prefix.
pub async fn concurrent_groups(
    root: &Path,
    groups: usize,
    appends: usize,
) -> Result<ConcurrentGroups, String> {
    let e = |e: &dyn std::fmt::Display| e.to_string();
    let dir = root.join("concurrent");
    let store = Store::open(&dir).map_err(|x| e(&x))?;
    let cold = ColdStore::local(&dir.join("cold")).map_err(|x| e(&x))?;
    let id = BucketStreamId::new("tenant", "orders");
    let mut engines = Vec::with_capacity(groups);
    for g in 0..groups {
        engines.push(open_with_stream(&store, &cold, &format!("c{g}"), &id).await?);
    }
    let start = Instant::now();
    let tasks: Vec<_> = engines
        .into_iter()
        .map(|mut engine| {
            let id = id.clone();
            tokio::spawn(async move {
                let mut times = Vec::with_capacity(appends);
                for _ in 0..appends {
                    let mut r = AppendRequest::from_bytes(id.clone(), Bytes::from(vec![7u8; 1024]));
                    r.content_type = "application/octet-stream".into();
                    let at = Instant::now();
                    engine
                        .append(r, placement(), ColdWriteAdmission::default())
                        .await
                        .map_err(|x| x.to_string())?;
                    times.push(at.elapsed());
                }
                Ok::<_, String>(times)
            })
        })
        .collect();
    let mut strata = Vec::with_capacity(groups * appends);
    for task in tasks {
        strata.extend(task.await.map_err(|x| e(&x))??);
    }
    let strata_wall = start.elapsed();
    let footprint = footprint(&dir);
    drop(store);
    let (rocksdb, rocksdb_wall) =
        rocksdb_concurrent(&root.join("concurrent-rocksdb"), groups, appends)?;
    Ok(ConcurrentGroups {
        groups,
        appends,
        strata,
        strata_wall,
        rocksdb,
        rocksdb_wall,
        footprint,
    })
}

/// RocksDB's side of [`concurrent_groups`].
fn rocksdb_concurrent(
    dir: &Path,
    groups: usize,
    appends: usize,
) -> Result<(Vec<Duration>, Duration), String> {
    let mut options = rocksdb::Options::default();
    options.create_if_missing(true);
    let db = std::sync::Arc::new(rocksdb::DB::open(&options, dir).map_err(|e| e.to_string())?);
    let start = Instant::now();
    let threads: Vec<_> = (0..groups)
        .map(|g| {
            let db = db.clone();
            std::thread::spawn(move || {
                let mut synced = rocksdb::WriteOptions::default();
                synced.set_sync(true);
                let mut times = Vec::with_capacity(appends);
                for i in 0..appends {
                    let at = Instant::now();
                    let mut batch = rocksdb::WriteBatch::default();
                    batch.put(format!("c{g}/p/orders/{i:016}"), [7u8; 1024]);
                    batch.put(
                        format!("c{g}/t/orders"),
                        ((i as u64 + 1) * 1024).to_be_bytes(),
                    );
                    db.write_opt(batch, &synced).map_err(|e| e.to_string())?;
                    times.push(at.elapsed());
                }
                Ok::<_, String>(times)
            })
        })
        .collect();
    let mut times = Vec::with_capacity(groups * appends);
    for thread in threads {
        times.extend(
            thread
                .join()
                .map_err(|_| "a RocksDB thread panicked".to_string())??,
        );
    }
    Ok((times, start.elapsed()))
}

/// One log of `partitions` partitions in a new store under `root`, ten 100 B records per
/// partition, then reopened.
pub fn partition_scale(root: &Path, partitions: u32) -> Result<PartitionScale, String> {
    let e = |e: crate::StoreError| e.to_string();
    let dir = root.join(format!("partitions-{partitions}"));
    let store = Store::open(&dir).map_err(e)?;
    let start = Instant::now();
    let log = store
        .open_log("wide", partitions, LogOptions::default())
        .map_err(e)?;
    let create = start.elapsed();
    let start = Instant::now();
    for p in 0..partitions {
        let records = (0..10)
            .map(|i| NewRecord::value(i, Bytes::from(vec![b'a' + (i % 26) as u8; 100])))
            .collect();
        log.append_blocking(p, records).map_err(e)?;
    }
    let append = start.elapsed();
    let footprint = footprint(&dir);
    drop(log);
    store.close_blocking().map_err(e)?;
    drop(store);
    let start = Instant::now();
    let store = Store::open(&dir).map_err(e)?;
    let log = store
        .open_log("wide", partitions, LogOptions::default())
        .map_err(e)?;
    let reopen = start.elapsed();
    let expected = 10 * i64::from(partitions);
    let found: i64 = (0..partitions)
        .map(|p| log.high_water_mark(p))
        .sum::<Result<i64, _>>()
        .map_err(e)?;
    if found != expected {
        return Err(format!("reopened with {found} records, {expected} written"));
    }
    Ok(PartitionScale {
        partitions,
        create,
        append,
        reopen,
        footprint,
    })
}

/// What the process holds now, and the disk under `dir`.
fn footprint(dir: &Path) -> Footprint {
    let count = |d: &str| std::fs::read_dir(d).map_or(0, |entries| entries.count());
    let prefix = dir.to_string_lossy().into_owned();
    let mappings = std::fs::read_to_string("/proc/self/maps").map_or(0, |maps| {
        maps.lines().filter(|l| l.contains(prefix.as_str())).count()
    });
    Footprint {
        disk_bytes: disk_bytes(dir),
        fds: count("/proc/self/fd"),
        threads: count("/proc/self/task"),
        mappings,
    }
}

/// Bytes of disk allocated to the files under `dir` (holes not counted).
fn disk_bytes(dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .filter_map(|entry| entry.ok())
        .map(|entry| match entry.metadata() {
            Ok(m) if m.is_dir() => disk_bytes(&entry.path()) + m.blocks() * 512,
            Ok(m) => m.blocks() * 512,
            Err(_) => 0,
        })
        .sum()
}
