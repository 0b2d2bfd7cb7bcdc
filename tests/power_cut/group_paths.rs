//! The group engine's write paths: stream commands (create, append, batch, close, delete),
//! checkpoints and retention, and the cold tier (flush, compaction, GC, orphan sweep) on the
//! default local cold store, all through the file layer; RocksDB's durability points are
//! crash points too.

use std::collections::BTreeMap;
use std::path::Path;

use bytes::Bytes;
use strata::cold::ColdStore;
use strata::fs::FileSystem;
use strata::group::{DiskGroupEngine, GroupOptions};
use strata::{LogOptions, Store};
use ursula_runtime::{
    AdvanceRetentionRequest, AppendBatchRequest, AppendRequest, CloseStreamRequest,
    ColdWriteAdmission, CreateStreamRequest, DeleteStreamRequest, GroupEngine, HeadStreamRequest,
    PublishSnapshotRequest, ReadStreamRequest,
};
use ursula_shard::{BucketStreamId, CoreId, RaftGroupId, ShardId, ShardPlacement};
use ursula_stream::StreamErrorCode;

use super::harness::{Disk, Outcome, Workload};
use super::log_paths::{open_image, open_with_retries, runtime, verify_clean, Tally};

const CT: &str = "application/octet-stream";

pub fn placement() -> ShardPlacement {
    ShardPlacement {
        core_id: CoreId(0),
        shard_id: ShardId(0),
        raft_group_id: RaftGroupId(0),
    }
}

pub fn group_options() -> GroupOptions {
    GroupOptions::default()
        .with_payload_log(
            LogOptions::default()
                .with_segment_bytes(4096)
                .with_journal_bytes(64 << 10),
        )
        .with_orphan_grace(std::time::Duration::ZERO)
}

/// Opens the group engine `g` of `store` with the default local cold store `<root>/cold`.
pub fn open_engine(store: &Store) -> Result<DiskGroupEngine, strata::group::GroupError> {
    let cold = ColdStore::local_with_fs(store.fs().clone(), &store.root().join("cold"))?;
    DiskGroupEngine::open(store, "g", cold, group_options())
}

fn stream(i: usize) -> BucketStreamId {
    BucketStreamId::new("tenant", format!("s{i}"))
}

fn bytes_of(step: usize, len: usize) -> Bytes {
    Bytes::from((0..len).map(|j| (step * 31 + j) as u8).collect::<Vec<u8>>())
}

/// What the engine acknowledged, per stream.
#[derive(Debug, Default)]
pub struct GroupAcks {
    /// Acknowledged byte ranges: `(stream, start) -> bytes`.
    pub appended: BTreeMap<(usize, u64), Bytes>,
    /// Streams whose creation was acknowledged (and not deleted since, as far as acked).
    pub live: BTreeMap<usize, bool>,
    /// Retained offset per stream: acknowledged, or asked for by a command that failed.
    pub retained: BTreeMap<usize, u64>,
    /// Streams with a command whose outcome is unknown (it failed): their existence may go
    /// either way.
    pub uncertain: std::collections::BTreeSet<usize>,
    /// Streams with an append whose outcome is unknown (it failed, and may have taken
    /// effect): their integrity digest is not known until they are deleted.
    pub unknown_appends: std::collections::BTreeSet<usize>,
    pub tally: Tally,
}

/// One scripted step of the group workload.
#[derive(Debug, Clone, Copy)]
enum Step {
    Create(usize),
    Append(usize, usize),
    /// A batch of four payloads of about `len` bytes each to a stream.
    Batch(usize, usize),
    Flush(usize),
    Compact(usize),
    Checkpoint(usize),
    Delete(usize),
    Close(usize),
    Gc,
    Sweep,
}

fn script() -> Vec<Step> {
    use Step::*;
    let mut steps = vec![Create(0), Create(1)];
    for i in 0..6 {
        steps.push(Append(i % 2, 200 + 150 * i));
    }
    steps.extend([
        Batch(0, 150),
        Flush(0),
        Append(0, 700),
        Flush(0),
        Compact(0),
        Create(2),
    ]);
    steps.extend([
        Append(2, 900),
        Delete(1),
        Append(2, 300),
        Checkpoint(0),
        Gc,
        Sweep,
    ]);
    // A batch of four payloads in another stream (8 KiB and more: its integrity digests are
    // hashed beside the sync and added after it), its digest checked after every cut.
    steps.extend([
        Batch(2, 2300),
        Flush(2),
        Create(1),
        Append(1, 400),
        Close(2),
        Gc,
    ]);
    steps
}

struct Runner<'a> {
    engine: &'a mut DiskGroupEngine,
    acks: &'a mut GroupAcks,
    now: u64,
}

impl Runner<'_> {
    async fn append(&mut self, s: usize, payload: Bytes) -> Result<(), String> {
        let mut r = AppendRequest::from_bytes(stream(s), payload.clone());
        r.content_type = CT.into();
        r.now_ms = self.now;
        let appended = self
            .engine
            .append(r, placement(), ColdWriteAdmission::default());
        let response = appended.await.map_err(|e| {
            // It may have taken effect (its commit record can survive the cut).
            self.acks.unknown_appends.insert(s);
            format!("append: {e}")
        })?;
        self.acks
            .appended
            .insert((s, response.start_offset), payload);
        Ok(())
    }

    async fn batch(&mut self, s: usize, step: usize, len: usize) -> Result<(), String> {
        let payloads: Vec<Bytes> = (0..4).map(|k| bytes_of(step + k, len + 40 * k)).collect();
        let mut r = AppendBatchRequest::new(stream(s), payloads.clone());
        r.content_type = CT.into();
        r.now_ms = self.now;
        let appended = self
            .engine
            .append_batch(r, placement(), ColdWriteAdmission::default());
        let response = appended.await.map_err(|e| {
            // It may have taken effect (its commit record can survive the cut).
            self.acks.unknown_appends.insert(s);
            format!("batch: {e}")
        })?;
        for (item, payload) in response.items.iter().zip(payloads) {
            let appended = item.as_ref().map_err(|e| format!("batch item: {e}"))?;
            self.acks
                .appended
                .insert((s, appended.start_offset), payload);
        }
        Ok(())
    }

    async fn checkpoint(&mut self, s: usize) -> Result<(), String> {
        let id = stream(s);
        let Some(&(_, start)) = self.acks.appended.keys().rfind(|(x, _)| *x == s) else {
            return Ok(());
        };
        let publish = PublishSnapshotRequest {
            stream_id: id.clone(),
            snapshot_offset: start,
            content_type: "text/plain".into(),
            payload: Bytes::from(vec![9u8; 300]),
            expected_digest: None,
            now_ms: self.now,
        };
        self.engine
            .publish_snapshot(publish, placement())
            .await
            .map_err(|e| format!("publish: {e}"))?;
        let retain = AdvanceRetentionRequest {
            stream_id: id,
            retained_offset: start,
            now_ms: self.now,
        };
        // Bytes below `start` may go from here on: a command that fails may still have been
        // applied (its commit record can survive the cut), and retention only moves forward.
        self.acks.retained.insert(s, start);
        self.engine
            .advance_retention(retain, placement())
            .await
            .map_err(|e| format!("retention: {e}"))?;
        Ok(())
    }

    async fn run(&mut self, step: usize, what: Step) -> Result<(), String> {
        let p = placement();
        let none = ColdWriteAdmission::default();
        self.now += 10;
        match what {
            Step::Create(s) => {
                let mut r = CreateStreamRequest::new(stream(s), CT);
                r.now_ms = self.now;
                self.acks.uncertain.insert(s);
                self.engine
                    .create_stream(r, p, none)
                    .await
                    .map_err(|e| format!("create: {e}"))?;
                self.acks.live.insert(s, true);
                self.acks.uncertain.remove(&s);
                Ok(())
            }
            Step::Append(s, len) => self.append(s, bytes_of(step, len)).await,
            Step::Batch(s, len) => self.batch(s, step, len).await,
            Step::Flush(s) => {
                let id = stream(s);
                let flushed = self.engine.flush_stream_cold(&id, 2000, p).await;
                flushed.map(drop).map_err(|e| format!("flush: {e}"))
            }
            Step::Compact(s) => {
                let id = stream(s);
                let compacted = self.engine.compact_stream_cold(&id, 1 << 20, 8, 0, p);
                compacted
                    .await
                    .map(drop)
                    .map_err(|e| format!("compact: {e}"))
            }
            Step::Checkpoint(s) => self.checkpoint(s).await,
            Step::Delete(s) => {
                self.acks.uncertain.insert(s);
                let r = DeleteStreamRequest {
                    stream_id: stream(s),
                };
                match self.engine.delete_stream(r, p).await {
                    Ok(_) => {}
                    // An earlier delete whose outcome was unknown took effect.
                    Err(e) if e.code() == Some(StreamErrorCode::StreamNotFound) => {}
                    Err(e) => return Err(format!("delete: {e}")),
                }
                self.acks.live.insert(s, false);
                self.acks.uncertain.remove(&s);
                self.acks.appended.retain(|(x, _), _| *x != s);
                self.acks.retained.remove(&s);
                self.acks.unknown_appends.remove(&s);
                Ok(())
            }
            Step::Close(s) => {
                let r = CloseStreamRequest {
                    stream_id: stream(s),
                    stream_seq: None,
                    producer: None,
                    now_ms: self.now,
                };
                let closed = self.engine.close_stream(r, p).await;
                closed.map(drop).map_err(|e| format!("close: {e}"))
            }
            Step::Gc => {
                let gc = self.engine.run_cold_gc(u64::MAX, 64, p).await;
                gc.map(drop).map_err(|e| format!("gc: {e}"))
            }
            Step::Sweep => {
                let swept = self.engine.sweep_orphan_objects().await;
                swept.map(drop).map_err(|e| format!("sweep: {e}"))
            }
        }
    }
}

/// Opens the store on `disk` and group `g` in it, retrying as a client would.
fn open_store_and_engine(
    disk: &Disk,
    acks: &mut GroupAcks,
    between: &dyn Fn(),
) -> Option<(Store, DiskGroupEngine)> {
    open_with_retries(disk, &mut acks.tally, between, || {
        let store = Store::open_with(&disk.root, disk.options()).map_err(|e| e.to_string())?;
        let engine = open_engine(&store).map_err(|e| e.to_string())?;
        Ok::<_, String>((store, engine))
    })
}

/// Stream commands and cold work on one group.
pub struct Group;

impl Workload for Group {
    type Acks = GroupAcks;

    fn name(&self) -> &'static str {
        "group engine and cold tier"
    }

    fn run(&self, disk: &Disk, acks: &mut GroupAcks, between: &dyn Fn()) {
        let Some((store, mut engine)) = open_store_and_engine(disk, acks, between) else {
            return;
        };
        let rt = runtime();
        let steps = script();
        let half = steps.len() / 2;
        rt.block_on(async {
            let mut runner = Runner {
                engine: &mut engine,
                acks,
                now: 1_000,
            };
            for (i, what) in steps.into_iter().enumerate() {
                if disk.dead() {
                    return;
                }
                if i == half {
                    between();
                    runner.acks.tally.halfway = true;
                }
                // A client retries a failed command once (a single injected fault is gone by
                // then; a power cut is not).
                if let Err(e) = runner.run(i, what).await {
                    runner.acks.tally.failed(e);
                    if !disk.dead() {
                        if let Err(e) = runner.run(i, what).await {
                            runner.acks.tally.failed(e);
                        }
                    }
                }
            }
            let probe = bytes_of(99, 50);
            let first = runner.append(0, probe.clone()).await;
            let probed = match first {
                Ok(()) => true,
                Err(e) => {
                    runner.acks.tally.messages.push(format!("probe: {e}"));
                    runner.append(0, probe).await.is_ok()
                }
            };
            runner.acks.tally.probe_ok = probed && !disk.dead();
        });
        drop(engine);
        let _ = store.close_blocking();
    }

    fn check(&self, root: &Path, acks: &GroupAcks) {
        let (disk, store) = open_image(root);
        let mut engine = open_engine(&store).expect("the group opens");
        let rt = runtime();
        rt.block_on(check_streams(&mut engine, acks));
        let report = rt.block_on(engine.verify());
        assert!(report.is_clean(), "group verify: {:?}", report.findings);
        drop(engine);
        verify_clean(&disk, store);
    }

    fn outcome(&self, acks: &GroupAcks) -> Outcome {
        acks.tally.outcome()
    }

    fn messages(&self, acks: &GroupAcks) -> Vec<String> {
        acks.tally.messages.clone()
    }
}

async fn check_streams(engine: &mut DiskGroupEngine, acks: &GroupAcks) {
    let p = placement();
    for (&s, &live) in &acks.live {
        let head = HeadStreamRequest {
            stream_id: stream(s),
            now_ms: 1_000_000,
        };
        let found = engine.head_stream(head, p).await;
        if acks.uncertain.contains(&s) {
            continue;
        }
        match (&found, live) {
            (Ok(head), true) if !acks.unknown_appends.contains(&s) => {
                let (setsum, records) = expected_integrity(s, acks);
                assert_eq!(
                    (
                        &head.integrity.total_setsum[..],
                        head.integrity.total_records
                    ),
                    (&setsum.hexdigest()[..], records),
                    "stream s{s}: the integrity digest of its acknowledged appends"
                );
            }
            (Ok(_), true) => {}
            (Err(e), false) if e.code() == Some(StreamErrorCode::StreamNotFound) => {}
            _ => panic!("stream s{s}: acknowledged live={live}, found {found:?}"),
        }
    }
    for (&(s, start), bytes) in &acks.appended {
        if acks.retained.get(&s).is_some_and(|&r| start < r) || acks.uncertain.contains(&s) {
            continue;
        }
        let read = ReadStreamRequest {
            stream_id: stream(s),
            offset: start,
            max_len: bytes.len(),
            now_ms: 1_000_000,
            record: None,
            max_records: None,
        };
        let got = engine.read_stream(read, p).await.map(|r| r.payload);
        assert_eq!(
            got.as_deref().ok(),
            Some(&bytes[..]),
            "stream s{s}: acknowledged bytes at {start} lost ({got:?})"
        );
    }
}

/// ursula's integrity setsum over the acknowledged appends of stream `s`, and their count,
/// computed here from the bytes (one record digest per append, as ursula defines it).
fn expected_integrity(s: usize, acks: &GroupAcks) -> (setsum::Setsum, u64) {
    let id = stream(s);
    let mut sum = setsum::Setsum::default();
    let mut records = 0;
    for (&(x, start), bytes) in &acks.appended {
        if x != s {
            continue;
        }
        let end = start + bytes.len() as u64;
        sum.insert_vectored(&[
            b"ursula-stream-record-v1",
            id.bucket_id.as_bytes(),
            b"\0",
            id.stream_id.as_bytes(),
            b"\0",
            &start.to_le_bytes(),
            &end.to_le_bytes(),
            b"inline",
            bytes,
        ]);
        records += 1;
    }
    (sum, records)
}

/// A group as a format-3 build left it (a RocksDB of its own under `groups/g`, JSON stream
/// rows), opened by this build (the move into the store's state database and the upgrade to
/// format 4 at open), then appended to.
pub struct Upgrade;

/// Whether the commit partition of group `g` (the store's only group, so the first range of
/// the store's group payload log, after its directory partition) starts past offset 0, the
/// store closed; `None` if the power was cut meanwhile.
fn commit_records_trimmed(disk: &Disk) -> Option<bool> {
    let store = Store::open_with(&disk.root, disk.options()).ok()?;
    let count = store
        .logs()
        .iter()
        .find(|l| l.name == "__groups")?
        .partitions;
    let log = store
        .open_log("__groups", count, group_options().payload_log)
        .ok()?;
    let low = log
        .low_water_mark(1 + strata::group::commit_record::COMMIT_PARTITION)
        .ok()?;
    drop(log);
    store.close_blocking().ok()?;
    Some(low > 0)
}

/// Copies group `g` under `root` into the per-group layout, then puts its stream rows there
/// back as JSON and its format version to 3, directly in RocksDB (which syncs its own files),
/// as a format-3 build left them.
fn downgrade_to_format_3(root: &Path) {
    use strata::group::rows::encode_row;
    use strata::group::stream_row::decode_stream_row;
    crate::group_state::copy_to_per_group_layout(root, "g");
    let db = crate::group_state::open_all(&crate::group_state::per_group_dir(root, "g"));
    let streams = db.cf_handle("streams").expect("streams");
    let rows: Vec<_> = db
        .iterator_cf(streams, rocksdb::IteratorMode::Start)
        .map(|kv| kv.expect("a row"))
        .collect();
    for (key, value) in rows {
        let json = encode_row(&decode_stream_row(&value).expect("a stream row")).unwrap();
        db.put_cf(streams, key, json).unwrap();
    }
    let meta = db.cf_handle("meta").expect("meta");
    db.put_cf(meta, "format_version", 3u64.to_be_bytes())
        .unwrap();
    db.flush_cf(streams).unwrap();
    db.flush_cf(meta).unwrap();
}

impl Workload for Upgrade {
    type Acks = GroupAcks;

    fn name(&self) -> &'static str {
        "group state upgrade: format 3, per-group layout"
    }

    fn run(&self, disk: &Disk, acks: &mut GroupAcks, between: &dyn Fn()) {
        let rt = runtime();
        let setup = (|| {
            let store = Store::open_with(&disk.root, disk.options()).ok()?;
            let mut engine = open_engine(&store).ok()?;
            let mut runner = Runner {
                engine: &mut engine,
                acks,
                now: 1_000,
            };
            rt.block_on(runner.run(0, Step::Create(0))).ok()?;
            // Enough commits to roll the commit partition's segments, then a cold flush,
            // which reclaims them: the log no longer holds the group's first commit record,
            // so only the state moved from the old database has what they did.
            for (i, len) in [300, 900, 1500, 700].into_iter().enumerate() {
                rt.block_on(runner.run(1 + i, Step::Append(0, len))).ok()?;
            }
            rt.block_on(runner.run(5, Step::Flush(0))).ok()?;
            drop(engine);
            store.close_blocking().ok()
        })();
        if setup.is_none() || disk.dead() {
            return;
        }
        match commit_records_trimmed(disk) {
            Some(trimmed) => assert!(trimmed, "the setup trims commit records"),
            None => return,
        }
        // `groups/` through the fault layer; the old database in it is made beside the layer
        // (RocksDB syncs its own files) and then handed to it, its entry synced, as an earlier
        // build left it.
        let groups = disk.root.join("groups");
        if strata::fs::create_dir_durable(&disk.fs, &groups).is_err() {
            return;
        }
        downgrade_to_format_3(&disk.root);
        let handed = disk.fs.native_dir(&groups.join("g"));
        if handed.and_then(|()| disk.fs.sync_dir(&groups)).is_err() {
            return;
        }
        // Durable in the old layout now: the rows leave the shared database.
        crate::group_state::remove_from_shared(&disk.root, "g");
        let Some((store, mut engine)) = open_store_and_engine(disk, acks, between) else {
            return;
        };
        rt.block_on(async {
            let mut runner = Runner {
                engine: &mut engine,
                acks,
                now: 2_000,
            };
            if let Err(e) = runner.run(6, Step::Append(0, 500)).await {
                runner.acks.tally.failed(e);
            }
            between();
            runner.acks.tally.halfway = true;
            let probed = runner.append(0, bytes_of(99, 50)).await;
            runner.acks.tally.probe_ok = probed.is_ok() && !disk.dead();
        });
        drop(engine);
        if let Err(e) = store.close_blocking() {
            acks.tally.failed(e);
        }
    }

    fn check(&self, root: &Path, acks: &GroupAcks) {
        Group.check(root, acks);
    }

    fn outcome(&self, acks: &GroupAcks) -> Outcome {
        acks.tally.outcome()
    }

    fn messages(&self, acks: &GroupAcks) -> Vec<String> {
        acks.tally.messages.clone()
    }
}

// ------------------------------------------------- groups of one current-thread runtime

/// Groups of [`CurrentThreadGroups`] and appends each makes.
const RUNTIME_GROUPS: usize = 3;
const RUNTIME_APPENDS: usize = 6;

/// Opens group `name` of `store` with the default local cold store `<root>/cold`.
fn open_named(store: &Store, name: &str) -> Result<DiskGroupEngine, strata::group::GroupError> {
    let cold = ColdStore::local_with_fs(store.fs().clone(), &store.root().join("cold"))?;
    DiskGroupEngine::open(store, name, cold, group_options())
}

/// What the groups of [`CurrentThreadGroups`] acknowledged.
#[derive(Debug, Default)]
pub struct RuntimeAcks {
    /// Acknowledged appends: `(group, start offset) -> bytes` of stream 0 of the group.
    pub appended: BTreeMap<(usize, u64), Bytes>,
    /// Groups whose stream's creation was acknowledged.
    pub created: std::collections::BTreeSet<usize>,
    pub tally: Tally,
}

/// Several groups of one store as tasks of one current-thread runtime (ursula's thread-per-core
/// executor): each creates a stream and appends to it, and every command awaits its
/// durability as a future while the commit workers (`strata-commit-`) run the groups' rounds,
/// so one group's round syncs and ends among the other groups' writes.
pub struct CurrentThreadGroups;

impl CurrentThreadGroups {
    /// One group's task: a stream, then `appends` of `RUNTIME_APPENDS` appends (by index).
    async fn group_task(
        g: usize,
        mut engine: DiskGroupEngine,
        appends: std::ops::Range<usize>,
        acks: std::sync::Arc<std::sync::Mutex<RuntimeAcks>>,
        dead: impl Fn() -> bool,
    ) -> DiskGroupEngine {
        let lock = || acks.lock().unwrap_or_else(|p| p.into_inner());
        if appends.start == 0 {
            let create = CreateStreamRequest::new(stream(0), CT);
            match engine
                .create_stream(create, placement(), ColdWriteAdmission::default())
                .await
            {
                Ok(_) => {
                    lock().created.insert(g);
                }
                Err(e) => lock().tally.failed(format!("g{g} create: {e}")),
            }
        }
        for k in appends {
            if dead() {
                break;
            }
            let payload = bytes_of(g * 100 + k, 100 + 97 * k);
            let mut append = AppendRequest::from_bytes(stream(0), payload.clone());
            append.content_type = CT.into();
            let admission = ColdWriteAdmission::default();
            match engine.append(append, placement(), admission).await {
                Ok(r) => {
                    lock().appended.insert((g, r.start_offset), payload);
                }
                Err(e) => lock().tally.failed(format!("g{g} append {k}: {e}")),
            }
        }
        engine
    }
}

impl Workload for CurrentThreadGroups {
    type Acks = RuntimeAcks;

    fn name(&self) -> &'static str {
        "groups of one current-thread runtime"
    }

    fn run(&self, disk: &Disk, acks: &mut RuntimeAcks, between: &dyn Fn()) {
        let Some((store, mut engines)) = open_with_retries(disk, &mut acks.tally, between, || {
            let store = Store::open_with(&disk.root, disk.options()).map_err(|e| e.to_string())?;
            let engines = (0..RUNTIME_GROUPS)
                .map(|g| open_named(&store, &format!("g{g}")).map_err(|e| e.to_string()))
                .collect::<Result<Vec<_>, String>>()?;
            Ok::<_, String>((store, engines))
        }) else {
            return;
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a runtime");
        let shared = std::sync::Arc::new(std::sync::Mutex::new(std::mem::take(acks)));
        let half = RUNTIME_APPENDS / 2;
        for range in [0..half, half..RUNTIME_APPENDS] {
            if range.start > 0 {
                between();
                shared.lock().unwrap().tally.halfway = true;
            }
            engines = rt.block_on(async {
                let tasks: Vec<_> = engines
                    .into_iter()
                    .enumerate()
                    .map(|(g, engine)| {
                        let fs = disk.fs.clone();
                        let dead = move || fs.crashed().is_some();
                        let task = Self::group_task(g, engine, range.clone(), shared.clone(), dead);
                        tokio::spawn(task)
                    })
                    .collect();
                let mut back = Vec::new();
                for task in tasks {
                    back.push(task.await.expect("a group task"));
                }
                back
            });
        }
        *acks = std::mem::take(&mut *shared.lock().unwrap());
        let probe = bytes_of(999, 50);
        let mut append = AppendRequest::from_bytes(stream(0), probe.clone());
        append.content_type = CT.into();
        let probed =
            rt.block_on(engines[0].append(append, placement(), ColdWriteAdmission::default()));
        if let Ok(r) = &probed {
            acks.appended.insert((0, r.start_offset), probe);
        }
        acks.tally.probe_ok = probed.is_ok() && !disk.dead();
        drop(engines);
        let _ = store.close_blocking();
    }

    fn check(&self, root: &Path, acks: &RuntimeAcks) {
        let (disk, store) = open_image(root);
        let rt = runtime();
        for g in 0..RUNTIME_GROUPS {
            let mut engine = open_named(&store, &format!("g{g}")).expect("the group opens");
            let head = HeadStreamRequest {
                stream_id: stream(0),
                now_ms: 0,
            };
            let found = rt.block_on(engine.head_stream(head, placement()));
            if acks.created.contains(&g) {
                assert!(
                    found.is_ok(),
                    "g{g}: its acknowledged stream is gone: {found:?}"
                );
            }
            for (&(_, start), bytes) in acks.appended.range((g, 0)..(g + 1, 0)) {
                let read = ReadStreamRequest {
                    stream_id: stream(0),
                    offset: start,
                    max_len: bytes.len(),
                    now_ms: 0,
                    record: None,
                    max_records: None,
                };
                let got = rt
                    .block_on(engine.read_stream(read, placement()))
                    .map(|r| r.payload);
                assert_eq!(
                    got.as_deref().ok(),
                    Some(&bytes[..]),
                    "g{g}: acknowledged bytes at {start} lost ({got:?})"
                );
            }
            let report = rt.block_on(engine.verify());
            assert!(report.is_clean(), "g{g} verify: {:?}", report.findings);
        }
        verify_clean(&disk, store);
    }

    fn outcome(&self, acks: &RuntimeAcks) -> Outcome {
        acks.tally.outcome()
    }

    fn messages(&self, acks: &RuntimeAcks) -> Vec<String> {
        acks.tally.messages.clone()
    }
}
