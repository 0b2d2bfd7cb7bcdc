//! Applying commit records to RocksDB behind the command thread.
//!
//! A command is done once its commit record is durable in the payload log
//! (format/GROUP_STATE.md, "Commit protocol and crash argument"): the RocksDB write that follows
//! is not durable anyway (no WAL; replay restores it from the log), so it need not delay the
//! command's answer. The engine hands each synced record to this process-wide thread
//! (`strata-apply`; the hand-over wakes it only once it has parked for good, see
//! [`worker::Lingering`]) and takes the command's planned state as its own at once; the next
//! command plans, writes its payloads and syncs while RocksDB takes the record (a 32 x 1 KiB
//! `append_batch` spent ~20 us of its thread there).
//!
//! The applier owns the database it applies to: the only way to reach it is
//! [`Applier::settle`], which first waits until every record the engine handed over is applied,
//! so no read of RocksDB or of the memory mirrors of its rows sees them behind the engine's
//! state (a read written around the wait cannot compile). Records of one engine are applied in
//! order. Once one fails, the engine's later records are not applied (RocksDB's replay position
//! must not pass the failed one): the failure is reported to the next wait, and the engine then
//! replays the log into RocksDB ([`crate::group::persist::replay`]), which applies every record
//! from the failed one on.
//!
//! Without a thread (the system refused one), records are applied by the caller, as before.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, OnceLock};

use crate::group::worker::{self, lock, Lingering};
use crate::group::GroupError;

/// The work of applying one record (it owns what it needs, the database included).
type ApplyJob = Box<dyn FnOnce() -> Result<(), GroupError> + Send>;

/// One engine's database (`T`: its RocksDB state) and the records handed to the thread for it
/// and not yet applied.
#[derive(Debug)]
pub(crate) struct Applier<T> {
    /// Reached only through [`Applier::settle`] (and by the jobs, in order).
    target: Arc<T>,
    shared: Arc<Shared>,
}

/// What the engine and the thread share. The counters are atomics so that handing over a
/// record and finishing one take no lock (the command thread and the apply thread used to meet
/// on one mutex per record); the locks are taken only by a failure and by a caller that waits.
#[derive(Debug, Default)]
struct Shared {
    /// Jobs handed over and not yet finished (applied, failed or skipped).
    queued: AtomicUsize,
    /// Whether `failure` holds an unrepaired failure (read without its lock by every job).
    failing: AtomicBool,
    /// The first failure not yet repaired ([`Applier::settle`]); later jobs are skipped.
    failure: Mutex<Option<GroupError>>,
    /// Callers inside [`Applier::idle`]: a finishing job signals `idle` only if there is one.
    waiters: AtomicUsize,
    /// Held to wait on or signal `idle`.
    idle_lock: Mutex<()>,
    /// Signalled when `queued` drops to zero while a caller waits.
    idle: Condvar,
}

/// A job with the engine it belongs to.
struct Queued {
    job: ApplyJob,
    shared: Arc<Shared>,
}

impl<T: Send + Sync + 'static> Applier<T> {
    /// An applier of records to `target`.
    pub fn new(target: T) -> Self {
        Self {
            target: Arc::new(target),
            shared: Arc::default(),
        }
    }

    /// Hands `job` to the thread (or runs it here without one); it is given the target.
    pub fn submit(&self, job: impl FnOnce(&T) -> Result<(), GroupError> + Send + 'static) {
        self.shared.queued.fetch_add(1, Ordering::SeqCst);
        let target = Arc::clone(&self.target);
        let queued = Queued {
            job: Box::new(move || job(&target)),
            shared: Arc::clone(&self.shared),
        };
        match thread() {
            Some(queue) => {
                if let Err(unsent) = queue.push(queued) {
                    tracing::warn!("the apply thread is gone; commit records are applied inline");
                    unsent.run();
                }
            }
            None => queued.run(),
        }
    }

    /// The target, once every job handed over is finished. If one failed, first calls `repair`
    /// with it (which must bring RocksDB up to the engine's log) and clears the failure once it
    /// succeeds; the failure stays (and the later jobs stay skipped) while `repair` fails.
    pub fn settle(
        &self,
        repair: impl FnOnce(&T) -> Result<(), GroupError>,
    ) -> Result<&T, GroupError> {
        self.idle();
        // Set before its job was counted finished, so `idle` returning makes it visible.
        if !self.shared.failing.load(Ordering::SeqCst) {
            return Ok(&self.target);
        }
        let failed = match &*lock(&self.shared.failure) {
            Some(e) => e.to_string(),
            None => return Ok(&self.target),
        };
        tracing::warn!(error = %failed, "applying a commit record failed; replaying the log into RocksDB");
        repair(&self.target)?;
        *lock(&self.shared.failure) = None;
        self.shared.failing.store(false, Ordering::SeqCst);
        Ok(&self.target)
    }

    /// Whether a job failed and no repair has succeeded since (without waiting for the rest).
    pub fn has_failed(&self) -> bool {
        self.shared.failing.load(Ordering::SeqCst)
    }
}

impl<T> Applier<T> {
    /// Waits until no job is queued.
    fn idle(&self) {
        let shared = &self.shared;
        if shared.queued.load(Ordering::SeqCst) == 0 {
            return;
        }
        // The thread may be lingering on its timer with these jobs queued.
        if let Some(queue) = thread() {
            queue.wake();
        }
        // Counted before `queued` is read again: a job that takes `queued` to zero after that
        // read sees the waiter and signals; one that did so before it is seen here.
        shared.waiters.fetch_add(1, Ordering::SeqCst);
        let mut guard = lock(&shared.idle_lock);
        while shared.queued.load(Ordering::SeqCst) > 0 {
            guard = shared.idle.wait(guard).unwrap_or_else(|p| p.into_inner());
        }
        drop(guard);
        shared.waiters.fetch_sub(1, Ordering::SeqCst);
    }
}

impl<T> Drop for Applier<T> {
    /// Waits for the engine's jobs: they hold its database, which must close after them.
    fn drop(&mut self) {
        self.idle();
    }
}

impl Queued {
    /// Runs the job unless an earlier one of its engine failed, then counts it finished (the
    /// job, and the database it holds, are dropped first). A job that panics counts as failed:
    /// the thread goes on, and no one waits for ever.
    fn run(self) {
        let Queued { job, shared } = self;
        let outcome = if shared.failing.load(Ordering::SeqCst) {
            drop(job);
            Ok(())
        } else {
            std::panic::catch_unwind(AssertUnwindSafe(job)).unwrap_or_else(|_| {
                Err(GroupError::Corrupt(
                    "applying a commit record panicked".into(),
                ))
            })
        };
        if let Err(e) = outcome {
            lock(&shared.failure).get_or_insert(e);
            shared.failing.store(true, Ordering::SeqCst);
        }
        let before = shared.queued.fetch_sub(1, Ordering::SeqCst);
        debug_assert!(before > 0, "a job finished that was never counted");
        if before == 1 && shared.waiters.load(Ordering::SeqCst) > 0 {
            // Taking the lock orders this signal after the waiter's check of `queued`.
            drop(lock(&shared.idle_lock));
            shared.idle.notify_all();
        }
    }
}

/// The apply thread's queue, started on first use; `None` if the thread could not start.
/// Handing a job over does not wake the thread while it lingers ([`Lingering`]): a command's
/// record is applied within [`worker::LINGER`], or at once when someone waits for it.
fn thread() -> Option<&'static Lingering<Queued>> {
    static THREAD: OnceLock<Option<Arc<Lingering<Queued>>>> = OnceLock::new();
    THREAD
        .get_or_init(|| {
            worker::start_lingering(
                "strata-apply",
                "commit records are applied inline",
                Queued::run,
            )
        })
        .as_deref()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn jobs_run_in_order_and_settle_waits_for_them_all() {
        let applier = Applier::new(());
        let seen = Arc::new(Mutex::new(Vec::new()));
        for i in 0..100 {
            let seen = Arc::clone(&seen);
            applier.submit(move |_| {
                lock(&seen).push(i);
                Ok(())
            });
        }
        applier.settle(|_| Ok(())).expect("no failure");
        assert_eq!(*lock(&seen), (0..100).collect::<Vec<_>>());
    }

    #[test]
    fn a_wait_that_races_the_last_job_is_never_lost() {
        // Each settle meets its one job about when the job finishes: a signal lost between
        // the job's count and the waiter's would hang this loop.
        let applier = Applier::new(());
        let ran = Arc::new(AtomicUsize::new(0));
        for i in 0..2000 {
            let counter = Arc::clone(&ran);
            applier.submit(move |_| {
                if i % 2 == 0 {
                    std::hint::spin_loop();
                }
                counter.fetch_add(1, Ordering::SeqCst);
                Ok(())
            });
            applier.settle(|_| Ok(())).expect("no failure");
            assert_eq!(ran.load(Ordering::SeqCst), i + 1);
        }
    }

    #[test]
    fn a_failure_skips_the_later_jobs_until_a_repair_succeeds() {
        let applier = Applier::new(());
        let ran = Arc::new(AtomicUsize::new(0));
        for i in 0..10 {
            let ran = Arc::clone(&ran);
            applier.submit(move |_| {
                ran.fetch_add(1, Ordering::SeqCst);
                if i == 3 {
                    return Err(GroupError::Corrupt("job 3".into()));
                }
                Ok(())
            });
        }
        let repaired = Arc::new(AtomicUsize::new(0));
        let failing = applier.settle(|_| Err(GroupError::Corrupt("repair failed".into())));
        assert!(failing.is_err());
        assert!(applier.has_failed(), "a failed repair keeps the failure");
        assert_eq!(
            ran.load(Ordering::SeqCst),
            4,
            "jobs after the failed one are skipped"
        );
        let counted = Arc::clone(&repaired);
        applier
            .settle(|_| {
                counted.fetch_add(1, Ordering::SeqCst);
                Ok(())
            })
            .expect("repaired");
        assert_eq!(repaired.load(Ordering::SeqCst), 1);
        assert!(!applier.has_failed());
        let ran_after = Arc::clone(&ran);
        applier.submit(move |_| {
            ran_after.fetch_add(1, Ordering::SeqCst);
            Ok(())
        });
        applier
            .settle(|_| unreachable!("nothing failed"))
            .expect("no failure");
        assert_eq!(ran.load(Ordering::SeqCst), 5);
    }

    #[test]
    fn a_panicking_job_counts_as_failed_and_nothing_hangs() {
        let applier = Applier::new(());
        applier.submit(|_| panic!("a job panics"));
        let ran = Arc::new(AtomicUsize::new(0));
        let counted = Arc::clone(&ran);
        applier.submit(move |_| {
            counted.fetch_add(1, Ordering::SeqCst);
            Ok(())
        });
        let failing = applier.settle(|_| Err(GroupError::Corrupt("still broken".into())));
        assert!(failing.is_err(), "the panic is a failure");
        assert_eq!(
            ran.load(Ordering::SeqCst),
            0,
            "the job after it was skipped"
        );
        applier.settle(|_| Ok(())).expect("repaired");
        let counted = Arc::clone(&ran);
        applier.submit(move |_| {
            counted.fetch_add(1, Ordering::SeqCst);
            Ok(())
        });
        applier
            .settle(|_| Ok(()))
            .expect("the thread still runs jobs");
        assert_eq!(ran.load(Ordering::SeqCst), 1);
    }
}
