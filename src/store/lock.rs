//! The advisory lock on `<root>/LOCK` that keeps a store to one opener at a time.

use std::fs::{File, OpenOptions};
use std::path::Path;

use crate::error::{IoContext, StoreError, StoreResult};

/// A held lock on a store directory; released when dropped.
#[derive(Debug)]
pub struct DirLock {
    _file: File,
}

/// How long a busy lock is retried before the open fails with `Locked`.
///
/// An flock belongs to the open file description, so a child process forked at the instant a
/// store is dropped briefly shares the closing descriptor until its `exec` closes it. A store
/// reopened right after being dropped could then see a lock nobody really holds any more. A
/// short retry absorbs that; a real second opener still fails, only this much later.
pub const LOCK_RETRY: std::time::Duration = std::time::Duration::from_millis(250);

impl DirLock {
    /// Takes the lock of the store at `root`, retrying a busy lock for [`LOCK_RETRY`].
    ///
    /// Fails with [`StoreError::Locked`] while another opener holds it: another process, or
    /// another open of the same directory in this process.
    pub fn acquire(root: &Path) -> StoreResult<Self> {
        let path = root.join("LOCK");
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .at(&path)?;
        let deadline = std::time::Instant::now() + LOCK_RETRY;
        loop {
            match file.try_lock() {
                Ok(()) => return Ok(DirLock { _file: file }),
                Err(std::fs::TryLockError::WouldBlock) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                Err(std::fs::TryLockError::WouldBlock) => return Err(StoreError::Locked { path }),
                Err(std::fs::TryLockError::Error(e)) => return Err(e).at(&path),
            }
        }
    }
}
