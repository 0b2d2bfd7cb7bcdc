//! Strata's group engines behind ursula's own `ShardRuntime` (0.4.1): the runtime routes streams
//! to raft groups, creates one `DiskGroupEngine` per touched group through
//! `DiskGroupEngineFactory`, and serves creates, appends and reads from them.
//! Needs the `s3` feature: parts of it run against an S3 server on loopback.
#![cfg(feature = "s3")]

mod s3_harness;

use std::collections::HashSet;
use std::sync::Arc;

use bytes::Bytes;
use strata::cold::{ColdStore, S3Config};
use strata::group::{DiskGroupEngineFactory, GroupOptions};
use strata::Store;
use ursula_runtime::{
    AppendRequest, ColdIndexPageKey, ColdIndexPageStore, ColdStoreColdIndexPageStore,
    CreateStreamRequest, DeleteStreamRequest, PlanColdFlushRequest, ReadStreamRequest,
    RuntimeConfig, RuntimeThreading, ShardRuntime,
};
use ursula_shard::BucketStreamId;

const CT: &str = "application/octet-stream";

fn runtime_config() -> RuntimeConfig {
    RuntimeConfig {
        core_count: 2,
        raft_group_count: 4,
        mailbox_capacity: 128,
        threading: RuntimeThreading::HostedTokio,
        cold_max_hot_bytes_per_group: None,
        raft_max_uncommitted_bytes_per_group: None,
        live_read_max_waiters_per_core: Some(1024),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shard_runtime_drives_durable_groups() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Arc::new(Store::open(dir.path()).expect("store"));
    let cold = ColdStore::local(&dir.path().join("cold")).expect("cold");
    let config = runtime_config();
    let factory = DiskGroupEngineFactory::new(store.clone(), cold, GroupOptions::default());
    let runtime = ShardRuntime::spawn_with_engine_factory(config, factory).expect("runtime");
    let mut groups = HashSet::new();
    for i in 0..16 {
        let id = BucketStreamId::new("tenant", format!("stream-{i}"));
        groups.insert(runtime.locate(&id).raft_group_id.0);
        runtime
            .create_stream(CreateStreamRequest::new(id.clone(), CT))
            .await
            .expect("create");
        for round in 0..3 {
            let mut append =
                AppendRequest::from_bytes(id.clone(), Bytes::from(format!("{i}:{round};")));
            append.content_type = CT.into();
            runtime.append(append).await.expect("append");
        }
        let read = runtime
            .read_stream(ReadStreamRequest {
                stream_id: id.clone(),
                offset: 0,
                max_len: 1 << 20,
                now_ms: 0,
                record: None,
                max_records: None,
            })
            .await
            .expect("read");
        assert_eq!(read.payload, format!("{i}:0;{i}:1;{i}:2;").into_bytes());
    }
    assert!(groups.len() > 1, "streams spread over several groups");
    // Every command's commit reaches the runtime's metrics (the factory wires them).
    let metrics = runtime.metrics().snapshot();
    assert!(
        metrics.wal_batches >= 16 * 4 && metrics.wal_sync_ns > 0,
        "{} WAL batches, {} ns syncing",
        metrics.wal_batches,
        metrics.wal_sync_ns
    );
    // One group engine per touched raft group, all of them in the store's one state database
    // and the store's one group payload log.
    let on_disk: HashSet<u32> = strata::group::DiskGroupEngine::group_names(&store)
        .expect("group names")
        .iter()
        .filter_map(|name| name.strip_prefix("group-").and_then(|n| n.parse().ok()))
        .collect();
    assert_eq!(on_disk, groups);
    assert!(
        !dir.path().join("groups").exists(),
        "no database of a group's own"
    );
    let logs: Vec<String> = store.logs().into_iter().map(|l| l.name).collect();
    assert_eq!(logs, ["__groups"], "no payload log of a group's own");
}

async fn read_all(runtime: &ShardRuntime, id: &BucketStreamId) -> Vec<u8> {
    let read = ReadStreamRequest {
        stream_id: id.clone(),
        offset: 0,
        max_len: 1 << 20,
        now_ms: 0,
        record: None,
        max_records: None,
    };
    runtime.read_stream(read).await.expect("read").payload
}

async fn append_and_flush(runtime: &ShardRuntime, id: &BucketStreamId, text: &str) {
    let mut append = AppendRequest::from_bytes(id.clone(), Bytes::from(text.to_string()));
    append.content_type = CT.into();
    runtime.append(append).await.expect("append");
    let plan = PlanColdFlushRequest {
        stream_id: id.clone(),
        min_hot_bytes: 1,
        max_flush_bytes: 1 << 20,
    };
    let flushed = runtime.flush_cold_once(plan).await.expect("runtime flush");
    assert!(
        flushed.is_some(),
        "the runtime uploaded and committed a chunk"
    );
}

/// Strata's and the runtime's views of one moto bucket (they name objects alike).
fn shared_bucket(
    moto: &s3_harness::Moto,
    bucket: &str,
) -> (ColdStore, Arc<ursula_runtime::ColdStore>) {
    let strata_cold = ColdStore::s3(
        &S3Config::new(bucket)
            .with_endpoint(Some(moto.endpoint.clone()))
            .with_region(Some("us-east-1".into()))
            .with_access_key_id(Some("test".into()))
            .with_secret_access_key(Some("test".into()))
            .with_allow_http(true),
    )
    .expect("strata's view of the bucket");
    let runtime_cold = ursula_runtime::ColdStore::try_new(&ursula_config::ColdConfig {
        backend: ursula_config::ColdBackend::S3,
        s3: Some(ursula_config::S3Config {
            bucket: Some(bucket.into()),
            region: Some("us-east-1".into()),
            endpoint: Some(moto.endpoint.clone()),
            access_key_id: Some("test".into()),
            secret_access_key: Some("test".into()),
            server_side_encryption: ursula_config::S3ServerSideEncryption::None,
            ..ursula_config::S3Config::default()
        }),
        ..ursula_config::ColdConfig::default()
    })
    .expect("the runtime's view of the bucket");
    (strata_cold, Arc::new(runtime_cold))
}

/// The chunks on page 0 of `id`'s cold index in the runtime's store (None: no page).
async fn page_zero(
    runtime_cold: &Arc<ursula_runtime::ColdStore>,
    id: &BucketStreamId,
) -> Option<Vec<(u64, u64)>> {
    let pages = ColdStoreColdIndexPageStore::new(runtime_cold.clone());
    let key = ColdIndexPageKey {
        stream_id: id.clone(),
        generation: 0,
        page_id: 0,
    };
    let page = pages.get_page(&key).await.expect("read page")?;
    Some(
        page.cold_chunks
            .iter()
            .map(|c| (c.start_offset, c.end_offset))
            .collect(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runtimes_background_compaction_merges_strata_groups_chunks() {
    // ursula's runtime discovers compaction work through cold-index pages; a factory given the
    // runtime's cold store keeps them for Strata's groups.
    let moto = s3_harness::start("compact-cold");
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Arc::new(Store::open(dir.path()).expect("store"));
    let (strata_cold, runtime_cold) = shared_bucket(&moto, "compact-cold");
    let factory = DiskGroupEngineFactory::new(store.clone(), strata_cold, GroupOptions::default())
        .with_runtime_cold_index(runtime_cold.clone());
    let runtime = ShardRuntime::spawn_with_engine_factory_and_cold_store(
        runtime_config(),
        factory,
        Some(runtime_cold.clone()),
    )
    .expect("runtime");
    let id = BucketStreamId::new("tenant", "merged");
    runtime
        .create_stream(CreateStreamRequest::new(id.clone(), CT))
        .await
        .expect("create");
    let texts = [
        "chunk one of four; ",
        "chunk two of four; ",
        "chunk 3 of four; ",
        "last chunk.",
    ];
    for text in texts {
        append_and_flush(&runtime, &id, text).await;
    }
    let whole = texts.concat().into_bytes();
    let ends: Vec<u64> = texts
        .iter()
        .scan(0u64, |end, t| {
            *end += t.len() as u64;
            Some(*end)
        })
        .collect();
    let page = page_zero(&runtime_cold, &id).await.expect("page 0 written");
    assert_eq!(
        page.len(),
        4,
        "every flushed chunk is on the page: {page:?}"
    );
    // Three chunks reach the target: they become one object, committed by Strata.
    let target = ends[2] - 1;
    let compacted = runtime
        .compact_cold_once(target, 1 << 20, 8, 0)
        .await
        .expect("compact");
    assert_eq!(compacted, 1);
    assert_eq!(read_all(&runtime, &id).await, whole);
    let page = page_zero(&runtime_cold, &id)
        .await
        .expect("page 0 rewritten");
    assert_eq!(page, vec![(0, ends[2]), (ends[2], ends[3])]);
    assert_eq!(
        runtime
            .compact_cold_once(target, 1 << 20, 8, 0)
            .await
            .expect("again"),
        0
    );
    // GC deletes the page before the merged objects, then the page is written again.
    let group = runtime.locate(&id).raft_group_id;
    assert_eq!(
        runtime.run_cold_gc_group_once(group, 64).await.expect("gc"),
        1
    );
    let page = page_zero(&runtime_cold, &id)
        .await
        .expect("page 0 after GC");
    assert_eq!(page, vec![(0, ends[2]), (ends[2], ends[3])]);
    assert_eq!(read_all(&runtime, &id).await, whole);
    // A deleted stream's pages go with its objects.
    runtime
        .delete_stream(DeleteStreamRequest {
            stream_id: id.clone(),
        })
        .await
        .expect("delete");
    assert_eq!(page_zero(&runtime_cold, &id).await, None);
    runtime
        .run_cold_gc_group_once(group, 64)
        .await
        .expect("gc after delete");
    let pages = runtime_cold.list_cold_index_pages().await.expect("list");
    assert!(pages.iter().all(|p| p.stream_id != id), "{pages:?}");
    assert_eq!(
        runtime
            .compact_cold_once(1, 1 << 20, 8, 0)
            .await
            .expect("nothing"),
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runtimes_cold_gc_never_takes_a_recreated_streams_objects() {
    // ursula's runtime uploads chunks itself (under `{stream}/chunks/`) and, for a whole-stream
    // GC entry, deletes everything under that prefix: with ursula's in-memory engine a stream
    // recreated under the same id loses its new chunks. Strata queues exact paths instead.
    let moto = s3_harness::start("shared-cold");
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Arc::new(Store::open(dir.path()).expect("store"));
    let (strata_cold, runtime_cold) = shared_bucket(&moto, "shared-cold");
    let factory = DiskGroupEngineFactory::new(store.clone(), strata_cold, GroupOptions::default());
    let runtime = ShardRuntime::spawn_with_engine_factory_and_cold_store(
        runtime_config(),
        factory,
        Some(runtime_cold),
    )
    .expect("runtime");
    let id = BucketStreamId::new("tenant", "recycled");
    runtime
        .create_stream(CreateStreamRequest::new(id.clone(), CT))
        .await
        .expect("create");
    append_and_flush(&runtime, &id, "first incarnation;").await;
    runtime
        .delete_stream(DeleteStreamRequest {
            stream_id: id.clone(),
        })
        .await
        .expect("delete");
    runtime
        .create_stream(CreateStreamRequest::new(id.clone(), CT))
        .await
        .expect("recreate");
    append_and_flush(&runtime, &id, "second incarnation;").await;
    let group = runtime.locate(&id).raft_group_id;
    let reclaimed = runtime.run_cold_gc_group_once(group, 64).await.expect("gc");
    assert_eq!(
        reclaimed, 1,
        "the deleted incarnation's entry was collected"
    );
    assert_eq!(read_all(&runtime, &id).await, b"second incarnation;");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn removing_runtime_chunks_queues_their_pages_before_their_objects() {
    use strata::group::DiskGroupEngine;
    use ursula_runtime::{ColdWriteAdmission, FlushColdRequest, GroupEngine};
    use ursula_shard::{CoreId, RaftGroupId, ShardId, ShardPlacement};
    use ursula_stream::{ColdChunkRef, ColdGcTarget};
    let p = ShardPlacement {
        core_id: CoreId(0),
        shard_id: ShardId(0),
        raft_group_id: RaftGroupId(0),
    };
    let none = ColdWriteAdmission::default();
    let moto = s3_harness::start("page-order");
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Store::open(dir.path()).expect("store");
    let (strata_cold, runtime_cold) = shared_bucket(&moto, "page-order");
    let mut engine = DiskGroupEngine::open(&store, "g", strata_cold, GroupOptions::default())
        .expect("engine")
        .with_runtime_cold_index(runtime_cold.clone());
    let id = BucketStreamId::new("tenant", "removed");
    let create = CreateStreamRequest::new(id.clone(), CT);
    engine.create_stream(create, p, none).await.expect("create");
    // Two chunks uploaded the way the runtime uploads them, committed by flush_cold.
    let mut objects = Vec::new();
    for text in ["first chunk;", "second chunk;"] {
        let mut append = AppendRequest::from_bytes(id.clone(), Bytes::from(text));
        append.content_type = CT.into();
        let appended = engine.append(append, p, none).await.expect("append");
        let (start, end) = (appended.start_offset, appended.next_offset);
        let path = ursula_runtime::new_cold_chunk_path(&id, start, end);
        let size = runtime_cold
            .write_chunk(&path, text.as_bytes())
            .await
            .expect("upload");
        let chunk = ColdChunkRef {
            start_offset: start,
            end_offset: end,
            s3_path: path.clone(),
            object_offset: 0,
            object_size: size,
            shared_object: false,
            payload_digest: String::new(),
        };
        let flush = FlushColdRequest {
            stream_id: id.clone(),
            chunk,
        };
        engine.flush_cold(flush, p).await.expect("flush_cold");
        objects.push(path);
    }
    assert_eq!(
        page_zero(&runtime_cold, &id).await.map(|c| c.len()),
        Some(2)
    );
    engine
        .delete_stream(
            DeleteStreamRequest {
                stream_id: id.clone(),
            },
            p,
        )
        .await
        .expect("delete");
    let page = ColdIndexPageKey {
        stream_id: id.clone(),
        generation: 0,
        page_id: 0,
    }
    .path();
    let entries = engine.plan_cold_gc(16, p).await.expect("plan gc");
    let paths: Vec<String> = entries
        .into_iter()
        .flat_map(|e| match e.target {
            ColdGcTarget::Paths(paths) => paths,
            ColdGcTarget::Stream(_) => Vec::new(),
        })
        .collect();
    let mut expected = vec![page];
    expected.extend(objects);
    assert_eq!(paths, expected, "the page first, then the objects it names");
    assert_eq!(
        page_zero(&runtime_cold, &id).await,
        None,
        "and it was deleted at once"
    );
}
