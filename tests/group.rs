//! GroupEngine seam: Strata's durable engine against ursula-runtime 0.4.1's InMemoryGroupEngine
//! (the oracle) on the same generated sequences of typed operations (`group/ops.rs`), applied by
//! `group/run.rs`, with reopens in between; a difference prints the sequence up to it.
#![cfg(feature = "ursula")]

mod group {
    pub mod ops;
    pub mod run;
}

use std::sync::Arc;

use group::ops::generate;
use group::run::{key, read_shape, Pair};
use strata::cold::ColdStore;
use strata::group::{DiskGroupEngine, GroupOptions};
use strata::{LogOptions, Store};
use ursula_runtime::{
    ColdStore as UrsulaColdStore, GroupEngine, HeadStreamRequest, InMemoryGroupEngine,
    ReadStreamRequest,
};
use ursula_shard::{BucketStreamId, CoreId, RaftGroupId, ShardId, ShardPlacement};

fn placement() -> ShardPlacement {
    ShardPlacement {
        core_id: CoreId(0),
        shard_id: ShardId(0),
        raft_group_id: RaftGroupId(1),
    }
}

fn small_segments() -> GroupOptions {
    GroupOptions::default().with_payload_log(LogOptions::default().with_segment_bytes(4096))
}

fn open(dir: &std::path::Path) -> (Arc<Store>, DiskGroupEngine) {
    let store = Arc::new(Store::open(dir).expect("store"));
    let cold = ColdStore::local(&dir.join("cold")).expect("cold");
    let engine = DiskGroupEngine::open(&store, "g1", cold, small_segments()).expect("engine");
    (store, engine)
}

fn streams() -> Vec<BucketStreamId> {
    let mut out = Vec::new();
    for b in ["bucket-a", "bucket-b"] {
        for s in ["s0", "s1", "s2"] {
            out.push(BucketStreamId::new(b, s));
        }
    }
    out.push(BucketStreamId::new("bucket-a", "j1"));
    out.push(BucketStreamId::new("bucket-b", "j0"));
    out.push(BucketStreamId::with_affinity("bucket-a", "aff", "t0"));
    out.push(BucketStreamId::with_affinity("bucket-a", "aff", "t1"));
    out
}

/// Runs `steps` generated commands on both engines, comparing every response and usage report;
/// reopens Strata every `reopen_every` steps. A difference prints the operations up to it.
async fn differential(seed: u64, steps: usize, reopen_every: usize, ids: Vec<BucketStreamId>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let (store, strata) = open(dir.path());
    let oracle_cold = Arc::new(UrsulaColdStore::memory().expect("memory cold store"));
    let mut pair = Pair {
        dir: dir.path().to_path_buf(),
        store: Some(store),
        strata: Some(strata),
        oracle: InMemoryGroupEngine::with_cold_store(oracle_cold.clone()),
        oracle_cold,
        flushed: Default::default(),
        tainted: Default::default(),
        open,
    };
    let (ops, now) = generate(seed, steps, reopen_every, &ids);
    let p = placement();
    for (at, op) in ops.iter().enumerate() {
        let (a, b) = pair.run(op).await;
        let ua = pair
            .strata()
            .bucket_usage(p)
            .await
            .map_err(|e| e.to_string());
        let ub = pair.oracle.bucket_usage(p).await.map_err(|e| e.to_string());
        if a != b || ua != ub {
            let sequence: Vec<String> = ops[..=at]
                .iter()
                .enumerate()
                .map(|(i, op)| format!("  #{i} {}", op.line(300)))
                .collect();
            panic!(
                "seed {seed}: operation #{at} differs\n strata: {a}\n oracle: {b}\n usage: \
                 {ua:?} / {ub:?}\noperations:\n{}",
                sequence.join("\n")
            );
        }
    }
    let strata = pair.strata.as_mut().expect("Strata is open");
    let (oracle, tainted) = (&mut pair.oracle, &pair.tainted);
    // Every stream reads back identically, and the cold GC queues agree.
    for id in &ids {
        let r = ReadStreamRequest {
            stream_id: id.clone(),
            offset: 0,
            max_len: 1 << 20,
            now_ms: now,
            record: None,
            max_records: None,
        };
        let head = oracle
            .head_stream(
                HeadStreamRequest {
                    stream_id: id.clone(),
                    now_ms: now,
                },
                p,
            )
            .await;
        let r = ReadStreamRequest {
            offset: head.map(|h| h.retained_offset).unwrap_or(0),
            ..r
        };
        let (x, y) = (
            strata.read_stream(r.clone(), p).await,
            oracle.read_stream(r, p).await,
        );
        if tainted.contains(id) {
            assert_eq!(read_shape(&x), read_shape(&y), "final read {id}");
        } else {
            assert_eq!(key(&x), key(&y), "final read {id}");
        }
    }
    let ga = strata.plan_cold_gc(1000, p).await.expect("gc");
    let gb = oracle.plan_cold_gc(1000, p).await.expect("gc");
    // Strata also queues the exclusive chunks that retention drops (ursula 0.4.1 leaves them
    // until the stream is deleted), and for a deleted stream it queues the exact paths of its
    // objects where ursula queues the whole stream (whose prefix its runtime then deletes, taking
    // the objects of a stream recreated under the same id with it). So the queues are compared on
    // what both queue alike: the shared pack objects released, in order.
    let streams_only = |q: Vec<ursula_stream::ColdGcEntry>| {
        q.into_iter()
            .map(|e| e.target)
            .filter_map(|t| match t {
                ursula_stream::ColdGcTarget::Paths(paths)
                    if paths.iter().all(|p| p.starts_with("_packs/")) =>
                {
                    Some(paths.join(","))
                }
                _ => None,
            })
            .collect::<Vec<_>>()
    };
    let (mut ga, mut gb) = (streams_only(ga), streams_only(gb));
    ga.sort();
    gb.sort();
    assert_eq!(ga, gb, "seed {seed}: cold GC queue");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn matches_in_memory_engine_across_reopens() {
    for seed in [1, 7, 42, 1234, 99_991, 5, 77, 31_337, 2_024, 65_537] {
        differential(seed, 500, 97, streams()).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_record_streams_match_in_memory_engine_across_reopens() {
    let json = vec![
        BucketStreamId::new("bucket-a", "j0"),
        BucketStreamId::new("bucket-a", "j1"),
        BucketStreamId::new("bucket-b", "j2"),
    ];
    for seed in [3, 11, 101, 4_242, 77_777] {
        differential(seed, 400, 89, json.clone()).await;
    }
}
