//! Process-wide helper threads of the group engine (the digest helper, the apply thread): each
//! is started on first use and fed through a queue (which every thread shares); a process that
//! cannot start one does the work in the caller instead.
//!
//! The digest helper is fed through a channel: each job is wanted at once, so each send wakes
//! it. The apply thread is fed through a [`Lingering`] queue: its jobs are wanted only by a
//! later wait ([`Lingering::wake`]), so a sender wakes it only when it has parked for good,
//! and while work keeps coming it lingers on a timer instead and takes what came meanwhile in
//! one go. Waking a parked thread was ~6% of a command thread's CPU (a futex call and an
//! inter-processor interrupt on every `append_batch`).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::thread::Thread;
use std::time::Duration;

/// Starts thread `name`, which runs `serve` on the receiving end of the returned sender (it
/// should return once every sender is gone); `None` (with a warning that `fallback` happens
/// instead) if the system refuses a thread.
pub(crate) fn start<T: Send + 'static>(
    name: &str,
    fallback: &str,
    serve: impl FnOnce(Receiver<T>) + Send + 'static,
) -> Option<Sender<T>> {
    let (send, receive) = channel::<T>();
    spawn(name, fallback, move || serve(receive)).map(|_| send)
}

/// Spawns thread `name` running `body`, or warns that `fallback` happens instead.
fn spawn(name: &str, fallback: &str, body: impl FnOnce() + Send + 'static) -> Option<Thread> {
    let started = std::thread::Builder::new().name(name.into()).spawn(body);
    match started {
        Ok(handle) => Some(handle.thread().clone()),
        Err(e) => {
            tracing::warn!(error = %e, thread = name, "no {name} thread; {fallback}");
            None
        }
    }
}

/// How long a [`Lingering`] thread waits on its timer after work before it looks again (and,
/// if nothing came, parks until a sender wakes it).
pub(crate) const LINGER: Duration = Duration::from_micros(500);

/// Jobs a [`Lingering`] queue holds before a sender wakes its thread anyway (a bound on the
/// work a later wait finds queued).
pub(crate) const LINGER_JOBS: usize = 8;

/// A helper thread's queue that senders fill without waking it while it lingers.
#[derive(Debug)]
pub(crate) struct Lingering<T> {
    /// Jobs not yet taken by the thread.
    jobs: Mutex<Vec<T>>,
    /// Set while the thread parks with no timeout: a job queued then must wake it.
    parked: AtomicBool,
    /// Set if the thread ended (a job panicked through its runner): senders run jobs inline.
    gone: AtomicBool,
    /// The thread (set before the queue is handed to any sender).
    thread: OnceLock<Thread>,
}

/// Starts thread `name`, which runs `run` on each job of the returned queue, in order; `None`
/// (with a warning that `fallback` happens instead) if the system refuses a thread.
pub(crate) fn start_lingering<T: Send + 'static>(
    name: &str,
    fallback: &str,
    run: impl FnMut(T) + Send + 'static,
) -> Option<Arc<Lingering<T>>> {
    let queue = Arc::new(Lingering {
        jobs: Mutex::new(Vec::new()),
        parked: AtomicBool::new(false),
        gone: AtomicBool::new(false),
        thread: OnceLock::new(),
    });
    let served = Arc::clone(&queue);
    let thread = spawn(name, fallback, move || served.serve(run))?;
    queue.thread.get_or_init(|| thread);
    Some(queue)
}

impl<T> Lingering<T> {
    /// Queues `job`, waking the thread if it parked for good or the queue is long; gives the
    /// job back if the thread has ended. (The thread sets `parked` before it last looks at the
    /// queue, so either it sees this job there, or this side sees `parked` set: SeqCst on both,
    /// the push and the look under one mutex.)
    pub fn push(&self, job: T) -> Result<(), T> {
        let queued = {
            let mut jobs = lock(&self.jobs);
            if self.gone.load(Ordering::SeqCst) {
                return Err(job);
            }
            jobs.push(job);
            jobs.len()
        };
        if queued >= LINGER_JOBS || self.parked.load(Ordering::SeqCst) {
            self.wake();
        }
        Ok(())
    }

    /// Makes the thread take the queued jobs now rather than when its timer fires (a caller
    /// about to wait for them calls it).
    pub fn wake(&self) {
        if let Some(thread) = self.thread.get() {
            thread.unpark();
        }
    }

    /// The thread's loop: runs the queued jobs, lingers [`LINGER`], and parks until woken
    /// once a linger found nothing new.
    fn serve(&self, mut run: impl FnMut(T)) {
        let _gone = Gone(self);
        // The thread's side of the queue: swapped with the senders' side, so that each side
        // keeps the other's capacity (a push into an empty vector would allocate).
        let mut taken = Vec::new();
        let mut lingered = false;
        loop {
            std::mem::swap(&mut *lock(&self.jobs), &mut taken);
            if !taken.is_empty() {
                taken.drain(..).for_each(&mut run);
                lingered = false;
                continue;
            }
            if !lingered {
                std::thread::park_timeout(LINGER);
                lingered = true;
                continue;
            }
            self.parked.store(true, Ordering::SeqCst);
            // A job queued before the flag was set is seen here; one after it, wakes us.
            if lock(&self.jobs).is_empty() {
                std::thread::park();
            }
            self.parked.store(false, Ordering::SeqCst);
            lingered = false;
        }
    }
}

/// Marks its queue's thread ended when dropped (by a panic unwinding the thread: its runner
/// should catch its jobs' own): the jobs still queued are dropped unrun, as a channel drops
/// its messages with its receiver, and later ones run in their senders.
struct Gone<'a, T>(&'a Lingering<T>);

impl<T> Drop for Gone<'_, T> {
    fn drop(&mut self) {
        let mut jobs = lock(&self.0.jobs);
        self.0.gone.store(true, Ordering::SeqCst);
        let left = std::mem::take(&mut *jobs);
        drop(jobs);
        drop(left);
    }
}

/// Locks `m`, taking over a lock poisoned by a panic elsewhere (the data is a plain value).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc::RecvTimeoutError;

    /// A queue whose thread reports each job's number on `done`.
    fn numbered() -> (Arc<Lingering<usize>>, Receiver<usize>) {
        let (done, seen) = channel();
        let queue = start_lingering("lingering-test", "inline", move |n| {
            let _ = done.send(n);
        })
        .expect("a thread");
        (queue, seen)
    }

    #[test]
    fn a_job_queued_as_the_thread_parks_is_never_left_behind() {
        // Pauses around `LINGER` make the thread park for good about when the next job comes:
        // a job queued between its last look and its park would wait for ever here (the
        // sender never calls `wake`).
        let (queue, seen) = numbered();
        for n in 0..400 {
            std::thread::sleep(LINGER / 8 * (n % 24) as u32);
            assert!(queue.push(n).is_ok());
            match seen.recv_timeout(Duration::from_secs(10)) {
                Ok(got) => assert_eq!(got, n),
                Err(RecvTimeoutError::Timeout) => panic!("job {n} was never run"),
                Err(e) => panic!("the thread is gone: {e}"),
            }
        }
    }

    #[test]
    fn a_burst_runs_in_order_and_a_wake_takes_it_at_once() {
        let (queue, seen) = numbered();
        // Parked for good by now (nothing came for two lingers).
        std::thread::sleep(LINGER * 4);
        for n in 0..LINGER_JOBS * 3 + 1 {
            assert!(queue.push(n).is_ok());
        }
        queue.wake();
        let got: Vec<usize> = (0..LINGER_JOBS * 3 + 1)
            .map(|_| seen.recv_timeout(Duration::from_secs(10)).expect("run"))
            .collect();
        assert_eq!(got, (0..LINGER_JOBS * 3 + 1).collect::<Vec<_>>());
    }
}
