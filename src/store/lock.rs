//! The advisory lock on `<root>/LOCK` that keeps a store to one opener at a time.

use std::fs::{File, OpenOptions};
use std::path::Path;

use crate::error::{IoContext, StoreError, StoreResult};

/// A held lock on a store directory; released when dropped.
#[derive(Debug)]
pub struct DirLock {
    _file: File,
}

impl DirLock {
    /// Takes the lock of the store at `root` without waiting.
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
        match file.try_lock() {
            Ok(()) => Ok(DirLock { _file: file }),
            Err(std::fs::TryLockError::WouldBlock) => Err(StoreError::Locked { path }),
            Err(std::fs::TryLockError::Error(e)) => Err(e).at(&path),
        }
    }
}
