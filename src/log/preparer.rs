//! The journal's preparer: one thread per journaled log that zeroes and syncs journal space
//! ahead of the writers (format/JOURNAL.md: frames are only written into space already written
//! and synced, so a round's fdatasync carries no file-system metadata).
//!
//! The group-commit leader used to prepare the next chunk itself after its round, so every
//! chunk (up to 1 MiB written and synced) delayed that leader's own acknowledgement; with one
//! writer at a time (a group engine's commands) that was one command in ~32 paying ~1 ms. Now
//! the leader only asks ([`Preparer::request`], when less than a chunk is prepared ahead) and
//! this thread does the work beside the next rounds, through the journal file's second handle.
//!
//! Writers never wait for the preparer itself: a writer that finds too little prepared space
//! waits only while a preparation is *running* (which takes no partition lock, so it always
//! ends), and otherwise prepares inline. A busy, slow or stopped preparer costs speed, never
//! progress, and a preparation that fails is left to the writer that needs the space, which
//! prepares it inline and reports the error.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::Sender;
use std::sync::{Arc, Mutex, Weak};
use std::thread::JoinHandle;

use super::inner::LogInner;
use crate::error::{StoreError, StoreResult};

/// The preparer thread of a journaled log (idle for a log without a journal).
#[derive(Debug, Default)]
pub(crate) struct Preparer {
    /// A request is pending (the thread clears it before it prepares): rounds in between do
    /// not queue more wake-ups.
    requested: AtomicBool,
    /// The thread and its wake-up channel (dropping the sender stops it).
    pub thread: Mutex<Option<(Sender<()>, JoinHandle<()>)>>,
}

impl Preparer {
    /// Starts the thread for `inner`'s journal.
    pub fn start(inner: &Arc<LogInner>) -> StoreResult<()> {
        let (wake_tx, wake_rx) = std::sync::mpsc::channel::<()>();
        let weak: Weak<LogInner> = Arc::downgrade(inner);
        let handle = std::thread::Builder::new()
            .name(format!("strata-prep-{}", inner.name))
            .spawn(move || {
                while wake_rx.recv().is_ok() {
                    let Some(inner) = weak.upgrade() else { return };
                    inner.preparer.requested.store(false, Ordering::Release);
                    inner.prepare_journal_ahead();
                }
            })
            .map_err(|e| StoreError::io(&inner.dir, e))?;
        *inner
            .preparer
            .thread
            .lock()
            .unwrap_or_else(|p| p.into_inner()) = Some((wake_tx, handle));
        Ok(())
    }

    /// Asks the thread to prepare the next chunk (a no-op while a request is pending or with
    /// no thread).
    pub fn request(&self) {
        if self.requested.swap(true, Ordering::AcqRel) {
            return;
        }
        let thread = self.thread.lock().unwrap_or_else(|p| p.into_inner());
        let sent = thread
            .as_ref()
            .is_some_and(|(wake, _)| wake.send(()).is_ok());
        if !sent {
            // No thread (stopped): the next writer that needs space prepares it inline.
            self.requested.store(false, Ordering::Release);
        }
    }
}
