//! One sync at a time per file, and a failed sync remembered until one succeeds.
//!
//! A writer that syncs a file without holding the lock that orders its writes (a segment's
//! checkpoint, a journal round) may race another sync of the same file (a roll, a journal file
//! switch). The kernel may report a lost write-back to one fdatasync only, so a second sync that
//! returns success after the first failed proves nothing. Every sync of such a file therefore
//! passes through its [`SyncGate`]: syncs take turns, and a failure stays recorded, refusing
//! later syncs, until the writer heals (writes the unsynced bytes again and syncs them).

use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use super::FileHandle;
use crate::error::{IoContext, StoreError, StoreResult};

/// The sync state of one file.
#[derive(Debug, Default)]
pub struct GateState {
    /// Why the last sync failed, until one succeeds.
    pub failed: Option<String>,
    /// The file's content is final (a sealed segment): late syncs have nothing left to do.
    pub sealed: bool,
}

/// Serializes the syncs of one file (see the module doc).
#[derive(Debug, Default, Clone)]
pub struct SyncGate(Arc<Mutex<GateState>>);

impl SyncGate {
    /// Holds the gate.
    pub fn lock(&self) -> MutexGuard<'_, GateState> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// fdatasyncs `file` (at `path`) in turn; refuses while an earlier failure is unhealed, and
    /// records a new one.
    pub fn sync(&self, file: &dyn FileHandle, path: &Path) -> StoreResult<()> {
        let mut gate = self.lock();
        refuse_if_failed(&gate, path)?;
        file.sync_data().at(path).inspect_err(|e| {
            gate.failed = Some(e.to_string());
        })
    }
}

/// The error for a sync refused because an earlier one failed and was not healed.
pub fn refuse_if_failed(gate: &GateState, path: &Path) -> StoreResult<()> {
    match &gate.failed {
        None => Ok(()),
        Some(reason) => Err(StoreError::io(
            path,
            std::io::Error::other(format!(
                "an earlier sync failed and its bytes were not written again yet: {reason}"
            )),
        )),
    }
}
