//! The store: one directory, one opener at a time (LOCK), a MANIFEST of logs, and the logs.

pub mod backup;
pub mod lock;
pub mod manifest;
mod recorded_options;
mod temporary;

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use crate::error::{IoContext, StoreError, StoreResult};
use crate::fs::{create_dir_durable, BoundedFs, EntryKind, FileSystem, Fs, RealFs};
use crate::log::{Log, LogOptions, LogOwner, LogSetup};
pub use lock::DirLock;
use manifest::{new_store_id, validate_log_name, LogEntry, Manifest};

/// How a store is opened.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct StoreOptions {
    /// The file system every file operation of the store goes through. Default: the real one
    /// ([`RealFs`]); tests put a [`crate::fs::FaultFs`] here.
    pub fs: Fs,
    /// Open a directory whose MANIFEST is gone although `logs/` or `groups/` hold data, as a
    /// store with a new MANIFEST (a new store id; each log is registered again, with the
    /// partition count its opener gives, when it is opened). Default `false`: such a directory
    /// is refused, since opening it as a new store would hide its logs.
    pub rebuild_manifest: bool,
    /// File descriptors the store keeps open at most ([`crate::fs::BoundedFs`]): past it, the
    /// files least recently used close their descriptor and open it again at their next
    /// operation (a partition's active segment, a journal). The bound is soft (a file in the
    /// middle of an operation, and the store's lock, stay open). Default 256
    /// ([`crate::fs::DEFAULT_MAX_OPEN_FILES`]); valid 4 to 1,048,576. RocksDB's own files (the
    /// group state database) are not counted.
    pub max_open_files: usize,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            fs: RealFs::shared(),
            rebuild_manifest: false,
            max_open_files: crate::fs::DEFAULT_MAX_OPEN_FILES,
        }
    }
}

impl StoreOptions {
    /// These options with file system `fs`.
    pub fn with_fs(mut self, fs: Fs) -> Self {
        self.fs = fs;
        self
    }

    /// These options with [`StoreOptions::max_open_files`] set to `max`.
    pub fn with_max_open_files(mut self, max: usize) -> Self {
        self.max_open_files = max;
        self
    }

    /// These options with [`StoreOptions::rebuild_manifest`] set to `rebuild`.
    pub fn with_rebuild_manifest(mut self, rebuild: bool) -> Self {
        self.rebuild_manifest = rebuild;
        self
    }
}

pub use temporary::TemporaryStore;

struct StoreInner {
    root: PathBuf,
    fs: Fs,
    lock: Arc<DirLock>,
    manifest: Mutex<Manifest>,
    logs: Mutex<HashMap<String, Log>>,
    shared: Mutex<HashMap<TypeId, Arc<dyn Any + Send + Sync>>>,
    /// Parts that write their own state, for [`Store::backup`].
    backup_sources: backup::Registry<dyn backup::BackupSource>,
    /// Parts whose state needs files they may delete, for [`Store::backup`].
    backup_holds: backup::Registry<dyn backup::BackupHold>,
}

/// An open store directory. Cheap to clone.
///
/// Dropping the last handle of an open log closes it on the dropping thread (its syncs and
/// checkpoint); in async code, [`Store::close`] (or [`Log::close`]) first keeps that off the
/// executor.
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

/// True when `logs/`, `groups/` or `group_state/` under `root` hold any entry (a store's data, not a new
/// directory): the MANIFEST is written before any of it, so its absence there is damage.
fn holds_data(fs: &dyn FileSystem, root: &Path) -> StoreResult<bool> {
    for dir in ["logs", "groups", "group_state"].map(|d| root.join(d)) {
        if fs.kind(&dir).at(&dir)? == Some(EntryKind::Dir)
            && !fs.read_dir(&dir).at(&dir)?.is_empty()
        {
            return Ok(true);
        }
    }
    Ok(false)
}

impl Store {
    /// Opens the store at `root`, creating the directory if needed.
    ///
    /// Fails with [`StoreError::Locked`] while another opener (in this process or another one)
    /// holds the store.
    pub fn open(root: impl AsRef<Path>) -> StoreResult<Self> {
        Self::open_with(root, StoreOptions::default())
    }

    /// Opens the store at `root` with `options`.
    pub fn open_with(root: impl AsRef<Path>, options: StoreOptions) -> StoreResult<Self> {
        let root = root.as_ref().to_path_buf();
        let bound = crate::fs::MIN_MAX_OPEN_FILES..=crate::fs::MAX_MAX_OPEN_FILES;
        if !bound.contains(&options.max_open_files) {
            return Err(StoreError::Invalid(format!(
                "max_open_files {} is outside {bound:?}",
                options.max_open_files
            )));
        }
        let fs: Fs = Arc::new(BoundedFs::new(options.fs, options.max_open_files));
        create_dir_durable(&*fs, &root.join("logs"))?;
        let lock = DirLock::acquire(&*fs, &root)?;
        let manifest = match Manifest::load(&*fs, &root)? {
            Some(m) if m.store_id != [0; 16] => m,
            None if !options.rebuild_manifest && holds_data(&*fs, &root)? => {
                return Err(StoreError::Invalid(format!(
                    "{} has no MANIFEST but its logs/ or groups/ hold data: not opened as a new \
                     store (StoreOptions::with_rebuild_manifest opens it with a new MANIFEST)",
                    root.display()
                )));
            }
            loaded => {
                // A new store, or a version 1 MANIFEST: assign the id (written in the current version).
                let mut m = loaded.unwrap_or_default();
                m.store_id = new_store_id();
                m.store(&*fs, &root)?;
                m
            }
        };
        Ok(Store {
            inner: Arc::new(StoreInner {
                root,
                fs,
                lock: Arc::new(lock),
                manifest: Mutex::new(manifest),
                logs: Mutex::new(HashMap::new()),
                shared: Mutex::new(HashMap::new()),
                backup_sources: Mutex::new(Vec::new()),
                backup_holds: Mutex::new(Vec::new()),
            }),
        })
    }

    /// Root directory of the store.
    pub fn root(&self) -> &Path {
        &self.inner.root
    }

    /// The file system the store works through.
    pub fn fs(&self) -> &Fs {
        &self.inner.fs
    }

    /// The store's id as 32 hex digits (see format/MANIFEST.md).
    pub fn id(&self) -> String {
        self.lock_manifest().store_id_hex()
    }

    fn lock_manifest(&self) -> std::sync::MutexGuard<'_, Manifest> {
        self.inner
            .manifest
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// The names of the group engines with a payload log of their own (created by earlier
    /// versions), in order; `strata::group::DiskGroupEngine::group_names` lists every group.
    pub fn own_log_group_names(&self) -> Vec<String> {
        self.lock_manifest().own_log_group_names()
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

    /// [`Store::open_with`] on tokio's blocking pool: an async caller's executor thread never
    /// waits for the lock, the MANIFEST or the directory syncs of a new store.
    pub async fn open_async(root: impl AsRef<Path>, options: StoreOptions) -> StoreResult<Self> {
        let root = root.as_ref().to_path_buf();
        crate::blocking::off_executor(move || Self::open_with(root, options)).await
    }

    /// [`Store::open_log`] on tokio's blocking pool: recovering a log (its segments, its
    /// journal's replay) or creating one (its partitions' syncs) never holds up the caller's
    /// executor thread.
    pub async fn open_log_async(
        &self,
        name: &str,
        partitions: u32,
        options: LogOptions,
    ) -> StoreResult<Log> {
        let (store, name) = (self.clone(), name.to_string());
        crate::blocking::off_executor(move || store.open_log(&name, partitions, options)).await
    }

    /// Opens log `name`, creating it with `partitions` partitions if the store does not hold it.
    ///
    /// The MANIFEST records the options a log is opened with (format/MANIFEST.md, "Log
    /// options"): opening an existing log with options other than the recorded ones records
    /// the new ones, durably, before the log opens, and logs the change (a `tracing` info event
    /// naming the options). Opening a log that is already open returns the same log (its
    /// options are those of the first opener, and nothing is recorded). An existing log with
    /// another partition count is an error.
    pub fn open_log(&self, name: &str, partitions: u32, options: LogOptions) -> StoreResult<Log> {
        let owner = self
            .lock_manifest()
            .get(name)
            .map_or(LogOwner::Policies, |e| e.owner);
        self.open_log_as(name, partitions, options, owner)
    }

    /// Opens log `name` as [`Store::open_log`] does, recording `owner` when it is created. An
    /// owned log refuses retention and compaction (options and calls alike).
    pub fn open_log_as(
        &self,
        name: &str,
        partitions: u32,
        options: LogOptions,
        owner: LogOwner,
    ) -> StoreResult<Log> {
        self.open_log_recording(name, partitions, options, owner, true)
    }

    /// Opens the existing log `name` with its recorded partition count and options, recording
    /// nothing: what a tool does, so that it runs the log as its application configured it.
    /// A log whose options were never recorded (not opened since a version that did not
    /// record them) opens with [`LogOptions::default`]; [`Store::log_options`] tells which.
    pub fn open_recorded_log(&self, name: &str) -> StoreResult<Log> {
        let entry = self.lock_manifest().get(name).cloned();
        let entry = entry.ok_or_else(|| StoreError::Invalid(format!("no log {name:?}")))?;
        let options = entry.options.unwrap_or_default();
        self.open_log_recording(name, entry.partitions, options, entry.owner, false)
    }

    /// The options the MANIFEST records for log `name` (`None`: no such log, or its options
    /// were never recorded).
    pub fn log_options(&self, name: &str) -> Option<LogOptions> {
        self.lock_manifest()
            .get(name)
            .and_then(|e| e.options.clone())
    }

    fn open_log_recording(
        &self,
        name: &str,
        partitions: u32,
        options: LogOptions,
        owner: LogOwner,
        record_options: bool,
    ) -> StoreResult<Log> {
        validate_log_name(name).map_err(StoreError::Invalid)?;
        options.validate().map_err(StoreError::Invalid)?;
        if owner == LogOwner::Layer && options.trims() {
            return Err(StoreError::Invalid(format!(
                "log {name:?} is owned by the layer that writes it: retention, compaction and \
                 maintenance options are refused"
            )));
        }
        let mut logs = self.inner.logs.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(log) = logs.get(name).filter(|l| !l.is_closed()) {
            check_same(name, log.partition_count(), partitions, log.owner(), owner)?;
            return Ok(log.clone());
        }
        let entry = LogEntry {
            name: name.into(),
            partitions,
            owner,
            options: Some(options.clone()),
        };
        self.record_log(entry, record_options)?;
        let log = Log::open(LogSetup {
            fs: self.inner.fs.clone(),
            name: name.to_string(),
            dir: self.inner.root.join("logs").join(name),
            partitions,
            options,
            owner,
            lock: self.inner.lock.clone(),
        })?;
        logs.insert(name.to_string(), log.clone());
        Ok(log)
    }

    /// Checks `entry` against the MANIFEST, or records it there (durably) when new; records
    /// its options over the recorded ones when they differ and `record_options` is set.
    fn record_log(&self, entry: LogEntry, record_options: bool) -> StoreResult<()> {
        let mut manifest = self.lock_manifest();
        let Some(recorded) = manifest.get(&entry.name) else {
            // Existing entries were checked when the MANIFEST was decoded.
            check_partition_count(entry.partitions)?;
            return self.replace_manifest(&mut manifest, |next| next.logs.push(entry));
        };
        let (name, partitions, owner) = (&entry.name, entry.partitions, entry.owner);
        check_same(name, recorded.partitions, partitions, recorded.owner, owner)?;
        let changed = match (&recorded.options, &entry.options) {
            (Some(old), Some(new)) => recorded_options::changed(old, new),
            (None, _) => vec!["(first recorded)"],
            (_, None) => Vec::new(),
        };
        if !record_options || changed.is_empty() {
            return Ok(());
        }
        tracing::info!(log = %name, changed = ?changed, "recording the log's new options");
        self.replace_manifest(&mut manifest, |next| {
            for e in next.logs.iter_mut().filter(|e| e.name == entry.name) {
                e.options = entry.options.clone();
            }
        })
    }

    /// Replaces the MANIFEST (durably) with `change` applied to it, then the copy in memory:
    /// persist, then apply.
    fn replace_manifest(
        &self,
        manifest: &mut std::sync::MutexGuard<'_, Manifest>,
        change: impl FnOnce(&mut Manifest),
    ) -> StoreResult<()> {
        let mut next = Manifest::clone(manifest);
        change(&mut next);
        next.store(&*self.inner.fs, &self.inner.root)?;
        **manifest = next;
        Ok(())
    }

    /// Grows log `log` (open in this store) to `to` partitions: records `to` in the MANIFEST
    /// (durably), then opens the new partitions ([`Log::add_partitions`]). A power cut between
    /// the two leaves the MANIFEST's count, whose missing partitions the next open creates
    /// empty. A log never shrinks: `to` at most its count changes nothing.
    #[cfg_attr(not(feature = "ursula"), allow(dead_code))]
    pub(crate) fn grow_log(&self, log: &Log, to: u32) -> StoreResult<()> {
        let mut manifest = self.lock_manifest();
        let recorded = manifest
            .get(log.name())
            .map(|e| e.partitions)
            .ok_or_else(|| {
                StoreError::Invalid(format!("log {:?} is not in the MANIFEST", log.name()))
            })?;
        if recorded < to {
            check_partition_count(to)?;
            self.replace_manifest(&mut manifest, |next| {
                for entry in next.logs.iter_mut().filter(|e| e.name == log.name()) {
                    entry.partitions = to;
                }
            })?;
        }
        log.add_partitions(to)
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

    /// [`Store::close_blocking`] on tokio's blocking pool, so closing (every open log's syncs
    /// and checkpoint) never holds up the caller's executor thread.
    pub async fn close(&self) -> StoreResult<()> {
        let store = self.clone();
        crate::blocking::off_executor(move || store.close_blocking()).await
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

/// Refuses a partition count a log cannot have.
fn check_partition_count(partitions: u32) -> StoreResult<()> {
    if partitions == 0 || partitions > i32::MAX as u32 {
        return Err(StoreError::Invalid(
            "a log needs 1 to 2^31 - 1 partitions".into(),
        ));
    }
    Ok(())
}

/// Refuses to open an existing log with another partition count or owner.
fn check_same(
    name: &str,
    existing: u32,
    requested: u32,
    existing_owner: LogOwner,
    requested_owner: LogOwner,
) -> StoreResult<()> {
    if existing != requested {
        return Err(StoreError::PartitionCountMismatch {
            name: name.into(),
            existing,
            requested,
        });
    }
    if existing_owner != requested_owner {
        return Err(StoreError::Invalid(format!(
            "log {name:?} is recorded with owner {existing_owner:?}, opened as {requested_owner:?}"
        )));
    }
    Ok(())
}
