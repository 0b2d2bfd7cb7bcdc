//! Online backup and restore: a store copied while writers append and a group engine runs,
//! restored and checked record by record (and by `verify`), with the source deleting what the
//! backup still needed right after it; the holds a backup takes; and every refusal.
#![cfg(feature = "ursula")]

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use strata::cold::{ColdError, ColdStore};
use strata::group::{DiskGroupEngine, GroupOptions};
use strata::store::backup::{partial_path, restore};
use strata::{Durability, Log, LogOptions, NewRecord, Store, StoreError};
use ursula_runtime::ReadStreamRequest;
use ursula_runtime::{AppendRequest, ColdWriteAdmission, CreateStreamRequest, GroupEngine};
use ursula_shard::{BucketStreamId, CoreId, RaftGroupId, ShardId, ShardPlacement};

#[path = "common/group_state.rs"]
mod group_state;

const CT: &str = "application/octet-stream";
const PARTITIONS: u32 = 3;

fn placement() -> ShardPlacement {
    ShardPlacement {
        core_id: CoreId(0),
        shard_id: ShardId(0),
        raft_group_id: RaftGroupId(1),
    }
}

fn group_options() -> GroupOptions {
    GroupOptions::default()
        .with_payload_log(LogOptions::default().with_segment_bytes(4096))
        .with_orphan_grace(std::time::Duration::ZERO)
}

fn events_options() -> LogOptions {
    LogOptions::default()
        .with_segment_bytes(8192)
        .with_durability(Durability::Sync)
}

fn open_group(store: &Store, dir: &Path) -> DiskGroupEngine {
    let cold = ColdStore::local(&dir.join("cold")).expect("cold store");
    DiskGroupEngine::open(store, "orders", cold, group_options()).expect("group")
}

/// Creates the stream `tenant/orders`.
async fn create_orders(engine: &mut DiskGroupEngine) -> BucketStreamId {
    let id = BucketStreamId::new("tenant", "orders");
    let mut create = CreateStreamRequest::new(id.clone(), CT);
    create.now_ms = 1;
    engine
        .create_stream(create, placement(), ColdWriteAdmission::default())
        .await
        .expect("create");
    id
}

async fn append(engine: &mut DiskGroupEngine, id: &BucketStreamId, model: &mut Vec<u8>, n: usize) {
    for i in 0..n {
        let payload: Vec<u8> = (0..(60 + (i * 31) % 300)).map(|j| (i + j) as u8).collect();
        let mut r = AppendRequest::from_bytes(id.clone(), Bytes::from(payload.clone()));
        r.content_type = CT.into();
        r.now_ms = 2;
        engine
            .append(r, placement(), ColdWriteAdmission::default())
            .await
            .expect("append");
        model.extend_from_slice(&payload);
    }
}

async fn read_all(engine: &mut DiskGroupEngine, id: &BucketStreamId) -> Vec<u8> {
    let r = ReadStreamRequest {
        stream_id: id.clone(),
        offset: 0,
        max_len: 1 << 24,
        now_ms: 3,
        record: None,
        max_records: None,
    };
    engine
        .read_stream(r, placement())
        .await
        .expect("read")
        .payload
}

/// Every record of `partition` from the low-water mark.
fn records(log: &Log, partition: u32) -> Vec<(i64, Bytes)> {
    let mut out = Vec::new();
    let mut from = log.low_water_mark(partition).expect("low water");
    loop {
        let page = log.read(partition, from, 1 << 20).expect("read");
        if page.records.is_empty() {
            return out;
        }
        for r in page.records {
            out.push((r.offset, r.value.unwrap_or_default()));
        }
        from = page.next_offset;
    }
}

/// Writers append to a `Sync` log from threads until told to stop; returns what each partition
/// had acknowledged.
fn spawn_writers(log: &Log, stop: &Arc<AtomicBool>) -> Vec<std::thread::JoinHandle<()>> {
    (0..PARTITIONS)
        .map(|partition| {
            let (log, stop) = (log.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut i = 0u64;
                while !stop.load(Ordering::Acquire) {
                    let value = Bytes::from(format!("p{partition}-r{i}-{}", "x".repeat(40)));
                    log.append_blocking(partition, vec![NewRecord::value(1, value)])
                        .expect("append");
                    i += 1;
                }
            })
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backup_of_a_serving_store_restores_every_acknowledged_record_and_group_state() {
    let scratch = tempfile::tempdir().expect("scratch");
    let (dir, dest, target) = (
        scratch.path().join("store"),
        scratch.path().join("backup"),
        scratch.path().join("restored"),
    );
    let store = Store::open(&dir).expect("store");
    let events = store
        .open_log("events", PARTITIONS, events_options())
        .expect("log");
    let mut engine = open_group(&store, &dir);
    let id = create_orders(&mut engine).await;
    let mut model = Vec::new();
    append(&mut engine, &id, &mut model, 60).await;
    // Part cold, part hot: the backup holds both tiers.
    for _ in 0..3 {
        engine
            .flush_stream_cold(&id, 2000, placement())
            .await
            .expect("flush");
    }
    append(&mut engine, &id, &mut model, 20).await;

    let stop = Arc::new(AtomicBool::new(false));
    let writers = spawn_writers(&events, &stop);
    std::thread::sleep(std::time::Duration::from_millis(150));
    let before: Vec<i64> = (0..PARTITIONS)
        .map(|p| events.high_water_mark(p).expect("hw"))
        .collect();
    let report = store.backup(&dest).expect("backup while writers append");
    std::thread::sleep(std::time::Duration::from_millis(50));
    stop.store(true, Ordering::Release);
    writers.into_iter().for_each(|w| w.join().expect("writer"));
    assert_eq!((report.logs, report.groups), (2, 1), "{report:?}");

    // The source moves on: everything goes cold, the hot segments the backup copied are
    // reclaimed, compaction replaces the cold objects it named, and GC deletes them.
    append(&mut engine, &id, &mut Vec::new(), 10).await;
    while engine
        .flush_stream_cold(&id, 2000, placement())
        .await
        .expect("flush")
        .is_some()
    {}
    engine
        .compact_stream_cold(&id, 1 << 20, 2, 100, placement())
        .await
        .expect("compact");
    let gc = engine
        .run_cold_gc(u64::MAX, 64, placement())
        .await
        .expect("gc");
    assert!(
        gc.objects > 0,
        "GC deleted objects the backup references: {gc:?}"
    );

    let source: Vec<Vec<(i64, Bytes)>> = (0..PARTITIONS).map(|p| records(&events, p)).collect();
    drop(engine);
    store.close_blocking().expect("close");
    drop(store);

    let verified = strata::tools::verify_store(&dest).expect("verify the backup");
    assert!(verified.is_clean(), "{:?}", verified.findings);
    let restored = restore(&dest, &target).expect("restore");
    assert_eq!((restored.logs, restored.groups), (2, 1));
    let store = Store::open(&target).expect("restored store");
    let events = store
        .open_log("events", PARTITIONS, events_options())
        .expect("log");
    for p in 0..PARTITIONS {
        let copy = records(&events, p);
        let end = events.high_water_mark(p).expect("hw");
        assert!(
            end >= before[p as usize],
            "partition {p}: {end} < {}",
            before[p as usize]
        );
        assert_eq!(
            copy[..],
            source[p as usize][..copy.len()],
            "partition {p} is a prefix"
        );
        assert_eq!(copy.len() as i64, end);
    }
    let mut engine = open_group(&store, &target);
    assert_eq!(
        read_all(&mut engine, &id).await,
        model,
        "the group as the backup found it"
    );
    assert!(engine.verify().await.findings.is_empty());
}

/// Backs `store` up into `scratch/name`, restores it to `scratch/name-restored`, and returns
/// what group `orders` reads there.
async fn backed_up_orders(store: &Store, scratch: &Path, name: &str) -> Vec<u8> {
    let (dest, target) = (scratch.join(name), scratch.join(format!("{name}-restored")));
    let report = store.backup(&dest).expect("backup");
    assert_eq!(report.groups, 1, "{report:?}");
    restore(&dest, &target).expect("restore");
    let restored = Store::open(&target).expect("restored store");
    let mut engine = open_group(&restored, &target);
    let id = BucketStreamId::new("tenant", "orders");
    let bytes = read_all(&mut engine, &id).await;
    assert!(engine.verify().await.findings.is_empty());
    bytes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_needs_no_group_open_and_carries_groups_of_the_per_group_layout() {
    let scratch = tempfile::tempdir().expect("scratch");
    let dir = scratch.path().join("store");
    let mut model = Vec::new();
    {
        let store = Store::open(&dir).expect("store");
        let mut engine = open_group(&store, &dir);
        let id = create_orders(&mut engine).await;
        append(&mut engine, &id, &mut model, 30).await;
        // The group closes without a shutdown (its last batches unflushed); the state
        // database stays open with the store, and the backup checkpoints it.
        drop(engine);
        let copy = backed_up_orders(&store, scratch.path(), "closed-group").await;
        assert_eq!(copy, model);
        store.close_blocking().expect("close");
    }
    // A store no group has opened since it opened: the state database is closed and copied as
    // its files, with the payload log after it.
    let store = Store::open(&dir).expect("store");
    assert_eq!(
        backed_up_orders(&store, scratch.path(), "cold-start").await,
        model
    );
    drop(store);
    // A group still kept the per-group way: copied as it is, moved at the restored group's
    // first open.
    group_state::to_per_group_layout(&dir, "orders");
    let store = Store::open(&dir).expect("store");
    assert_eq!(
        backed_up_orders(&store, scratch.path(), "per-group").await,
        model
    );
    assert!(
        !scratch
            .path()
            .join("per-group-restored/groups/orders")
            .exists(),
        "the restored group moved into the state database"
    );
}

#[tokio::test]
async fn a_backup_holds_deletions_of_payload_segments_and_cold_objects() {
    let scratch = tempfile::tempdir().expect("scratch");
    let store = Store::open(scratch.path()).expect("store");
    let log = store
        .open_log_as(
            "owned",
            1,
            LogOptions::default().with_segment_bytes(4096),
            strata::log::LogOwner::Layer,
        )
        .expect("log");
    for i in 0..200 {
        log.append_blocking(
            0,
            vec![NewRecord::value(1, Bytes::from(vec![i as u8; 100]))],
        )
        .expect("append");
    }
    let hold = log.hold_deletions();
    let held = log.delete_segments_before(0, 150).expect("delete");
    assert_eq!(held.segments_deleted, 0);
    drop(hold);
    assert!(
        log.delete_segments_before(0, 150)
            .expect("delete")
            .segments_deleted
            > 0
    );

    let cold = ColdStore::local(&scratch.path().join("cold")).expect("cold");
    cold.put("a/object", Bytes::from_static(b"bytes"))
        .await
        .expect("put");
    let hold = cold.clone().hold_deletes();
    assert!(matches!(
        cold.delete("a/object").await,
        Err(ColdError::DeletesHeld { .. })
    ));
    drop(hold);
    cold.delete("a/object")
        .await
        .expect("delete after the hold");
}

#[test]
fn backup_and_restore_refuse_what_they_cannot_do_with_clear_errors() {
    let scratch = tempfile::tempdir().expect("scratch");
    let dir = scratch.path().join("store");
    let store = Store::open(&dir).expect("store");
    store
        .open_log("events", 1, LogOptions::default())
        .expect("log");
    let invalid = |r: Result<_, StoreError>, needle: &str| match r {
        Err(StoreError::Invalid(message)) => assert!(message.contains(needle), "{message}"),
        other => panic!("expected an Invalid error naming {needle:?}, got {other:?}"),
    };
    invalid(store.backup(dir.join("inside")).map(|_| ()), "lies inside");
    // The same place spelled through `..` (from a sibling of the store) or reached through a
    // symbolic link: neither starts with the store's path as written.
    let sibling = scratch.path().join("sibling");
    std::fs::create_dir(&sibling).expect("sibling");
    let around = sibling.join("..").join("store").join("inside");
    invalid(store.backup(&around).map(|_| ()), "lies inside");
    let link = scratch.path().join("link-to-store");
    std::os::unix::fs::symlink(&dir, &link).expect("symlink");
    invalid(store.backup(link.join("inside")).map(|_| ()), "lies inside");
    assert!(
        !dir.join("inside").exists() && !dir.join("inside.partial").exists(),
        "a refused backup writes nothing"
    );
    let taken = scratch.path().join("taken");
    std::fs::create_dir(&taken).expect("dir");
    invalid(store.backup(&taken).map(|_| ()), "exists");
    let dest = scratch.path().join("backup");
    std::fs::create_dir(partial_path(&dest)).expect("leftover");
    invalid(store.backup(&dest).map(|_| ()), "interrupted");
    std::fs::remove_dir(partial_path(&dest)).expect("cleanup");
    store.backup(&dest).expect("backup");

    invalid(
        restore(scratch.path().join("nothing"), scratch.path().join("t")).map(|_| ()),
        "not a Strata backup",
    );
    invalid(restore(&dest, &taken).map(|_| ()), "exists");
    // A target inside the backup would copy its own output until the path is too long.
    invalid(restore(&dest, dest.join("x")).map(|_| ()), "lies inside");
    invalid(
        restore(&dest, dest.join("logs").join("..").join("x")).map(|_| ()),
        "lies inside",
    );
    assert!(
        !dest.join("x.partial").exists(),
        "a refused restore leaves nothing to block a retry"
    );
    restore(&dest, scratch.path().join("t")).expect("restore");
    // The restored store is a store of its own: another id names (and bounds) its cold
    // objects.
    let restored = Store::open(scratch.path().join("t")).expect("the restored store opens");
    assert_ne!(restored.id(), store.id(), "a restore gets a new identity");
    assert_eq!(restored.id().len(), 32);
}

#[test]
fn a_store_whose_manifest_is_gone_is_refused_unless_rebuilt() {
    let scratch = tempfile::tempdir().expect("scratch");
    let dir = scratch.path().join("store");
    let old_id = {
        let store = Store::open(&dir).expect("store");
        let log = store
            .open_log("events", 2, LogOptions::default())
            .expect("log");
        log.append_blocking(1, vec![NewRecord::value(1, Bytes::from_static(b"kept"))])
            .expect("append");
        store.close_blocking().expect("close");
        store.id()
    };
    std::fs::remove_file(dir.join("MANIFEST")).expect("the MANIFEST is lost");
    match Store::open(&dir) {
        Err(StoreError::Invalid(message)) => {
            assert!(message.contains("no MANIFEST"), "{message}")
        }
        other => panic!("a store without its MANIFEST must be refused, got {other:?}"),
    }
    assert!(!dir.join("MANIFEST").exists(), "the refusal wrote nothing");
    let options = strata::StoreOptions::default().with_rebuild_manifest(true);
    let store = Store::open_with(&dir, options).expect("rebuilt on request");
    assert_ne!(
        store.id(),
        old_id,
        "a rebuilt MANIFEST is a new store identity"
    );
    let log = store
        .open_log("events", 2, LogOptions::default())
        .expect("the log registers again");
    assert_eq!(records(&log, 1).len(), 1, "its records are all there");
    store.close_blocking().expect("close");
    let empty = scratch.path().join("empty");
    std::fs::create_dir_all(empty.join("logs")).expect("an empty logs/");
    Store::open(&empty).expect("an empty directory is a new store");
}

/// One round of group work that deletes: append, flush everything cold (reclaiming hot
/// segments), merge cold objects, and GC the merged inputs.
async fn churn(engine: &mut DiskGroupEngine, id: &BucketStreamId, model: &Mutex<Vec<u8>>) {
    let mut added = Vec::new();
    append(engine, id, &mut added, 8).await;
    model.lock().expect("model").extend_from_slice(&added);
    while engine
        .flush_stream_cold(id, 1500, placement())
        .await
        .expect("flush")
        .is_some()
    {}
    engine
        .compact_stream_cold(id, 1 << 20, 2, 100, placement())
        .await
        .expect("compact");
    engine
        .run_cold_gc(u64::MAX, 64, placement())
        .await
        .expect("gc");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_work_during_a_backup_cannot_delete_what_its_checkpoint_needs() {
    let scratch = tempfile::tempdir().expect("scratch");
    let dir = scratch.path().join("store");
    let store = Arc::new(Store::open(&dir).expect("store"));
    let mut engine = open_group(&store, &dir);
    let id = create_orders(&mut engine).await;
    let model = Arc::new(Mutex::new(Vec::new()));
    churn(&mut engine, &id, &model).await;
    let stop = Arc::new(AtomicBool::new(false));
    let worker = {
        let (stop, model, id) = (stop.clone(), model.clone(), id.clone());
        tokio::spawn(async move {
            let mut rounds = 0;
            while !stop.load(Ordering::Acquire) || rounds < 3 {
                churn(&mut engine, &id, &model).await;
                rounds += 1;
            }
            engine
        })
    };
    let mut backups = Vec::new();
    for i in 0..4 {
        let dest = scratch.path().join(format!("backup-{i}"));
        let acked = model.lock().expect("model").len();
        let store = store.clone();
        let copy = dest.clone();
        tokio::task::spawn_blocking(move || store.backup(&copy))
            .await
            .expect("backup task")
            .expect("backup while the group works");
        backups.push((dest, acked));
    }
    stop.store(true, Ordering::Release);
    let engine = worker.await.expect("worker");
    let model = model.lock().expect("model").clone();
    drop(engine);
    for (i, (dest, acked)) in backups.iter().enumerate() {
        let target = scratch.path().join(format!("restored-{i}"));
        restore(dest, &target).expect("restore");
        let store = Store::open(&target).expect("restored store");
        let mut engine = open_group(&store, &target);
        let read = read_all(&mut engine, &id).await;
        assert!(
            read.len() >= *acked && read[..] == model[..read.len()],
            "backup {i}: {} bytes against {acked} acknowledged before it",
            read.len()
        );
        let report = engine.verify().await;
        assert!(
            report.findings.is_empty(),
            "backup {i}: {:?}",
            report.findings
        );
    }
}
