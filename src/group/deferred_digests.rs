//! Integrity digests of large inline appends, computed on a helper thread while the command's
//! commit record syncs (format/GROUP_STATE.md, "Deferred digests").
//!
//! ursula's per-stream integrity setsum takes one SHA3 digest per append over its bytes: about
//! 2.5 ns a byte here one at a time, 80-100 us for an `append_batch` of 32 KiB, about a third
//! of that hashed four at a time, and less again eight at a time where the CPU has AVX-512F
//! ([`crate::group::state::sha3_lanes`], as every side of a job here does). Nothing in the
//! commit record needs it before the record is durable, and the fdatasync that makes it
//! durable leaves the CPU idle for longer than that. So a command whose inline appends reach
//! [`DEFER_MIN_BYTES`] writes its stream rows without their digests plus one digest op per
//! append (the payload record, which holds the bytes, and the stream offset), hands the hashing
//! to a helper thread as soon as it has planned its appends (so the helper hashes while the
//! payloads are written and the record is built, as well as during the sync), and adds the sums
//! to its rows (in memory and in the RocksDB write) once the record is synced. Replay computes
//! the same sums from the payload records. Smaller commands hash inline while sealing: handing
//! off costs more than it saves.
//!
//! The helper is one thread per process. Once the record is synced the caller shares the job:
//! both claim the next [`CLAIM`] unhashed appends in turn, so a helper that started late leaves
//! the rest to the caller (who used to take a job back whole when the helper had not begun it:
//! one command in ~11 then hashed all 32 KiB after its sync), and a busy helper never makes a
//! command slower than hashing inline would.
//!
//! A finished job holds the last references to the command's payloads (the payload record
//! was written from them), so the caller hands it back to the helper to be dropped (freeing
//! 32 payloads took ~10 us of the command's own thread), which does so once it has hashed the
//! next command's job, while that command syncs ([`serve`]).

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, RecvTimeoutError, Sender};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use ursula_shard::BucketStreamId;

use super::commit_record::Op;
use super::state::integrity::{inline_digest, inline_digests, InlineAppend};
use super::worker::{self, lock};

/// Inline bytes a command must append for its digests to be deferred (below, they are hashed
/// while sealing: handing off and patching rows costs about as much as hashing 8 KiB).
pub(crate) const DEFER_MIN_BYTES: usize = 8 << 10;

/// One inline append whose record digest is still to be added to its stream's row.
#[derive(Debug, Clone)]
pub(crate) struct DeferredDigest {
    /// The stream (one allocation shared by a command's appends to it).
    pub id: Arc<BucketStreamId>,
    /// Stream offset of the append's first byte.
    pub start: u64,
    /// The appended bytes (shared with the payload record written from them).
    pub payload: Bytes,
    /// Payload-log partition of the record holding the bytes.
    pub partition: u32,
    /// Offset of that record.
    pub log_offset: u64,
}

/// The digests per stream, summed, in the order the streams were first appended to (each
/// stream id shared with its appends).
pub(crate) type DigestSums = Vec<(Arc<BucketStreamId>, setsum::Setsum)>;

/// The inline appends of one command whose digests are not yet in their rows.
#[derive(Debug, Default)]
pub(crate) struct DeferredDigests {
    /// Appends not yet handed to the helper.
    items: Vec<DeferredDigest>,
    /// Bytes of every append pushed (handed to the helper or not).
    bytes: usize,
    /// The appends handed to the helper as soon as the command had planned them
    /// ([`Self::start_early`]), before its payloads were written.
    early: Option<Arc<JobSlot>>,
}

impl DeferredDigests {
    /// Adds one append (an empty payload is no record and has no digest).
    pub fn push(&mut self, digest: DeferredDigest) {
        if !digest.payload.is_empty() {
            self.bytes += digest.payload.len();
            self.items.push(digest);
        }
    }

    /// Makes room for `appends` more appends.
    pub fn reserve(&mut self, appends: usize) {
        self.items.reserve(appends);
    }

    /// Whether the command's appends are large enough to hash beside the sync.
    pub fn worth_deferring(&self) -> bool {
        self.bytes >= DEFER_MIN_BYTES
    }

    /// The digest op of every append, for the commit record.
    pub fn ops(&self) -> impl Iterator<Item = Op<'static>> + '_ {
        let early = self.early.iter().flat_map(|slot| slot.items.iter());
        early.chain(&self.items).map(|d| Op::Digest {
            partition: d.partition,
            offset: d.log_offset,
            start: d.start,
        })
    }

    /// Hashes every append now, in this thread (those handed to the helper early included:
    /// the caller shares them, as [`DigestJob::wait`] does).
    pub fn compute(self) -> DigestSums {
        match self.early {
            Some(slot) => DigestJob {
                slot,
                late: self.items,
            }
            .wait(),
            None => sum_digests(self.items),
        }
    }

    /// Hands the appends pushed so far to the helper thread at once, when they are worth
    /// deferring: a command calls it as soon as it has planned its appends, so the helper hashes
    /// while the payloads are written and the commit record is built, not only during the sync
    /// (with 32 KiB to hash, a helper started at the sync left a quarter of it to the caller
    /// after the sync). Appends pushed later are hashed by the caller in [`DigestJob::wait`].
    pub fn start_early(&mut self) {
        if self.early.is_none() && self.worth_deferring() && !self.items.is_empty() {
            self.early = Some(hand_to_helper(std::mem::take(&mut self.items)));
        }
    }

    /// Hands the hashing to the helper thread (or leaves it for [`DigestJob::wait`] when there
    /// is none); `None` when there is nothing to hash.
    pub fn start(self) -> Option<DigestJob> {
        match self.early {
            Some(slot) => Some(DigestJob {
                slot,
                late: self.items,
            }),
            None if self.items.is_empty() => None,
            None => Some(DigestJob {
                slot: hand_to_helper(self.items),
                late: Vec::new(),
            }),
        }
    }
}

/// A job of `items`, sent to the helper thread (if there is one: else its caller hashes it).
fn hand_to_helper(items: Vec<DeferredDigest>) -> Arc<JobSlot> {
    let job = Arc::new(JobSlot::new(items));
    send_to_helper(Work::Hash(Arc::clone(&job)));
    job
}

/// The record digests of `items`, summed per stream.
fn sum_digests(items: Vec<DeferredDigest>) -> DigestSums {
    let digests = digests_of(&items);
    sum_per_stream(&items, digests)
}

/// Appends the helper or the caller claims at a time: the batched hash works on eight at once
/// (four on a CPU without AVX-512F: a claim is then hashed as two fours;
/// [`crate::group::state::sha3_lanes`]).
const CLAIM: usize = 8;

/// The record digests of `items`, in order, hashed eight or four at a time.
fn digests_of(items: &[DeferredDigest]) -> Vec<setsum::Setsum> {
    inline_digests(items, |d| -> InlineAppend<'_> {
        (&*d.id, d.start, d.payload.as_ref())
    })
}

/// The record digest of one append.
fn digest_of(d: &DeferredDigest) -> setsum::Setsum {
    inline_digest(&d.id, d.start, &d.payload)
}

/// Sums `digests` (one per item, in order) per stream, streams in the order they first appear.
fn sum_per_stream(items: &[DeferredDigest], digests: Vec<setsum::Setsum>) -> DigestSums {
    debug_assert_eq!(items.len(), digests.len());
    let mut sums: DigestSums = Vec::new();
    add_per_stream(&mut sums, items.iter().zip(digests));
    sums
}

/// Adds each digest to its stream's sum in `sums` (a stream not there yet goes last).
fn add_per_stream<'a>(
    sums: &mut DigestSums,
    digests: impl IntoIterator<Item = (&'a DeferredDigest, setsum::Setsum)>,
) {
    for (d, digest) in digests {
        // A command's appends to one stream share its id: the pointer settles most lookups.
        let same = |id: &Arc<BucketStreamId>| Arc::ptr_eq(id, &d.id) || **id == *d.id;
        match sums.iter_mut().find(|(id, _)| same(id)) {
            Some((_, sum)) => *sum += digest,
            None => sums.push((Arc::clone(&d.id), digest)),
        }
    }
}

/// Hashing handed to the helper thread, which the caller shares once it waits, and the appends
/// planned after it was handed over (the caller hashes those).
#[derive(Debug)]
pub(crate) struct DigestJob {
    slot: Arc<JobSlot>,
    late: Vec<DeferredDigest>,
}

/// The appends of one job and who has hashed which. The helper and the waiting caller each
/// claim the next unclaimed append, hash it outside the lock and store its digest, so a helper
/// that starts late (or never) leaves the rest to the caller, and neither waits for work the
/// other has not begun.
#[derive(Debug)]
struct JobSlot {
    items: Vec<DeferredDigest>,
    results: Mutex<JobState>,
    /// Signalled when the helper stops hashing.
    done: Condvar,
}

#[derive(Debug)]
struct JobState {
    /// The digest of each append, once hashed.
    digests: Vec<Option<setsum::Setsum>>,
    /// The next append no one has claimed.
    next: usize,
    helper: Helper,
    /// Whether the caller waits on [`JobSlot::done`] (the helper signals only then: a signal
    /// costs a system call, and the caller rarely waits).
    caller_waits: bool,
}

/// The helper thread's part in a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Helper {
    /// Not started; once the caller has claimed every append it never will.
    Idle,
    /// Claiming and hashing appends.
    Hashing,
    /// Done with this job (every append claimed).
    Finished,
}

impl JobSlot {
    /// A job no one has started.
    fn new(items: Vec<DeferredDigest>) -> Self {
        Self {
            results: Mutex::new(JobState {
                digests: vec![None; items.len()],
                next: 0,
                helper: Helper::Idle,
                caller_waits: false,
            }),
            items,
            done: Condvar::new(),
        }
    }

    /// Claims the next [`CLAIM`] unclaimed appends (fewer at the end), if any (both sides call
    /// it with the lock held).
    fn claim(state: &mut JobState) -> Option<std::ops::Range<usize>> {
        let from = state.next;
        let to = (from + CLAIM).min(state.digests.len());
        (from < to).then(|| {
            state.next = to;
            from..to
        })
    }

    /// Hashes appends until none is left unclaimed; `state` is this side's lock on entry,
    /// returned held.
    fn hash_claimed<'a>(&'a self, mut state: MutexGuard<'a, JobState>) -> MutexGuard<'a, JobState> {
        while let Some(range) = Self::claim(&mut state) {
            drop(state);
            let digests = digests_of(&self.items[range.clone()]);
            state = lock(&self.results);
            for (slot, digest) in state.digests[range].iter_mut().zip(digests) {
                *slot = Some(digest);
            }
        }
        state
    }

    /// The helper's side: hashes appends until none is left, unless the caller has claimed
    /// them all already.
    fn run(&self) {
        let mut state = lock(&self.results);
        // Every append claimed (or the sums taken, which empties the digests): nothing to do.
        if state.next >= state.digests.len() {
            state.helper = Helper::Finished;
            return;
        }
        state.helper = Helper::Hashing;
        let state = self.hash_claimed(state);
        self.finish(state);
    }

    /// Marks the helper done with the job and wakes the caller if it waits for that.
    fn finish(&self, mut state: MutexGuard<'_, JobState>) {
        state.helper = Helper::Finished;
        let waits = state.caller_waits;
        drop(state);
        if waits {
            self.done.notify_all();
        }
    }

    /// Marks the helper done with a job it panicked in (its unfinished digests stay `None`, and
    /// the caller hashes them).
    fn abandon(&self) {
        self.finish(lock(&self.results));
    }
}

impl DigestJob {
    /// The sums: hashes the appends the helper has not claimed, waits for those it is
    /// hashing, sums every digest per stream, and hands the spent job to the helper to drop.
    pub fn wait(self) -> DigestSums {
        let slot = &self.slot;
        let mut state = slot.hash_claimed(lock(&slot.results));
        while state.helper == Helper::Hashing {
            state.caller_waits = true;
            state = slot.done.wait(state).unwrap_or_else(|p| p.into_inner());
        }
        let digests = std::mem::take(&mut state.digests);
        drop(state);
        let digests = digests
            .into_iter()
            .zip(&slot.items)
            .map(|(digest, d)| digest.unwrap_or_else(|| digest_of(d)))
            .collect();
        let mut sums = sum_per_stream(&slot.items, digests);
        add_per_stream(&mut sums, self.late.iter().zip(digests_of(&self.late)));
        retire(self);
        sums
    }
}

/// What the helper thread is sent.
#[derive(Debug)]
enum Work {
    /// A job to hash.
    Hash(Arc<JobSlot>),
    /// A spent job was handed over while the helper blocked without a timeout ([`Spent`]).
    Wake,
}

/// Spent jobs waiting for the helper to drop them (their payloads freed off the command's
/// thread, after the next job's hashing), handed over without waking it: the next job's
/// message does, and a helper with spent jobs waits only [`SPENT_LINGER`] for one. A send per
/// spent job woke the helper once more per command (a futex call on the command's thread).
#[derive(Debug)]
struct Spent {
    jobs: Mutex<Vec<DigestJob>>,
    /// Set while the helper blocks with no timeout: a job handed over then must wake it.
    parked: AtomicBool,
}

impl Spent {
    const fn new() -> Self {
        Self {
            jobs: Mutex::new(Vec::new()),
            parked: AtomicBool::new(false),
        }
    }

    /// Hands `job` over, calling `wake` if the helper may block without a timeout. (The helper
    /// sets `parked` before it last looks at `jobs`; so either it sees this job there, or this
    /// side sees `parked` set: SeqCst on both, the push and the look under one mutex.)
    fn hand_over(&self, job: DigestJob, wake: impl FnOnce()) {
        lock(&self.jobs).push(job);
        if self.parked.load(Ordering::SeqCst) {
            wake();
        }
    }

    /// The jobs handed over so far, taken. The list left behind is allocated here, on the
    /// helper's side, with room for [`SPENT_ROOM`] jobs: a hand-over then pushes without
    /// allocating (an empty list left behind made every command's push allocate, on glibc's
    /// arena lock beside the helper's frees: ~2.6% of the command thread's samples).
    fn take(&self) -> Vec<DigestJob> {
        let room = Vec::with_capacity(SPENT_ROOM);
        std::mem::replace(&mut *lock(&self.jobs), room)
    }

    fn is_empty(&self) -> bool {
        lock(&self.jobs).is_empty()
    }
}

/// Spent jobs a list taken by the helper leaves room for (one per command between two of its
/// takes, usually).
const SPENT_ROOM: usize = 4;

/// The spent jobs of the process's helper thread.
static SPENT: Spent = Spent::new();

/// Hands a spent job to the helper thread to drop (without one, drops it here).
fn retire(job: DigestJob) {
    if helper().is_some() {
        SPENT.hand_over(job, || send_to_helper(Work::Wake));
    }
}

/// Sends `work` to the helper thread; without one (or with it gone), drops it here (a job's
/// caller then hashes every append itself in [`DigestJob::wait`]), and with it the spent jobs
/// the helper would have dropped (they are handed over without a send, so none would be).
fn send_to_helper(work: Work) {
    let Some(helper) = helper() else { return };
    if let Err(unsent) = helper.send(work) {
        tracing::warn!("the digest helper thread is gone; digests are hashed inline");
        drop(unsent);
        drop(SPENT.take());
    }
}

/// The helper thread's queue, started on first use; `None` if the thread could not start.
fn helper() -> Option<&'static Sender<Work>> {
    static HELPER: OnceLock<Option<Sender<Work>>> = OnceLock::new();
    HELPER
        .get_or_init(|| {
            worker::start("strata-digests", "digests are hashed inline", |work| {
                serve(work, &SPENT)
            })
        })
        .as_ref()
}

/// How long the helper keeps a spent job when no other work comes (it drops it then).
const SPENT_LINGER: Duration = Duration::from_millis(10);

/// The helper thread's loop. Spent jobs are kept until the next job has been hashed and then
/// dropped: freeing the payloads of one command while the next one's sync is under way, when
/// the command thread allocates nothing. Freed at once, they met the command thread's own
/// allocations for the next command on the allocator's lock (a payload allocated in one thread
/// and freed in another goes back to its arena under that lock): three to four futex calls a
/// command on each side in a probe of 100 `append_batch` commands. With no next job, they go
/// after [`SPENT_LINGER`]. After hashing a job the helper waits with that timeout too (its
/// command hands the job back as soon as the sums are taken), so that hand-over needs no wake.
fn serve(work: Receiver<Work>, spent: &Spent) {
    let mut hashed = false;
    loop {
        let next = if !hashed && spent.is_empty() {
            spent.parked.store(true, Ordering::SeqCst);
            // A job handed over before the flag was set is seen here; one after it, wakes us.
            if !spent.is_empty() {
                spent.parked.store(false, Ordering::SeqCst);
                continue;
            }
            let next = work.recv();
            spent.parked.store(false, Ordering::SeqCst);
            match next {
                Ok(next) => next,
                Err(_) => return,
            }
        } else {
            match work.recv_timeout(SPENT_LINGER) {
                Ok(next) => next,
                Err(RecvTimeoutError::Timeout) => {
                    drop(spent.take());
                    hashed = false;
                    continue;
                }
                Err(RecvTimeoutError::Disconnected) => return,
            }
        };
        if let Work::Hash(job) = next {
            // The jobs spent before this one: the previous command's payloads, freed while
            // this one syncs.
            let older = spent.take();
            hash(&job);
            drop(older);
            hashed = true;
        }
    }
}

/// The helper's part of a job. A panic while hashing must not leave the caller waiting for
/// ever: the job is marked finished and the caller hashes what is missing.
fn hash(job: &JobSlot) {
    if std::panic::catch_unwind(AssertUnwindSafe(|| job.run())).is_err() {
        job.abandon();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digest(stream: &str, start: u64, len: usize) -> DeferredDigest {
        DeferredDigest {
            id: Arc::new(BucketStreamId::new("bucket", stream)),
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
            ..DeferredDigests::default()
        }
        .compute();
        let a = inline_digest(&items[0].id, 0, &items[0].payload)
            + inline_digest(&items[2].id, 5000, &items[2].payload);
        assert_eq!(inline[0], (Arc::clone(&items[0].id), a));
        assert_eq!(inline.len(), 2);
        let job = deferred.start().unwrap();
        assert_eq!(job.wait(), inline);
        assert!(DeferredDigests::default().start().is_none());
    }

    #[test]
    fn appends_handed_over_early_and_those_planned_after_are_summed_once_each() {
        let all = items(12);
        let expected = sum_digests(all.clone());
        let mut deferred = DeferredDigests::default();
        for d in all[..9].iter().cloned() {
            deferred.push(d);
        }
        deferred.start_early();
        assert!(deferred.early.is_some(), "9 KB is worth deferring");
        assert!(deferred.items.is_empty());
        for d in all[9..].iter().cloned() {
            deferred.push(d);
        }
        deferred.start_early();
        assert_eq!(deferred.items.len(), 3, "one job is handed over early");
        let offsets: Vec<u64> = deferred
            .ops()
            .map(|op| match op {
                Op::Digest { offset, .. } => offset,
                _ => u64::MAX,
            })
            .collect();
        let planned: Vec<u64> = all.iter().map(|d| d.log_offset).collect();
        assert_eq!(offsets, planned, "every append's op, in plan order");
        let job = deferred.start().expect("a job");
        assert_eq!(job.wait(), expected);

        let mut small = DeferredDigests::default();
        small.push(digest("a", 0, 100));
        small.start_early();
        assert!(small.early.is_none(), "100 B is hashed while sealing");
    }

    fn slot(items: Vec<DeferredDigest>) -> DigestJob {
        DigestJob {
            slot: Arc::new(JobSlot::new(items)),
            late: Vec::new(),
        }
    }

    fn items(n: u64) -> Vec<DeferredDigest> {
        (0..n)
            .map(|i| digest(["a", "b"][i as usize % 2], i * 1000, 1000))
            .collect()
    }

    #[test]
    fn a_job_the_helper_has_not_started_is_hashed_by_its_caller() {
        let expected = sum_digests(items(5));
        let job = slot(items(5));
        let slot = Arc::clone(&job.slot);
        assert_eq!(job.wait(), expected);
        slot.run();
        let state = lock(&slot.results);
        assert_eq!(
            state.helper,
            Helper::Finished,
            "the helper found nothing left"
        );
        assert_eq!(state.next, 5);
    }

    #[test]
    fn the_helper_and_the_caller_share_a_job_and_sum_every_append_once() {
        let expected = sum_digests(items(64));
        for _ in 0..20 {
            let job = slot(items(64));
            let slot = Arc::clone(&job.slot);
            let helper = std::thread::spawn(move || slot.run());
            assert_eq!(job.wait(), expected);
            helper.join().expect("the helper ran");
        }
    }

    #[test]
    fn appends_a_helper_abandoned_are_hashed_by_the_caller() {
        let expected = sum_digests(items(4));
        let job = slot(items(4));
        {
            // As a helper that claimed two appends, stored one, then panicked.
            let mut state = lock(&job.slot.results);
            state.next = 2;
            state.digests[0] = Some(digest_of(&job.slot.items[0]));
            state.helper = Helper::Hashing;
        }
        job.slot.abandon();
        assert_eq!(job.wait(), expected);
    }

    /// A payload whose owner counts its live references in `alive`.
    fn tracked(alive: &Arc<()>) -> DeferredDigest {
        struct Owner {
            bytes: Vec<u8>,
            _alive: Arc<()>,
        }
        impl AsRef<[u8]> for Owner {
            fn as_ref(&self) -> &[u8] {
                &self.bytes
            }
        }
        let owner = Owner {
            bytes: vec![7; 1000],
            _alive: Arc::clone(alive),
        };
        DeferredDigest {
            payload: Bytes::from_owner(owner),
            ..digest("a", 0, 0)
        }
    }

    /// Waits up to five seconds for `alive` to have no reference but the test's.
    fn freed(alive: &Arc<()>) -> bool {
        let until = std::time::Instant::now() + Duration::from_secs(5);
        while Arc::strong_count(alive) > 1 && std::time::Instant::now() < until {
            std::thread::sleep(Duration::from_millis(1));
        }
        Arc::strong_count(alive) == 1
    }

    #[test]
    fn the_helper_frees_a_spent_job_after_the_next_hash_or_when_idle() {
        let (send, receive) = std::sync::mpsc::channel();
        let spent: &'static Spent = Box::leak(Box::new(Spent::new()));
        let helper = std::thread::spawn(move || serve(receive, spent));
        let wake = || send.send(Work::Wake).expect("sent");
        let first = Arc::new(());
        spent.hand_over(slot(vec![tracked(&first)]), wake);
        let next = slot(items(8));
        send.send(Work::Hash(Arc::clone(&next.slot))).expect("sent");
        assert_eq!(next.wait(), sum_digests(items(8)));
        assert!(freed(&first), "dropped once the next job was hashed");
        // Handed over while the helper lingers, or blocks (then woken): dropped either way.
        for round in 0..40 {
            let idle = Arc::new(());
            spent.hand_over(slot(vec![tracked(&idle)]), wake);
            assert!(freed(&idle), "round {round}: dropped with no other work");
            if round % 2 == 1 {
                std::thread::sleep(SPENT_LINGER * 2);
            }
        }
        drop(send);
        helper
            .join()
            .expect("the helper returns once its queue is gone");
    }
}
