//! The group engine's state across restarts, method by method: producers, quotas, TTL, close,
//! checkpoints and retention, bootstrap, usage, whole-group snapshots (to and from ursula's
//! in-memory engine), import, refusals, and SIGKILL in the middle of appends.
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
use strata::{LogOptions, Store};
use ursula_runtime::{
    AdvanceRetentionRequest, AppendBatchRequest, AppendRequest, BootstrapStreamRequest,
    CloseStreamRequest, ColdWriteAdmission, CreateStreamExternalRequest, CreateStreamRequest,
    GroupEngine, GroupEngineError, HeadStreamRequest, ImportGroupStateRequest, InMemoryGroupEngine,
    PublishSnapshotRequest, ReadSnapshotRequest, ReadStreamRequest, SetBucketQuotaRequest,
};
use ursula_shard::{BucketStreamId, CoreId, RaftGroupId, ShardId, ShardPlacement};
use ursula_stream::{ExternalPayloadRef, ProducerRequest, StreamErrorCode};

const CT: &str = "application/octet-stream";

fn p() -> ShardPlacement {
    ShardPlacement {
        core_id: CoreId(0),
        shard_id: ShardId(0),
        raft_group_id: RaftGroupId(3),
    }
}

fn none() -> ColdWriteAdmission {
    ColdWriteAdmission::default()
}

fn open(dir: &Path) -> (Arc<Store>, DiskGroupEngine) {
    let store = Arc::new(Store::open(dir).expect("store"));
    let cold = ColdStore::local(&dir.join("cold")).expect("cold");
    let engine =
        DiskGroupEngine::open(&store, "durable", cold, GroupOptions::default()).expect("engine");
    (store, engine)
}

fn reopen(dir: &Path, store: Arc<Store>, engine: DiskGroupEngine) -> (Arc<Store>, DiskGroupEngine) {
    drop(engine);
    store.close_blocking().expect("close");
    drop(store);
    open(dir)
}

fn code<T>(r: Result<T, GroupEngineError>) -> Option<StreamErrorCode> {
    r.err().and_then(|e| e.code())
}

fn append(
    id: &BucketStreamId,
    bytes: &'static [u8],
    now: u64,
    producer: Option<(u64, u64)>,
) -> AppendRequest {
    let mut r = AppendRequest::from_bytes(id.clone(), Bytes::from_static(bytes));
    r.content_type = CT.into();
    r.now_ms = now;
    r.producer = producer.map(|(epoch, seq)| ProducerRequest {
        producer_id: "writer".into(),
        producer_epoch: epoch,
        producer_seq: seq,
    });
    r
}

fn create(id: &BucketStreamId, now: u64) -> CreateStreamRequest {
    let mut r = CreateStreamRequest::new(id.clone(), CT);
    r.now_ms = now;
    r
}

async fn read(
    engine: &mut DiskGroupEngine,
    id: &BucketStreamId,
    offset: u64,
    now: u64,
) -> Result<Vec<u8>, GroupEngineError> {
    engine
        .read_stream(
            ReadStreamRequest {
                stream_id: id.clone(),
                offset,
                max_len: 1 << 20,
                now_ms: now,
                record: None,
                max_records: None,
            },
            p(),
        )
        .await
        .map(|r| r.payload)
}

async fn head(
    engine: &mut DiskGroupEngine,
    id: &BucketStreamId,
    now: u64,
) -> Result<ursula_runtime::HeadStreamResponse, GroupEngineError> {
    let request = HeadStreamRequest {
        stream_id: id.clone(),
        now_ms: now,
    };
    engine.head_stream(request, p()).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producers_are_idempotent_across_restarts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, mut engine) = open(dir.path());
    let id = BucketStreamId::new("orders", "log");
    engine
        .create_stream(create(&id, 1), p(), none())
        .await
        .expect("create");
    let first = engine
        .append(append(&id, b"one", 2, Some((0, 0))), p(), none())
        .await
        .expect("seq 0");
    let second = engine
        .append(append(&id, b"two", 3, Some((0, 1))), p(), none())
        .await
        .expect("seq 1");
    let (store, mut engine) = reopen(dir.path(), store, engine);
    let retry = engine
        .append(append(&id, b"two", 4, Some((0, 1))), p(), none())
        .await
        .expect("retry");
    assert!(retry.deduplicated);
    assert_eq!(
        (retry.start_offset, retry.next_offset),
        (second.start_offset, second.next_offset)
    );
    assert_eq!(retry.group_commit_index, second.group_commit_index);
    let old = engine
        .append(append(&id, b"one", 4, Some((0, 0))), p(), none())
        .await
        .expect("old receipt");
    assert_eq!(
        (old.start_offset, old.deduplicated),
        (first.start_offset, true)
    );
    assert_eq!(
        code(
            engine
                .append(append(&id, b"gap", 5, Some((0, 3))), p(), none())
                .await
        ),
        Some(StreamErrorCode::ProducerSeqConflict)
    );
    engine
        .append(append(&id, b"new", 6, Some((1, 0))), p(), none())
        .await
        .expect("new epoch");
    let (store, mut engine) = reopen(dir.path(), store, engine);
    assert_eq!(
        code(
            engine
                .append(append(&id, b"zombie", 7, Some((0, 2))), p(), none())
                .await
        ),
        Some(StreamErrorCode::ProducerEpochStale)
    );
    assert_eq!(
        code(
            engine
                .append(append(&id, b"jump", 7, Some((2, 5))), p(), none())
                .await
        ),
        Some(StreamErrorCode::InvalidProducer)
    );
    assert_eq!(
        read(&mut engine, &id, 0, 8).await.expect("read"),
        b"onetwonew"
    );
    drop((store, engine));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quotas_ttl_and_close_survive_restarts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, mut engine) = open(dir.path());
    let a = BucketStreamId::new("tenant", "a");
    let b = BucketStreamId::new("tenant", "b");
    let mut ttl = create(&a, 1_000);
    ttl.stream_ttl_seconds = Some(10);
    engine
        .create_stream(ttl, p(), none())
        .await
        .expect("create");
    engine
        .set_bucket_quota(
            SetBucketQuotaRequest {
                bucket_id: "tenant".into(),
                max_streams: Some(1),
                max_retained_bytes: Some(8),
            },
            p(),
        )
        .await
        .expect("quota");
    let usage = engine.bucket_usage(p()).await.expect("usage");
    let (store, mut engine) = reopen(dir.path(), store, engine);
    assert_eq!(engine.bucket_usage(p()).await.expect("usage"), usage);
    assert_eq!(
        code(engine.create_stream(create(&b, 2_000), p(), none()).await),
        Some(StreamErrorCode::QuotaExceeded)
    );
    engine
        .append(append(&a, b"12345", 2_000, None), p(), none())
        .await
        .expect("fits");
    assert_eq!(
        code(
            engine
                .append(append(&a, b"6789", 2_000, None), p(), none())
                .await
        ),
        Some(StreamErrorCode::QuotaExceeded)
    );
    engine
        .set_bucket_quota(
            SetBucketQuotaRequest {
                bucket_id: "tenant".into(),
                max_streams: None,
                max_retained_bytes: None,
            },
            p(),
        )
        .await
        .expect("clear");
    // Reads renew the sliding TTL once a quarter of it has passed, durably.
    read(&mut engine, &a, 0, 7_000).await.expect("read renews");
    let (store, mut engine) = reopen(dir.path(), store, engine);
    let head = engine
        .head_stream(
            HeadStreamRequest {
                stream_id: a.clone(),
                now_ms: 16_000,
            },
            p(),
        )
        .await
        .expect("alive: renewed at 7 s");
    assert_eq!(head.tail_offset, 5);
    let touch = engine
        .touch_stream_access(a.clone(), 17_000, false, p())
        .await
        .expect("touch");
    assert!(touch.expired);
    let (store, mut engine) = reopen(dir.path(), store, engine);
    assert_eq!(
        code(
            engine
                .head_stream(
                    HeadStreamRequest {
                        stream_id: a.clone(),
                        now_ms: 17_001
                    },
                    p()
                )
                .await
        ),
        Some(StreamErrorCode::StreamNotFound)
    );
    let usage = engine.bucket_usage(p()).await.expect("usage");
    assert_eq!(usage[0].usage.stream_count, 0);
    assert_eq!(usage[0].usage.committed_append_bytes, 5);
    // Close is durable and final.
    engine
        .create_stream(create(&b, 18_000), p(), none())
        .await
        .expect("create b");
    engine
        .close_stream(
            CloseStreamRequest {
                stream_id: b.clone(),
                stream_seq: None,
                producer: None,
                now_ms: 18_001,
            },
            p(),
        )
        .await
        .expect("close");
    let (store, mut engine) = reopen(dir.path(), store, engine);
    let err = engine
        .append(append(&b, b"late", 18_002, None), p(), none())
        .await
        .expect_err("closed");
    assert_eq!(
        (err.code(), err.next_offset()),
        (Some(StreamErrorCode::StreamClosed), Some(0))
    );
    drop((store, engine));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoints_retention_and_bootstrap_survive_restarts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, mut engine) = open(dir.path());
    let id = BucketStreamId::new("docs", "doc-1");
    engine
        .create_stream(create(&id, 1), p(), none())
        .await
        .expect("create");
    for part in [&b"aaaa"[..], b"bbbb", b"cccc"] {
        let mut r = AppendRequest::from_bytes(id.clone(), Bytes::copy_from_slice(part));
        r.content_type = CT.into();
        engine.append(r, p(), none()).await.expect("append");
    }
    let unaligned = PublishSnapshotRequest {
        stream_id: id.clone(),
        snapshot_offset: 6,
        content_type: "text/plain".into(),
        payload: Bytes::from_static(b"x"),
        expected_digest: None,
        now_ms: 2,
    };
    assert_eq!(
        code(engine.publish_snapshot(unaligned, p()).await),
        Some(StreamErrorCode::InvalidSnapshot)
    );
    let publish = PublishSnapshotRequest {
        snapshot_offset: 8,
        payload: Bytes::from_static(b"state@8"),
        ..PublishSnapshotRequest {
            stream_id: id.clone(),
            snapshot_offset: 0,
            content_type: "text/plain".into(),
            payload: Bytes::new(),
            expected_digest: None,
            now_ms: 2,
        }
    };
    let published = engine
        .publish_snapshot(publish, p())
        .await
        .expect("publish");
    assert_eq!(
        code(
            engine
                .advance_retention(
                    AdvanceRetentionRequest {
                        stream_id: id.clone(),
                        retained_offset: 12,
                        now_ms: 3
                    },
                    p()
                )
                .await
        ),
        Some(StreamErrorCode::SnapshotConflict)
    );
    engine
        .advance_retention(
            AdvanceRetentionRequest {
                stream_id: id.clone(),
                retained_offset: 8,
                now_ms: 3,
            },
            p(),
        )
        .await
        .expect("retain");
    let (store, mut engine) = reopen(dir.path(), store, engine);
    let gone = read(&mut engine, &id, 0, 4)
        .await
        .expect_err("retained away");
    assert_eq!(
        (gone.code(), gone.next_offset()),
        (Some(StreamErrorCode::StreamGone), Some(8))
    );
    assert_eq!(read(&mut engine, &id, 8, 4).await.expect("suffix"), b"cccc");
    let snapshot = engine
        .read_snapshot(
            ReadSnapshotRequest {
                stream_id: id.clone(),
                snapshot_offset: None,
                now_ms: 4,
            },
            p(),
        )
        .await
        .expect("snapshot");
    assert_eq!(
        (snapshot.payload.as_slice(), snapshot.snapshot_digest),
        (&b"state@8"[..], published.snapshot_digest)
    );
    let boot = engine
        .bootstrap_stream(
            BootstrapStreamRequest {
                stream_id: id.clone(),
                now_ms: 4,
            },
            p(),
        )
        .await
        .expect("bootstrap");
    assert_eq!(boot.snapshot_offset, Some(8));
    assert_eq!(
        boot.updates
            .iter()
            .map(|u| u.payload.clone())
            .collect::<Vec<_>>(),
        vec![b"cccc".to_vec()]
    );
    let usage = engine.bucket_usage(p()).await.expect("usage");
    assert_eq!(
        (
            usage[0].usage.retained_bytes,
            usage[0].usage.committed_append_bytes
        ),
        (4, 12)
    );
    drop((store, engine));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn group_snapshots_move_between_strata_and_the_in_memory_engine() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, mut engine) = open(dir.path());
    let mut oracle = InMemoryGroupEngine::default();
    let ids = [
        BucketStreamId::new("snap", "x"),
        BucketStreamId::with_affinity("snap", "k", "y"),
    ];
    for id in &ids {
        engine
            .create_stream(create(id, 1), p(), none())
            .await
            .expect("create");
        oracle
            .create_stream(create(id, 1), p(), none())
            .await
            .expect("create");
        for (i, bytes) in [&b"first "[..], b"second ", b"third"].iter().enumerate() {
            let r = append(id, bytes, 2, Some((0, i as u64)));
            engine.append(r.clone(), p(), none()).await.expect("append");
            oracle.append(r, p(), none()).await.expect("append");
        }
    }
    // Strata -> in-memory: installs, and every head and read agrees.
    let from_strata = engine.snapshot(p()).await.expect("snapshot");
    let mut installed = InMemoryGroupEngine::default();
    installed
        .install_snapshot(from_strata.clone())
        .await
        .expect("ursula installs Strata's snapshot");
    assert_eq!(
        installed
            .snapshot(p())
            .await
            .expect("snapshot")
            .group_commit_index,
        from_strata.group_commit_index
    );
    // In-memory -> a fresh Strata group: installs, survives a restart, answers like the oracle.
    let from_oracle = oracle.snapshot(p()).await.expect("snapshot");
    drop(engine);
    store.close_blocking().expect("close");
    let other = tempfile::tempdir().expect("tempdir");
    let (store, mut fresh) = open(other.path());
    fresh.install_snapshot(from_oracle).await.expect("install");
    let (store, mut fresh) = reopen(other.path(), store, fresh);
    for id in &ids {
        let h = HeadStreamRequest {
            stream_id: id.clone(),
            now_ms: 3,
        };
        assert_eq!(
            fresh.head_stream(h.clone(), p()).await.expect("head"),
            oracle.head_stream(h.clone(), p()).await.expect("head")
        );
        assert_eq!(
            installed.head_stream(h.clone(), p()).await.expect("head"),
            oracle.head_stream(h, p()).await.expect("head")
        );
        assert_eq!(
            read(&mut fresh, id, 0, 3).await.expect("read"),
            b"first second third"
        );
        let retry = fresh
            .append(append(id, b"third", 4, Some((0, 2))), p(), none())
            .await
            .expect("retry");
        assert!(
            retry.deduplicated,
            "producer receipts travel in the snapshot"
        );
    }
    // import_group_state: only into an empty group.
    let snapshot = oracle
        .snapshot(p())
        .await
        .expect("snapshot")
        .stream_snapshot;
    let conflict = fresh
        .import_group_state(
            ImportGroupStateRequest {
                snapshot: Box::new(snapshot.clone()),
            },
            p(),
        )
        .await;
    assert_eq!(code(conflict), Some(StreamErrorCode::ImportConflict));
    let third = tempfile::tempdir().expect("tempdir");
    let (_s, mut empty) = open(third.path());
    let imported = empty
        .import_group_state(
            ImportGroupStateRequest {
                snapshot: Box::new(snapshot),
            },
            p(),
        )
        .await
        .expect("import");
    assert_eq!((imported.buckets, imported.streams), (1, 2));
    assert_eq!(
        read(&mut empty, &ids[1], 6, 5).await.expect("read"),
        b"second third"
    );
    drop((store, fresh));
}

fn external(path: &str, len: u64, size: u64) -> ExternalPayloadRef {
    ExternalPayloadRef {
        s3_path: path.into(),
        payload_len: len,
        object_size: size,
    }
}

/// A create of `id` whose first `len` bytes are in the object at `path` (of `size` bytes).
fn create_external(
    id: &BucketStreamId,
    path: &str,
    len: u64,
    size: u64,
) -> CreateStreamExternalRequest {
    CreateStreamExternalRequest {
        stream_id: id.clone(),
        content_type: CT.into(),
        initial_payload: external(path, len, size),
        record_ends: Vec::new(),
        close_after: false,
        stream_seq: None,
        producer: None,
        stream_ttl_seconds: None,
        stream_expires_at_ms: None,
        attrs: None,
        now_ms: 1,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn external_payloads_are_served_from_their_objects_across_flushes_and_restarts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, mut engine) = open(dir.path());
    let id = BucketStreamId::new("tenant", "ext");
    let first: Vec<u8> = (0..100u8).collect();
    let second: Vec<u8> = (0..250u32).map(|i| (i * 7) as u8).collect();
    engine
        .cold_store()
        .put("tenant/ext/external/one.bin", Bytes::from(first.clone()))
        .await
        .expect("upload");
    engine
        .cold_store()
        .put("tenant/ext/external/two.bin", Bytes::from(second.clone()))
        .await
        .expect("upload");
    let bad = |len, size| create_external(&id, "tenant/ext/external/one.bin", len, size);
    assert_eq!(
        code(engine.create_stream_external(bad(0, 100), p()).await),
        Some(StreamErrorCode::EmptyAppend)
    );
    assert_eq!(
        code(engine.create_stream_external(bad(100, 10), p()).await),
        Some(StreamErrorCode::InvalidColdFlush)
    );
    let created = engine
        .create_stream_external(bad(100, 100), p())
        .await
        .expect("create external");
    assert_eq!(created.next_offset, 100);
    let head = head(&mut engine, &id, 2).await.expect("head");
    assert_eq!(
        head.cold_hot_start_offset, 100,
        "external bytes are not hot"
    );
    let inline = |bytes: &'static [u8]| {
        let mut r = AppendRequest::from_bytes(id.clone(), Bytes::from_static(bytes));
        r.content_type = CT.into();
        r
    };
    engine
        .append(
            inline(b"hot bytes between the objects, fifty bytes long..!"),
            p(),
            none(),
        )
        .await
        .expect("inline");
    let ext = ursula_runtime::AppendExternalRequest {
        stream_id: id.clone(),
        content_type: CT.into(),
        payload: external("tenant/ext/external/two.bin", 200, 250),
        record_ends: Vec::new(),
        close_after: false,
        stream_seq: None,
        producer: None,
        now_ms: 3,
        record_match: None,
    };
    let appended = engine
        .append_external(ext, p())
        .await
        .expect("append external");
    assert_eq!((appended.start_offset, appended.next_offset), (150, 350));
    assert_eq!(appended.stream_hot_bytes, 50, "only inline bytes are hot");
    engine
        .append(inline(b"and a hot tail, thirty bytes."), p(), none())
        .await
        .expect("inline");
    let mut model = first.clone();
    model.extend_from_slice(b"hot bytes between the objects, fifty bytes long..!");
    model.extend_from_slice(&second[..200]);
    model.extend_from_slice(b"and a hot tail, thirty bytes.");
    assert_eq!(read(&mut engine, &id, 0, 4).await.expect("read"), model);
    // A flush takes the contiguous hot run only, and the hot start then skips the external bytes.
    let hot_start = engine
        .flush_stream_cold(&id, 1 << 20, p())
        .await
        .expect("flush")
        .expect("flushed");
    assert_eq!(hot_start, 350);
    assert_eq!(engine.backlog_bytes(&id), 29);
    assert_eq!(read(&mut engine, &id, 0, 5).await.expect("read"), model);
    assert!(engine.verify().await.is_clean());
    let (store, mut engine) = reopen(dir.path(), store, engine);
    assert_eq!(
        read(&mut engine, &id, 120, 6).await.expect("read"),
        model[120..]
    );
    // The external segments travel in the group snapshot.
    let snapshot = engine.snapshot(p()).await.expect("snapshot");
    assert_eq!(
        snapshot.stream_snapshot.streams[0].external_segments.len(),
        2
    );
    drop((store, engine));
    let other = tempfile::tempdir().expect("tempdir");
    let store = Arc::new(Store::open(other.path()).expect("store"));
    let cold = ColdStore::local(&dir.path().join("cold")).expect("same objects");
    let mut fresh =
        DiskGroupEngine::open(&store, "durable", cold, GroupOptions::default()).expect("engine");
    fresh.install_snapshot(snapshot).await.expect("install");
    assert_eq!(
        read(&mut fresh, &id, 0, 7)
            .await
            .expect("read after install"),
        model
    );
    // A missing external object is reported by path.
    std::fs::remove_file(dir.path().join("cold/tenant/ext/external/two.bin")).expect("delete");
    let report = fresh.verify().await;
    assert!(
        !report.is_clean() && report.findings[0].problem.contains("two.bin")
            || report
                .findings
                .iter()
                .any(|f| f.problem.contains("not found") || f.problem.contains("No such")),
        "{report:?}"
    );
    assert_eq!(
        code(
            fresh
                .create_stream(create(&BucketStreamId::new("no", "x"), 1), p(), none())
                .await
        ),
        Some(StreamErrorCode::InvalidBucketId)
    );
}

/// Child of the crash test: appends forever with a producer and prints every acknowledged
/// append as `seq start end`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by kill_9_never_loses_an_acknowledged_append"]
async fn group_crash_child() {
    let Ok(dir) = std::env::var("STRATA_GROUP_CRASH_DIR") else {
        return;
    };
    let (_store, mut engine) = open(Path::new(&dir));
    let id = BucketStreamId::new("crash", "s");
    engine
        .create_stream(create(&id, 1), p(), none())
        .await
        .expect("create");
    let head = engine
        .head_stream(
            HeadStreamRequest {
                stream_id: id.clone(),
                now_ms: 1,
            },
            p(),
        )
        .await
        .expect("head");
    let mut seq = head.tail_offset / 8;
    loop {
        let payload = format!("{seq:08}");
        let mut r = AppendRequest::from_bytes(id.clone(), Bytes::from(payload));
        r.content_type = CT.into();
        r.producer = Some(ProducerRequest {
            producer_id: "crash".into(),
            producer_epoch: 0,
            producer_seq: seq,
        });
        let response = engine.append(r, p(), none()).await.expect("append");
        println!("{seq} {} {}", response.start_offset, response.next_offset);
        seq += 1;
    }
}

#[test]
fn kill_9_never_loses_an_acknowledged_append() {
    let dir = tempfile::tempdir().expect("tempdir");
    let env = [("STRATA_GROUP_CRASH_DIR", dir.path().display().to_string())];
    let mut acknowledged = 0u64;
    for cycle in 0..6 {
        let lines = common::run_and_kill(
            "group_crash_child",
            &env,
            Duration::from_millis(400 + 70 * cycle),
        );
        // The last acknowledged append's line (a cycle killed before its first append, still
        // opening the engine, prints only the test harness's lines).
        let last_seq = lines
            .iter()
            .rev()
            .find_map(|line| line.split(' ').next()?.parse::<u64>().ok());
        if let Some(seq) = last_seq {
            acknowledged = acknowledged.max(seq + 1);
        }
    }
    assert!(acknowledged > 10, "the child made progress: {acknowledged}");
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    runtime.block_on(async {
        let (_store, mut engine) = open(dir.path());
        let id = BucketStreamId::new("crash", "s");
        let bytes = read(&mut engine, &id, 0, 2).await.expect("read");
        assert!(
            bytes.len() as u64 >= acknowledged * 8,
            "{} bytes for {acknowledged} acknowledged appends",
            bytes.len()
        );
        for (i, chunk) in bytes.chunks(8).enumerate() {
            assert_eq!(
                chunk,
                format!("{i:08}").as_bytes(),
                "append {i} is intact and in order"
            );
        }
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_record_coordinates_survive_restarts_and_travel_in_snapshots() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, mut engine) = open(dir.path());
    let id = BucketStreamId::new("records", "events");
    let json = "application/json";
    let mut c = CreateStreamRequest::new(id.clone(), json);
    c.initial_payload = Bytes::from_static(b"{\"a\":1}\n");
    c.now_ms = 1;
    let created = engine.create_stream(c, p(), none()).await.expect("create");
    assert_eq!(
        created
            .record_range
            .map(|r| (r.first_record, r.next_record)),
        Some((0, 1))
    );
    let mut batch =
        AppendRequest::from_bytes(id.clone(), Bytes::from_static(b"{\"b\":2}\n{\"c\":3}\n"));
    batch.content_type = json.into();
    batch.record_match = Some(1);
    let appended = engine
        .append(batch, p(), none())
        .await
        .expect("append two records");
    assert_eq!(
        appended
            .record_range
            .map(|r| (r.first_record, r.next_record)),
        Some((1, 3))
    );
    let mut torn = AppendRequest::from_bytes(id.clone(), Bytes::from_static(b"{\"d\":4}"));
    torn.content_type = json.into();
    assert_eq!(
        code(engine.append(torn, p(), none()).await),
        Some(StreamErrorCode::InvalidRecordBoundaries)
    );
    let mut stale = AppendRequest::from_bytes(id.clone(), Bytes::from_static(b"{}\n"));
    stale.content_type = json.into();
    stale.record_match = Some(1);
    let err = engine
        .append(stale, p(), none())
        .await
        .expect_err("record tail moved");
    assert_eq!(err.code(), Some(StreamErrorCode::RecordPreconditionFailed));

    let (store, mut engine) = reopen(dir.path(), store, engine);
    let by_record = |record, max| ReadStreamRequest {
        stream_id: id.clone(),
        offset: 0,
        max_len: 0,
        now_ms: 2,
        record: Some(record),
        max_records: max,
    };
    let second = engine
        .read_stream(by_record(1, Some(1)), p())
        .await
        .expect("read record 1");
    assert_eq!(second.payload, b"{\"b\":2}\n");
    assert_eq!(
        second.record_range.map(|r| (r.first_record, r.next_record)),
        Some((1, 2))
    );
    // Flush the first two records' bytes to the cold tier; record reads stitch both tiers.
    engine
        .flush_stream_cold(&id, 12, p())
        .await
        .expect("flush")
        .expect("flushed");
    let rest = engine
        .read_stream(by_record(0, None), p())
        .await
        .expect("read all records");
    assert_eq!(rest.payload, b"{\"a\":1}\n{\"b\":2}\n{\"c\":3}\n");
    // Retention must land on a record boundary.
    let publish = PublishSnapshotRequest {
        stream_id: id.clone(),
        snapshot_offset: 16,
        content_type: "text/plain".into(),
        payload: Bytes::from_static(b"s"),
        expected_digest: None,
        now_ms: 3,
    };
    engine
        .publish_snapshot(publish, p())
        .await
        .expect("checkpoint at record 2");
    let mid = engine
        .advance_retention(
            AdvanceRetentionRequest {
                stream_id: id.clone(),
                retained_offset: 12,
                now_ms: 3,
            },
            p(),
        )
        .await;
    // 12 is below the flushed prefix (so "aligned"), but no record starts there.
    assert_eq!(code(mid), Some(StreamErrorCode::InvalidRecordBoundaries));
    let retained = engine
        .advance_retention(
            AdvanceRetentionRequest {
                stream_id: id.clone(),
                retained_offset: 16,
                now_ms: 3,
            },
            p(),
        )
        .await
        .expect("retain");
    assert_eq!(
        retained
            .record_range
            .map(|r| (r.first_record, r.next_record)),
        Some((2, 3))
    );
    let (store, mut engine) = reopen(dir.path(), store, engine);
    assert_eq!(
        code(engine.read_stream(by_record(1, None), p()).await),
        Some(StreamErrorCode::StreamGone)
    );
    assert_eq!(
        engine
            .read_stream(by_record(2, None), p())
            .await
            .expect("record 2")
            .payload,
        b"{\"c\":3}\n"
    );
    // The coordinates travel in the group snapshot to ursula's engine and back.
    let snapshot = engine.snapshot(p()).await.expect("snapshot");
    let mut oracle = InMemoryGroupEngine::default();
    oracle
        .install_snapshot(snapshot.clone())
        .await
        .expect("ursula installs it");
    let head = HeadStreamRequest {
        stream_id: id.clone(),
        now_ms: 4,
    };
    assert_eq!(
        oracle
            .head_stream(head.clone(), p())
            .await
            .expect("head")
            .record_range,
        engine
            .head_stream(head.clone(), p())
            .await
            .expect("head")
            .record_range
    );
    drop((store, engine));
    let other = tempfile::tempdir().expect("tempdir");
    let (_store, mut fresh) = open(other.path());
    fresh
        .install_snapshot(oracle.snapshot(p()).await.expect("snapshot"))
        .await
        .expect("install");
    let read = ReadStreamRequest {
        stream_id: id.clone(),
        offset: 0,
        max_len: 0,
        now_ms: 5,
        record: Some(2),
        max_records: None,
    };
    assert_eq!(
        fresh
            .read_stream(read, p())
            .await
            .expect("record 2 after install")
            .payload,
        b"{\"c\":3}\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn external_payloads_answer_like_the_in_memory_engine() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (_store, mut engine) = open(dir.path());
    let oracle_cold = Arc::new(ursula_runtime::ColdStore::memory().expect("memory store"));
    let mut oracle = InMemoryGroupEngine::with_cold_store(oracle_cold.clone());
    let id = BucketStreamId::new("tenant", "ext-diff");
    let object: Vec<u8> = (0..64u8).collect();
    for path in [
        "tenant/ext-diff/external/a.bin",
        "tenant/ext-diff/external/b.bin",
    ] {
        engine
            .cold_store()
            .put(path, Bytes::from(object.clone()))
            .await
            .expect("upload");
        oracle_cold
            .write_chunk(path, &object)
            .await
            .expect("upload");
    }
    let create = create_external(&id, "tenant/ext-diff/external/a.bin", 40, 64);
    assert_eq!(
        engine
            .create_stream_external(create.clone(), p())
            .await
            .expect("create"),
        oracle
            .create_stream_external(create, p())
            .await
            .expect("create")
    );
    let inline = append(&id, b"inline bytes", 2, Some((0, 0)));
    assert_eq!(
        engine
            .append(inline.clone(), p(), none())
            .await
            .expect("inline"),
        oracle.append(inline, p(), none()).await.expect("inline")
    );
    let ext = ursula_runtime::AppendExternalRequest {
        stream_id: id.clone(),
        content_type: CT.into(),
        payload: ExternalPayloadRef {
            s3_path: "tenant/ext-diff/external/b.bin".into(),
            payload_len: 64,
            object_size: 64,
        },
        record_ends: Vec::new(),
        close_after: false,
        stream_seq: None,
        producer: Some(ProducerRequest {
            producer_id: "writer".into(),
            producer_epoch: 0,
            producer_seq: 1,
        }),
        now_ms: 3,
        record_match: None,
    };
    assert_eq!(
        engine
            .append_external(ext.clone(), p())
            .await
            .expect("external"),
        oracle
            .append_external(ext.clone(), p())
            .await
            .expect("external")
    );
    // The retry is answered from the producer's receipt by both.
    assert_eq!(
        engine
            .append_external(ext.clone(), p())
            .await
            .expect("retry"),
        oracle.append_external(ext, p()).await.expect("retry")
    );
    let h = HeadStreamRequest {
        stream_id: id.clone(),
        now_ms: 4,
    };
    assert_eq!(
        engine.head_stream(h.clone(), p()).await.expect("head"),
        oracle.head_stream(h, p()).await.expect("head")
    );
    for offset in [0, 30, 45, 52, 100] {
        let r = ReadStreamRequest {
            stream_id: id.clone(),
            offset,
            max_len: 1 << 10,
            now_ms: 5,
            record: None,
            max_records: None,
        };
        assert_eq!(
            engine.read_stream(r.clone(), p()).await.expect("read"),
            oracle.read_stream(r, p()).await.expect("read"),
            "read at {offset}"
        );
    }
    let plan = plan_all(&id);
    assert_eq!(
        engine
            .plan_cold_flush(plan.clone(), p())
            .await
            .expect("plan"),
        oracle.plan_cold_flush(plan, p()).await.expect("plan"),
        "flush candidates stop at the external segment"
    );
}

/// A plan request over all hot bytes.
fn plan_all(id: &BucketStreamId) -> ursula_runtime::PlanColdFlushRequest {
    ursula_runtime::PlanColdFlushRequest {
        stream_id: id.clone(),
        min_hot_bytes: 1,
        max_flush_bytes: 1 << 20,
    }
}

/// Polls `future` up to `polls` times (letting background I/O run between polls) and drops it
/// if it has not finished: a caller that gave up at one of its awaits. True if it finished.
async fn poll_then_drop<F: std::future::Future>(future: F, polls: usize) -> bool {
    let mut future = std::pin::pin!(future);
    for _ in 0..polls {
        if futures::poll!(future.as_mut()).is_ready() {
            return true;
        }
        tokio::time::sleep(Duration::from_micros(300)).await;
    }
    false
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_dropped_at_any_await_leaves_memory_and_disk_consistent() {
    // Each command is dropped after 0, 1, 2, ... polls until one run lets it finish; then
    // commands that depend on what it may have changed are acknowledged, the engine restarts,
    // and everything acknowledged must be there (the original defect: a dropped create left its
    // new bucket in memory only, so a later acknowledged create in that bucket was lost).
    for command in 0..4 {
        for polls in 0.. {
            let dir = tempfile::tempdir().unwrap();
            let (store, mut engine) = open(dir.path());
            let base = BucketStreamId::new("tenant", "base");
            engine
                .create_stream(create(&base, 1), p(), none())
                .await
                .unwrap();
            engine
                .append(append(&base, b"0123456789", 2, None), p(), none())
                .await
                .unwrap();
            let fresh = BucketStreamId::new("fresh-bucket", "a");
            let finished = match command {
                0 => {
                    let mut with_bytes = create(&fresh, 3);
                    with_bytes.initial_payload = Bytes::from_static(b"initial bytes");
                    poll_then_drop(engine.create_stream(with_bytes, p(), none()), polls).await
                }
                1 => {
                    poll_then_drop(
                        engine.append(append(&base, b"abc", 3, None), p(), none()),
                        polls,
                    )
                    .await
                }
                2 => {
                    let batch = AppendBatchRequest {
                        content_type: CT.into(),
                        now_ms: 3,
                        ..AppendBatchRequest::new(
                            base.clone(),
                            vec![Bytes::from_static(b"xy"), Bytes::from_static(b"z")],
                        )
                    };
                    poll_then_drop(engine.append_batch(batch, p(), none()), polls).await
                }
                _ => poll_then_drop(engine.flush_stream_cold(&base, 1 << 20, p()), polls).await,
            };
            // Commands that rely on the state the dropped one may have touched.
            let other = BucketStreamId::new("fresh-bucket", "b");
            engine
                .create_stream(create(&other, 4), p(), none())
                .await
                .unwrap();
            let tail = engine
                .append(append(&base, b"tail", 5, None), p(), none())
                .await
                .unwrap()
                .next_offset;
            let before = read(&mut engine, &base, 0, 6).await.unwrap();
            assert_eq!(before.len() as u64, tail);
            let (store, mut engine) = reopen(dir.path(), store, engine);
            let head = HeadStreamRequest {
                stream_id: other.clone(),
                now_ms: 6,
            };
            assert!(
                engine.head_stream(head, p()).await.is_ok(),
                "command {command} dropped after {polls} polls: an acknowledged create was lost"
            );
            assert_eq!(
                read(&mut engine, &base, 0, 6).await.unwrap(),
                before,
                "command {command}"
            );
            assert!(engine.verify().await.is_clean());
            drop(engine);
            store.close_blocking().unwrap();
            if finished || polls > 40 {
                break;
            }
        }
    }
}

/// Persist, then apply, with one fdatasync per command: appends, batches, a close and a create
/// each sync the payload log's journal once, and RocksDB (applied without its WAL) never syncs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_group_command_costs_one_file_sync_and_no_rocksdb_sync() {
    use strata::fs::{FaultFs, OpKind, OpKinds};
    let dir = tempfile::tempdir().unwrap();
    let fs = FaultFs::new(dir.path()).unwrap();
    let options = strata::StoreOptions::default().with_fs(fs.shared());
    let store = Store::open_with(dir.path(), options).unwrap();
    let cold = ColdStore::local_with_fs(store.fs().clone(), &dir.path().join("cold")).unwrap();
    let mut engine = DiskGroupEngine::open(&store, "g", cold, GroupOptions::default()).unwrap();
    let syncs = |fs: &FaultFs| {
        (
            fs.count(OpKinds::only(OpKind::Sync)),
            fs.count(OpKinds::only(OpKind::ExternalSync)),
        )
    };
    // A new log prepares journal space in steps that grow with what it has written: warm it
    // up past the first small steps, then count.
    let warm = BucketStreamId::new("tenant", "warm");
    engine
        .create_stream(CreateStreamRequest::new(warm.clone(), CT), p(), none())
        .await
        .unwrap();
    for i in 0..64u8 {
        let mut append = AppendRequest::from_bytes(warm.clone(), Bytes::from(vec![i; 1000]));
        append.content_type = CT.into();
        engine.append(append, p(), none()).await.unwrap();
    }
    let id = BucketStreamId::new("tenant", "s");
    let before = syncs(&fs);
    engine
        .create_stream(CreateStreamRequest::new(id.clone(), CT), p(), none())
        .await
        .unwrap();
    let mut commands = 1;
    for i in 0..40u8 {
        let mut append = AppendRequest::from_bytes(id.clone(), Bytes::from(vec![i; 1000]));
        append.content_type = CT.into();
        engine.append(append, p(), none()).await.unwrap();
        commands += 1;
    }
    let batch = AppendBatchRequest {
        content_type: CT.into(),
        ..AppendBatchRequest::new(
            id.clone(),
            (0..32u8).map(|i| Bytes::from(vec![i; 100])).collect(),
        )
    };
    engine.append_batch(batch, p(), none()).await.unwrap();
    commands += 1;
    let after = syncs(&fs);
    // Preparing journal space ahead (zeroing a chunk, then syncing it) may add a sync now and
    // then; never one per command.
    let file_syncs = after.0 - before.0;
    println!("{file_syncs} file syncs for {commands} commands");
    assert!(
        (commands..commands + commands / 8).contains(&file_syncs),
        "{file_syncs} file syncs for {commands} commands"
    );
    assert_eq!(after.1, before.1, "RocksDB synced during commands");
}

/// Moves the closed group to the per-group layout of earlier versions and opens its RocksDB
/// there directly (every family).
fn raw_per_group_db(dir: &Path) -> rocksdb::DB {
    group_state::to_per_group_layout(dir, "durable");
    group_state::open_all(&group_state::per_group_dir(dir, "durable"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_format_3_database_with_json_stream_rows_opens_and_writes_binary_rows() {
    use strata::group::rows::encode_row;
    use strata::group::stream_row::decode_stream_row;
    let dir = tempfile::tempdir().unwrap();
    let id = BucketStreamId::new("bucket", "old-rows");
    let (store, mut engine) = open(dir.path());
    engine
        .create_stream(create(&id, 1), p(), none())
        .await
        .unwrap();
    engine
        .append(append(&id, b"hello", 2, None), p(), none())
        .await
        .unwrap();
    // A shutdown flushes RocksDB; a drop alone leaves the rows to replay.
    engine.shutdown().await.unwrap();
    drop(engine);
    store.close_blocking().unwrap();
    drop(store);
    // Make it what format version 3 wrote: JSON stream rows, in a database of the group's own.
    {
        let db = raw_per_group_db(dir.path());
        let streams = db.cf_handle("streams").unwrap();
        let rows: Vec<_> = db
            .iterator_cf(streams, rocksdb::IteratorMode::Start)
            .map(|kv| kv.unwrap())
            .collect();
        assert_eq!(rows.len(), 1);
        for (key, value) in rows {
            assert_eq!(value[0], 2, "format 4 writes binary rows");
            let json = encode_row(&decode_stream_row(&value).unwrap()).unwrap();
            db.put_cf(streams, key, json).unwrap();
        }
        let meta = db.cf_handle("meta").unwrap();
        db.put_cf(meta, "format_version", 3u64.to_be_bytes())
            .unwrap();
        db.flush_cf(streams).unwrap();
        db.flush_cf(meta).unwrap();
    }
    let (store, mut engine) = open(dir.path());
    assert_eq!(read(&mut engine, &id, 0, 3).await.unwrap(), b"hello");
    engine
        .append(append(&id, b" again", 4, None), p(), none())
        .await
        .unwrap();
    let (_store, mut engine) = reopen(dir.path(), store, engine);
    assert_eq!(read(&mut engine, &id, 0, 5).await.unwrap(), b"hello again");
    engine.shutdown().await.unwrap();
    drop(engine);
    drop(_store);
    assert!(
        !group_state::per_group_dir(dir.path(), "durable").exists(),
        "the group moved into the store's state database"
    );
    let db = group_state::shared_db(dir.path());
    let meta = db.cf_handle("meta").unwrap();
    let version = db
        .get_cf(meta, group_state::key("durable", "format_version"))
        .unwrap()
        .unwrap();
    assert_eq!(version, strata::group::GROUP_STATE_VERSION.to_be_bytes());
    assert_eq!(strata::group::GROUP_STATE_VERSION, 4);
    let streams = db.cf_handle("streams").unwrap();
    let from = group_state::prefix("durable");
    let (_, row) = db
        .iterator_cf(
            streams,
            rocksdb::IteratorMode::From(&from, rocksdb::Direction::Forward),
        )
        .next()
        .unwrap()
        .unwrap();
    assert_eq!(row[0], 2, "the stream's next change wrote a binary row");
}

/// What the engine answers about a stream: its bytes, head (tail, integrity, ...) and the
/// group's commit index.
async fn observed(engine: &mut DiskGroupEngine, id: &BucketStreamId) -> (Vec<u8>, String, u64) {
    let bytes = read(engine, id, 0, 2).await.expect("read");
    let head = head(engine, id, 2).await.expect("head");
    (bytes, format!("{head:?}"), engine.commit_index())
}

/// Persist, then apply, when the persist fails: a command whose file operations fail at any
/// one point (a write, a sync, a preparation of journal space) leaves memory as the disk has
/// it. The next command first settles the failed one (the log decides whether its record
/// counts; memory is never reloaded) and then works; what the engine then answers equals what
/// a reopened engine answers, and a failed command took effect in both or in neither. Run for
/// a stream whose payloads share the payload log's partition with the commit records and for
/// one whose payloads do not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_failing_at_any_file_operation_is_settled_without_reloading_memory() {
    let shared = (0..)
        .map(|i| BucketStreamId::new("tenant", format!("s{i}")))
        .find(|id| DiskGroupEngine::payload_partition(id) == 0)
        .expect("a stream in partition 0");
    let own = (0..)
        .map(|i| BucketStreamId::new("tenant", format!("s{i}")))
        .find(|id| DiskGroupEngine::payload_partition(id) != 0)
        .expect("a stream in another partition");
    for id in [shared, own] {
        fail_each_operation_of_a_batch(&id, 2).await;
    }
}

/// As above for a batch of 9 KiB, whose integrity digests are hashed beside the commit's sync
/// and added after it (format/GROUP_STATE.md, "Deferred digests").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_with_deferred_digests_failing_at_any_file_operation_is_settled() {
    let id = BucketStreamId::new("tenant", "large");
    fail_each_operation_of_a_batch(&id, 3 << 10).await;
}

/// Fails each file operation of an `append_batch` of three payloads of `len` bytes in turn.
async fn fail_each_operation_of_a_batch(id: &BucketStreamId, len: usize) {
    use strata::fs::{FaultFs, FaultPlan, OpKinds};
    let open_on = |dir: &Path, fs: &FaultFs| {
        let options = strata::StoreOptions::default().with_fs(fs.shared());
        let store = Arc::new(Store::open_with(dir, options).expect("store"));
        let cold = ColdStore::local_with_fs(store.fs().clone(), &dir.join("cold")).expect("cold");
        let engine = DiskGroupEngine::open(&store, "g", cold, GroupOptions::default()).unwrap();
        (store, engine)
    };
    let (mut failed, mut took_effect) = (0, 0);
    for n in 0.. {
        let dir = tempfile::tempdir().unwrap();
        let fs = FaultFs::new(dir.path()).unwrap();
        let (store, mut engine) = open_on(dir.path(), &fs);
        engine
            .create_stream(create(id, 1), p(), none())
            .await
            .unwrap();
        engine
            .append(append(id, b"a", 1, None), p(), none())
            .await
            .unwrap();
        let before = fs.count(OpKinds::ALL);
        fs.set_plan(FaultPlan::FailAt {
            n,
            kinds: OpKinds::ALL,
        });
        let batch = AppendBatchRequest {
            content_type: CT.into(),
            now_ms: 1,
            ..AppendBatchRequest::new(id.clone(), vec![Bytes::from(vec![b'b'; len]); 3])
        };
        let result = engine.append_batch(batch, p(), none()).await;
        let fired = fs.count(OpKinds::ALL) - before > n;
        fs.set_plan(FaultPlan::None);
        if !fired {
            result.expect("no fault, no error");
            break;
        }
        let ok = result
            .as_ref()
            .is_ok_and(|r| r.items.iter().all(|i| i.is_ok()));
        failed += usize::from(!ok);
        engine
            .append(append(id, b"c", 1, None), p(), none())
            .await
            .unwrap_or_else(|e| panic!("fault at op {n}: the next command failed: {e}"));
        let memory = observed(&mut engine, id).await;
        let all = [&b"a"[..], &vec![b'b'; 3 * len], b"c"].concat();
        assert!(
            memory.0 == all || (!ok && memory.0 == b"ac"),
            "fault at op {n} (command ok: {ok}): the stream holds {} bytes",
            memory.0.len()
        );
        took_effect += usize::from(!ok && memory.0 == all);
        drop(engine);
        store.close_blocking().expect("close");
        drop(store);
        let (_store, mut engine) = open_on(dir.path(), &fs);
        assert_eq!(
            observed(&mut engine, id).await,
            memory,
            "fault at op {n}: memory differs from the disk"
        );
    }
    println!("{id}: {failed} failed commands, {took_effect} of them took effect after settling");
    assert!(failed > 0, "no fault made the command fail");
}

/// A runtime with one thread, as ursula's thread-per-core mode gives each core.
fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// Opens group `name` of `store` with a local cold store on the store's file layer.
fn open_on(store: &Store, dir: &Path, name: &str) -> DiskGroupEngine {
    let cold = ColdStore::local_with_fs(store.fs().clone(), &dir.join("cold")).unwrap();
    DiskGroupEngine::open(store, name, cold, GroupOptions::default()).unwrap()
}

/// The groups of one current-thread runtime await durability as futures: a command's journal
/// round runs on a commit worker, so while syncs take 40 ms no other task of the runtime
/// waits for one (the bound: 20 ms), several groups' commands are in flight at once, and every
/// acknowledged append is there after a reopen.
#[test]
fn group_commands_on_a_current_thread_runtime_never_hold_up_its_other_tasks() {
    const GROUPS: usize = 4;
    let dir = tempfile::tempdir().unwrap();
    let (fs, store) = common::fault_store(dir.path());
    let id = BucketStreamId::new("tenant", "s");
    let rt = current_thread();
    let mut engines = Vec::new();
    for g in 0..GROUPS {
        let mut engine = open_on(&store, dir.path(), &format!("g{g}"));
        rt.block_on(engine.create_stream(create(&id, 0), p(), none()))
            .unwrap();
        engines.push(engine);
    }
    fs.set_sync_delay(Duration::from_millis(40));
    let (longest, engines) = common::longest_stall(&rt, async {
        let tasks: Vec<_> = engines
            .into_iter()
            .map(|mut engine| {
                let id = id.clone();
                tokio::spawn(async move {
                    for bytes in [&b"a"[..], b"b", b"c"] {
                        tokio::task::yield_now().await;
                        engine
                            .append(append(&id, bytes, 0, None), p(), none())
                            .await?;
                    }
                    Ok::<_, GroupEngineError>(engine)
                })
            })
            .collect();
        let mut engines = Vec::new();
        for task in tasks {
            engines.push(task.await.unwrap().unwrap());
        }
        engines
    });
    fs.set_sync_delay(Duration::ZERO);
    assert!(
        longest < Duration::from_millis(20),
        "another task of the runtime waited {longest:?} for a group command"
    );
    drop(engines);
    store.close_blocking().unwrap();
    drop(store);
    let store = Store::open(dir.path()).unwrap();
    for g in 0..GROUPS {
        let mut engine = open_on(&store, dir.path(), &format!("g{g}"));
        let bytes = rt.block_on(read(&mut engine, &id, 0, 0)).unwrap();
        assert_eq!(bytes, b"abc", "group g{g}");
    }
}

/// A command whose future is dropped while it awaits durability has written its commit
/// record: the next command settles it (makes it durable and takes its planned state), so its
/// append is there, once, at the offset it was planned at, before and after a reopen.
#[test]
fn a_group_command_dropped_while_it_awaits_durability_takes_effect_with_the_next_command() {
    let dir = tempfile::tempdir().unwrap();
    let (fs, store) = common::fault_store(dir.path());
    let id = BucketStreamId::new("tenant", "s");
    let rt = current_thread();
    let mut engine = open_on(&store, dir.path(), "g");
    rt.block_on(async {
        engine.create_stream(create(&id, 0), p(), none()).await?;
        engine.append(append(&id, b"a", 0, None), p(), none()).await
    })
    .unwrap();
    fs.set_sync_delay(Duration::from_millis(200));
    let dropped = rt.block_on(async {
        let b = engine.append(append(&id, b"b", 0, None), p(), none());
        tokio::time::timeout(Duration::from_millis(20), b).await
    });
    assert!(dropped.is_err(), "the append was still awaiting its round");
    fs.set_sync_delay(Duration::ZERO);
    let head = rt.block_on(head(&mut engine, &id, 0)).unwrap();
    assert_eq!(head.tail_offset, 2, "the dropped append took effect");
    let next = rt
        .block_on(engine.append(append(&id, b"c", 0, None), p(), none()))
        .unwrap();
    assert_eq!(next.start_offset, 2);
    assert_eq!(rt.block_on(read(&mut engine, &id, 0, 0)).unwrap(), b"abc");
    drop(engine);
    store.close_blocking().unwrap();
    drop(store);
    let store = Store::open(dir.path()).unwrap();
    let mut engine = open_on(&store, dir.path(), "g");
    assert_eq!(rt.block_on(read(&mut engine, &id, 0, 0)).unwrap(), b"abc");
}

/// Opens group `name` of `store` with the store's local cold directory.
fn open_group(store: &Store, dir: &Path, name: &str) -> DiskGroupEngine {
    let cold = ColdStore::local(&dir.join("cold")).expect("cold");
    DiskGroupEngine::open(store, name, cold, GroupOptions::default()).expect("engine")
}

/// The store's group payload log, as open in `store`.
fn shared_group_log(store: &Store) -> strata::Log {
    let logs = store.logs();
    let entry = logs
        .iter()
        .find(|l| l.name == "__groups")
        .expect("__groups");
    store
        .open_log(
            "__groups",
            entry.partitions,
            GroupOptions::default().payload_log,
        )
        .expect("the group payload log")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn groups_share_the_stores_payload_log_and_its_commit_rounds() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Store::open(dir.path()).unwrap());
    const GROUPS: usize = 16;
    const APPENDS: usize = 20;
    let id = BucketStreamId::new("tenant", "s");
    let mut engines = Vec::new();
    for g in 0..GROUPS {
        let mut engine = open_group(&store, dir.path(), &format!("g{g}"));
        engine
            .create_stream(create(&id, 1), p(), none())
            .await
            .unwrap();
        engines.push(engine);
    }
    let log = shared_group_log(&store);
    assert_eq!(log.partition_count() as usize, 1 + 8 * GROUPS);
    let rounds_before = log.sync_rounds();
    let tasks: Vec<_> = engines
        .into_iter()
        .enumerate()
        .map(|(g, mut engine)| {
            let id = id.clone();
            tokio::spawn(async move {
                for i in 0..APPENDS {
                    let bytes = Bytes::from(format!("{g}:{i};"));
                    let mut request = AppendRequest::from_bytes(id.clone(), bytes);
                    request.content_type = CT.into();
                    engine.append(request, p(), none()).await.unwrap();
                }
                engine
            })
        })
        .collect();
    let mut engines = Vec::new();
    for task in tasks {
        engines.push(task.await.unwrap());
    }
    let rounds = log.sync_rounds() - rounds_before;
    let commands = (GROUPS * APPENDS) as u64;
    println!("{rounds} journal rounds for {commands} commands of {GROUPS} groups");
    assert!(rounds < commands, "{rounds} rounds for {commands} commands");
    let logs: Vec<String> = store.logs().into_iter().map(|l| l.name).collect();
    assert_eq!(logs, ["__groups"], "one payload log for every group");
    drop((engines, log));
    store.close_blocking().unwrap();
    drop(store);
    let store = Store::open(dir.path()).unwrap();
    let names = DiskGroupEngine::group_names(&store).unwrap();
    assert_eq!(names.len(), GROUPS);
    for g in 0..GROUPS {
        let mut engine = open_group(&store, dir.path(), &format!("g{g}"));
        let expected: String = (0..APPENDS).map(|i| format!("{g}:{i};")).collect();
        assert_eq!(
            read(&mut engine, &id, 0, 3).await.unwrap(),
            expected.as_bytes()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_with_a_payload_log_of_its_own_keeps_it_beside_the_shared_one() {
    use strata::log::LogOwner;
    let dir = tempfile::tempdir().unwrap();
    {
        // The layout of an earlier version: the group's own payload log, 8 partitions, owned.
        let store = Store::open(dir.path()).unwrap();
        store
            .open_log_as("__group_old", 8, LogOptions::default(), LogOwner::Layer)
            .unwrap();
        store.close_blocking().unwrap();
    }
    let id = BucketStreamId::new("tenant", "s");
    let store = Store::open(dir.path()).unwrap();
    let mut old = open_group(&store, dir.path(), "old");
    old.create_stream(create(&id, 1), p(), none())
        .await
        .unwrap();
    old.append(append(&id, b"in its own log", 2, None), p(), none())
        .await
        .unwrap();
    let own = store
        .open_log("__group_old", 8, LogOptions::default())
        .unwrap();
    assert!(
        own.high_water_mark(0).unwrap() >= 2,
        "commit records in its own log"
    );
    assert!(store.logs().iter().all(|l| l.name != "__groups"));
    let mut new = open_group(&store, dir.path(), "new");
    new.create_stream(create(&id, 1), p(), none())
        .await
        .unwrap();
    new.append(append(&id, b"in the shared log", 2, None), p(), none())
        .await
        .unwrap();
    assert_eq!(
        DiskGroupEngine::group_names(&store).unwrap(),
        ["new", "old"]
    );
    drop((old, new, own));
    store.close_blocking().unwrap();
    drop(store);
    let store = Store::open(dir.path()).unwrap();
    let mut old = open_group(&store, dir.path(), "old");
    assert_eq!(read(&mut old, &id, 0, 3).await.unwrap(), b"in its own log");
    let mut new = open_group(&store, dir.path(), "new");
    assert_eq!(
        read(&mut new, &id, 0, 3).await.unwrap(),
        b"in the shared log"
    );
    assert_eq!(shared_group_log(&store).partition_count(), 1 + 8);
}

/// A group engine opened through its async form on a current-thread runtime, while every sync
/// takes 40 ms (a new group's partitions and directory record sync several times): another
/// task of the runtime never waits longer than the bound (20 ms), and the engine works.
#[test]
fn a_group_engine_opened_async_never_holds_up_a_current_thread_runtime() {
    let dir = tempfile::tempdir().unwrap();
    let (fs, store) = common::fault_store(dir.path());
    let cold = ColdStore::local_with_fs(store.fs().clone(), &dir.path().join("cold")).unwrap();
    fs.set_sync_delay(Duration::from_millis(40));
    let rt = current_thread();
    let (longest, mut engine) = common::longest_stall(&rt, async {
        DiskGroupEngine::open_async(&store, "g", cold, GroupOptions::default())
            .await
            .unwrap()
    });
    fs.set_sync_delay(Duration::ZERO);
    assert!(
        longest < Duration::from_millis(20),
        "another task of the runtime waited {longest:?} for the open"
    );
    let id = BucketStreamId::new("tenant", "s");
    rt.block_on(engine.create_stream(create(&id, 0), p(), none()))
        .unwrap();
    rt.block_on(engine.append(append(&id, b"opened", 0, None), p(), none()))
        .unwrap();
    assert_eq!(
        rt.block_on(read(&mut engine, &id, 0, 1)).unwrap(),
        b"opened"
    );
}

/// A group's creation (the group payload log grown, its directory record appended) with each
/// of its file operations failing once: the open fails or succeeds, then another group is
/// created and the first opened again; both hold their own bytes, also after a reopen (no two
/// groups ever share a range, whether the failed record reached the disk or not).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_creation_failing_at_any_file_operation_never_gives_its_range_to_another() {
    use strata::fs::{FaultFs, FaultPlan, OpKinds};
    let id = BucketStreamId::new("tenant", "s");
    let open_on = |store: &Store, dir: &Path, name: &str| {
        let cold = ColdStore::local_with_fs(store.fs().clone(), &dir.join("cold"))
            .map_err(|e| e.to_string())?;
        DiskGroupEngine::open(store, name, cold, GroupOptions::default()).map_err(|e| e.to_string())
    };
    let mut failed = 0;
    for n in 0.. {
        let dir = tempfile::tempdir().unwrap();
        let fs = FaultFs::new(dir.path()).unwrap();
        let options = strata::StoreOptions::default().with_fs(fs.shared());
        let store = Store::open_with(dir.path(), options.clone()).unwrap();
        drop(open_on(&store, dir.path(), "first").unwrap());
        let before = fs.count(OpKinds::ALL);
        fs.set_plan(FaultPlan::FailAt {
            n,
            kinds: OpKinds::ALL,
        });
        let result = open_on(&store, dir.path(), "a");
        let fired = fs.count(OpKinds::ALL) - before > n;
        fs.set_plan(FaultPlan::None);
        if !fired {
            result.expect("no fault, no error");
            break;
        }
        failed += usize::from(result.is_err());
        drop(result);
        let mut engines = Vec::new();
        for (name, bytes) in [("b", &b"of b"[..]), ("a", b"of a")] {
            let mut engine = open_on(&store, dir.path(), name)
                .unwrap_or_else(|e| panic!("fault at op {n}: group {name} does not open: {e}"));
            engine
                .create_stream(create(&id, 1), p(), none())
                .await
                .unwrap();
            let mut request = AppendRequest::from_bytes(id.clone(), Bytes::copy_from_slice(bytes));
            request.content_type = CT.into();
            engine.append(request, p(), none()).await.unwrap();
            engines.push(engine);
        }
        drop(engines);
        store.close_blocking().unwrap();
        drop(store);
        let store = Store::open_with(dir.path(), options).unwrap();
        for (name, bytes) in [("a", &b"of a"[..]), ("b", b"of b")] {
            let mut engine = open_on(&store, dir.path(), name).unwrap();
            let read = read(&mut engine, &id, 0, 2).await.unwrap();
            assert_eq!(read, bytes, "fault at op {n}: group {name} after a reopen");
        }
        store.close_blocking().unwrap();
    }
    assert!(failed > 0, "some fault failed the open");
}
