//! A store in a fresh temporary directory that never syncs and is removed when dropped: the
//! fast fixture for test suites (one per test). Its data survives a process crash (the page
//! cache keeps it) but not a power cut.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{IoContext, StoreResult};
use crate::fs::{NoSyncFs, RealFs};

use super::{Store, StoreOptions};

/// A [`Store`] in its own temporary directory, with every sync skipped; closed and deleted on
/// drop. Derefs to the store.
#[derive(Debug)]
pub struct TemporaryStore {
    store: Store,
    dir: PathBuf,
}

static NEXT: AtomicU64 = AtomicU64::new(0);

impl TemporaryStore {
    /// Opens a fresh store in a new directory under [`std::env::temp_dir`].
    pub fn new() -> StoreResult<Self> {
        Self::new_in(&std::env::temp_dir())
    }

    /// Opens a fresh store in a new directory under `parent`.
    pub fn new_in(parent: &Path) -> StoreResult<Self> {
        let dir = loop {
            let dir = parent.join(format!(
                "strata-tmp-{}-{}-{}",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed),
                crate::now_ms()
            ));
            match std::fs::create_dir(&dir) {
                Ok(()) => break dir,
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
                Err(e) => return Err(e).at(&dir),
            }
        };
        let options = StoreOptions::default().with_fs(NoSyncFs::shared(RealFs::shared()));
        let store = Store::open_with(&dir, options)?;
        Ok(Self { store, dir })
    }

    /// The store's directory.
    pub fn path(&self) -> &Path {
        &self.dir
    }
}

impl std::ops::Deref for TemporaryStore {
    type Target = Store;

    fn deref(&self) -> &Store {
        &self.store
    }
}

impl Drop for TemporaryStore {
    fn drop(&mut self) {
        if let Err(e) = self.store.close_blocking() {
            tracing::warn!(dir = %self.dir.display(), error = %e, "closing a temporary store failed");
        }
        if let Err(e) = std::fs::remove_dir_all(&self.dir) {
            tracing::warn!(dir = %self.dir.display(), error = %e, "removing a temporary store failed");
        }
    }
}
