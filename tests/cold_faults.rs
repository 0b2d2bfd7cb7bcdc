//! The cold tier under a misbehaving object store, through the object-store fault layer
//! ([`FaultObjectStore`]): every cold path (flush, read, compaction, GC, orphan sweep) with
//! every fault kind at every request, and a restart after the faulted step; plus the four
//! regressions (a truncated upload, an intact but wrong object, a hung store, an undeletable
//! object) and a hung server on a real HTTP path.
//! Needs the `s3` feature: parts of it run against an S3 server on loopback.
#![cfg(feature = "s3")]

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use object_store::memory::InMemory;
use object_store::{ObjectStore, ObjectStoreExt};
use strata::cold::{ColdStore, FaultObjectStore, ObjectFault, ObjectOp, UploadCheck};
use strata::group::{DiskGroupEngine, GroupOptions};
use strata::{LogOptions, Store};
use ursula_runtime::{DeleteStreamRequest, GroupEngine, GroupEngineError};
use ursula_shard::{BucketStreamId, CoreId, RaftGroupId, ShardId, ShardPlacement};

#[path = "common/streams.rs"]
mod streams;

/// The deadline of every cold call in these tests.
const DEADLINE: Duration = Duration::from_millis(250);

/// How much longer than its requests' deadlines a step may take (scheduling, local work).
const SLACK: Duration = Duration::from_secs(3);

fn placement() -> ShardPlacement {
    ShardPlacement {
        core_id: CoreId(0),
        shard_id: ShardId(0),
        raft_group_id: RaftGroupId(3),
    }
}

fn options() -> GroupOptions {
    GroupOptions::default()
        .with_payload_log(LogOptions::default().with_segment_bytes(4096))
        .with_orphan_grace(Duration::ZERO)
        .with_cold_gc_backoff(Duration::from_millis(1))
}

/// The engine and its store, over a cold store made of `fault` (checked with `check`).
struct Node {
    store: Arc<Store>,
    engine: DiskGroupEngine,
}

fn cold(fault: &FaultObjectStore, check: UploadCheck) -> ColdStore {
    ColdStore::new(Arc::new(fault.clone()), "fault")
        .with_upload_check(check)
        .with_deadline(DEADLINE)
        .expect("deadline")
}

fn open(dir: &Path, fault: &FaultObjectStore, check: UploadCheck) -> Node {
    open_with(dir, cold(fault, check))
}

fn open_with(dir: &Path, cold: ColdStore) -> Node {
    let store = Arc::new(Store::open(dir).expect("store"));
    let engine = DiskGroupEngine::open(&store, "g", cold, options()).expect("engine");
    Node { store, engine }
}

impl Node {
    fn close(self) {
        drop(self.engine);
        self.store.close_blocking().expect("close");
    }
}

fn stream(name: &str) -> BucketStreamId {
    BucketStreamId::new("tenant", name)
}

async fn create(engine: &mut DiskGroupEngine, id: &BucketStreamId) {
    streams::create_stream(engine, id, placement()).await;
}

/// Appends `count` records to `id` and adds them to `model`.
async fn append(
    engine: &mut DiskGroupEngine,
    id: &BucketStreamId,
    model: &mut Vec<u8>,
    count: usize,
) {
    streams::append_many(engine, id, model, (count, 2), placement()).await;
}

async fn read(
    engine: &mut DiskGroupEngine,
    id: &BucketStreamId,
    from: u64,
) -> Result<Vec<u8>, GroupEngineError> {
    streams::read_from(engine, id, (from, 3), placement()).await
}

async fn delete(engine: &mut DiskGroupEngine, id: &BucketStreamId) -> Result<(), GroupEngineError> {
    let request = DeleteStreamRequest {
        stream_id: id.clone(),
    };
    engine.delete_stream(request, placement()).await.map(|_| ())
}

/// Regression: a store that answers 200 but keeps a truncated body. Checked by size (what an S3
/// store with checksums gets), the flush is refused, nothing is committed, the bytes stay hot
/// and the retry succeeds; nothing is lost across a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_truncated_upload_is_never_committed() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fault = FaultObjectStore::new(Arc::new(InMemory::new()));
    let mut node = open(dir.path(), &fault, UploadCheck::Size);
    let id = stream("truncated");
    create(&mut node.engine, &id).await;
    let mut model = Vec::new();
    append(&mut node.engine, &id, &mut model, 40).await;
    let commit = node.engine.commit_index();
    fault.inject(ObjectOp::Put, 0, ObjectFault::Truncate);
    let err = node
        .engine
        .flush_stream_cold(&id, 4000, placement())
        .await
        .expect_err("a truncated upload is refused");
    assert!(fault.fired() && err.to_string().contains("keeps"), "{err}");
    assert_eq!(node.engine.commit_index(), commit, "nothing committed");
    assert_eq!(
        node.engine.backlog_bytes(&id),
        model.len() as u64,
        "still hot"
    );
    node.close();
    let mut node = open(dir.path(), &fault, UploadCheck::Size);
    assert_eq!(read(&mut node.engine, &id, 0).await.expect("read"), model);
    node.engine
        .flush_stream_cold(&id, 4000, placement())
        .await
        .expect("the retry flushes")
        .expect("a chunk");
    node.close();
    let mut node = open(dir.path(), &fault, UploadCheck::Size);
    assert_eq!(read(&mut node.engine, &id, 0).await.expect("read"), model);
    assert!(node.engine.verify().await.is_clean());
}

/// Regression: another valid object under a chunk's name is never served as the stream's
/// bytes, compaction refuses to merge it, and `verify` names it; an upload the store replaced
/// is refused when read back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_intact_but_wrong_object_is_never_served() {
    let dir = tempfile::tempdir().expect("tempdir");
    let inner: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    let fault = FaultObjectStore::new(inner.clone());
    let mut node = open(dir.path(), &fault, UploadCheck::ReadBack);
    let id = stream("swapped");
    create(&mut node.engine, &id).await;
    let mut model = Vec::new();
    append(&mut node.engine, &id, &mut model, 60).await;
    for _ in 0..2 {
        node.engine
            .flush_stream_cold(&id, 3000, placement())
            .await
            .expect("flush")
            .expect("a chunk");
    }
    // An upload the store replaces with the previous object is refused when read back.
    fault.inject(
        ObjectOp::Put,
        fault.count(ObjectOp::Put),
        ObjectFault::Substitute,
    );
    let err = node
        .engine
        .flush_stream_cold(&id, 3000, placement())
        .await
        .expect_err("a substituted upload is refused");
    assert!(err.to_string().contains("read back"), "{err}");
    node.close();

    // Put the second chunk's object under the first chunk's name.
    let mut names: Vec<String> = futures::TryStreamExt::try_collect::<Vec<_>>(inner.list(None))
        .await
        .expect("list")
        .into_iter()
        .map(|m| m.location.to_string())
        .filter(|n| n.ends_with(".sco"))
        .collect();
    names.sort();
    assert!(names.len() >= 2, "{names:?}");
    let (first, second) = (
        object_store::path::Path::from(names[0].as_str()),
        object_store::path::Path::from(names[1].as_str()),
    );
    let other = inner
        .get(&second)
        .await
        .expect("get")
        .bytes()
        .await
        .expect("bytes");
    inner.put(&first, other.into()).await.expect("swap");

    let mut node = open(dir.path(), &fault, UploadCheck::ReadBack);
    let err = read(&mut node.engine, &id, 0)
        .await
        .expect_err("never the wrong bytes");
    assert!(err.to_string().contains(names[0].as_str()), "{err}");
    let compacted = node
        .engine
        .compact_stream_cold(&id, 1 << 20, 8, 0, placement())
        .await;
    assert!(
        compacted.is_err(),
        "compaction refuses the wrong object: {compacted:?}"
    );
    let report = node.engine.verify().await;
    assert_eq!(report.findings.len(), 1, "{report:?}");
    assert_eq!(report.findings[0].at, names[0]);
    // The hot suffix is still served.
    let hot = node.engine.backlog_bytes(&id);
    let tail = model.len() as u64 - hot;
    assert_eq!(
        read(&mut node.engine, &id, tail).await.expect("hot"),
        model[tail as usize..]
    );
}

/// Regression: a store that never answers fails each cold call within the deadline, and the
/// group serves appends and hot reads right after; a flush that hangs commits nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_store_holds_a_group_no_longer_than_the_deadline() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fault = FaultObjectStore::new(Arc::new(InMemory::new()));
    let mut node = open(dir.path(), &fault, UploadCheck::ReadBack);
    let id = stream("hung");
    create(&mut node.engine, &id).await;
    let mut model = Vec::new();
    append(&mut node.engine, &id, &mut model, 40).await;
    node.engine
        .flush_stream_cold(&id, 4000, placement())
        .await
        .expect("flush")
        .expect("a chunk");
    node.close();
    let mut node = open(dir.path(), &fault, UploadCheck::ReadBack);
    for op in [ObjectOp::Get, ObjectOp::Put] {
        fault.inject(op, fault.count(op), ObjectFault::Hang);
        let started = Instant::now();
        let outcome = match op {
            ObjectOp::Get => read(&mut node.engine, &id, 0).await.map(|_| ()),
            _ => node
                .engine
                .flush_stream_cold(&id, 4000, placement())
                .await
                .map(|_| ()),
        };
        let took = started.elapsed();
        let err = outcome.expect_err("a hung request fails");
        assert!(fault.fired(), "{op:?}");
        assert!(err.to_string().contains("did not finish"), "{op:?}: {err}");
        assert!(
            took < DEADLINE + SLACK,
            "{op:?} held the group for {took:?}"
        );
        append(&mut node.engine, &id, &mut model, 1).await;
        let hot_from = model.len() as u64 - 100;
        assert_eq!(
            read(&mut node.engine, &id, hot_from)
                .await
                .expect("hot read"),
            model[hot_from as usize..]
        );
    }
    assert_eq!(read(&mut node.engine, &id, 0).await.expect("read"), model);
}

/// A server on 127.0.0.1 that accepts connections and never answers: over real HTTP, each
/// cold call fails once the URL's deadline passes, and the group goes on serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_that_never_answers_costs_one_deadline_per_call() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for conn in listener.incoming().flatten() {
            held.push(conn);
        }
    });
    let url = format!(
        "s3://silent?endpoint=http://127.0.0.1:{port}&access_key_id=a&secret_access_key=b\
         &connect_timeout_ms=200&request_timeout_ms=300&retries=1&deadline_ms=1000"
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let mut node = open_with(dir.path(), ColdStore::from_url(&url).expect("url"));
    let id = stream("silent");
    create(&mut node.engine, &id).await;
    let mut model = Vec::new();
    append(&mut node.engine, &id, &mut model, 20).await;
    let started = Instant::now();
    let err = node
        .engine
        .flush_stream_cold(&id, 4000, placement())
        .await
        .expect_err("nothing answers");
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(1) + SLACK,
        "the flush waited {took:?}: {err}"
    );
    assert_eq!(
        node.engine.backlog_bytes(&id),
        model.len() as u64,
        "still hot"
    );
    append(&mut node.engine, &id, &mut model, 1).await;
    assert_eq!(
        read(&mut node.engine, &id, 0).await.expect("hot read"),
        model
    );
}

/// Regression: one object the store refuses to delete for good never stops cold GC: the
/// entries behind it are deleted and acknowledged, it is set aside (listed, in the report and
/// in `verify`), and deleted once the store allows it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_undeletable_object_never_stops_cold_gc() {
    let dir = tempfile::tempdir().expect("tempdir");
    let fault = FaultObjectStore::new(Arc::new(InMemory::new()));
    let mut node = open(dir.path(), &fault, UploadCheck::ReadBack);
    let ids: Vec<BucketStreamId> = (0..3).map(|i| stream(&format!("gc{i}"))).collect();
    for id in &ids {
        create(&mut node.engine, id).await;
        append(&mut node.engine, id, &mut Vec::new(), 20).await;
        node.engine
            .flush_stream_cold(id, 2000, placement())
            .await
            .expect("flush")
            .expect("a chunk");
    }
    let ns = node.engine.cold_namespace().clone();
    let locked = ns.stream_prefix(&ids[0]);
    fault.refuse(ObjectOp::Delete, locked.clone());
    for id in &ids {
        delete(&mut node.engine, id).await.expect("delete");
    }
    let now = 10_000_000_000_000;
    let report = node
        .engine
        .run_cold_gc(now, 100, placement())
        .await
        .expect("a pass with one refused entry still succeeds");
    assert_eq!((report.entries, report.set_aside), (2, 1), "{report:?}");
    for id in &ids[1..] {
        let left = node
            .engine
            .cold_store()
            .list(&ns.stream_prefix(id))
            .await
            .expect("list");
        assert!(left.is_empty(), "{id}: {left:?}");
    }
    let failures = node.engine.cold_gc_failures();
    assert_eq!(failures.len(), 1, "{failures:?}");
    assert!(failures[0].error.contains("refused"), "{failures:?}");
    assert_eq!(node.engine.verify().await.gc_set_aside, failures);
    // Later passes keep failing on it without blocking anything; once allowed, it goes.
    let again = node
        .engine
        .run_cold_gc(now + 1000, 100, placement())
        .await
        .expect("pass");
    assert_eq!((again.entries, again.set_aside), (0, 1));
    assert_eq!(node.engine.cold_gc_failures()[0].attempts, 2);
    fault.allow_all();
    let done = node
        .engine
        .run_cold_gc(now + 10_000, 100, placement())
        .await
        .expect("pass");
    assert_eq!((done.entries, done.set_aside), (1, 0), "{done:?}");
    assert!(node.engine.cold_gc_failures().is_empty());
    let left = node.engine.cold_store().list(&locked).await.expect("list");
    assert!(left.is_empty(), "{left:?}");
}

// ------------------------------------------------------------- every path, every fault

/// The cold-tier workload, step by step: flushes, a cold read, compaction, a stream deleted and
/// its objects collected, and the orphan sweep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    Flush(usize),
    Append(usize),
    Read(usize),
    Compact(usize),
    Delete(usize),
    Gc,
    Sweep,
}

const SCRIPT: [Step; 10] = [
    Step::Flush(0),
    Step::Flush(1),
    Step::Append(0),
    Step::Flush(0),
    Step::Read(0),
    Step::Compact(0),
    Step::Delete(1),
    Step::Gc,
    Step::Sweep,
    Step::Read(0),
];

/// What the run acknowledged.
#[derive(Default)]
struct Acked {
    models: [Vec<u8>; 2],
    deleted: [bool; 2],
    /// Steps that failed (with the faulted request, or after it while the store was down).
    errors: Vec<String>,
}

/// Runs one step; returns its outcome.
async fn step(engine: &mut DiskGroupEngine, acked: &mut Acked, what: Step) -> Result<(), String> {
    let p = placement();
    let ids = [stream("x0"), stream("x1")];
    let e = |e: GroupEngineError| e.to_string();
    match what {
        Step::Flush(s) => engine
            .flush_stream_cold(&ids[s], 2500, p)
            .await
            .map(|_| ())
            .map_err(e),
        Step::Append(s) => {
            append(engine, &ids[s], &mut acked.models[s], 12).await;
            Ok(())
        }
        Step::Read(s) => match read(engine, &ids[s], 0).await {
            Ok(bytes) if bytes == acked.models[s] => Ok(()),
            Ok(bytes) => panic!(
                "stream {s} read {} bytes that are not what was acknowledged",
                bytes.len()
            ),
            Err(err) => Err(err.to_string()),
        },
        Step::Compact(s) => engine
            .compact_stream_cold(&ids[s], 1 << 20, 8, 0, p)
            .await
            .map(|_| ())
            .map_err(e),
        Step::Delete(s) => {
            let deleted = delete(engine, &ids[s]).await.map_err(e);
            acked.deleted[s] |= deleted.is_ok();
            deleted
        }
        Step::Gc => engine
            .run_cold_gc(u64::MAX / 2, 100, p)
            .await
            .map(|_| ())
            .map_err(e),
        Step::Sweep => engine.sweep_orphan_objects().await.map(|_| ()).map_err(e),
    }
}

/// Runs the script with `fault` planned at request `nth` of kind `op`; restarts the engine
/// after the step in which it fired (the store comes back up then). Returns whether it fired.
async fn run_with_fault(check: UploadCheck, op: ObjectOp, nth: u64, fault: ObjectFault) -> bool {
    let dir = tempfile::tempdir().expect("tempdir");
    let faults = FaultObjectStore::new(Arc::new(InMemory::new()));
    let mut node = open(dir.path(), &faults, check);
    let mut acked = Acked::default();
    for (s, id) in [stream("x0"), stream("x1")].iter().enumerate() {
        create(&mut node.engine, id).await;
        append(&mut node.engine, id, &mut acked.models[s], 30).await;
    }
    faults.inject(op, nth, fault);
    let mut fired_at = None;
    for (i, what) in SCRIPT.into_iter().enumerate() {
        let started = Instant::now();
        if let Err(err) = step(&mut node.engine, &mut acked, what).await {
            acked.errors.push(format!("{what:?}: {err}"));
        }
        let took = started.elapsed();
        // A step makes a handful of requests; one of them may hang until its deadline.
        assert!(
            took < DEADLINE * 2 + SLACK,
            "{op:?}#{nth} {fault:?}: {what:?} took {took:?}"
        );
        if fired_at.is_none() && faults.fired() {
            fired_at = Some(i);
            faults.set_down(false);
            node.close();
            node = open(dir.path(), &faults, check);
        }
    }
    node.close();
    check_after_restart(dir.path(), &faults, &acked, (op, nth, fault)).await;
    fired_at.is_some()
}

/// After a restart on a store without faults: every acknowledged byte reads back, a deleted
/// stream stays deleted, `verify` is clean (no chunk points at a missing or wrong object),
/// and GC and the sweep leave it clean.
async fn check_after_restart(
    dir: &Path,
    faults: &FaultObjectStore,
    acked: &Acked,
    case: (ObjectOp, u64, ObjectFault),
) {
    let mut node = open(dir, faults, UploadCheck::ReadBack);
    for pass in 0..2 {
        for (s, id) in [stream("x0"), stream("x1")].iter().enumerate() {
            let got = read(&mut node.engine, id, 0).await;
            if acked.deleted[s] {
                assert!(got.is_err(), "{case:?}: deleted stream {s} came back");
            } else {
                assert_eq!(
                    got.as_deref().ok(),
                    Some(&acked.models[s][..]),
                    "{case:?} (pass {pass}): stream {s}; errors {:?}",
                    acked.errors
                );
            }
        }
        let report = node.engine.verify().await;
        assert!(
            report.is_clean(),
            "{case:?} (pass {pass}): {report:?}; errors {:?}",
            acked.errors
        );
        let p = placement();
        node.engine
            .run_cold_gc(u64::MAX / 2, 100, p)
            .await
            .expect("gc");
        node.engine.sweep_orphan_objects().await.expect("sweep");
    }
    node.close();
}

/// Requests of each kind the workload makes with uploads checked by `check`.
async fn count_requests(check: UploadCheck) -> [(ObjectOp, u64); 5] {
    let dry = FaultObjectStore::new(Arc::new(InMemory::new()));
    let dir = tempfile::tempdir().expect("tempdir");
    let mut node = open(dir.path(), &dry, check);
    let mut acked = Acked::default();
    for (s, id) in [stream("x0"), stream("x1")].iter().enumerate() {
        create(&mut node.engine, id).await;
        append(&mut node.engine, id, &mut acked.models[s], 30).await;
    }
    for what in SCRIPT {
        step(&mut node.engine, &mut acked, what)
            .await
            .expect("dry run");
    }
    node.close();
    ObjectOp::ALL.map(|op| (op, dry.count(op)))
}

/// Every fault kind at every request of every kind the workload makes, with uploads read
/// back and with uploads checked by size (as S3 with checksums: every fault but a silently
/// substituted body, which such a server refuses), and a restart after the faulted step:
/// nothing acknowledged is lost or replaced, nothing referenced deleted, no step waits past
/// the deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_cold_path_under_every_object_store_fault_and_a_restart() {
    for check in [UploadCheck::ReadBack, UploadCheck::Size] {
        let counts = count_requests(check).await;
        let (mut runs, mut fired) = (0, 0);
        for (op, count) in counts {
            for nth in 0..count {
                for fault in ObjectFault::ALL {
                    if check == UploadCheck::Size && fault == ObjectFault::Substitute {
                        continue;
                    }
                    runs += 1;
                    fired += u64::from(run_with_fault(check, op, nth, fault).await);
                }
            }
        }
        println!("cold faults, {check:?}: requests {counts:?}, {runs} runs, {fired} faults fired");
        let made = |op: ObjectOp| counts.iter().any(|&(o, n)| o == op && n > 0);
        let head = check == UploadCheck::Size;
        assert!(
            [
                ObjectOp::Put,
                ObjectOp::Get,
                ObjectOp::Delete,
                ObjectOp::List
            ]
            .into_iter()
            .all(made)
                && made(ObjectOp::Head) == head,
            "the requests made: {counts:?}"
        );
        assert_eq!(fired, runs, "every planned fault fired");
    }
}

// ------------------------------------------------------------- faults on the wire

#[path = "s3_harness/mod.rs"]
mod s3_harness;

#[path = "s3_harness/proxy.rs"]
mod proxy;

/// An S3 cold store on moto through the fault proxy, with short timeouts.
fn s3_through(proxy: &proxy::Proxy, bucket: &str) -> ColdStore {
    let timeouts = strata::cold::ColdTimeouts::default()
        .with_request(Duration::from_secs(2))
        .with_retries(2)
        .with_deadline(Duration::from_secs(8));
    let config = strata::cold::S3Config::new(bucket)
        .with_endpoint(Some(proxy.endpoint.clone()))
        .with_allow_http(true)
        .with_access_key_id(Some("test".into()))
        .with_secret_access_key(Some("test".into()))
        .with_timeouts(timeouts);
    ColdStore::s3(&config).expect("s3 cold store")
}

/// On a real S3 wire (moto on loopback behind a proxy): a PUT body cut short on the way (the
/// server answers 200 and keeps the short body) is refused before the commit, and a lost
/// answer after the server stored the object leaves at most an orphan; after a restart every
/// acknowledged byte reads back and `verify` is clean.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncated_bodies_and_lost_answers_on_the_wire_lose_nothing() {
    let moto = s3_harness::start("wire");
    let proxy = proxy::start(&moto.endpoint);
    let dir = tempfile::tempdir().expect("tempdir");
    let mut node = open_with(dir.path(), s3_through(&proxy, "wire"));
    let id = stream("wire");
    create(&mut node.engine, &id).await;
    let mut model = Vec::new();
    append(&mut node.engine, &id, &mut model, 60).await;

    proxy
        .faults
        .truncate_puts
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let err = node
        .engine
        .flush_stream_cold(&id, 4000, placement())
        .await
        .expect_err("a truncated upload is refused");
    assert!(err.to_string().contains("keeps"), "{err}");
    assert_eq!(
        node.engine.backlog_bytes(&id),
        model.len() as u64,
        "still hot"
    );
    proxy
        .faults
        .truncate_puts
        .store(false, std::sync::atomic::Ordering::SeqCst);

    // Each request of the next flush in turn loses its answer once.
    for _ in 0..3 {
        proxy
            .faults
            .drop_answers
            .store(1, std::sync::atomic::Ordering::SeqCst);
        let _ = node.engine.flush_stream_cold(&id, 4000, placement()).await;
    }
    node.close();
    let mut node = open_with(dir.path(), s3_through(&proxy, "wire"));
    assert_eq!(read(&mut node.engine, &id, 0).await.expect("read"), model);
    let report = node.engine.verify().await;
    assert!(report.is_clean(), "{report:?}");
    node.engine.sweep_orphan_objects().await.expect("sweep");
    assert_eq!(read(&mut node.engine, &id, 0).await.expect("read"), model);
    assert!(
        proxy
            .faults
            .forwarded
            .load(std::sync::atomic::Ordering::SeqCst)
            > 0
    );
}
