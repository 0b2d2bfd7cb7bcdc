//! The seams as their users call them, each beside RocksDB doing the same work in the same run:
//! event-log publish (Sync by 64 tasks, buffered by 4, of 100 B and of 1 KiB), `visit_range`
//! over every partition and a subscription's catch-up over the records published (RocksDB: an
//! iterator over the same records; the fastest of [`READ_PASSES`] passes of each, as for the
//! `Log` rows), publish-to-delivery latency (`super::tail`), consumer position commits (RocksDB: a synced put each), and a coordination lease
//! (`acquire_epoch` then `write_lease`; RocksDB: read the role's token, check or bump it, write
//! with a synced WAL). The `Log` rows of `strata bench` are the ceiling these approach.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures::StreamExt;

use super::{best_read, Latency, BENCH_PARTITIONS, READ_PASSES};
use super::{process_cpu, rocksdb_append, rocksdb_read_all, AppendRun, AppendWorkload, Comparison};
use crate::coordination::{
    CoordinationTransport, DiskCoordinationTransport, Lease, MemberId, Role,
};
use crate::event_log::{ConsumerPositions, DiskEventLog, MetadataEventLog, PartitionStart};
use crate::{Durability, LogOptions, Store};

fn err(e: impl std::fmt::Display) -> String {
    e.to_string()
}

/// The seam rows: publishes of `records` events of 100 B (buffered: ten times as many), reads of
/// the buffered ones, and `records / 20` position commits and leases.
pub async fn seam_rows(root: &Path, records: usize) -> Result<Vec<Comparison>, String> {
    let sync = AppendWorkload {
        records,
        value_size: 100,
        writers: 64,
        sync: true,
    };
    let buffered = AppendWorkload {
        records: records * 10,
        writers: 4,
        sync: false,
        ..sync
    };
    let mut rows = Vec::new();
    let (_, publish_sync, _) = publish_row(&root.join("sync"), &sync).await?;
    rows.push(publish_sync);
    let (events, publish_buffered, rocks) = publish_row(&root.join("buffered"), &buffered).await?;
    rows.push(publish_buffered);
    let total = buffered.total();
    let rocks_read = best_read(total, || rocksdb_read_all(&rocks))?;
    let read = |name: &str, strata| read_row(name, &buffered, strata, rocks_read);
    let mut visits = Duration::MAX;
    let mut catch_ups = Duration::MAX;
    for _ in 0..READ_PASSES {
        visits = visits.min(visit_all(&events, total).await?);
        catch_ups = catch_ups.min(catch_up(&events, total).await?);
    }
    rows.push(read("seam visit_range 100 B", visits));
    rows.push(read("seam subscription catch-up 100 B", catch_ups));
    let commands = (records / 20).max(16);
    rows.extend(kilobyte_rows(&root.join("kilobyte"), records).await?);
    rows.push(super::tail::tail_row(&root.join("tail"), commands).await?);
    rows.push(positions_row(&root.join("positions"), commands).await?);
    rows.push(lease_row(&root.join("lease"), commands).await?);
    Ok(rows)
}

/// Buffered publish of `records` events of 1 KiB by 4 tasks, then `visit_range` over them.
async fn kilobyte_rows(dir: &Path, records: usize) -> Result<Vec<Comparison>, String> {
    let w = AppendWorkload {
        records,
        value_size: 1024,
        writers: 4,
        sync: false,
    };
    let (events, publish, rocks) = publish_row(dir, &w).await?;
    let rocks_read = best_read(w.total(), || rocksdb_read_all(&rocks))?;
    let mut visits = Duration::MAX;
    for _ in 0..READ_PASSES {
        visits = visits.min(visit_all(&events, w.total()).await?);
    }
    let visit = read_row("seam visit_range 1024 B", &w, visits, rocks_read);
    Ok(vec![publish, visit])
}

/// Publishes `w` through the seam (one task per writer, partition = writer modulo the count),
/// then the same records into RocksDB; the event log, the row and the database.
async fn publish_row(
    dir: &Path,
    w: &AppendWorkload,
) -> Result<(DiskEventLog, Comparison, Arc<rocksdb::DB>), String> {
    let durability = if w.sync {
        Durability::Sync
    } else {
        Durability::Interval(Duration::from_millis(200))
    };
    let store = Store::open(dir.join("strata")).map_err(err)?;
    let options = LogOptions::default().with_durability(durability);
    let log = store
        .open_log("events", BENCH_PARTITIONS, options)
        .map_err(err)?;
    let events = DiskEventLog::new(log);
    let strata = publish(&events, w).await?;
    let (db, rocks) = rocksdb_append(&dir.join("rocksdb"), w)?;
    let mode = if w.sync { "Sync" } else { "buffered" };
    let name = format!(
        "seam publish {} B x {} tasks, {mode}",
        w.value_size, w.writers
    );
    let size = (w.total(), (w.total() * w.value_size) as u64);
    let row = Comparison::of_runs(name, size, &strata, &rocks);
    Ok((events, row, db))
}

/// `w.writers` tasks publishing `w.per_writer()` events each; every publish timed.
async fn publish(events: &DiskEventLog, w: &AppendWorkload) -> Result<AppendRun, String> {
    let value = Bytes::from(vec![0x5au8; w.value_size]);
    let (started, cpu) = (Instant::now(), process_cpu());
    let tasks: Vec<_> = (0..w.writers)
        .map(|writer| {
            let (events, value, n) = (events.clone(), value.clone(), w.per_writer());
            tokio::spawn(async move {
                let partition = (writer as u32 % BENCH_PARTITIONS) as i32;
                let mut times = Vec::with_capacity(n);
                for _ in 0..n {
                    let at = Instant::now();
                    events
                        .publish(partition, value.clone())
                        .await
                        .map_err(err)?;
                    times.push(at.elapsed());
                }
                Ok::<_, String>(times)
            })
        })
        .collect();
    let mut samples = Vec::with_capacity(w.total());
    for task in tasks {
        samples.extend(task.await.map_err(err)??);
    }
    Ok(AppendRun {
        elapsed: started.elapsed(),
        latency: Latency::of(&mut samples),
        cpu: process_cpu().saturating_sub(cpu),
    })
}

/// The row of reading back what `w` published.
fn read_row(name: &str, w: &AppendWorkload, strata: Duration, rocksdb: Duration) -> Comparison {
    Comparison {
        name: name.to_string(),
        operations: w.total(),
        bytes: (w.total() * w.value_size) as u64,
        strata,
        rocksdb,
        latency: None,
        cpu: None,
    }
}

/// `visit_range` over every partition from 0 to its high-water mark; checks the count.
async fn visit_all(events: &DiskEventLog, expected: usize) -> Result<Duration, String> {
    let highs = events.high_water_marks().await.map_err(err)?;
    let started = Instant::now();
    let mut count = 0usize;
    for (p, high) in highs.into_iter().enumerate() {
        let mut visit = |r: crate::event_log::MetadataEventRecord| {
            std::hint::black_box(&r.payload);
            count += 1;
            Ok(())
        };
        events
            .visit_range(p as i32, 0, high, &mut visit)
            .await
            .map_err(err)?;
    }
    let took = started.elapsed();
    check_count("visit_range", count, expected)?;
    Ok(took)
}

/// A subscription from offset 0 of every partition, read until every record arrived.
async fn catch_up(events: &DiskEventLog, expected: usize) -> Result<Duration, String> {
    let all = (0..events.partition_count())
        .map(|partition| PartitionStart {
            partition,
            start_offset: 0,
        })
        .collect();
    let started = Instant::now();
    let (mut stream, _handle) = events.subscribe(all);
    let mut count = 0usize;
    while count < expected {
        match stream.next().await {
            Some(r) => {
                std::hint::black_box(&r.payload);
                count += 1;
            }
            None => break,
        }
    }
    let took = started.elapsed();
    check_count("the subscription", count, expected)?;
    Ok(took)
}

fn check_count(what: &str, got: usize, expected: usize) -> Result<(), String> {
    if got == expected {
        Ok(())
    } else {
        Err(format!("{what} delivered {got} records of {expected}"))
    }
}

/// `commands` consumer position commits, one after another, beside synced RocksDB puts.
async fn positions_row(dir: &Path, commands: usize) -> Result<Comparison, String> {
    let store = Store::open(dir.join("strata")).map_err(err)?;
    let positions = ConsumerPositions::open(&store).map_err(err)?;
    let mut strata = Timed::start();
    for i in 0..commands {
        let at = Instant::now();
        let offset = i as i64 + 1;
        positions
            .commit("events", "bench", 0, offset)
            .await
            .map_err(err)?;
        strata.sample(at);
    }
    let strata = strata.finish();
    let rocks = RocksCoordination::open(&dir.join("rocksdb"))?;
    let rocksdb = Timed::each(commands, |i| {
        rocks.put("positions/events/bench/0", &(i as i64 + 1).to_be_bytes())
    })?;
    Ok(command_row(
        "seam consumer position commit",
        commands,
        strata,
        rocksdb,
    ))
}

/// `commands` rounds of `acquire_epoch` then `write_lease` under the new token.
async fn lease_row(dir: &Path, commands: usize) -> Result<Comparison, String> {
    let store = Store::open(dir.join("strata")).map_err(err)?;
    let transport = DiskCoordinationTransport::open(&store).map_err(err)?;
    let role = Role::new("controller").map_err(err)?;
    let member = MemberId::new("node-1").map_err(err)?;
    let mut strata = Timed::start();
    for i in 0..commands {
        let at = Instant::now();
        let token = transport.acquire_epoch(&role).await.map_err(err)?;
        let lease = Lease {
            member: member.clone(),
            token,
            granted_at: i as i64,
            deadline: i as i64 + 1,
        };
        transport
            .write_lease(&role, token, &lease)
            .await
            .map_err(err)?;
        strata.sample(at);
    }
    let strata = strata.finish();
    let rocks = RocksCoordination::open(&dir.join("rocksdb"))?;
    let rocksdb = Timed::each(commands, |_| {
        let token = rocks.acquire("controller")?;
        rocks.write_lease("controller", token, b"node-1 lease bytes")
    })?;
    let name = "seam lease: acquire_epoch + write_lease";
    Ok(command_row(name, commands, strata, rocksdb))
}

fn command_row(name: &str, commands: usize, strata: AppendRun, rocksdb: AppendRun) -> Comparison {
    Comparison::of_runs(name.to_string(), (commands, 0), &strata, &rocksdb)
}

/// Wall time, CPU and the latency of each sampled command of a run.
struct Timed {
    started: Instant,
    cpu: Duration,
    samples: Vec<Duration>,
}

impl Timed {
    fn start() -> Self {
        Self {
            started: Instant::now(),
            cpu: process_cpu(),
            samples: Vec::new(),
        }
    }

    /// Times `op(i)` for each `i` of `0..n`, one after another.
    fn each(
        n: usize,
        mut op: impl FnMut(usize) -> Result<(), String>,
    ) -> Result<AppendRun, String> {
        let mut timed = Self::start();
        for i in 0..n {
            let at = Instant::now();
            op(i)?;
            timed.sample(at);
        }
        Ok(timed.finish())
    }

    fn sample(&mut self, at: Instant) {
        self.samples.push(at.elapsed());
    }

    fn finish(mut self) -> AppendRun {
        AppendRun {
            elapsed: self.started.elapsed(),
            latency: Latency::of(&mut self.samples),
            cpu: process_cpu().saturating_sub(self.cpu),
        }
    }
}

/// RocksDB doing what the coordination transport does: the token of a role read, checked or
/// bumped under a lock, each record written with a synced WAL.
struct RocksCoordination {
    db: rocksdb::DB,
    lock: Mutex<()>,
    sync: rocksdb::WriteOptions,
}

impl RocksCoordination {
    fn open(path: &Path) -> Result<Self, String> {
        let mut opts = rocksdb::Options::default();
        opts.create_if_missing(true);
        let mut sync = rocksdb::WriteOptions::default();
        sync.set_sync(true);
        Ok(Self {
            db: rocksdb::DB::open(&opts, path).map_err(err)?,
            lock: Mutex::new(()),
            sync,
        })
    }

    fn put(&self, key: &str, value: &[u8]) -> Result<(), String> {
        self.db.put_opt(key, value, &self.sync).map_err(err)
    }

    fn token(&self, role: &str) -> Result<Option<u64>, String> {
        let value = self.db.get(format!("epoch/{role}")).map_err(err)?;
        Ok(value.and_then(|v| Some(u64::from_be_bytes(v.get(..8)?.try_into().ok()?))))
    }

    fn acquire(&self, role: &str) -> Result<u64, String> {
        let _held = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        let next = self.token(role)?.map_or(0, |t| t + 1);
        self.put(&format!("epoch/{role}"), &next.to_be_bytes())?;
        Ok(next)
    }

    fn write_lease(&self, role: &str, token: u64, lease: &[u8]) -> Result<(), String> {
        let _held = self.lock.lock().unwrap_or_else(|p| p.into_inner());
        if self.token(role)? != Some(token) {
            return Err(format!("role {role}: token {token} fenced"));
        }
        self.put(&format!("lease/{role}"), lease)
    }
}
