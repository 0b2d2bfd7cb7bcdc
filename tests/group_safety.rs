//! Regression tests of the group engine's safety rules: only the engine trims its payload log;
//! state never points at a payload it cannot prove is its stream's; reads by record coordinates
//! are bounded; a checkpoint is written once, not with every append; commands do not block the
//! executor on syncs.
#![cfg(feature = "ursula")]

mod common;
#[path = "common/group_state.rs"]
mod group_state;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use strata::cold::ColdStore;
use strata::group::{DiskGroupEngine, GroupOptions};
use strata::log::RetentionPolicy;
use strata::{Durability, LogOptions, Store};
use ursula_runtime::{
    AppendRequest, ColdWriteAdmission, CreateStreamRequest, GroupEngine, PublishSnapshotRequest,
    ReadSnapshotRequest, ReadStreamRequest,
};
use ursula_shard::{BucketStreamId, CoreId, RaftGroupId, ShardId, ShardPlacement};

const CT: &str = "application/octet-stream";
const JSON: &str = "application/json";

fn p() -> ShardPlacement {
    ShardPlacement {
        core_id: CoreId(0),
        shard_id: ShardId(0),
        raft_group_id: RaftGroupId(5),
    }
}

fn none() -> ColdWriteAdmission {
    ColdWriteAdmission::default()
}

fn open_with(dir: &Path, options: GroupOptions) -> (Arc<Store>, DiskGroupEngine) {
    let store = Arc::new(Store::open(dir).expect("store"));
    let cold = ColdStore::local(&dir.join("cold")).expect("cold");
    let engine = DiskGroupEngine::open(&store, "safe", cold, options).expect("engine");
    (store, engine)
}

async fn create(engine: &mut DiskGroupEngine, id: &BucketStreamId, content_type: &str) {
    let mut r = CreateStreamRequest::new(id.clone(), content_type);
    r.now_ms = 1;
    engine.create_stream(r, p(), none()).await.expect("create");
}

async fn append(engine: &mut DiskGroupEngine, id: &BucketStreamId, bytes: Vec<u8>, ct: &str) {
    let mut r = AppendRequest::from_bytes(id.clone(), Bytes::from(bytes));
    r.content_type = ct.into();
    r.now_ms = 2;
    engine.append(r, p(), none()).await.expect("append");
}

/// Moves the closed group to the per-group layout of earlier versions (which the next open
/// moves back) and opens its RocksDB there directly, as a tool would.
fn raw_db(dir: &Path) -> rocksdb::DB {
    group_state::to_per_group_layout(dir, "safe");
    group_state::open_all(&group_state::per_group_dir(dir, "safe"))
}

/// Partitions of the store's group payload log, as its MANIFEST records them.
fn shared_log_partitions(store: &Store) -> u32 {
    let logs = store.logs();
    let log = logs.iter().find(|l| l.name == "__groups");
    log.expect("the store's group payload log").partitions
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_engine_trims_its_payload_log() {
    let dir = tempfile::tempdir().unwrap();
    let (store, mut engine) = open_with(dir.path(), GroupOptions::default());
    let id = BucketStreamId::new("tenant", "kept");
    create(&mut engine, &id, CT).await;
    append(&mut engine, &id, b"acknowledged".to_vec(), CT).await;
    let count = shared_log_partitions(&store);
    let log = store
        .open_log("__groups", count, LogOptions::default())
        .expect("the log can be opened for reading");
    let refused = log.compact_blocking(strata::now_ms()).unwrap_err();
    assert!(refused.to_string().contains("owned"), "{refused}");
    assert!(log.apply_retention(strata::now_ms()).is_err());
    drop(log);
    drop(engine);
    store.close_blocking().unwrap();
    drop(store);
    let store = Store::open(dir.path()).unwrap();
    let trimming = LogOptions::default().with_retention(
        RetentionPolicy::default()
            .with_max_bytes(Some(1))
            .with_max_age(None),
    );
    let count = shared_log_partitions(&store);
    let refused = store.open_log("__groups", count, trimming).unwrap_err();
    assert!(refused.to_string().contains("owned"), "{refused}");
    drop(store);
    let (_store, mut engine) = open_with(dir.path(), GroupOptions::default());
    let read = ReadStreamRequest {
        stream_id: id,
        offset: 0,
        max_len: 100,
        now_ms: 3,
        record: None,
        max_records: None,
    };
    assert_eq!(
        engine.read_stream(read, p()).await.unwrap().payload,
        b"acknowledged"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_never_references_an_unsynced_payload_or_another_streams_record() {
    let dir = tempfile::tempdir().unwrap();
    // A payload log that acknowledges before syncing is refused, naming the option.
    let store = Arc::new(Store::open(dir.path()).unwrap());
    let buffered = GroupOptions::default().with_payload_log(
        LogOptions::default().with_durability(Durability::Interval(Duration::from_millis(50))),
    );
    let cold = ColdStore::local(&dir.path().join("cold")).unwrap();
    let refused = DiskGroupEngine::open(&store, "safe", cold, buffered).unwrap_err();
    assert!(
        refused.to_string().contains("payload_log.durability"),
        "{refused}"
    );
    drop(store);

    // Two streams in one payload partition; a damaged message row of one pointing at the
    // other's record must be an error, never the other tenant's bytes.
    let (store, mut engine) = open_with(dir.path(), GroupOptions::default());
    let a = BucketStreamId::new("tenant-a", "s");
    let b = (0..)
        .map(|i| BucketStreamId::new("tenant-b", format!("s{i}")))
        .find(|b| DiskGroupEngine::payload_partition(b) == DiskGroupEngine::payload_partition(&a))
        .unwrap();
    create(&mut engine, &a, CT).await;
    create(&mut engine, &b, CT).await;
    append(&mut engine, &a, b"tenant a's bytes".to_vec(), CT).await;
    append(&mut engine, &b, b"tenant b's bytes".to_vec(), CT).await;
    // A shutdown flushes RocksDB (a drop alone leaves the rows to replay).
    engine.shutdown().await.unwrap();
    drop(engine);
    store.close_blocking().unwrap();
    drop(store);
    {
        let db = raw_db(dir.path());
        let messages = db.cf_handle("messages").unwrap();
        let a_key = strata::group::keys::message_key(&a, 0);
        let b_key = strata::group::keys::message_key(&b, 0);
        let b_row = db.get_cf(messages, &b_key).unwrap().unwrap();
        db.put_cf(messages, &a_key, b_row).unwrap();
    }
    let (_store, mut engine) = open_with(dir.path(), GroupOptions::default());
    let read = ReadStreamRequest {
        stream_id: a,
        offset: 0,
        max_len: 100,
        now_ms: 3,
        record: None,
        max_records: None,
    };
    let err = engine.read_stream(read, p()).await.unwrap_err();
    assert!(err.to_string().contains("another stream"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_by_record_coordinates_are_bounded_like_reads_by_offset() {
    let dir = tempfile::tempdir().unwrap();
    let options = GroupOptions::default().with_max_read_bytes(1024);
    let (_store, mut engine) = open_with(dir.path(), options);
    let id = BucketStreamId::new("tenant", "json");
    create(&mut engine, &id, JSON).await;
    let record = |i: usize| format!("{{\"i\":{i},\"pad\":\"{}\"}}\n", "x".repeat(90));
    for chunk in 0..10 {
        let text: String = (0..10).map(|i| record(chunk * 10 + i)).collect();
        append(&mut engine, &id, text.into_bytes(), JSON).await;
    }
    let read = |record: u64| ReadStreamRequest {
        stream_id: id.clone(),
        offset: 0,
        max_len: 1 << 30,
        now_ms: 3,
        record: Some(record),
        max_records: None,
    };
    let first = engine.read_stream(read(0), p()).await.unwrap();
    let range = first.record_range.unwrap();
    assert!(first.payload.len() <= 1024, "{}", first.payload.len());
    assert_eq!(range.first_record, 0);
    let n = range.next_record;
    assert!(n > 1 && n < 100, "a bounded, non-empty window: {n}");
    let len_of = |records: std::ops::Range<usize>| records.map(|i| record(i).len()).sum::<usize>();
    assert_eq!(first.payload.len(), len_of(0..n as usize), "whole records");
    // Paging by the returned record range reaches every record.
    let (mut next, mut seen) = (n, first.payload.len());
    while next < 100 {
        let page = engine.read_stream(read(next), p()).await.unwrap();
        seen += page.payload.len();
        next = page.record_range.unwrap().next_record;
    }
    assert_eq!(seen, len_of(0..100));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_is_written_once_not_with_every_append() {
    let dir = tempfile::tempdir().unwrap();
    let (store, mut engine) = open_with(dir.path(), GroupOptions::default());
    let id = BucketStreamId::new("tenant", "checkpointed");
    create(&mut engine, &id, CT).await;
    append(&mut engine, &id, vec![1; 10], CT).await;
    let checkpoint = vec![7u8; 256 << 10];
    let publish = PublishSnapshotRequest {
        stream_id: id.clone(),
        snapshot_offset: 10,
        content_type: "application/octet-stream".into(),
        payload: Bytes::from(checkpoint.clone()),
        expected_digest: None,
        now_ms: 2,
    };
    engine.publish_snapshot(publish, p()).await.unwrap();
    for _ in 0..20 {
        append(&mut engine, &id, vec![2; 10], CT).await;
    }
    engine.shutdown().await.unwrap();
    drop(engine);
    store.close_blocking().unwrap();
    drop(store);
    {
        let db = raw_db(dir.path());
        let streams = db.cf_handle("streams").unwrap();
        let row = db
            .get_cf(streams, strata::group::keys::stream_key(&id))
            .unwrap()
            .unwrap();
        assert!(
            row.len() < 4096,
            "the stream row carries the checkpoint: {} bytes",
            row.len()
        );
        let snapshots = db.cf_handle("snapshots").unwrap();
        let stored = db
            .get_cf(snapshots, strata::group::keys::stream_key(&id))
            .unwrap()
            .unwrap();
        assert_eq!(stored, checkpoint);
    }
    let (_store, mut engine) = open_with(dir.path(), GroupOptions::default());
    let read = ReadSnapshotRequest {
        stream_id: id,
        snapshot_offset: None,
        now_ms: 3,
    };
    assert_eq!(
        engine.read_snapshot(read, p()).await.unwrap().payload,
        checkpoint
    );
}

#[test]
fn commands_do_not_hold_the_executor_while_they_sync() {
    // One worker thread and a slow disk: if a command synced on the worker, the ticker sharing
    // it would stall for a whole sync.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let (fs, store) = common::fault_store(dir.path());
    let store = Arc::new(store);
    let cold = ColdStore::local_with_fs(store.fs().clone(), &dir.path().join("cold")).unwrap();
    let mut engine = DiskGroupEngine::open(&store, "safe", cold, GroupOptions::default()).unwrap();
    let id = BucketStreamId::new("tenant", "slow");
    let delay = Duration::from_millis(80);
    let max_gap = rt.block_on(async move {
        create(&mut engine, &id, CT).await;
        fs.set_sync_delay(delay);
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let ticker = {
            let stop = stop.clone();
            tokio::spawn(async move {
                let mut last = std::time::Instant::now();
                let mut max_gap = Duration::ZERO;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    max_gap = max_gap.max(last.elapsed());
                    last = std::time::Instant::now();
                }
                max_gap
            })
        };
        let work = tokio::spawn(async move {
            for _ in 0..4 {
                append(&mut engine, &id, vec![3; 100], CT).await;
            }
        });
        work.await.unwrap();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        ticker.await.unwrap()
    });
    assert!(max_gap < delay / 2, "the executor stalled for {max_gap:?}");
}
