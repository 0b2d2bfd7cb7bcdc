//! Strata's group engines behind ursula's own `ShardRuntime` (0.4.1): the runtime routes streams
//! to raft groups, creates one `DiskGroupEngine` per touched group through
//! `DiskGroupEngineFactory`, and serves creates, appends and reads from them.
#![cfg(feature = "ursula")]

mod s3_harness;

use std::collections::HashSet;
use std::sync::Arc;

use bytes::Bytes;
use strata::cold::{ColdStore, S3Config};
use strata::group::{DiskGroupEngineFactory, GroupOptions};
use strata::Store;
use ursula_runtime::{
    AppendRequest, CreateStreamRequest, DeleteStreamRequest, PlanColdFlushRequest,
    ReadStreamRequest, RuntimeConfig, RuntimeThreading, ShardRuntime,
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
    // One RocksDB group directory per touched raft group.
    let on_disk: HashSet<u32> = std::fs::read_dir(dir.path().join("groups"))
        .expect("groups dir")
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().into_string().ok())
        .filter_map(|name| name.strip_prefix("group-").and_then(|n| n.parse().ok()))
        .collect();
    assert_eq!(on_disk, groups);
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runtimes_cold_gc_never_takes_a_recreated_streams_objects() {
    // ursula's runtime uploads chunks itself (under `{stream}/chunks/`) and, for a whole-stream
    // GC entry, deletes everything under that prefix: with ursula's in-memory engine a stream
    // recreated under the same id loses its new chunks. Strata queues exact paths instead.
    let moto = s3_harness::start("shared-cold");
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Arc::new(Store::open(dir.path()).expect("store"));
    let strata_cold = ColdStore::s3(
        &S3Config::new("shared-cold")
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
            bucket: Some("shared-cold".into()),
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
    let factory = DiskGroupEngineFactory::new(store.clone(), strata_cold, GroupOptions::default());
    let runtime = ShardRuntime::spawn_with_engine_factory_and_cold_store(
        runtime_config(),
        factory,
        Some(Arc::new(runtime_cold)),
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
