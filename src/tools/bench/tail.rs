//! Publish-to-delivery latency through the `MetadataEventLog` seam: one task publishes events
//! (Sync) one after another, each carrying the time it was published at, and a subscription
//! that started at the empty log's end receives them; the latency of an event is the time from
//! the start of its publish to its arrival. RocksDB, which has no subscription, does the same
//! hand-off the plain way: a synced put, then the key passed to a reader thread over a
//! channel, which gets it.

use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;

use super::{process_cpu, AppendRun, Comparison, Latency, BENCH_PARTITIONS};
use crate::event_log::{DiskEventLog, MetadataEventLog, PartitionStart};
use crate::{Durability, LogOptions, Store};

/// Bytes of each event: the time it was published at, padded.
const EVENT_BYTES: usize = 100;

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// The row: `events` events through each engine, with their publish-to-delivery latencies.
pub async fn tail_row(dir: &Path, events: usize) -> Result<Comparison, String> {
    let strata = strata_tail(&dir.join("strata"), events).await?;
    let rocksdb = rocksdb_tail(&dir.join("rocksdb"), events)?;
    let name = "seam tail: Sync publish to delivery, 100 B".to_string();
    let size = (events, (events * EVENT_BYTES) as u64);
    Ok(Comparison::of_runs(name, size, &strata, &rocksdb))
}

/// An event published `since` after `base`.
fn stamped(since: Duration) -> Bytes {
    let mut event = vec![0u8; EVENT_BYTES];
    event[..8].copy_from_slice(&(since.as_nanos() as u64).to_le_bytes());
    Bytes::from(event)
}

/// How long ago, after `base`, the event was published.
fn latency_of(base: Instant, event: &[u8]) -> Result<Duration, String> {
    let stamp = event
        .get(..8)
        .and_then(|b| b.try_into().ok())
        .map(u64::from_le_bytes)
        .ok_or("an event without its time")?;
    Ok(base.elapsed().saturating_sub(Duration::from_nanos(stamp)))
}

async fn strata_tail(dir: &Path, events: usize) -> Result<AppendRun, String> {
    let store = Store::open(dir).map_err(err)?;
    let options = LogOptions::default().with_durability(Durability::Sync);
    let log = store
        .open_log("events", BENCH_PARTITIONS, options)
        .map_err(err)?;
    let seam = DiskEventLog::new(log);
    let all = (0..seam.partition_count())
        .map(|partition| PartitionStart {
            partition,
            start_offset: 0,
        })
        .collect();
    let (mut stream, _handle) = seam.subscribe(all);
    let (base, cpu) = (Instant::now(), process_cpu());
    let receiver = tokio::spawn(async move {
        let mut latencies = Vec::with_capacity(events);
        while latencies.len() < events {
            let event = stream.next().await.ok_or("the subscription ended")?;
            latencies.push(latency_of(base, &event.payload)?);
        }
        Ok::<_, String>(latencies)
    });
    for i in 0..events {
        let partition = (i % BENCH_PARTITIONS as usize) as i32;
        let event = stamped(base.elapsed());
        seam.publish(partition, event).await.map_err(err)?;
    }
    let mut latencies = receiver.await.map_err(err)??;
    Ok(AppendRun {
        elapsed: base.elapsed(),
        latency: Latency::of(&mut latencies),
        cpu: process_cpu().saturating_sub(cpu),
    })
}

fn rocksdb_tail(dir: &Path, events: usize) -> Result<AppendRun, String> {
    let mut opts = rocksdb::Options::default();
    opts.create_if_missing(true);
    let db = rocksdb::DB::open(&opts, dir).map_err(err)?;
    let mut sync = rocksdb::WriteOptions::default();
    sync.set_sync(true);
    let (base, cpu) = (Instant::now(), process_cpu());
    let (send, receive) = std::sync::mpsc::channel::<u64>();
    let mut latencies = std::thread::scope(|s| {
        let reader = s.spawn(|| {
            let mut latencies = Vec::with_capacity(events);
            for key in receive {
                let event = db.get(key.to_be_bytes()).map_err(err)?;
                let event = event.ok_or("a put key is missing")?;
                latencies.push(latency_of(base, &event)?);
            }
            Ok::<_, String>(latencies)
        });
        for key in 0..events as u64 {
            let event = stamped(base.elapsed());
            db.put_opt(key.to_be_bytes(), &event, &sync).map_err(err)?;
            send.send(key).map_err(err)?;
        }
        drop(send);
        reader
            .join()
            .map_err(|_| "the reader panicked".to_string())?
    })?;
    Ok(AppendRun {
        elapsed: base.elapsed(),
        latency: Latency::of(&mut latencies),
        cpu: process_cpu().saturating_sub(cpu),
    })
}
