//! ursula's `ShardRuntime` as ursula runs it (thread-per-core: each core a current-thread
//! executor on a thread of its own, each raft group an actor task on its core) serving single
//! appends from many clients, once with Strata's durable group engines
//! (`DiskGroupEngineFactory`) and once with ursula's own in-memory engine, in the same run.
//! Every acknowledged byte is read back and checked.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use ursula_runtime::{
    AppendRequest, CreateStreamRequest, GroupEngineFactory, InMemoryGroupEngineFactory,
    ReadStreamRequest, RuntimeConfig, RuntimeThreading, ShardRuntime,
};
use ursula_shard::BucketStreamId;

use crate::cold::ColdStore;
use crate::group::{DiskGroupEngineFactory, GroupOptions};
use crate::Store;

/// Cores of the runtime (ursula's executors; one thread each).
pub const RUNTIME_CORES: usize = 2;

/// Bytes of each append.
const APPEND_BYTES: usize = 1024;

/// One engine's run: its append latencies and wall time.
#[derive(Debug, Clone, Default)]
pub struct RuntimeRun {
    /// Latency of each acknowledged append.
    pub latencies: Vec<Duration>,
    /// Wall time of all the clients' appends.
    pub wall: Duration,
}

impl RuntimeRun {
    /// Acknowledged appends per second.
    pub fn rate(&self) -> f64 {
        self.latencies.len() as f64 / self.wall.as_secs_f64().max(1e-9)
    }
}

/// Strata's engine and ursula's in-memory engine under the same runtime workload.
#[derive(Debug, Clone, Default)]
pub struct RuntimeComparison {
    /// Raft groups of the runtime.
    pub groups: usize,
    /// Client tasks, each appending to a stream of its own.
    pub clients: usize,
    /// Strata's durable engine.
    pub strata: RuntimeRun,
    /// ursula's `InMemoryGroupEngineFactory`.
    pub in_memory: RuntimeRun,
}

impl RuntimeComparison {
    /// Strata's append rate as a fraction of the in-memory engine's.
    pub fn ratio(&self) -> f64 {
        self.strata.rate() / self.in_memory.rate().max(1e-9)
    }
}

/// Runs `clients` tasks on the caller's runtime, each making `appends` single 1 KiB appends to
/// a stream of its own through a thread-per-core `ShardRuntime` of `groups` raft groups: with
/// Strata's engines in a new store under `root`, then with ursula's in-memory engine.
pub async fn shard_runtime(
    root: &Path,
    groups: usize,
    clients: usize,
    appends: usize,
) -> Result<RuntimeComparison, String> {
    let e = |e: &dyn std::fmt::Display| e.to_string();
    let dir = root.join(format!("runtime-{groups}"));
    let store = Arc::new(Store::open(&dir).map_err(|x| e(&x))?);
    let cold = ColdStore::local(&dir.join("cold")).map_err(|x| e(&x))?;
    let factory = DiskGroupEngineFactory::new(store.clone(), cold, GroupOptions::default());
    let strata = drive(factory, groups, clients, appends).await?;
    let in_memory = drive(
        InMemoryGroupEngineFactory::default(),
        groups,
        clients,
        appends,
    )
    .await?;
    Ok(RuntimeComparison {
        groups,
        clients,
        strata,
        in_memory,
    })
}

/// The workload on a runtime with `factory`'s engines; checks every acknowledged byte.
async fn drive<F: GroupEngineFactory + 'static>(
    factory: F,
    groups: usize,
    clients: usize,
    appends: usize,
) -> Result<RuntimeRun, String> {
    let mut config = RuntimeConfig::new(RUNTIME_CORES, groups);
    config.threading = RuntimeThreading::ThreadPerCore;
    let runtime =
        ShardRuntime::spawn_with_engine_factory(config, factory).map_err(|e| e.to_string())?;
    let streams: Vec<_> = (0..clients)
        .map(|c| BucketStreamId::new("bench", format!("client-{c}")))
        .collect();
    for id in &streams {
        let create = CreateStreamRequest::new(id.clone(), "application/octet-stream");
        runtime
            .create_stream(create)
            .await
            .map_err(|e| e.to_string())?;
    }
    let started = Instant::now();
    let tasks: Vec<_> = streams
        .iter()
        .enumerate()
        .map(|(c, id)| tokio::spawn(client(runtime.clone(), id.clone(), c, appends)))
        .collect();
    let mut latencies = Vec::with_capacity(clients * appends);
    for task in tasks {
        latencies.extend(task.await.map_err(|e| e.to_string())??);
    }
    let wall = started.elapsed();
    for (c, id) in streams.iter().enumerate() {
        check_stream(&runtime, id, c, appends).await?;
    }
    Ok(RuntimeRun { latencies, wall })
}

/// The bytes of append `i` of client `c`.
fn payload(c: usize, i: usize) -> Bytes {
    Bytes::from(vec![(c * 31 + i) as u8; APPEND_BYTES])
}

/// One client: `appends` single appends, each acknowledged before the next; their latencies.
async fn client(
    runtime: ShardRuntime,
    id: BucketStreamId,
    c: usize,
    appends: usize,
) -> Result<Vec<Duration>, String> {
    let mut times = Vec::with_capacity(appends);
    for i in 0..appends {
        let mut request = AppendRequest::from_bytes(id.clone(), payload(c, i));
        request.content_type = "application/octet-stream".into();
        let at = Instant::now();
        let response = runtime.append(request).await.map_err(|e| e.to_string())?;
        times.push(at.elapsed());
        if response.start_offset != (i * APPEND_BYTES) as u64 {
            return Err(format!("{id}: append {i} at {}", response.start_offset));
        }
    }
    Ok(times)
}

/// Reads stream `id` back and checks every byte client `c` appended.
async fn check_stream(
    runtime: &ShardRuntime,
    id: &BucketStreamId,
    c: usize,
    appends: usize,
) -> Result<(), String> {
    let mut offset = 0;
    while offset < appends * APPEND_BYTES {
        let read = ReadStreamRequest {
            stream_id: id.clone(),
            offset: offset as u64,
            max_len: 1 << 20,
            now_ms: 0,
            record: None,
            max_records: None,
        };
        let got = runtime.read_stream(read).await.map_err(|e| e.to_string())?;
        if got.payload.is_empty() {
            return Err(format!("{id}: nothing at {offset}"));
        }
        for (k, byte) in got.payload.iter().enumerate() {
            let at = offset + k;
            if *byte != payload(c, at / APPEND_BYTES)[0] {
                return Err(format!("{id}: wrong byte at {at}"));
            }
        }
        offset += got.payload.len();
    }
    if offset != appends * APPEND_BYTES {
        return Err(format!(
            "{id}: {offset} bytes, {} appended",
            appends * APPEND_BYTES
        ));
    }
    Ok(())
}
