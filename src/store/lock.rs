//! The advisory lock on `<root>/LOCK` that keeps a store to one opener at a time.

use std::path::Path;

use crate::error::{IoContext, StoreError, StoreResult};
use crate::fs::{FileRef, FileSystem, OpenMode};

/// A held lock on a store directory; released when dropped.
#[derive(Debug)]
pub struct DirLock {
    _file: FileRef,
}

/// How long a busy lock is retried before the open fails with `Locked`.
///
/// An flock belongs to the open file description, so a child process forked at the instant a
/// store is dropped briefly shares the closing descriptor until its `exec`. A store
/// reopened right after being dropped could then see a lock nobody really holds any more. A
/// short retry absorbs that; a real second opener still fails, only this much later.
pub const LOCK_RETRY: std::time::Duration = std::time::Duration::from_millis(250);

impl DirLock {
    /// Takes the lock of the store at `root`, retrying a busy lock for [`LOCK_RETRY`].
    ///
    /// Fails with [`StoreError::Locked`] while another opener holds it: another process, or
    /// another open of the same directory in this process.
    pub fn acquire(fs: &dyn FileSystem, root: &Path) -> StoreResult<Self> {
        let path = root.join("LOCK");
        let file = match fs.open(&path, OpenMode::ReadWrite) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                match fs.open(&path, OpenMode::CreateNew) {
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                        fs.open(&path, OpenMode::ReadWrite)
                    }
                    other => other,
                }
            }
            other => other,
        }
        .at(&path)?;
        let deadline = std::time::Instant::now() + LOCK_RETRY;
        loop {
            match file.try_lock().at(&path)? {
                true => return Ok(DirLock { _file: file }),
                false if std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                false => return Err(StoreError::Locked { path }),
            }
        }
    }
}
