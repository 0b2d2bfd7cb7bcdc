//! The store: one directory, one opener at a time (LOCK), a MANIFEST of logs, and the logs.

pub mod lock;
pub mod manifest;

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::error::{StoreError, StoreResult};
use crate::log::{Log, LogOptions};
pub use lock::DirLock;
use manifest::{validate_log_name, LogEntry, Manifest};

struct StoreInner {
    root: PathBuf,
    lock: Arc<DirLock>,
    manifest: Mutex<Manifest>,
    logs: Mutex<HashMap<String, Log>>,
    shared: Mutex<HashMap<TypeId, Arc<dyn Any + Send + Sync>>>,
}

/// An open store directory. Cheap to clone.
#[derive(Clone)]
pub struct Store {
    inner: Arc<StoreInner>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("root", &self.inner.root)
            .finish()
    }
}

impl Store {
    /// Opens the store at `root`, creating the directory if needed.
    ///
    /// Fails with [`StoreError::Locked`] while another opener (in this process or another one)
    /// holds the store.
    pub fn open(root: impl AsRef<Path>) -> StoreResult<Self> {
        let root = root.as_ref().to_path_buf();
        crate::fs::create_dir_durable(&root.join("logs"))?;
        let lock = DirLock::acquire(&root)?;
        let manifest = Manifest::load(&root)?;
        if !root.join("MANIFEST").exists() {
            manifest.store(&root)?;
        }
        Ok(Store {
            inner: Arc::new(StoreInner {
                root,
                lock: Arc::new(lock),
                manifest: Mutex::new(manifest),
                logs: Mutex::new(HashMap::new()),
                shared: Mutex::new(HashMap::new()),
            }),
        })
    }

    /// Root directory of the store.
    pub fn root(&self) -> &Path {
        &self.inner.root
    }

    /// The logs recorded in the MANIFEST.
    pub fn logs(&self) -> Vec<LogEntry> {
        self.inner
            .manifest
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .logs
            .clone()
    }

    /// Opens log `name`, creating it with `partitions` partitions if the store does not hold it.
    ///
    /// Opening a log that is already open returns the same log (its options are those of the
    /// first opener). An existing log with another partition count is an error.
    pub fn open_log(&self, name: &str, partitions: u32, options: LogOptions) -> StoreResult<Log> {
        validate_log_name(name).map_err(StoreError::Invalid)?;
        options.validate().map_err(StoreError::Invalid)?;
        let mut logs = self.inner.logs.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(log) = logs.get(name).filter(|l| !l.is_closed()) {
            if log.partition_count() != partitions {
                return Err(StoreError::PartitionCountMismatch {
                    name: name.into(),
                    existing: log.partition_count(),
                    requested: partitions,
                });
            }
            return Ok(log.clone());
        }
        {
            let mut manifest = self
                .inner
                .manifest
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            match manifest.get(name) {
                Some(entry) if entry.partitions != partitions => {
                    return Err(StoreError::PartitionCountMismatch {
                        name: name.into(),
                        existing: entry.partitions,
                        requested: partitions,
                    })
                }
                Some(_) => {}
                None => {
                    // Existing entries were checked when the MANIFEST was decoded.
                    if partitions == 0 || partitions > i32::MAX as u32 {
                        return Err(StoreError::Invalid(
                            "a log needs at least one partition".into(),
                        ));
                    }
                    let mut next = manifest.clone();
                    next.logs.push(LogEntry {
                        name: name.into(),
                        partitions,
                    });
                    next.store(&self.inner.root)?;
                    *manifest = next;
                }
            }
        }
        let dir = self.inner.root.join("logs").join(name);
        let log = Log::open(name, &dir, partitions, options, self.inner.lock.clone())?;
        logs.insert(name.to_string(), log.clone());
        Ok(log)
    }

    /// The one value of type `T` this store holds, made by `init` on first use.
    ///
    /// Layers built on the store (the coordination transport's epoch state, for one) use it so
    /// that every handle opened on the same store shares one instance.
    pub fn shared<T: Any + Send + Sync>(
        &self,
        init: impl FnOnce() -> StoreResult<T>,
    ) -> StoreResult<Arc<T>> {
        let mut shared = self.inner.shared.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(value) = shared.get(&TypeId::of::<T>()) {
            if let Ok(value) = value.clone().downcast::<T>() {
                return Ok(value);
            }
        }
        let value = Arc::new(init()?);
        shared.insert(TypeId::of::<T>(), value.clone());
        Ok(value)
    }

    /// Closes every open log of this store.
    pub fn close_blocking(&self) -> StoreResult<()> {
        let logs: Vec<Log> = self
            .inner
            .logs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain()
            .map(|(_, l)| l)
            .collect();
        let mut result = Ok(());
        for log in logs {
            result = result.and(log.close_blocking());
        }
        result
    }
}
