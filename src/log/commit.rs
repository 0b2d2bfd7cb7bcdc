//! Group commit for a journaled log: the first waiter leads.
//!
//! An append writes its frames into the journal and waits until the journal is durable past
//! them. The first waiter that finds no sync running leads one: it takes the journal's current
//! end, fdatasyncs the journal file (every frame written so far, by any writer, rides along),
//! publishes what became durable in every partition, and wakes the others. If appends wrote
//! frames meanwhile, the same leader syncs again at once (up to [`CHAIN_LIMIT`] rounds, then it
//! hands the next round to a waiter): a round starts the moment the one before it ends, not a
//! wake and a trip through the scheduler later. The leader is an appending thread (an async
//! appender of a multi-thread runtime leads through [`crate::blocking::blocking`], so the
//! executor is not held). A task of a current-thread runtime never leads: its runtime has one thread, which a
//! round would hold for an `fdatasync`, so it queues and hands the round to the log's job on the
//! process's commit workers (`strata-commit-N`, [`super::workers`]), which leads as a thread
//! would; its runtime's other tasks run meanwhile.
//!
//! Waiters queue their own wake handle (a parked thread or a task's waker) and the leader wakes
//! exactly the waiters its round satisfied, plus one that must lead the next round (first, so
//! the next sync starts at once); a woken waiter checks an atomic and returns without touching
//! the lock. A round thus costs one wake per satisfied append, not a stampede of every waiter
//! onto one mutex. Waking is itself the main cost of a round on a small machine (a cross-CPU
//! interrupt each), so the leader wakes [`RELAY_FANOUT`] threads and leaves the rest on a relay
//! list, from which every thread that returns wakes as many again: the wakes spread over every
//! CPU as a tree instead of queueing behind the leader. A parked thread also wakes on its own
//! after [`PARK_LIMIT`], so a wake lost on the relay can only delay it.
//!
//! Cheaper still is no wake at all: before it queues, a thread that finds a round running
//! yields its CPU and checks again, for up to `LogOptions::commit_yield` (as RocksDB's write
//! group does), provided at least [`YIELD_WAITERS_PER_CPU`] threads per CPU are waiting: then
//! the CPUs have more threads than they can run, and a yield hands the CPU to a thread with
//! work rather than spinning. On a 2-vCPU virtual machine the futex wakes' cross-CPU interrupts
//! took 15% of all CPU and the woken threads' context switches 13%; yielding instead took 64
//! writers of 1 KiB from 75-96k to 98-107k appends/s, of 100 B from 112k to 148-166k.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::task::{Poll, Waker};
use std::thread::Thread;
use std::time::{Duration, Instant};

use super::append::poisoned;
use super::LogInner;
use crate::error::StoreResult;

/// How to wake a waiter.
#[derive(Debug)]
enum Wake {
    /// A blocked thread (it stays in its wait loop until satisfied).
    Thread(Thread),
    /// An async task (its future may have been dropped).
    Task(Waker),
}

impl Wake {
    fn wake(self) {
        match self {
            Wake::Thread(t) => t.unpark(),
            Wake::Task(w) => w.wake(),
        }
    }
}

#[derive(Debug, Default)]
struct CommitState {
    /// Journal position made durable and published.
    synced: u64,
    /// The last failed round: frames up to this position may or may not be durable.
    failed: Option<(u64, String)>,
    /// Waiters with the journal position they wait for.
    waiters: Vec<(u64, Wake)>,
}

/// Threads each returning waiter (and the leader) wakes from the relay list.
const RELAY_FANOUT: usize = 2;

/// Most rounds one leader runs back to back (its own append returns after the last, so this
/// bounds what leading adds to its latency). 2 measured 117-126k appends/s (64 writers of
/// 100 B), 4 146-149k, 8 and 64 137-142k.
const CHAIN_LIMIT: usize = 4;

/// Threads per CPU that must be waiting before a waiter yields rather than queues. Measured on
/// 2 vCPUs (1 KiB appends, every waiter yielding against none): 2 writers made 14% fewer
/// appends/s at 3.4-3.6x the CPU per append, 4 writers 5-7% more at 3.1-3.2x, 8 writers 12-25%
/// more at 2.4-2.5x, 16 writers -13% to +31% (noise) at 1.6-2.2x, 64 writers 18-29% more at
/// 1.2x. With this bound (16 waiters here) 8 writers park as before and 64 keep the gain.
const YIELD_WAITERS_PER_CPU: usize = 8;

/// Longest a waiting thread stays parked before it looks at the durable position again.
const PARK_LIMIT: Duration = Duration::from_millis(10);

/// The group commit of one journaled log.
#[derive(Debug)]
pub(crate) struct GroupCommit {
    state: Mutex<CommitState>,
    /// Satisfied threads still to wake.
    relay: Mutex<Vec<Thread>>,
    /// `state.synced`, readable without the lock.
    synced: AtomicU64,
    /// A round is running. Written only under the state's lock (so it decides who leads as a
    /// field of the state would); read without it by yielding waiters.
    running: AtomicBool,
    /// Threads in [`Self::wait`] now.
    waiting: AtomicUsize,
    /// Threads in [`Self::wait`] from which on a waiter yields before it queues.
    yield_waiters: usize,
}

/// Counts a thread in [`GroupCommit::wait`] while it lives.
struct Waiting<'a>(&'a AtomicUsize);

impl<'a> Waiting<'a> {
    fn enter(count: &'a AtomicUsize) -> Self {
        count.fetch_add(1, Ordering::Relaxed);
        Self(count)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// What a waiter should do next.
enum Step {
    Done(StoreResult<()>),
    Lead,
    Wait,
    /// Queued; no round runs: the log's commit worker is to lead one.
    HandOff,
}

impl GroupCommit {
    /// A group commit whose journal is durable up to `synced`.
    pub fn new(synced: u64) -> Self {
        Self {
            state: Mutex::new(CommitState {
                synced,
                ..CommitState::default()
            }),
            synced: AtomicU64::new(synced),
            running: AtomicBool::new(false),
            waiting: AtomicUsize::new(0),
            yield_waiters: YIELD_WAITERS_PER_CPU
                * std::thread::available_parallelism().map_or(1, |n| n.get()),
            relay: Mutex::new(Vec::new()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, CommitState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Decides under the lock; a waiter that must wait is queued with `wake`. With
    /// `hand_off`, a waiter that would lead is queued too, and told to hand the round over.
    fn step(&self, lsn: u64, wake: impl FnOnce() -> Wake, hand_off: bool) -> Step {
        if self.synced() >= lsn {
            return Step::Done(Ok(()));
        }
        let mut state = self.lock();
        if state.synced >= lsn {
            return Step::Done(Ok(()));
        }
        if let Some((upto, reason)) = &state.failed {
            if lsn <= *upto {
                return Step::Done(Err(poisoned(u32::MAX, &format!("journal: {reason}"))));
            }
        }
        if self.running.load(Ordering::Acquire) {
            state.waiters.push((lsn, wake()));
            Step::Wait
        } else if hand_off {
            state.waiters.push((lsn, wake()));
            Step::HandOff
        } else {
            self.running.store(true, Ordering::Release);
            Step::Lead
        }
    }

    /// Forgets the last failed round, once the journal has been healed (its frames written
    /// and synced again): waiters up to it are then decided by the next round.
    pub fn forget_failure(&self) {
        self.lock().failed = None;
    }

    /// Blocks until the journal is durable past `lsn`, leading rounds as needed; while a round
    /// runs, it yields before it queues (see [`Self::yields`]).
    pub fn wait(&self, log: &LogInner, lsn: u64) -> StoreResult<()> {
        let yield_until = Instant::now() + log.options.commit_yield;
        let _waiting = Waiting::enter(&self.waiting);
        loop {
            if self.yields(lsn, yield_until) {
                std::thread::yield_now();
                continue;
            }
            match self.step(lsn, || Wake::Thread(std::thread::current()), false) {
                Step::Done(result) => {
                    self.relay_wakes();
                    return result;
                }
                Step::Lead => self.lead(log, CHAIN_LIMIT),
                // Woken (or spuriously, or late): decide again.
                Step::Wait | Step::HandOff => std::thread::park_timeout(PARK_LIMIT),
            }
        }
    }

    /// True while a thread waiting for `lsn` yields its CPU instead of queueing: a round runs
    /// (it may cover `lsn`; if it does not, its end lets this thread lead or queue), `lsn` is
    /// not durable yet, enough threads wait ([`YIELD_WAITERS_PER_CPU`]) and `until` has not
    /// passed. Atomics only: yielding threads leave the lock to the leader.
    fn yields(&self, lsn: u64, until: Instant) -> bool {
        self.running.load(Ordering::Acquire)
            && self.synced() < lsn
            && self.waiting.load(Ordering::Relaxed) >= self.yield_waiters
            && Instant::now() < until
    }

    /// Waits until the journal is durable past `lsn`, leading rounds as needed (a task queues
    /// at once: yielding would hold up its executor). A task of a current-thread runtime never
    /// leads: its executor's thread is the only one its runtime has, so it hands the round to
    /// the log's commit worker ([`LogInner::hand_off_round`]) and waits as any waiter does; a
    /// task of a multi-thread runtime leads through [`crate::blocking::blocking`].
    pub async fn wait_async(&self, log: &LogInner, lsn: u64) -> StoreResult<()> {
        let hand_off = crate::blocking::runs_inline_on_executor();
        loop {
            let step = std::future::poll_fn(|cx| {
                match self.step(lsn, || Wake::Task(cx.waker().clone()), hand_off) {
                    Step::Wait => Poll::Pending,
                    Step::HandOff if log.hand_off_round() => Poll::Pending,
                    decided => Poll::Ready(decided),
                }
            })
            .await;
            match step {
                Step::Done(result) => return result,
                Step::Lead => crate::blocking::blocking(|| self.lead(log, CHAIN_LIMIT)),
                // No worker to take it (the log is closing): one round inline, if no one
                // leads meanwhile.
                Step::HandOff => {
                    let leads = {
                        let _state = self.lock();
                        !self.running.swap(true, Ordering::AcqRel)
                    };
                    if leads {
                        self.lead(log, 1);
                    }
                }
                Step::Wait => {}
            }
        }
    }

    /// The commit worker's job: leads rounds (as many as a leading thread would) if waiters
    /// are queued and no round runs; otherwise nothing.
    pub fn lead_for_waiters(&self, log: &LogInner) {
        {
            let state = self.lock();
            if state.waiters.is_empty() || self.running.swap(true, Ordering::AcqRel) {
                return;
            }
        }
        self.lead(log, CHAIN_LIMIT);
    }

    /// Leads rounds: one, then more while appends wait for a next one (at most `rounds` in
    /// all), so a round starts the moment the one before it ends instead of after a wake of
    /// another thread and that thread's trip through the scheduler.
    fn lead(&self, log: &LogInner, rounds: usize) {
        for round in 1..=rounds {
            if !self.round(log, round < rounds) {
                break;
            }
        }
    }

    /// Runs one round: syncs the journal to its current end, publishes what became durable,
    /// then wakes the waiters it satisfied. Returns true if the caller is to lead the next
    /// round (`may_chain` and someone waits for one); otherwise it wakes one waiter to lead it.
    fn round(&self, log: &LogInner, may_chain: bool) -> bool {
        let started = std::time::Instant::now();
        let outcome = log.sync_journal();
        let bytes = outcome
            .as_ref()
            .map_or(0, |upto| upto.saturating_sub(self.synced()));
        log.metrics
            .sync_round(bytes, started.elapsed(), outcome.is_ok());
        if let Ok(upto) = &outcome {
            // Readable before acknowledged: publish, then let anyone see the new position.
            log.publish_journaled(*upto);
        }
        let mut state = self.lock();
        match outcome {
            Ok(upto) => state.synced = state.synced.max(upto),
            Err((upto, e)) => state.failed = Some((upto, e.to_string())),
        }
        let synced = state.synced;
        self.synced.store(synced, Ordering::Release);
        let chain = may_chain && state.failed.is_none();
        let (woken, again) = Self::take_woken(&mut state, chain);
        self.running.store(again, Ordering::Release);
        drop(state);
        self.wake_all(woken, again);
        log.request_preparation();
        again
    }

    /// Wakes `woken`: the first directly (the next round's leader, unless the caller leads it
    /// itself), the other threads through the relay.
    fn wake_all(&self, woken: Vec<Wake>, chained: bool) {
        let mut threads = Vec::new();
        for (i, wake) in woken.into_iter().enumerate() {
            match wake {
                Wake::Thread(t) if i > 0 || chained => threads.push(t),
                wake => wake.wake(),
            }
        }
        if !threads.is_empty() {
            self.lock_relay().append(&mut threads);
            self.relay_wakes();
        }
    }

    fn lock_relay(&self) -> MutexGuard<'_, Vec<Thread>> {
        self.relay.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Wakes the next [`RELAY_FANOUT`] threads of the relay list.
    fn relay_wakes(&self) {
        let mut relay = self.lock_relay();
        let from = relay.len().saturating_sub(RELAY_FANOUT);
        let next: Vec<_> = relay.drain(from..).collect();
        drop(relay);
        next.into_iter().for_each(|t| t.unpark());
    }

    /// Removes from the queue the waiters a round has decided (satisfied, or failed). If
    /// others still wait: with `chain`, the round's leader leads the next round (returns true);
    /// otherwise one waiter is taken too, first, to lead it: a thread if any waits (it is sure
    /// to be alive), else every task (a task's future may be gone, so none can be relied on
    /// alone).
    fn take_woken(state: &mut CommitState, chain: bool) -> (Vec<Wake>, bool) {
        let decided = state
            .failed
            .as_ref()
            .map_or(state.synced, |(upto, _)| (*upto).max(state.synced));
        let (mut woken, mut pending): (Vec<_>, Vec<_>) = std::mem::take(&mut state.waiters)
            .into_iter()
            .partition(|(lsn, _)| *lsn <= decided);
        let again = chain && !pending.is_empty();
        if again {
            // The leader syncs again at once; everyone else waits for that round.
        } else if let Some(i) = pending
            .iter()
            .position(|(_, w)| matches!(w, Wake::Thread(_)))
        {
            // First: the next round starts while the others are still being woken.
            let next = pending.swap_remove(i);
            woken.insert(0, next);
        } else {
            woken.append(&mut pending);
        }
        state.waiters = pending;
        (woken.into_iter().map(|(_, w)| w).collect(), again)
    }

    /// The position the journal is durable (and published) to.
    pub fn synced(&self) -> u64 {
        self.synced.load(Ordering::Acquire)
    }
}
