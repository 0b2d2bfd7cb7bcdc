//! Prefaulting a writable mapping ahead of its writer, on one background thread.
//!
//! An append into a fresh page of a mapped segment takes a write fault: a page-cache page
//! allocated and zeroed, the file system's `page_mkwrite`, a page-table entry. Taken by the
//! appender, that is several microseconds per 4 KiB inside the partition's lock, which the
//! group-commit leader needs too to publish its round (64 writers of 1 KiB: the leader waited
//! 20 us per round for that lock, against 3-5 us at 100 B). A writer instead asks for the range
//! ahead of it ([`prefault_later`]) and this process-wide thread (`strata-prefault`, started on
//! first use) takes those faults beside the writers.
//!
//! Nothing depends on it: a job changes no byte, the writer faults in whatever is not yet
//! mapped, the queue is bounded ([`QUEUE`] jobs; a job that does not fit is dropped), and a
//! thread that cannot be started only costs the speed it would have gained.

use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::OnceLock;

use super::MapRef;

/// Jobs waiting at most (each is a writer's next chunk; more pending means the thread is behind
/// and a later job's range would be written before it is reached).
pub const QUEUE: usize = 16;

/// One range to prefault or read ahead.
struct Job {
    map: MapRef,
    start: usize,
    end: usize,
    /// [`WritableMap::read_ahead`](super::WritableMap::read_ahead) instead of a prefault.
    read_only: bool,
}

/// The thread's queue, or `None` when it could not be started.
fn queue() -> Option<&'static SyncSender<Job>> {
    static QUEUE_TX: OnceLock<Option<SyncSender<Job>>> = OnceLock::new();
    QUEUE_TX.get_or_init(start).as_ref()
}

/// Starts the thread; `None` if the system refuses a thread.
fn start() -> Option<SyncSender<Job>> {
    let (tx, rx) = sync_channel::<Job>(QUEUE);
    let spawned = std::thread::Builder::new()
        .name("strata-prefault".into())
        .spawn(move || {
            crate::background::lower_current_thread(crate::background::AHEAD_OF_CALLERS);
            while let Ok(job) = rx.recv() {
                let done = match job.read_only {
                    true => job.map.read_ahead(job.start, job.end),
                    false => job.map.prefault(job.start, job.end),
                };
                if let Err(e) = done {
                    tracing::debug!(error = %e, "prefaulting a mapping failed (a hint only)");
                }
            }
        });
    match spawned {
        Ok(_) => Some(tx),
        Err(e) => {
            tracing::warn!(error = %e, "no prefault thread: writers fault their own pages");
            None
        }
    }
}

/// Asks the background thread to prefault `[start, end)` of `map` (which the file must already
/// cover). Never blocks: with the queue full, the job is dropped.
pub fn prefault_later(map: MapRef, start: usize, end: usize) {
    send(Job {
        map,
        start,
        end,
        read_only: false,
    });
}

/// Asks the background thread to read `[start, end)` of `map`'s file into the page cache
/// ([`WritableMap::read_ahead`](super::WritableMap::read_ahead)). Never blocks, like
/// [`prefault_later`].
pub fn read_ahead_later(map: MapRef, start: usize, end: usize) {
    send(Job {
        map,
        start,
        end,
        read_only: true,
    });
}

/// Queues `job`, or drops it when the queue is full.
fn send(job: Job) {
    let Some(tx) = queue() else { return };
    match tx.try_send(job) {
        Ok(()) | Err(TrySendError::Full(_)) => {}
        Err(TrySendError::Disconnected(_)) => {
            tracing::warn!("the prefault thread stopped: writers fault their own pages");
        }
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use std::time::{Duration, Instant};

    /// The nice value of this process's thread named `name`, if there is one (field 19 of
    /// `/proc/self/task/<tid>/stat`; the fields after the name's closing parenthesis).
    fn nice_of(name: &str) -> Option<i32> {
        let tasks = std::fs::read_dir("/proc/self/task").ok()?;
        tasks.flatten().find_map(|task| {
            let stat = std::fs::read_to_string(task.path().join("stat")).ok()?;
            let (head, fields) = stat.rsplit_once(')')?;
            if !head.ends_with(&format!("({name}")) {
                return None;
            }
            fields.split_whitespace().nth(16)?.parse().ok()
        })
    }

    #[test]
    fn the_prefault_thread_runs_at_the_lowest_priority() {
        assert!(super::queue().is_some(), "a prefault thread");
        let deadline = Instant::now() + Duration::from_secs(10);
        while nice_of("strata-prefault") != Some(crate::background::AHEAD_OF_CALLERS) {
            assert!(
                Instant::now() < deadline,
                "the thread kept nice {:?}",
                nice_of("strata-prefault")
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}
