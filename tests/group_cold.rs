//! The cold tier of the group engine against real object stores (a local directory and a moto
//! S3 server on 127.0.0.1): flush, transparent reads, compaction, GC, hot-segment reclamation,
//! restart, and object-store faults in the middle of a flush.
//! Needs the `s3` feature: parts of it run against an S3 server on loopback.
#![cfg(feature = "s3")]

mod common;
mod s3_harness;
#[path = "common/streams.rs"]
mod streams;

use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use object_store::aws::AmazonS3Builder;
use object_store::RetryConfig;
use strata::cold::{ColdStore, S3Config};
use strata::group::{DiskGroupEngine, GroupOptions};
use strata::{LogOptions, Store};
use ursula_runtime::{
    AppendRequest, ColdWriteAdmission, DeleteStreamRequest, FlushColdRequest, GroupEngine,
    HeadStreamRequest, PlanColdFlushRequest, ReadStreamRequest,
};
use ursula_shard::{BucketStreamId, CoreId, RaftGroupId, ShardId, ShardPlacement};
use ursula_stream::{ColdGcTarget, StreamErrorCode};

use streams::CT;

fn placement() -> ShardPlacement {
    ShardPlacement {
        core_id: CoreId(0),
        shard_id: ShardId(0),
        raft_group_id: RaftGroupId(7),
    }
}

fn options() -> GroupOptions {
    // These tests sweep right after uploading; the grace period has its own test.
    GroupOptions::default()
        .with_payload_log(LogOptions::default().with_segment_bytes(4096))
        .with_orphan_grace(std::time::Duration::ZERO)
}

fn open(dir: &Path, cold: ColdStore) -> (Arc<Store>, DiskGroupEngine) {
    let store = Arc::new(Store::open(dir).expect("store"));
    let engine = DiskGroupEngine::open(&store, "cold", cold, options()).expect("engine");
    (store, engine)
}

fn close(store: Arc<Store>, engine: DiskGroupEngine) {
    drop(engine);
    store.close_blocking().expect("close");
}

/// Segment files of the store's group payload log (the group's range and the directory).
fn segment_files(dir: &Path) -> u64 {
    let mut total = 0;
    let root = dir.join("logs").join("__groups");
    for partition in std::fs::read_dir(root).expect("payload log dir").flatten() {
        for file in std::fs::read_dir(partition.path())
            .expect("partition dir")
            .flatten()
        {
            if file.path().extension().is_some_and(|e| e == "seg") {
                total += 1;
            }
        }
    }
    total
}

/// Creates binary stream `id` at time 1.
async fn create_stream(engine: &mut DiskGroupEngine, id: &BucketStreamId) {
    streams::create_stream(engine, id, placement()).await;
}

async fn append_many(
    engine: &mut DiskGroupEngine,
    id: &BucketStreamId,
    model: &mut Vec<u8>,
    count: usize,
    now: u64,
) {
    streams::append_many(engine, id, model, (count, now), placement()).await;
}

async fn read_all(
    engine: &mut DiskGroupEngine,
    id: &BucketStreamId,
    from: u64,
    now: u64,
) -> Vec<u8> {
    streams::read_from(engine, id, (from, now), placement())
        .await
        .expect("read")
}

/// The whole lifecycle on one cold store, with a restart in the middle.
async fn lifecycle(dir: &Path, cold: impl Fn() -> ColdStore) {
    let p = placement();
    let id = BucketStreamId::new("tenant", "events");
    let (store, mut engine) = open(dir, cold());
    create_stream(&mut engine, &id).await;
    let mut model = Vec::new();
    append_many(&mut engine, &id, &mut model, 120, 2).await;
    let hot_before = segment_files(dir);

    // Flush everything in ~3 KiB objects; reads stay byte-exact at every step.
    let mut flushes = 0;
    while let Some(hot_start) = engine.flush_stream_cold(&id, 3000, p).await.expect("flush") {
        flushes += 1;
        assert_eq!(
            read_all(&mut engine, &id, 0, 3).await,
            model,
            "after flush {flushes}"
        );
        let mid = hot_start / 2;
        assert_eq!(
            read_all(&mut engine, &id, mid, 3).await,
            model[mid as usize..]
        );
    }
    assert!(flushes > 5);
    let head = engine
        .head_stream(
            HeadStreamRequest {
                stream_id: id.clone(),
                now_ms: 3,
            },
            p,
        )
        .await
        .expect("head");
    assert_eq!(head.cold_hot_start_offset, head.tail_offset);
    assert_eq!(engine.backlog_bytes(&id), 0);
    let hot_after = segment_files(dir);
    assert!(
        hot_before > u64::from(strata::group::PAYLOAD_PARTITIONS) + 1
            && hot_after <= u64::from(strata::group::PAYLOAD_PARTITIONS) + 1,
        "sealed segments were reclaimed, the active ones (and the directory's) stay: \
         {hot_before} -> {hot_after} files"
    );
    let objects = engine
        .cold_store()
        .list(&engine.cold_namespace().stream_prefix(&id))
        .await
        .expect("list")
        .len();
    assert_eq!(objects, flushes);

    // Restart: reads come back from the cold store.
    close(store, engine);
    let (store, mut engine) = open(dir, cold());
    assert_eq!(read_all(&mut engine, &id, 0, 4).await, model);

    // More appends stay hot; compaction merges the small cold chunks.
    append_many(&mut engine, &id, &mut model, 10, 5).await;
    let merged = engine
        .compact_stream_cold(&id, 4000, 4, 100, p)
        .await
        .expect("compact");
    assert_eq!(merged, 4);
    assert_eq!(read_all(&mut engine, &id, 0, 6).await, model);
    let queue = engine.plan_cold_gc(10, p).await.expect("plan gc");
    assert!(
        matches!(&queue[..], [e] if matches!(&e.target, ColdGcTarget::Paths(paths) if paths.len() == 4))
    );
    // Not due before its grace period; then the inputs are deleted and acknowledged.
    assert_eq!(engine.run_cold_gc(50, 10, p).await.expect("gc").objects, 0);
    let report = engine.run_cold_gc(100, 10, p).await.expect("gc");
    assert_eq!((report.entries, report.objects), (1, 4));
    assert!(engine.plan_cold_gc(10, p).await.expect("plan").is_empty());
    let objects_now = engine
        .cold_store()
        .list(&engine.cold_namespace().stream_prefix(&id))
        .await
        .expect("list")
        .len();
    assert_eq!(objects_now, objects - 4 + 1);
    assert_eq!(read_all(&mut engine, &id, 0, 7).await, model);

    // Delete: the whole prefix is queued, reclaimed, and stays reclaimed across a restart.
    engine
        .delete_stream(
            DeleteStreamRequest {
                stream_id: id.clone(),
            },
            p,
        )
        .await
        .expect("delete");
    let report = engine.run_cold_gc(200, 10, p).await.expect("gc");
    assert_eq!(report.entries, 1);
    assert!(engine
        .cold_store()
        .list(&engine.cold_namespace().stream_prefix(&id))
        .await
        .expect("list")
        .is_empty());
    close(store, engine);
    let (_store, mut engine) = open(dir, cold());
    assert!(engine.plan_cold_gc(10, p).await.expect("plan").is_empty());
    let gone = engine
        .head_stream(
            HeadStreamRequest {
                stream_id: id.clone(),
                now_ms: 8,
            },
            p,
        )
        .await;
    assert_eq!(
        gone.err().and_then(|e| e.code()),
        Some(StreamErrorCode::StreamNotFound)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cold_lifecycle_on_a_local_directory() {
    let dir = tempfile::tempdir().expect("tempdir");
    let cold_dir = dir.path().join("cold");
    lifecycle(dir.path(), || {
        ColdStore::local(&cold_dir).expect("local cold store")
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cold_lifecycle_on_s3_over_loopback() {
    let moto = s3_harness::start("strata-cold");
    let dir = tempfile::tempdir().expect("tempdir");
    let config = S3Config::new("strata-cold")
        .with_endpoint(Some(moto.endpoint.clone()))
        .with_region(Some("us-east-1".into()))
        .with_access_key_id(Some("test".into()))
        .with_secret_access_key(Some("test".into()))
        .with_allow_http(true);
    lifecycle(dir.path(), || {
        ColdStore::s3(&config).expect("s3 cold store")
    })
    .await;
    // The same store by URL.
    let url = format!(
        "s3://strata-cold?endpoint={}&access_key_id=test&secret_access_key=test&region=us-east-1",
        moto.endpoint
    );
    let by_url = ColdStore::from_url(&url).expect("url");
    by_url
        .put("probe/x", Bytes::from_static(b"abc"))
        .await
        .expect("put by url");
    assert_eq!(
        by_url.get("probe/x").await.expect("get"),
        Bytes::from_static(b"abc")
    );
}

/// An object store that refuses every request (nothing listens on the port).
fn unreachable_store() -> ColdStore {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("port");
    let store = AmazonS3Builder::new()
        .with_bucket_name("absent")
        .with_region("us-east-1")
        .with_endpoint(format!("http://127.0.0.1:{port}"))
        .with_allow_http(true)
        .with_access_key_id("test")
        .with_secret_access_key("test")
        .with_retry(RetryConfig {
            max_retries: 0,
            ..RetryConfig::default()
        })
        .build()
        .expect("builder");
    ColdStore::new(Arc::new(store), "unreachable")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn object_store_failures_mid_flush_lose_nothing_and_reference_nothing_twice() {
    let p = placement();
    let dir = tempfile::tempdir().expect("tempdir");
    let id = BucketStreamId::new("tenant", "faults");
    let (store, mut engine) = open(dir.path(), unreachable_store());
    create_stream(&mut engine, &id).await;
    let mut model = Vec::new();
    append_many(&mut engine, &id, &mut model, 40, 2).await;
    let commit = engine.commit_index();

    // 1. The upload fails: an infrastructure error, state untouched, bytes still hot.
    let err = engine
        .flush_stream_cold(&id, 5000, p)
        .await
        .expect_err("upload fails");
    assert!(err.infra().is_some(), "{err:?}");
    assert_eq!(engine.commit_index(), commit);
    assert_eq!(engine.backlog_bytes(&id), model.len() as u64);
    assert_eq!(read_all(&mut engine, &id, 0, 3).await, model);
    close(store, engine);

    // 2. The upload succeeds but the commit is refused (a stale candidate): the object is
    // orphaned, never referenced; the retry references only its own object.
    let cold_dir = dir.path().join("cold");
    let (store, mut engine) = open(dir.path(), ColdStore::local(&cold_dir).expect("cold"));
    assert_eq!(read_all(&mut engine, &id, 0, 3).await, model);
    let candidate = engine
        .plan_cold_flush(
            PlanColdFlushRequest {
                stream_id: id.clone(),
                min_hot_bytes: 1,
                max_flush_bytes: 5000,
            },
            p,
        )
        .await
        .expect("plan")
        .expect("a candidate");
    let mut chunk = engine.upload_candidate(&candidate).await.expect("upload");
    chunk.payload_digest = blake3_of(b"something else");
    let refused = engine
        .flush_cold(
            FlushColdRequest {
                stream_id: id.clone(),
                chunk,
            },
            p,
        )
        .await;
    assert_eq!(
        refused.err().and_then(|e| e.code()),
        Some(StreamErrorCode::InvalidColdFlush)
    );
    assert_eq!(engine.commit_index(), commit);
    let hot_start = engine
        .flush_stream_cold(&id, 5000, p)
        .await
        .expect("flush")
        .expect("flushed");
    assert_eq!(hot_start, 5000);
    let snapshot = engine.snapshot(p).await.expect("snapshot");
    let chunks = &snapshot.stream_snapshot.streams[0].cold_chunks;
    assert_eq!(chunks.len(), 1, "exactly one chunk is referenced");
    assert_eq!(
        engine
            .cold_store()
            .list(&engine.cold_namespace().stream_prefix(&id))
            .await
            .expect("list")
            .len(),
        2
    );
    assert_eq!(
        engine.sweep_orphan_objects().await.expect("sweep"),
        1,
        "the orphan is reclaimed"
    );
    assert_eq!(
        engine
            .cold_store()
            .list(&engine.cold_namespace().stream_prefix(&id))
            .await
            .expect("list"),
        vec![chunks[0].s3_path.clone()]
    );

    // 3. Restart with the store unreachable again: cold reads fail loudly, hot reads still work,
    // and nothing is lost once the store is back.
    close(store, engine);
    let (store, mut engine) = open(dir.path(), unreachable_store());
    let cold_read = engine
        .read_stream(
            ReadStreamRequest {
                stream_id: id.clone(),
                offset: 0,
                max_len: 10,
                now_ms: 4,
                record: None,
                max_records: None,
            },
            p,
        )
        .await;
    assert!(cold_read.expect_err("cold read fails").infra().is_some());
    assert_eq!(read_all(&mut engine, &id, 5000, 4).await, model[5000..]);
    close(store, engine);
    let (_store, mut engine) = open(dir.path(), ColdStore::local(&cold_dir).expect("cold"));
    assert_eq!(read_all(&mut engine, &id, 0, 5).await, model);
}

fn blake3_of(bytes: &[u8]) -> String {
    // Any digest that differs from the candidate's: a hex string of the right shape.
    let mut out = String::new();
    for (i, b) in bytes.iter().cycle().take(32).enumerate() {
        out.push_str(&format!("{:02x}", b.wrapping_add(i as u8)));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn damaged_and_missing_cold_objects_are_reported_with_their_path() {
    let p = placement();
    let dir = tempfile::tempdir().expect("tempdir");
    let cold_dir = dir.path().join("cold");
    let id = BucketStreamId::new("tenant", "damaged");
    let (_store, mut engine) = open(dir.path(), ColdStore::local(&cold_dir).expect("cold"));
    create_stream(&mut engine, &id).await;
    let mut model = Vec::new();
    append_many(&mut engine, &id, &mut model, 60, 2).await;
    engine
        .flush_stream_cold(&id, 4000, p)
        .await
        .expect("flush")
        .expect("first");
    engine
        .flush_stream_cold(&id, 4000, p)
        .await
        .expect("flush")
        .expect("second");
    let report = engine.verify().await;
    assert!(report.is_clean(), "{report:?}");
    assert_eq!((report.streams, report.cold_objects), (1, 2));
    assert_eq!(report.hot_bytes, model.len() as u64 - 8000);

    let objects = engine
        .cold_store()
        .list(&engine.cold_namespace().stream_prefix(&id))
        .await
        .expect("list");
    let mut sorted = objects.clone();
    sorted.sort();
    // Flip one byte of the first object's body; delete the second.
    let first = cold_dir.join(&sorted[0]);
    let mut bytes = std::fs::read(&first).expect("object file");
    let last = bytes.len() - 1;
    bytes[last] ^= 0x01;
    std::fs::write(&first, &bytes).expect("damage");
    std::fs::remove_file(cold_dir.join(&sorted[1])).expect("delete");

    // A fresh engine (no cached copies) sees both problems, naming the objects.
    drop(engine);
    let store = _store;
    store.close_blocking().expect("close");
    drop(store);
    let (_store, mut engine) = open(dir.path(), ColdStore::local(&cold_dir).expect("cold"));
    let report = engine.verify().await;
    assert_eq!(report.findings.len(), 2, "{report:?}");
    assert_eq!(report.findings[0].at, sorted[0]);
    assert!(
        report.findings[0].problem.contains("CRC"),
        "{:?}",
        report.findings[0]
    );
    assert_eq!(report.findings[1].at, sorted[1]);
    let err = engine
        .read_stream(
            ReadStreamRequest {
                stream_id: id.clone(),
                offset: 0,
                max_len: 100,
                now_ms: 3,
                record: None,
                max_records: None,
            },
            p,
        )
        .await
        .expect_err("a damaged object is an error, not wrong bytes");
    assert!(
        err.infra().is_some() && err.message().contains(&sorted[0]),
        "{err:?}"
    );
    // The hot suffix is unaffected.
    assert_eq!(read_all(&mut engine, &id, 8000, 3).await, model[8000..]);
}

/// The byte a stream holds at `offset` in the crash test.
fn pattern(offset: u64) -> u8 {
    (offset % 251) as u8
}

/// Child of the crash test: appends, flushes, compacts and collects garbage forever, printing
/// the tail after every acknowledged append.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by kill_9_during_flush_compaction_and_gc_loses_nothing"]
async fn cold_crash_child() {
    let Ok(dir) = std::env::var("STRATA_COLD_CRASH_DIR") else {
        return;
    };
    let dir = Path::new(&dir);
    let p = placement();
    let (_store, mut engine) = open(dir, ColdStore::local(&dir.join("cold")).expect("cold"));
    let id = BucketStreamId::new("tenant", "crash");
    create_stream(&mut engine, &id).await;
    for round in 0u64.. {
        let tail = engine
            .head_stream(
                HeadStreamRequest {
                    stream_id: id.clone(),
                    now_ms: 2,
                },
                p,
            )
            .await
            .expect("head")
            .tail_offset;
        let len = 200 + (round * 53) % 700;
        let payload: Vec<u8> = (tail..tail + len).map(pattern).collect();
        let mut r = AppendRequest::from_bytes(id.clone(), Bytes::from(payload));
        r.content_type = CT.into();
        r.now_ms = 2;
        let response = engine
            .append(r, p, ColdWriteAdmission::default())
            .await
            .expect("append");
        println!("{}", response.next_offset);
        match round % 4 {
            1 => {
                engine.flush_stream_cold(&id, 1500, p).await.expect("flush");
            }
            2 => {
                engine
                    .compact_stream_cold(&id, 2000, 3, 0, p)
                    .await
                    .expect("compact");
            }
            3 => {
                engine.run_cold_gc(u64::MAX, 64, p).await.expect("gc");
            }
            _ => {}
        }
    }
}

#[test]
fn kill_9_during_flush_compaction_and_gc_loses_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = [("STRATA_COLD_CRASH_DIR", dir.path().display().to_string())];
    let mut acknowledged = 0u64;
    for cycle in 0..6 {
        let lines = common::run_and_kill(
            "cold_crash_child",
            &env,
            std::time::Duration::from_millis(500 + 90 * cycle),
        );
        if let Some(tail) = lines.last().and_then(|l| l.parse::<u64>().ok()) {
            acknowledged = acknowledged.max(tail);
        }
    }
    assert!(
        acknowledged > 5_000,
        "the child made progress: {acknowledged} bytes"
    );
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let p = placement();
        let (_store, mut engine) = open(
            dir.path(),
            ColdStore::local(&dir.path().join("cold")).expect("cold"),
        );
        let id = BucketStreamId::new("tenant", "crash");
        let report = engine.verify().await;
        assert!(report.is_clean(), "{report:?}");
        assert!(
            report.cold_objects > 0,
            "some bytes reached the cold tier: {report:?}"
        );
        let bytes = read_all(&mut engine, &id, 0, 3).await;
        assert!(
            bytes.len() as u64 >= acknowledged,
            "{} bytes for {acknowledged} acknowledged",
            bytes.len()
        );
        for (offset, byte) in bytes.iter().enumerate() {
            assert_eq!(*byte, pattern(offset as u64), "byte {offset}");
        }
        // Uploads cut off before their commit are orphans; the sweep reclaims them and nothing
        // referenced goes with them.
        engine.sweep_orphan_objects().await.expect("sweep");
        engine.run_cold_gc(u64::MAX, 1024, p).await.expect("gc");
        assert!(engine.verify().await.is_clean());
        assert_eq!(read_all(&mut engine, &id, 0, 4).await, bytes);
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweep_spares_young_uploads_and_flush_refuses_a_missing_object() {
    let dir = tempfile::tempdir().expect("tempdir");
    let p = placement();
    let store = Arc::new(Store::open(dir.path()).expect("store"));
    let cold = ColdStore::local(&dir.path().join("cold")).expect("cold");
    let graceful = options().with_orphan_grace(std::time::Duration::from_secs(3600));
    let mut engine = DiskGroupEngine::open(&store, "cold", cold, graceful).expect("engine");
    let id = BucketStreamId::new("tenant", "events");
    create_stream(&mut engine, &id).await;
    let mut model = Vec::new();
    append_many(&mut engine, &id, &mut model, 20, 2).await;
    let plan = PlanColdFlushRequest {
        stream_id: id.clone(),
        min_hot_bytes: 1,
        max_flush_bytes: 4000,
    };
    let candidate = engine
        .plan_cold_flush(plan, p)
        .await
        .expect("plan")
        .expect("a candidate");
    // An upload whose commit has not come yet (a runtime uploads, then calls flush_cold): the
    // sweep must leave it alone, so the commit that follows finds its object.
    let chunk = engine.upload_candidate(&candidate).await.expect("upload");
    assert_eq!(
        engine.sweep_orphan_objects().await.expect("sweep"),
        0,
        "too young to sweep"
    );
    let flushed = FlushColdRequest {
        stream_id: id.clone(),
        chunk: chunk.clone(),
    };
    engine
        .flush_cold(flushed, p)
        .await
        .expect("the commit finds its object");
    assert_eq!(read_all(&mut engine, &id, 0, 3).await, model);
    // A commit that names an object nobody uploaded is refused, and changes nothing.
    let commit = engine.commit_index();
    let next = engine
        .plan_cold_flush(
            PlanColdFlushRequest {
                stream_id: id.clone(),
                min_hot_bytes: 1,
                max_flush_bytes: 4000,
            },
            p,
        )
        .await
        .expect("plan")
        .expect("a candidate");
    let missing = ursula_stream::ColdChunkRef {
        start_offset: next.start_offset,
        end_offset: next.end_offset,
        s3_path: format!(
            "{}never-uploaded.sco",
            engine.cold_namespace().stream_prefix(&id)
        ),
        object_size: next.payload.len() as u64,
        object_offset: 0,
        shared_object: false,
        payload_digest: next.payload_digest.clone(),
    };
    let refused = engine
        .flush_cold(
            FlushColdRequest {
                stream_id: id.clone(),
                chunk: missing,
            },
            p,
        )
        .await;
    assert_eq!(
        refused.err().and_then(|e| e.code()),
        Some(StreamErrorCode::InvalidColdFlush)
    );
    assert_eq!(engine.commit_index(), commit);
    assert_eq!(read_all(&mut engine, &id, 0, 3).await, model);
    close(store, engine);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweep_removes_a_temporary_file_an_interrupted_upload_left() {
    // A local upload killed between creating its temporary file and renaming it leaves the
    // file behind; the sweep lists it and must be able to delete it (it used to fail on it).
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, mut engine) = open(
        dir.path(),
        ColdStore::local(&dir.path().join("cold")).unwrap(),
    );
    let id = BucketStreamId::new("tenant", "leftover");
    create_stream(&mut engine, &id).await;
    let object = engine.cold_namespace().new_object_path(&id, 0, 10);
    let leftover = dir
        .path()
        .join("cold")
        .join(format!("{object}{}1-2", strata::cold::TMP_MARK));
    std::fs::create_dir_all(leftover.parent().unwrap()).unwrap();
    std::fs::write(&leftover, b"half an object").unwrap();
    assert_eq!(engine.sweep_orphan_objects().await.expect("sweep"), 1);
    assert!(!leftover.exists(), "the leftover is gone");
    assert!(engine.verify().await.is_clean());
    close(store, engine);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_whose_names_nest_keep_their_objects_apart() {
    // `tenant/a` and, with affinity key `a`, stream `chunks` of bucket `tenant` used to share
    // the prefix `tenant/a/chunks/`: deleting one and collecting its objects took the other's.
    let dir = tempfile::tempdir().expect("tempdir");
    let p = placement();
    let (store, mut engine) = open(
        dir.path(),
        ColdStore::local(&dir.path().join("cold")).unwrap(),
    );
    let a = BucketStreamId::new("tenant", "a");
    let nested = BucketStreamId::with_affinity("tenant", "a", "chunks");
    let mut models = Vec::new();
    for id in [&a, &nested] {
        create_stream(&mut engine, id).await;
        let mut model = Vec::new();
        append_many(&mut engine, id, &mut model, 30, 2).await;
        while engine
            .flush_stream_cold(id, 3000, p)
            .await
            .expect("flush")
            .is_some()
        {}
        models.push(model);
    }
    engine
        .delete_stream(
            DeleteStreamRequest {
                stream_id: a.clone(),
            },
            p,
        )
        .await
        .expect("delete");
    let report = engine.run_cold_gc(u64::MAX, 64, p).await.expect("gc");
    assert!(report.objects > 0, "a's objects were collected");
    assert_eq!(engine.sweep_orphan_objects().await.expect("sweep"), 0);
    assert_eq!(read_all(&mut engine, &nested, 0, 3).await, models[1]);
    assert!(engine.verify().await.is_clean());
    close(store, engine);
}

/// The cold object cache stays within the bytes the application allows (0: no caching), and
/// reads are right either way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cold_object_cache_stays_within_its_byte_bound() {
    for bound in [0usize, 3_000, 1 << 20] {
        let dir = tempfile::tempdir().unwrap();
        let cold = ColdStore::local(&dir.path().join("cold"))
            .unwrap()
            .with_cache_bytes(bound);
        let (store, mut engine) = open(dir.path(), cold);
        let id = BucketStreamId::new("bucket-a", "cached");
        create_stream(&mut engine, &id).await;
        let mut model = Vec::new();
        append_many(&mut engine, &id, &mut model, 40, 2).await;
        // Several objects of about 2 KB each.
        while engine
            .flush_stream_cold(&id, 2_000, placement())
            .await
            .unwrap()
            .is_some_and(|hot_start| hot_start < model.len() as u64)
        {}
        assert_eq!(read_all(&mut engine, &id, 0, 3).await, model);
        let cached = engine.cold_store().cached_bytes();
        assert!(cached <= bound, "{cached} cached bytes, bound {bound}");
        if bound == 1 << 20 {
            assert!(cached > 0, "a large bound caches what was read");
        }
        close(store, engine);
    }
}
