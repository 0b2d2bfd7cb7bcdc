//! The writer thread of a log: the only code that appends to active segments.
//!
//! Group commit: the thread takes every request waiting in its queue, writes all of them, then
//! makes each touched partition durable with one fdatasync (several partitions in parallel), then
//! publishes the new high-water marks and acknowledges every request of the round. With
//! `Durability::Interval` it acknowledges after the write and syncs on a timer instead.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{oneshot, watch};

use super::options::{Durability, LogOptions};
use super::partition::Partition;
use crate::error::{StoreError, StoreResult};
use crate::fs::{sync_dir, write_file};
use crate::segment::{
    batch_spans, encode_batch, index_file_name, segment_file_name, NewRecord, Record,
    SealedSegment, SegmentWriter,
};

/// Encoded records per batch when one request carries many records.
const TARGET_BATCH_BYTES: usize = 1 << 20;

/// Offsets `(first, last)` assigned to one append item.
pub type OffsetRange = (i64, i64);

/// Records to append, each item to its partition.
pub type Items = Vec<(u32, Vec<NewRecord>)>;

/// Computes the items of a conditional append on the writer thread; `None` rejects the append.
pub(crate) type Build = Box<dyn FnOnce() -> Option<Items> + Send>;

/// What an append request carries.
pub(crate) enum Payload {
    /// Items validated by the caller.
    Ready(Items),
    /// Items computed on the writer thread, in order with every other append.
    Deferred(Build),
}

/// A request to the writer thread.
pub(crate) enum Command {
    /// Append each item's records to its partition; reply once all are durable (or acknowledged).
    Append {
        payload: Payload,
        reply: oneshot::Sender<StoreResult<Vec<OffsetRange>>>,
    },
    /// Seal the active segment of a partition if it holds anything.
    Roll {
        partition: u32,
        reply: std::sync::mpsc::Sender<StoreResult<()>>,
    },
    /// Make everything written so far durable.
    Sync {
        reply: oneshot::Sender<StoreResult<()>>,
    },
    /// Sync, write the active indexes and stop.
    Shutdown {
        reply: std::sync::mpsc::Sender<StoreResult<()>>,
    },
}

struct PartitionWriter {
    shared: Arc<Partition>,
    active: SegmentWriter,
    next_offset: i64,
    dirty: bool,
    unpublished: bool,
    poisoned: Option<String>,
}

/// A request of this round whose answer waits for the sync.
struct Pending {
    reply: oneshot::Sender<StoreResult<Vec<OffsetRange>>>,
    result: StoreResult<Vec<OffsetRange>>,
    partitions: Vec<u32>,
}

pub(crate) struct Writer {
    partitions: Vec<PartitionWriter>,
    options: LogOptions,
    commits: watch::Sender<u64>,
    sync_rounds: Arc<AtomicU64>,
    last_sync: Instant,
    buffer: Vec<u8>,
}

/// Checks items before anything is written: partitions in range, records non-empty and valid.
pub(crate) fn check_items(items: &Items, partitions: u32) -> StoreResult<()> {
    for (partition, records) in items {
        if *partition >= partitions {
            return Err(StoreError::PartitionOutOfRange {
                partition: *partition as i32,
                count: partitions as i32,
            });
        }
        if records.is_empty() {
            return Err(StoreError::Encode(crate::segment::EncodeError::Empty));
        }
        if records.iter().any(|r| r.key.is_none() && r.value.is_none()) {
            return Err(StoreError::Encode(
                crate::segment::EncodeError::UnkeyedTombstone,
            ));
        }
    }
    Ok(())
}

fn poisoned(partition: u32, reason: &str) -> StoreError {
    StoreError::Poisoned {
        partition,
        reason: reason.to_string(),
    }
}

impl Writer {
    pub fn new(
        partitions: Vec<(Arc<Partition>, SegmentWriter)>,
        options: LogOptions,
        commits: watch::Sender<u64>,
        sync_rounds: Arc<AtomicU64>,
    ) -> Self {
        let partitions = partitions
            .into_iter()
            .map(|(shared, active)| PartitionWriter {
                next_offset: shared.high_water_mark(),
                shared,
                active,
                dirty: false,
                unpublished: false,
                poisoned: None,
            })
            .collect();
        Self {
            partitions,
            options,
            commits,
            sync_rounds,
            last_sync: Instant::now(),
            buffer: Vec::new(),
        }
    }

    /// Serves commands until a shutdown or until every sender is gone.
    pub fn run(mut self, rx: Receiver<Command>) {
        let mut deferred = Vec::new();
        loop {
            let first = match self.options.durability {
                Durability::Sync => rx.recv().map_err(|_| RecvTimeoutError::Disconnected),
                Durability::Interval(period) => {
                    let wait = period.saturating_sub(self.last_sync.elapsed());
                    rx.recv_timeout(wait.max(Duration::from_micros(100)))
                }
            };
            let first = match first {
                Ok(command) => command,
                Err(RecvTimeoutError::Timeout) => {
                    self.sync_dirty();
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => {
                    let _ = self.shutdown();
                    return;
                }
            };
            let mut pending = Vec::new();
            let mut round = vec![first];
            while round.len() < self.options.max_group_commit {
                match rx.try_recv() {
                    Ok(command) => round.push(command),
                    Err(_) => break,
                }
            }
            for command in round {
                match command {
                    Command::Append { payload, reply } => {
                        let items = match payload {
                            Payload::Ready(items) => Ok(items),
                            Payload::Deferred(build) => match build() {
                                None => Err(StoreError::Rejected),
                                Some(items) => check_items(&items, self.partitions.len() as u32)
                                    .map(|()| items),
                            },
                        };
                        let items = match items {
                            Ok(items) => items,
                            Err(e) => {
                                let _ = reply.send(Err(e));
                                continue;
                            }
                        };
                        let partitions = items.iter().map(|(p, _)| *p).collect();
                        let result = self.append_items(items);
                        pending.push(Pending {
                            reply,
                            result,
                            partitions,
                        });
                    }
                    other => deferred.push(other),
                }
            }
            let sync_now = match self.options.durability {
                Durability::Sync => true,
                Durability::Interval(period) => self.last_sync.elapsed() >= period,
            };
            if sync_now {
                self.sync_dirty();
            }
            self.publish();
            for p in pending {
                let result = match p.result {
                    Ok(ranges) => match p.partitions.iter().find_map(|&i| {
                        self.partitions[i as usize]
                            .poisoned
                            .as_deref()
                            .map(|r| poisoned(i, r))
                    }) {
                        Some(err) => Err(err),
                        None => Ok(ranges),
                    },
                    Err(e) => Err(e),
                };
                let _ = p.reply.send(result);
            }
            for command in deferred.drain(..) {
                match command {
                    Command::Roll { partition, reply } => {
                        let _ = reply.send(self.roll_if_not_empty(partition));
                    }
                    Command::Sync { reply } => {
                        self.sync_dirty();
                        let result = self
                            .partitions
                            .iter()
                            .find_map(|p| p.poisoned.as_deref().map(|r| poisoned(p.shared.id, r)));
                        let _ = reply.send(result.map_or(Ok(()), Err));
                    }
                    Command::Shutdown { reply } => {
                        let _ = reply.send(self.shutdown());
                        return;
                    }
                    Command::Append { .. } => {}
                }
            }
        }
    }

    fn append_items(&mut self, items: Items) -> StoreResult<Vec<OffsetRange>> {
        let mut ranges = Vec::with_capacity(items.len());
        let mut first_error = None;
        for (partition, records) in items {
            match self.append_records(partition, records) {
                Ok(range) => ranges.push(range),
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(ranges),
        }
    }

    fn append_records(
        &mut self,
        partition: u32,
        records: Vec<NewRecord>,
    ) -> StoreResult<OffsetRange> {
        let index = partition as usize;
        if let Some(reason) = &self.partitions[index].poisoned {
            return Err(poisoned(partition, reason));
        }
        if records.is_empty() {
            return Err(StoreError::Encode(crate::segment::EncodeError::Empty));
        }
        let first = self.partitions[index].next_offset;
        let records: Vec<Record> = records
            .into_iter()
            .enumerate()
            .map(|(i, r)| r.at(first + i as i64))
            .collect();
        for batch in batch_spans(&records, TARGET_BATCH_BYTES) {
            self.write_batch(partition, batch)?;
        }
        Ok((first, first + records.len() as i64 - 1))
    }

    fn write_batch(&mut self, partition: u32, records: &[Record]) -> StoreResult<()> {
        self.buffer.clear();
        let header = encode_batch(records, self.options.compression, &mut self.buffer)?;
        let segment_bytes = self.options.segment_bytes;
        let needs_roll = {
            let p = &self.partitions[partition as usize];
            !p.active.is_empty() && p.active.len() + header.len() as u64 > segment_bytes
        };
        if needs_roll {
            self.roll(partition)?;
        }
        let p = &mut self.partitions[partition as usize];
        p.active.append(&self.buffer, &header)?;
        p.next_offset = header.last_offset() + 1;
        p.dirty = true;
        p.unpublished = true;
        Ok(())
    }

    fn roll_if_not_empty(&mut self, partition: u32) -> StoreResult<()> {
        if self.partitions[partition as usize].active.is_empty() {
            return Ok(());
        }
        self.roll(partition)?;
        self.publish();
        Ok(())
    }

    /// Seals the active segment (synced, indexed, mapped) and starts a new one at the next offset.
    fn roll(&mut self, partition: u32) -> StoreResult<()> {
        let interval = self.options.index_interval_bytes;
        let p = &mut self.partitions[partition as usize];
        if let Some(reason) = &p.poisoned {
            return Err(poisoned(partition, reason));
        }
        if let Err(e) = p.active.sync() {
            p.poisoned = Some(e.to_string());
            return Err(e);
        }
        p.dirty = false;
        let index = p.active.shared().index();
        let old_path = p.active.path().to_path_buf();
        let base = index.base_offset;
        write_file(
            &p.shared.dir.join(index_file_name(base)),
            &index.encode(),
            false,
        )?;
        let sealed = SealedSegment::map(&old_path, p.active.file(), index)?;
        let next = p.next_offset;
        let new_path = p.shared.dir.join(segment_file_name(next));
        let fresh = SegmentWriter::create(&new_path, next, interval)?;
        sync_dir(&p.shared.dir)?;
        let new_active = fresh.shared().clone();
        let old = std::mem::replace(&mut p.active, fresh);
        p.shared.update_view(|view| {
            view.sealed.push(Arc::new(sealed));
            view.active = new_active;
        });
        // Readers holding the old active segment may read all of it now.
        old.shared().publish(old.len());
        Ok(())
    }

    /// fdatasync every partition written since its last sync; several in parallel.
    fn sync_dirty(&mut self) {
        let dirty: Vec<&mut PartitionWriter> = self
            .partitions
            .iter_mut()
            .filter(|p| p.dirty && p.poisoned.is_none())
            .collect();
        if dirty.is_empty() {
            self.last_sync = Instant::now();
            return;
        }
        self.sync_rounds.fetch_add(1, Ordering::Relaxed);
        let results: Vec<StoreResult<()>> = if dirty.len() == 1 {
            vec![dirty[0].active.sync()]
        } else {
            std::thread::scope(|s| {
                let handles: Vec<_> = dirty.iter().map(|p| s.spawn(|| p.active.sync())).collect();
                handles
                    .into_iter()
                    .map(|h| {
                        h.join().unwrap_or_else(|_| {
                            Err(StoreError::Invalid("sync thread panicked".into()))
                        })
                    })
                    .collect()
            })
        };
        for (p, result) in dirty.into_iter().zip(results) {
            match result {
                Ok(()) => p.dirty = false,
                // After a failed fsync the page cache state is unknown: refuse further writes.
                Err(e) => p.poisoned = Some(e.to_string()),
            }
        }
        self.last_sync = Instant::now();
    }

    /// Makes written records visible: active bytes first, then the high-water mark.
    fn publish(&mut self) {
        let mut any = false;
        for p in &mut self.partitions {
            if p.unpublished
                && (p.poisoned.is_none())
                && (!p.dirty || self.options.durability != Durability::Sync)
            {
                p.active.shared().publish(p.active.len());
                p.shared.set_high_water_mark(p.next_offset);
                p.unpublished = false;
                any = true;
            }
        }
        if any {
            self.commits.send_modify(|v| *v = v.wrapping_add(1));
        }
    }

    fn shutdown(&mut self) -> StoreResult<()> {
        self.sync_dirty();
        self.publish();
        let mut result = Ok(());
        for p in &self.partitions {
            if let Some(reason) = &p.poisoned {
                result = result.and(Err(poisoned(p.shared.id, reason)));
                continue;
            }
            let index = p.active.shared().index();
            let path = p.shared.dir.join(index_file_name(index.base_offset));
            result = result.and(write_file(&path, &index.encode(), false));
        }
        self.commits.send_modify(|v| *v = v.wrapping_add(1));
        result
    }
}
