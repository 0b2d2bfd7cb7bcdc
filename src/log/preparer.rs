//! The journal's preparer: a job of each journaled log, run by the process's `strata-prep-`
//! worker threads ([`super::workers`]), that zeroes and syncs journal space ahead of the writers (format/JOURNAL.md: frames are only written into space already written
//! and synced, so a round's fdatasync carries no file-system metadata).
//!
//! The group-commit leader used to prepare the next chunk itself after its round, so every
//! chunk (up to 1 MiB written and synced) delayed that leader's own acknowledgement; with one
//! writer at a time (a group engine's commands) that was one command in ~32 paying ~1 ms. Now
//! the leader only asks ([`Preparer::request`], when less than a chunk is prepared ahead) and
//! a worker does the work beside the next rounds, through the journal file's second handle.
//!
//! Writers never wait for the preparer itself: a writer that finds too little prepared space
//! waits only while a preparation is *running* (which takes no partition lock, so it always
//! ends), and otherwise prepares inline. A busy, slow or stopped preparer costs speed, never
//! progress, and a preparation that fails is left to the writer that needs the space, which
//! prepares it inline and reports the error.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use super::inner::LogInner;
use super::workers::{JobHandle, Kind};
use crate::error::StoreResult;

/// The preparer job of a journaled log (none for a log without a journal).
#[derive(Debug, Default)]
pub(crate) struct Preparer {
    /// A request is pending (the job clears it before it prepares): rounds in between do not
    /// queue more runs.
    requested: AtomicBool,
    /// The registered job (stopped when taken and dropped).
    pub job: Mutex<Option<JobHandle>>,
}

impl Preparer {
    /// Registers the job for `inner`'s journal.
    pub fn start(inner: &Arc<LogInner>) -> StoreResult<()> {
        inner.start_job(
            (Kind::Prepare, None),
            |inner| &inner.preparer.job,
            |inner| {
                inner.preparer.requested.store(false, Ordering::Release);
                inner.prepare_journal_ahead();
                true
            },
        )
    }

    /// Asks a worker to prepare the next chunk (a no-op while a request is pending or once
    /// the job is stopped).
    pub fn request(&self) {
        if self.requested.swap(true, Ordering::AcqRel) {
            return;
        }
        let job = self.job.lock().unwrap_or_else(|p| p.into_inner());
        if !job.as_ref().is_some_and(|j| j.wake()) {
            // Stopped: the next writer that needs space prepares it inline.
            self.requested.store(false, Ordering::Release);
        }
    }
}
