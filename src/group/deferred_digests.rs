//! Integrity digests of large inline appends, computed on a helper thread while the command's
//! commit record syncs (format/GROUP_STATE.md, "Deferred digests").
//!
//! ursula's per-stream integrity setsum takes one SHA3 digest per append over its bytes: about
//! 2.5 ns a byte here, 80 us for an `append_batch` of 32 KiB, a third of the command. Nothing
//! in the commit record needs it before the record is durable, and the fdatasync that makes it
//! durable leaves the CPU idle for longer than that. So a command whose inline appends reach
//! [`DEFER_MIN_BYTES`] writes its stream rows without their digests plus one digest op per
//! append (the payload record, which holds the bytes, and the stream offset), hands the hashing
//! to a helper thread, and adds the sums to its rows (in memory and in the RocksDB write) once
//! the record is synced. Replay computes the same sums from the payload records. Smaller
//! commands hash inline while sealing: handing off costs more than it saves.
//!
//! The helper is one thread per process. A caller that finds its job not yet started takes it
//! back and hashes it itself, so a busy helper never makes a command slower than hashing
//! inline would.

use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};

use bytes::Bytes;
use ursula_shard::BucketStreamId;

use super::commit_record::Op;
use super::state::integrity::inline_digest;

/// Inline bytes a command must append for its digests to be deferred (below, they are hashed
/// while sealing: handing off and patching rows costs about as much as hashing 8 KiB).
pub(crate) const DEFER_MIN_BYTES: usize = 8 << 10;

/// One inline append whose record digest is still to be added to its stream's row.
#[derive(Debug, Clone)]
pub(crate) struct DeferredDigest {
    /// The stream.
    pub id: BucketStreamId,
    /// Stream offset of the append's first byte.
    pub start: u64,
    /// The appended bytes (shared with the payload record written from them).
    pub payload: Bytes,
    /// Payload-log partition of the record holding the bytes.
    pub partition: u32,
    /// Offset of that record.
    pub log_offset: u64,
}

/// The digests per stream, summed, in the order the streams were first appended to.
pub(crate) type DigestSums = Vec<(BucketStreamId, setsum::Setsum)>;

/// The inline appends of one command whose digests are not yet in their rows.
#[derive(Debug, Default)]
pub(crate) struct DeferredDigests {
    items: Vec<DeferredDigest>,
    bytes: usize,
}

impl DeferredDigests {
    /// Adds one append (an empty payload is no record and has no digest).
    pub fn push(&mut self, digest: DeferredDigest) {
        if !digest.payload.is_empty() {
            self.bytes += digest.payload.len();
            self.items.push(digest);
        }
    }

    /// Whether the command's appends are large enough to hash beside the sync.
    pub fn worth_deferring(&self) -> bool {
        self.bytes >= DEFER_MIN_BYTES
    }

    /// The digest op of every append, for the commit record.
    pub fn ops(&self) -> impl Iterator<Item = Op<'static>> + '_ {
        self.items.iter().map(|d| Op::Digest {
            partition: d.partition,
            offset: d.log_offset,
            start: d.start,
        })
    }

    /// Hashes every append now, in this thread.
    pub fn compute(self) -> DigestSums {
        sum_digests(self.items)
    }

    /// Hands the hashing to the helper thread (or leaves it for [`DigestJob::wait`] when there
    /// is none); `None` when there is nothing to hash.
    pub fn start(self) -> Option<DigestJob> {
        if self.items.is_empty() {
            return None;
        }
        let job = Arc::new(JobSlot {
            state: Mutex::new(JobState::Queued(self.items)),
            done: Condvar::new(),
        });
        if let Some(helper) = helper() {
            let sent = lock(helper).send(Arc::clone(&job));
            if sent.is_err() {
                tracing::warn!("the digest helper thread is gone; digests are hashed inline");
            }
        }
        Some(DigestJob(job))
    }
}

/// The record digests of `items`, summed per stream.
fn sum_digests(items: Vec<DeferredDigest>) -> DigestSums {
    let mut sums: DigestSums = Vec::new();
    for d in items {
        let digest = inline_digest(&d.id, d.start, &d.payload);
        match sums.iter_mut().find(|(id, _)| *id == d.id) {
            Some((_, sum)) => *sum += digest,
            None => sums.push((d.id, digest)),
        }
    }
    sums
}

/// Hashing handed to the helper thread.
#[derive(Debug)]
pub(crate) struct DigestJob(Arc<JobSlot>);

#[derive(Debug)]
struct JobSlot {
    state: Mutex<JobState>,
    done: Condvar,
}

#[derive(Debug)]
enum JobState {
    /// Not started: whoever comes first (helper or caller) hashes it.
    Queued(Vec<DeferredDigest>),
    /// The helper is hashing it.
    Running,
    /// Hashed, not yet taken.
    Done(DigestSums),
    /// Taken by the caller.
    Taken,
}

impl DigestJob {
    /// The sums: the helper's if it finished or is hashing (waits for it), else hashed here.
    pub fn wait(self) -> DigestSums {
        let mut state = lock(&self.0.state);
        loop {
            match std::mem::replace(&mut *state, JobState::Taken) {
                JobState::Queued(items) => {
                    drop(state);
                    return sum_digests(items);
                }
                JobState::Done(sums) => return sums,
                JobState::Running => {
                    *state = JobState::Running;
                    state = self.0.done.wait(state).unwrap_or_else(|p| p.into_inner());
                }
                JobState::Taken => unreachable!("a digest job is waited for once"),
            }
        }
    }
}

impl JobSlot {
    /// The helper's side: hashes the job unless its caller took it back first.
    fn run(&self) {
        let items = {
            let mut state = lock(&self.state);
            match std::mem::replace(&mut *state, JobState::Running) {
                JobState::Queued(items) => items,
                other => {
                    *state = other;
                    return;
                }
            }
        };
        let sums = sum_digests(items);
        *lock(&self.state) = JobState::Done(sums);
        self.done.notify_all();
    }
}

/// The helper thread's queue, started on first use; `None` if the thread could not start.
fn helper() -> Option<&'static Mutex<Sender<Arc<JobSlot>>>> {
    static HELPER: OnceLock<Option<Mutex<Sender<Arc<JobSlot>>>>> = OnceLock::new();
    HELPER
        .get_or_init(|| {
            let (send, receive) = channel::<Arc<JobSlot>>();
            let started = std::thread::Builder::new()
                .name("strata-digests".into())
                .spawn(move || {
                    for job in receive {
                        job.run();
                    }
                });
            match started {
                Ok(_) => Some(Mutex::new(send)),
                Err(e) => {
                    tracing::warn!(error = %e, "no digest helper thread; digests are hashed inline");
                    None
                }
            }
        })
        .as_ref()
}

/// Locks `m`, taking over a lock poisoned by a panic elsewhere (the data is a plain value).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digest(stream: &str, start: u64, len: usize) -> DeferredDigest {
        DeferredDigest {
            id: BucketStreamId::new("bucket", stream),
            start,
            payload: Bytes::from(vec![start as u8; len]),
            partition: 1,
            log_offset: start,
        }
    }

    #[test]
    fn the_helper_and_the_caller_sum_the_same_digests_per_stream() {
        let items = vec![
            digest("a", 0, 5000),
            digest("b", 0, 3000),
            digest("a", 5000, 4000),
            digest("a", 9000, 0),
        ];
        let mut deferred = DeferredDigests::default();
        for d in items.clone() {
            deferred.push(d);
        }
        assert!(deferred.worth_deferring());
        assert_eq!(
            deferred.ops().count(),
            3,
            "an empty append has no digest op"
        );
        let inline = DeferredDigests {
            items: items[..3].to_vec(),
            bytes: 0,
        }
        .compute();
        let a = inline_digest(&items[0].id, 0, &items[0].payload)
            + inline_digest(&items[2].id, 5000, &items[2].payload);
        assert_eq!(inline[0], (items[0].id.clone(), a));
        assert_eq!(inline.len(), 2);
        let job = deferred.start().unwrap();
        assert_eq!(job.wait(), inline);
        assert!(DeferredDigests::default().start().is_none());
    }

    #[test]
    fn a_job_the_helper_has_not_started_is_hashed_by_its_caller() {
        let mut deferred = DeferredDigests::default();
        deferred.push(digest("a", 0, 100));
        let expected = DeferredDigests {
            items: deferred.items.clone(),
            bytes: 0,
        }
        .compute();
        let job = DigestJob(Arc::new(JobSlot {
            state: Mutex::new(JobState::Queued(deferred.items)),
            done: Condvar::new(),
        }));
        let slot = Arc::clone(&job.0);
        assert_eq!(job.wait(), expected);
        slot.run();
        assert!(
            matches!(*lock(&slot.state), JobState::Taken),
            "the helper found it taken"
        );
    }
}
