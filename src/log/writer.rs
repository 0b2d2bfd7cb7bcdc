//! The writer thread of a log: the only code that appends to active segments.
//!
//! Group commit: the thread takes every request waiting in its queue, writes all of them, then
//! makes each touched partition durable with one fdatasync (several partitions in parallel), then
//! publishes the new high-water marks and acknowledges every request of the round. With
//! `Durability::Interval` it acknowledges after the write and syncs on a timer instead.
//!
//! A request is all or nothing: it is encoded whole first (a bad record refuses it with nothing
//! written), the partitions it would overfill are rolled before any of its bytes are written, and
//! if a write fails part-way every partition it touched is cut back to where it stood. A failed
//! sync makes the partition refuse writes until a later request writes its unsynced bytes again
//! and syncs them successfully.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{oneshot, watch};

use super::options::{Durability, LogOptions};
use super::partition::Partition;
use super::request::{check_items, encode_request, EncodedRequest, Items, OffsetRange};
use crate::error::{StoreError, StoreResult};
use crate::fs::{remove_if_present, sync_dir, write_file, Fs};
use crate::segment::{
    index_file_name, segment_file_name, SealedSegment, SegmentWriter, WriterMark,
};

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
    /// Why the last sync failed; writes are refused until a re-sync succeeds.
    poisoned: Option<String>,
    /// A segment file a failed roll may have left; no write lands in the active segment until
    /// it is durably gone (it would claim offsets the active segment then holds).
    stray: Option<std::path::PathBuf>,
}

impl PartitionWriter {
    /// Makes the partition writable again: removes a stray segment file durably, and writes
    /// the unsynced bytes of a poisoned partition again and syncs them.
    fn heal(&mut self, fs: &dyn crate::fs::FileSystem) -> StoreResult<()> {
        if let Some(stray) = &self.stray {
            remove_if_present(fs, stray)?;
            sync_dir(fs, &self.shared.dir)?;
            self.stray = None;
        }
        let Some(reason) = &self.poisoned else {
            return Ok(());
        };
        let reason = reason.clone();
        self.active
            .resync()
            .map_err(|e| poisoned(self.shared.id, &format!("{reason}; retry: {e}")))?;
        self.poisoned = None;
        self.dirty = false;
        Ok(())
    }
}

/// A request of this round whose answer waits for the sync.
struct Pending {
    reply: oneshot::Sender<StoreResult<Vec<OffsetRange>>>,
    result: StoreResult<Vec<OffsetRange>>,
    partitions: Vec<u32>,
}

pub(crate) struct Writer {
    fs: Fs,
    partitions: Vec<PartitionWriter>,
    options: LogOptions,
    commits: watch::Sender<u64>,
    sync_rounds: Arc<AtomicU64>,
    last_sync: Instant,
}

fn poisoned(partition: u32, reason: &str) -> StoreError {
    StoreError::Poisoned {
        partition,
        reason: reason.to_string(),
    }
}

impl Writer {
    pub fn new(
        fs: Fs,
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
                stray: None,
            })
            .collect();
        Self {
            fs,
            partitions,
            options,
            commits,
            sync_rounds,
            last_sync: Instant::now(),
        }
    }

    /// Serves commands until a shutdown or until every sender is gone.
    pub fn run(mut self, rx: Receiver<Command>) {
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
            let mut round = vec![first];
            while round.len() < self.options.max_group_commit {
                match rx.try_recv() {
                    Ok(command) => round.push(command),
                    Err(_) => break,
                }
            }
            if self.serve_round(round) {
                return;
            }
        }
    }

    /// Serves one round of commands; true once the writer must stop.
    fn serve_round(&mut self, round: Vec<Command>) -> bool {
        let mut pending = Vec::new();
        let mut deferred = Vec::new();
        for command in round {
            match command {
                Command::Append { payload, reply } => {
                    if let Some(p) = self.serve_append(payload, reply) {
                        pending.push(p);
                    }
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
            let result = p
                .result
                .and_then(|ranges| match self.first_poison(&p.partitions) {
                    Some(err) => Err(err),
                    None => Ok(ranges),
                });
            let _ = p.reply.send(result);
        }
        for command in deferred {
            match command {
                Command::Roll { partition, reply } => {
                    let _ = reply.send(self.roll_if_not_empty(partition));
                }
                Command::Sync { reply } => {
                    let _ = reply.send(self.sync_all_partitions());
                }
                Command::Shutdown { reply } => {
                    let _ = reply.send(self.shutdown());
                    return true;
                }
                Command::Append { .. } => {}
            }
        }
        false
    }

    fn first_poison(&self, partitions: &[u32]) -> Option<StoreError> {
        partitions.iter().find_map(|&i| {
            let p = &self.partitions[i as usize];
            p.poisoned.as_deref().map(|r| poisoned(p.shared.id, r))
        })
    }

    /// Writes one append request; `None` when it was answered already (refused before writing).
    fn serve_append(
        &mut self,
        payload: Payload,
        reply: oneshot::Sender<StoreResult<Vec<OffsetRange>>>,
    ) -> Option<Pending> {
        let count = self.partitions.len() as u32;
        let items = match payload {
            Payload::Ready(items) => Ok(items),
            Payload::Deferred(build) => match build() {
                None => Err(StoreError::Rejected),
                Some(items) => check_items(&items, count).map(|()| items),
            },
        };
        let request = items.and_then(|items| encode_request(items, self.options.compression));
        let request = match request {
            Ok(request) => request,
            Err(e) => {
                let _ = reply.send(Err(e));
                return None;
            }
        };
        let partitions = request.partitions();
        let result = self.write_request(request, &partitions);
        Some(Pending {
            reply,
            result,
            partitions,
        })
    }

    /// Writes every batch of `request`, or none of them.
    fn write_request(
        &mut self,
        mut request: EncodedRequest,
        partitions: &[u32],
    ) -> StoreResult<Vec<OffsetRange>> {
        for &p in partitions {
            self.partitions[p as usize].heal(&*self.fs)?;
            let writer = &self.partitions[p as usize].active;
            let fits = writer.len() + request.bytes_for(p) <= self.options.segment_bytes;
            if !writer.is_empty() && !fits {
                self.roll(p)?;
            }
        }
        let marks: Vec<(u32, WriterMark, i64)> = partitions
            .iter()
            .map(|&p| {
                let w = &self.partitions[p as usize];
                (p, w.active.mark(), w.next_offset)
            })
            .collect();
        match self.write_batches(&mut request) {
            Ok(ranges) => Ok(ranges),
            Err(e) => {
                self.rollback(marks);
                Err(e)
            }
        }
    }

    fn write_batches(&mut self, request: &mut EncodedRequest) -> StoreResult<Vec<OffsetRange>> {
        let mut ranges: Vec<Option<OffsetRange>> = vec![None; request.items];
        for batch in &mut request.batches {
            let p = &mut self.partitions[batch.partition as usize];
            batch.header.base_offset = p.next_offset;
            p.active
                .append(&mut request.bytes[batch.range.clone()], &mut batch.header)?;
            let last = batch.header.last_offset();
            p.next_offset = last + 1;
            p.dirty = true;
            p.unpublished = true;
            let range = &mut ranges[batch.item];
            let first = range.map_or(batch.header.base_offset, |(first, _)| first);
            *range = Some((first, last));
        }
        ranges
            .into_iter()
            .map(|r| r.ok_or(StoreError::Invalid("an append item wrote no batch".into())))
            .collect()
    }

    /// Cuts every partition of a failed request back to where it stood before it.
    fn rollback(&mut self, marks: Vec<(u32, WriterMark, i64)>) {
        for (p, mark, next_offset) in marks {
            let w = &mut self.partitions[p as usize];
            match w.active.rollback(mark) {
                Ok(()) => w.next_offset = next_offset,
                Err(e) => w.poisoned = Some(format!("undoing a failed append: {e}")),
            }
        }
    }

    fn roll_if_not_empty(&mut self, partition: u32) -> StoreResult<()> {
        self.partitions[partition as usize].heal(&*self.fs)?;
        if self.partitions[partition as usize].active.is_empty() {
            return Ok(());
        }
        self.roll(partition)?;
        self.publish();
        Ok(())
    }

    /// Seals the active segment (synced, indexed, mapped) and starts a new one at the next
    /// offset. If the new segment cannot be made (a full disk), the old one stays active and a
    /// later roll tries again.
    fn roll(&mut self, partition: u32) -> StoreResult<()> {
        let interval = self.options.index_interval_bytes;
        let fs = self.fs.clone();
        let p = &mut self.partitions[partition as usize];
        p.heal(&*fs)?;
        if let Err(e) = p.active.sync() {
            p.poisoned = Some(e.to_string());
            return Err(e);
        }
        p.dirty = false;
        let index = p.active.shared().index();
        let base = index.base_offset;
        write_file(
            &*fs,
            &p.shared.dir.join(index_file_name(base)),
            &index.encode(),
            false,
        )?;
        let sealed = SealedSegment::map(
            p.active.path(),
            &**p.active.file(),
            index,
            p.shared.pins.clone(),
        )?;
        let next = p.next_offset;
        let new_path = p.shared.dir.join(segment_file_name(next));
        let created = SegmentWriter::create(&*fs, &new_path, next, interval)
            .and_then(|fresh| sync_dir(&*fs, &p.shared.dir).map(|()| fresh));
        let fresh = match created {
            Ok(fresh) => fresh,
            Err(e) => {
                p.stray = Some(new_path);
                return Err(e);
            }
        };
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

    /// Heals poisoned partitions, syncs everything, and reports the first partition that
    /// still refuses writes.
    fn sync_all_partitions(&mut self) -> StoreResult<()> {
        for p in &mut self.partitions {
            let _ = p.heal(&*self.fs);
        }
        self.sync_dirty();
        self.publish();
        let all: Vec<u32> = (0..self.partitions.len() as u32).collect();
        self.first_poison(&all).map_or(Ok(()), Err)
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
        let jobs: Vec<_> = dirty
            .iter()
            .map(|p| (p.active.file().clone(), p.active.len(), p.active.path()))
            .collect();
        let sync = |(file, _, path): &(crate::fs::FileRef, u64, &std::path::Path)| {
            file.sync_data().map_err(|e| StoreError::io(*path, e))
        };
        let results: Vec<StoreResult<()>> = if jobs.len() == 1 {
            vec![sync(&jobs[0])]
        } else {
            std::thread::scope(|s| {
                let handles: Vec<_> = jobs.iter().map(|j| s.spawn(move || sync(j))).collect();
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
        let lens: Vec<u64> = jobs.iter().map(|j| j.1).collect();
        for ((p, result), len) in dirty.into_iter().zip(results).zip(lens) {
            match result {
                Ok(()) => {
                    p.active.mark_synced(len);
                    p.dirty = false;
                }
                // After a failed fsync the page cache state is unknown: refuse writes until a
                // re-sync of the unsynced bytes succeeds.
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
                && p.poisoned.is_none()
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
        let _ = self.sync_all_partitions();
        let mut result = Ok(());
        for p in &self.partitions {
            if let Some(reason) = &p.poisoned {
                result = result.and(Err(poisoned(p.shared.id, reason)));
                continue;
            }
            let index = p.active.shared().index();
            let path = p.shared.dir.join(index_file_name(index.base_offset));
            result = result.and(write_file(&*self.fs, &path, &index.encode(), false));
        }
        self.commits.send_modify(|v| *v = v.wrapping_add(1));
        result
    }
}
