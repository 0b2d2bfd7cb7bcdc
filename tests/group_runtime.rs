//! Strata's group engines behind ursula's own `ShardRuntime` (0.4.1): the runtime routes streams
//! to raft groups, creates one `DiskGroupEngine` per touched group through
//! `DiskGroupEngineFactory`, and serves creates, appends and reads from them.
#![cfg(feature = "ursula")]

use std::collections::HashSet;
use std::sync::Arc;

use bytes::Bytes;
use strata::cold::ColdStore;
use strata::group::{DiskGroupEngineFactory, GroupOptions};
use strata::Store;
use ursula_runtime::{
    AppendRequest, CreateStreamRequest, ReadStreamRequest, RuntimeConfig, RuntimeThreading,
    ShardRuntime,
};
use ursula_shard::BucketStreamId;

const CT: &str = "application/octet-stream";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shard_runtime_drives_durable_groups() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = Arc::new(Store::open(dir.path()).expect("store"));
    let cold = ColdStore::local(&dir.path().join("cold")).expect("cold");
    let config = RuntimeConfig {
        core_count: 2,
        raft_group_count: 4,
        mailbox_capacity: 128,
        threading: RuntimeThreading::HostedTokio,
        cold_max_hot_bytes_per_group: None,
        raft_max_uncommitted_bytes_per_group: None,
        live_read_max_waiters_per_core: Some(1024),
    };
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
    // One RocksDB group directory per touched raft group.
    let on_disk: HashSet<u32> = std::fs::read_dir(dir.path().join("groups"))
        .expect("groups dir")
        .filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().into_string().ok())
        .filter_map(|name| name.strip_prefix("group-").and_then(|n| n.parse().ok()))
        .collect();
    assert_eq!(on_disk, groups);
}
