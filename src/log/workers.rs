//! Process-wide pools of worker threads for the logs' background work: a fixed number of
//! threads per kind of work, whatever the number of logs (a group engine's payload log is one
//! log; a thousand groups once meant two thousand threads).
//!
//! Each kind has its own pool, named by its own prefix (`strata-prep-N` prepare journal space,
//! `strata-sync-N` run the periodic syncs and checkpoints, `strata-maintenance-N` run retention
//! and compaction), so that the power-cut suite's interleaving model can hold one kind by name.
//! A log registers a [`Job`] per kind: a closure (holding the log weakly) run when woken
//! ([`JobHandle::wake`]) or every period. A job never runs twice at once; once stopped
//! ([`JobHandle::stop`], and when its handle drops) it never starts again, and `stop` waits for
//! a run in progress unless it is called from that run (a log dropped by its own job).
//!
//! The trade: jobs of different logs wait for each other when more are due than a pool has
//! threads. Nothing a writer needs waits for a pool (a writer prepares journal space itself
//! when none is ready), so that costs latency of background work, never progress.

use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, VecDeque};
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::thread::ThreadId;
use std::time::{Duration, Instant};

use crate::error::{StoreError, StoreResult};

/// A kind of background work, with its pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Journal space prepared ahead of the writers (woken on demand).
    Prepare,
    /// Buffered logs' interval syncs and journaled logs' checkpoints (periodic).
    Sync,
    /// Retention and compaction (periodic, when a log asks for it).
    Maintenance,
    /// Group-commit rounds of journaled logs whose waiters are tasks of a current-thread
    /// runtime (woken on demand), so no such task syncs on its executor's thread.
    Commit,
}

impl Kind {
    /// Prefix of the pool's thread names.
    fn prefix(self) -> &'static str {
        match self {
            Kind::Prepare => "strata-prep-",
            Kind::Sync => "strata-sync-",
            Kind::Maintenance => "strata-maintenance-",
            Kind::Commit => "strata-commit-",
        }
    }

    /// Threads in the pool: two for the short jobs (one can run while another waits on the
    /// disk), one for maintenance (a compaction pass is long; passes of different logs take
    /// turns, as a log cleaner's do), four for commit rounds (rounds of different logs are
    /// `fdatasync`s of different files, which the disk may serve at once).
    fn threads(self) -> usize {
        match self {
            Kind::Prepare | Kind::Sync => 2,
            Kind::Maintenance => 1,
            Kind::Commit => 4,
        }
    }

    fn pool(self) -> &'static Pool {
        static POOLS: [OnceLock<Pool>; 4] = [const { OnceLock::new() }; 4];
        POOLS[self as usize].get_or_init(|| Pool::start(self))
    }
}

/// What a job's closure answers: go on, or stop for good (no further run).
pub(crate) type Continue = bool;

/// One log's work of one kind.
struct Job {
    run: Box<dyn Fn() -> Continue + Send + Sync>,
    /// Run every period (after each run ends), when set.
    period: Option<Duration>,
    state: Mutex<JobState>,
    idle: Condvar,
}

#[derive(Default)]
struct JobState {
    queued: bool,
    running: Option<ThreadId>,
    stopped: bool,
}

impl Job {
    fn lock(&self) -> MutexGuard<'_, JobState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Marks the job queued; false if it is stopped or queued already.
    fn mark_queued(&self) -> bool {
        self.queue().0
    }

    /// Marks the job queued: (newly queued, not stopped).
    fn queue(&self) -> (bool, bool) {
        let mut s = self.lock();
        let fresh = !s.stopped && !s.queued;
        s.queued |= fresh;
        (fresh, !s.stopped)
    }

    /// Runs the job once (unless stopped meanwhile); returns when it is due next, if ever.
    fn run_once(&self) -> Option<Instant> {
        {
            let mut s = self.lock();
            s.queued = false;
            if s.stopped {
                return None;
            }
            s.running = Some(std::thread::current().id());
        }
        let go_on =
            std::panic::catch_unwind(AssertUnwindSafe(|| (self.run)())).unwrap_or_else(|_| {
                tracing::error!("a background job of a log panicked; it will not run again");
                false
            });
        let mut s = self.lock();
        s.running = None;
        s.stopped |= !go_on;
        self.idle.notify_all();
        let period = self.period.filter(|_| !s.stopped)?;
        Some(Instant::now() + period)
    }
}

/// A job due at `due` (ordered by time, then by arming order).
struct Timer {
    due: Instant,
    seq: u64,
    job: Arc<Job>,
}

impl PartialEq for Timer {
    fn eq(&self, other: &Self) -> bool {
        (self.due, self.seq) == (other.due, other.seq)
    }
}
impl Eq for Timer {}
impl PartialOrd for Timer {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Timer {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.due, self.seq).cmp(&(other.due, other.seq))
    }
}

#[derive(Default)]
struct Queues {
    ready: VecDeque<Arc<Job>>,
    timers: BinaryHeap<Reverse<Timer>>,
    seq: u64,
}

/// The threads of one kind and their queues.
struct Pool {
    queues: Mutex<Queues>,
    work: Condvar,
    /// Threads that started (a job registered with none would never run).
    threads: usize,
}

impl Pool {
    fn start(kind: Kind) -> Self {
        let pool = Pool {
            queues: Mutex::new(Queues::default()),
            work: Condvar::new(),
            threads: 0,
        };
        let mut started = 0;
        for n in 0..kind.threads() {
            let spawned = std::thread::Builder::new()
                .name(format!("{}{n}", kind.prefix()))
                .spawn(move || kind.pool().serve());
            match spawned {
                Ok(_) => started += 1,
                Err(e) => {
                    tracing::warn!(error = %e, pool = kind.prefix(), "a worker thread could not start")
                }
            }
        }
        Pool {
            threads: started,
            ..pool
        }
    }

    fn lock(&self) -> MutexGuard<'_, Queues> {
        self.queues.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn arm(&self, job: Arc<Job>, due: Instant) {
        let mut q = self.lock();
        q.seq += 1;
        let seq = q.seq;
        q.timers.push(Reverse(Timer { due, seq, job }));
        drop(q);
        self.work.notify_one();
    }

    fn push(&self, job: Arc<Job>) {
        self.lock().ready.push_back(job);
        self.work.notify_one();
    }

    /// A worker thread: takes due and ready jobs, one at a time, forever.
    fn serve(&self) {
        loop {
            let job = self.next();
            if let Some(due) = job.run_once() {
                self.arm(job, due);
            }
        }
    }

    /// Waits for the next job to run.
    fn next(&self) -> Arc<Job> {
        let mut q = self.lock();
        loop {
            let now = Instant::now();
            while q.timers.peek().is_some_and(|t| t.0.due <= now) {
                if let Some(Reverse(timer)) = q.timers.pop() {
                    if timer.job.mark_queued() {
                        q.ready.push_back(timer.job);
                    }
                }
            }
            if let Some(job) = q.ready.pop_front() {
                return job;
            }
            q = match q
                .timers
                .peek()
                .map(|t| t.0.due.saturating_duration_since(now))
            {
                Some(wait) => match self.work.wait_timeout(q, wait) {
                    Ok((q, _)) => q,
                    Err(p) => p.into_inner().0,
                },
                None => self.work.wait(q).unwrap_or_else(|p| p.into_inner()),
            };
        }
    }
}

/// A registered job: wake it, stop it (dropping the handle stops it too).
pub(crate) struct JobHandle {
    kind: Kind,
    job: Arc<Job>,
}

impl std::fmt::Debug for JobHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobHandle")
            .field("kind", &self.kind)
            .finish()
    }
}

/// Registers `run` with the pool of `kind`, run every `period` if given (the first run one
/// period from now), and otherwise when woken. An error if the pool has no thread.
pub(crate) fn register(
    kind: Kind,
    period: Option<Duration>,
    run: impl Fn() -> Continue + Send + Sync + 'static,
) -> StoreResult<JobHandle> {
    let pool = kind.pool();
    if pool.threads == 0 {
        return Err(StoreError::Invalid(format!(
            "no {}* worker thread could start",
            kind.prefix()
        )));
    }
    let job = Arc::new(Job {
        run: Box::new(run),
        period,
        state: Mutex::new(JobState::default()),
        idle: Condvar::new(),
    });
    if let Some(period) = period {
        pool.arm(job.clone(), Instant::now() + period);
    }
    Ok(JobHandle { kind, job })
}

impl JobHandle {
    /// Queues a run (a no-op while one is queued); false once the job is stopped.
    pub fn wake(&self) -> bool {
        let (fresh, live) = self.job.queue();
        if fresh {
            self.kind.pool().push(self.job.clone());
        }
        live
    }

    /// Stops the job: no run starts after this returns, and a run in progress has ended
    /// (unless it is the caller's own).
    pub fn stop(&self) {
        let me = std::thread::current().id();
        let mut s = self.job.lock();
        s.stopped = true;
        while s.running.is_some_and(|t| t != me) {
            s = self.job.idle.wait(s).unwrap_or_else(|p| p.into_inner());
        }
    }
}

impl Drop for JobHandle {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering as AtomicOrdering};

    #[test]
    fn a_woken_job_runs_once_per_wake_and_never_after_it_stops() {
        let runs = Arc::new(AtomicUsize::new(0));
        let counted = runs.clone();
        let job = register(Kind::Prepare, None, move || {
            counted.fetch_add(1, AtomicOrdering::SeqCst);
            std::thread::sleep(Duration::from_millis(20));
            true
        })
        .expect("a job");
        job.wake();
        job.wake();
        job.wake();
        // The pool's threads may be busy with other jobs of the process for a while.
        let started = Instant::now();
        while runs.load(AtomicOrdering::SeqCst) == 0 && started.elapsed() < Duration::from_secs(10)
        {
            std::thread::sleep(Duration::from_millis(1));
        }
        job.stop();
        let after_stop = runs.load(AtomicOrdering::SeqCst);
        // Wakes while it is queued are one run; one that lands after the run began queues one
        // more, which the stop skips unless it began too.
        assert!((1..=2).contains(&after_stop), "{after_stop} runs");
        job.wake();
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(
            runs.load(AtomicOrdering::SeqCst),
            after_stop,
            "no run after stop"
        );
    }

    #[test]
    fn a_periodic_job_runs_each_period_until_it_asks_to_stop() {
        let runs = Arc::new(AtomicUsize::new(0));
        let counted = runs.clone();
        let _job = register(Kind::Sync, Some(Duration::from_millis(2)), move || {
            counted.fetch_add(1, AtomicOrdering::SeqCst) + 1 < 3
        })
        .expect("a job");
        let started = Instant::now();
        while runs.load(AtomicOrdering::SeqCst) < 3 && started.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::sleep(Duration::from_millis(30));
        assert_eq!(
            runs.load(AtomicOrdering::SeqCst),
            3,
            "stopped after its third run"
        );
    }

    #[test]
    fn a_job_may_stop_itself_while_it_runs() {
        let slot: Arc<Mutex<Option<JobHandle>>> = Arc::default();
        let inside = slot.clone();
        let job = register(Kind::Prepare, None, move || {
            // What a log dropped by its own job does: its handle drops on the pool's thread.
            drop(inside.lock().unwrap_or_else(|p| p.into_inner()).take());
            true
        })
        .expect("a job");
        let mut held = slot.lock().unwrap();
        job.wake();
        *held = Some(job);
        drop(held);
        let started = Instant::now();
        while slot.lock().unwrap().is_some() && started.elapsed() < Duration::from_secs(10) {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(
            slot.lock().unwrap().is_none(),
            "the job dropped its own handle"
        );
    }
}
