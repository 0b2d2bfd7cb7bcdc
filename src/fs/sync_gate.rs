//! One sync at a time per file, and a failed sync remembered until one succeeds.
//!
//! A writer that syncs a file without holding the lock that orders its writes (a segment's
//! checkpoint, a journal round) may race another sync of the same file (a roll, a journal file
//! switch). The kernel may report a lost write-back to one fdatasync only, so a second sync that
//! returns success after the first failed proves nothing. Every sync of such a file therefore
//! passes through its [`SyncGate`]: syncs take turns, and a failure stays recorded, refusing
//! later syncs, until the writer heals (writes the unsynced bytes again and syncs them).

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use crate::error::{StoreError, StoreResult};

/// The sync state of one file (held while a sync runs).
#[derive(Debug, Default)]
pub struct GateState {
    /// Why the last sync failed, until one succeeds.
    failed: Option<String>,
    /// Mirrors `failed.is_some()`, readable without waiting for a running sync.
    flag: Arc<AtomicBool>,
    /// The file's content is final (a sealed segment): late syncs have nothing left to do.
    pub sealed: bool,
}

impl GateState {
    /// Why the last sync failed, if it is not healed yet.
    pub fn failure(&self) -> Option<&str> {
        self.failed.as_deref()
    }

    /// Records a failed sync.
    pub fn fail(&mut self, reason: String) {
        self.failed = Some(reason);
        self.flag.store(true, Ordering::Release);
    }

    /// Records a successful sync of every written byte.
    pub fn clear(&mut self) {
        self.failed = None;
        self.flag.store(false, Ordering::Release);
    }

    /// Fails with an I/O error naming `path` while an earlier failure is unhealed.
    pub fn refuse_if_failed(&self, path: &Path) -> StoreResult<()> {
        match &self.failed {
            None => Ok(()),
            Some(reason) => Err(StoreError::io(
                path,
                std::io::Error::other(format!(
                    "an earlier sync failed and its bytes were not written again yet: {reason}"
                )),
            )),
        }
    }
}

/// Serializes the syncs of one file (see the module doc).
#[derive(Debug, Clone)]
pub struct SyncGate {
    state: Arc<Mutex<GateState>>,
    flag: Arc<AtomicBool>,
}

impl Default for SyncGate {
    fn default() -> Self {
        let state = GateState::default();
        Self {
            flag: state.flag.clone(),
            state: Arc::new(Mutex::new(state)),
        }
    }
}

impl SyncGate {
    /// True when `other` is this gate (a clone of it): the same file's syncs.
    pub fn is(&self, other: &SyncGate) -> bool {
        Arc::ptr_eq(&self.state, &other.state)
    }

    /// Holds the gate (waits for a running sync).
    pub fn lock(&self) -> MutexGuard<'_, GateState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// True while a failed sync is unhealed; never waits for a running sync.
    pub fn has_failed(&self) -> bool {
        self.flag.load(Ordering::Acquire)
    }
}
