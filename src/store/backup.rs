//! Online backup of a whole store, and restore.
//!
//! [`Store::backup`] writes a copy of the store into a new directory while the store keeps
//! serving writes. The copy is itself a store directory (format/BACKUP.md): `strata verify`
//! checks it and [`restore`] copies it into place. What it holds:
//!
//! - every open group engine's state as a RocksDB checkpoint, taken first, while the group's
//!   payload segments and cold objects are held from deletion ([`BackupSource`]);
//! - every log, open ones as one snapshot per partition (`Log::copy_segments`: appends
//!   acknowledged before the backup began are in it), logs not open file by file;
//! - every other entry under the root (a local cold store in `cold/`) file by file;
//! - the MANIFEST, last.
//!
//! A group's payload log is copied after its checkpoint, with deletions held from before the
//! checkpoint, so the copy holds every payload and commit record the checkpoint needs, and the
//! restored group replays the commit records after it (format/GROUP_STATE.md).
//!
//! The copy is written into `DEST.partial`, every file and directory synced, and renamed to
//! `DEST` only when complete: after a power cut `DEST` either does not exist or is a whole
//! backup. Restore works the same way into `TARGET.partial` and `TARGET`.

use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Weak};

use super::manifest::{new_store_id, Manifest};
use super::Store;
use crate::error::{IoContext, StoreError, StoreResult};
use crate::fs::{
    copy_tree, create_dir_durable, sync_dir, sync_parent, CopyReport, EntryKind, FileSystem,
};
use crate::log::Log;

/// What a backup or a restore copied.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BackupReport {
    /// Logs copied.
    pub logs: usize,
    /// Group engines checkpointed.
    pub groups: usize,
    /// Files written outside the groups' checkpoints.
    pub files: u64,
    /// Bytes written outside the groups' checkpoints (holes of sparse files not counted).
    pub bytes: u64,
}

impl BackupReport {
    fn add(&mut self, copy: CopyReport) {
        self.files += copy.files;
        self.bytes += copy.bytes;
    }
}

/// A part of the store that writes its own state (a group engine's RocksDB): registered with
/// [`Store::register_backup_source`] while open.
pub trait BackupSource: Send + Sync {
    /// Holds what a copy of this state needs from deletion (payload segments, cold objects),
    /// then writes a consistent checkpoint of the state into `dir` (which does not exist yet).
    /// The returned guard keeps the hold until the backup has copied the logs and the rest of
    /// the root, then is dropped.
    fn checkpoint(&self, dir: &Path) -> StoreResult<Box<dyn Send>>;
}

/// The directory of a store holding group engines' state.
const GROUPS: &str = "groups";

/// `path` with `.partial` appended: where a backup or restore writes before it is complete.
pub fn partial_path(path: &Path) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(".partial");
    PathBuf::from(name)
}

/// Refuses a destination that exists, or that an interrupted run left half-written.
fn check_destination(fs: &dyn FileSystem, dest: &Path) -> StoreResult<PathBuf> {
    if fs.kind(dest).at(dest)?.is_some() {
        return Err(StoreError::Invalid(format!(
            "{} exists: a backup or restore writes a new directory",
            dest.display()
        )));
    }
    let partial = partial_path(dest);
    if fs.kind(&partial).at(&partial)?.is_some() {
        return Err(StoreError::Invalid(format!(
            "{} is left from an interrupted backup or restore: remove it first",
            partial.display()
        )));
    }
    Ok(partial)
}

/// `path` as the operating system resolves it: the longest prefix that exists, canonical
/// (symbolic links and `..` resolved), and the rest appended with its `..` applied. Two paths
/// that reach the same directory, through `..` or a link, resolve alike.
fn resolved(path: &Path) -> StoreResult<PathBuf> {
    let absolute = std::path::absolute(path).at(path)?;
    let parts: Vec<Component<'_>> = absolute.components().collect();
    for known in (1..=parts.len()).rev() {
        let prefix: PathBuf = parts[..known].iter().collect();
        let Ok(mut out) = std::fs::canonicalize(&prefix) else {
            continue;
        };
        for part in &parts[known..] {
            match part {
                Component::ParentDir => {
                    out.pop();
                }
                Component::Normal(name) => out.push(name),
                _ => {}
            }
        }
        return Ok(out);
    }
    Ok(absolute)
}

/// Refuses a copy of `source` into `dest` when `dest` lies inside `source` (however either is
/// spelled): the copy would copy itself. `what` names the operation in the error.
fn refuse_inside(source: &Path, dest: &Path, what: &str) -> StoreResult<()> {
    if resolved(dest)?.starts_with(resolved(source)?) {
        return Err(StoreError::Invalid(format!(
            "{what} destination {} lies inside {}",
            dest.display(),
            source.display()
        )));
    }
    Ok(())
}

/// Makes the finished copy in `partial` appear as `dest`, durably.
fn publish(fs: &dyn FileSystem, partial: &Path, dest: &Path) -> StoreResult<()> {
    sync_dir(fs, partial)?;
    fs.rename(partial, dest).at(dest)?;
    sync_parent(fs, dest)
}

impl Store {
    /// Registers `source` (a group engine's state, kept in `groups/<name>`) for backups while
    /// it lives.
    pub fn register_backup_source(&self, name: &str, source: Weak<dyn BackupSource>) {
        let mut sources = self.lock_sources();
        sources.retain(|(_, s)| s.strong_count() > 0);
        sources.retain(|(n, _)| n != name);
        sources.push((name.to_string(), source));
    }

    fn lock_sources(&self) -> std::sync::MutexGuard<'_, Vec<(String, Weak<dyn BackupSource>)>> {
        self.inner
            .backup_sources
            .lock()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// Writes a consistent copy of the whole store into the new directory `dest` while the
    /// store keeps serving (see the module docs for what "consistent" covers). Every group in
    /// `groups/` must be open in this process (its RocksDB cannot be copied otherwise).
    ///
    /// Refused before anything is written: a `dest` that exists or lies inside the store
    /// (however it is spelled: `..` and symbolic links are resolved), a
    /// leftover `dest.partial`, a group that is not open. A failure while copying leaves
    /// `dest.partial` for the caller to remove (the error says what failed); `dest` itself
    /// appears only complete.
    pub fn backup(&self, dest: impl AsRef<Path>) -> StoreResult<BackupReport> {
        let (fs, root, dest) = (&**self.fs(), self.root(), dest.as_ref());
        let _span = tracing::info_span!("strata.backup", dest = %dest.display()).entered();
        refuse_inside(root, dest, "backup (of the store)")?;
        let partial = check_destination(fs, dest)?;
        let sources = self.group_sources()?;
        create_dir_durable(fs, &partial)?;
        let mut report = BackupReport {
            groups: sources.len(),
            ..BackupReport::default()
        };
        let holds = self.checkpoint_groups(sources, &partial)?;
        let manifest = self.lock_manifest().clone();
        self.copy_logs(&manifest, &partial, &mut report)?;
        let skip =
            |name: &str| matches!(name, "LOCK" | "MANIFEST" | "MANIFEST.tmp" | "logs" | GROUPS);
        report.add(copy_tree(fs, root, &partial, &skip)?);
        drop(holds);
        manifest.store(fs, &partial)?;
        publish(fs, &partial, dest)?;
        tracing::info!(store = %root.display(), dest = %dest.display(), ?report, "backup written");
        Ok(report)
    }

    /// The open group engines, one per directory under `groups/` (an error names one that
    /// is not open).
    fn group_sources(&self) -> StoreResult<Vec<(String, Arc<dyn BackupSource>)>> {
        let (fs, groups) = (&**self.fs(), self.root().join(GROUPS));
        if fs.kind(&groups).at(&groups)? != Some(EntryKind::Dir) {
            return Ok(Vec::new());
        }
        let mut names: Vec<String> = fs
            .read_dir(&groups)
            .at(&groups)?
            .into_iter()
            .filter(|e| e.kind == EntryKind::Dir)
            .map(|e| e.name)
            .collect();
        names.sort();
        names
            .into_iter()
            .map(|name| self.open_source(&name).map(|source| (name, source)))
            .collect()
    }

    /// Checkpoints `sources` into `partial/groups/`; returns their holds.
    fn checkpoint_groups(
        &self,
        sources: Vec<(String, Arc<dyn BackupSource>)>,
        partial: &Path,
    ) -> StoreResult<Vec<Box<dyn Send>>> {
        let fs = &**self.fs();
        if sources.is_empty() {
            return Ok(Vec::new());
        }
        let target = partial.join(GROUPS);
        create_dir_durable(fs, &target)?;
        // RocksDB writes and syncs its checkpoints itself.
        fs.native_dir(&target).at(&target)?;
        sources
            .iter()
            .map(|(name, source)| source.checkpoint(&target.join(name)))
            .collect()
    }

    fn open_source(&self, name: &str) -> StoreResult<Arc<dyn BackupSource>> {
        self.lock_sources()
            .iter()
            .find(|(n, _)| n == name)
            .and_then(|(_, s)| s.upgrade())
            .ok_or_else(|| {
                StoreError::Invalid(format!(
                    "group {name:?} is not open: open every group engine of the store before \
                     backing it up (`strata backup` does)"
                ))
            })
    }

    /// Copies the logs `manifest` lists: open ones from their snapshots, others file by file.
    fn copy_logs(
        &self,
        manifest: &Manifest,
        partial: &Path,
        report: &mut BackupReport,
    ) -> StoreResult<()> {
        let (fs, target) = (&**self.fs(), partial.join("logs"));
        create_dir_durable(fs, &target)?;
        for entry in &manifest.logs {
            let open: Option<Log> = self.open_log_handle(&entry.name);
            let dest = target.join(&entry.name);
            let copied = match open {
                Some(log) => log.copy_segments(fs, &dest)?,
                None => {
                    // Held so that nobody opens (and writes) the log while it is copied.
                    let logs = self.inner.logs.lock().unwrap_or_else(|p| p.into_inner());
                    if self.open_log_handle_locked(&logs, &entry.name).is_some() {
                        return Err(StoreError::Invalid(format!(
                            "log {:?} was opened while the backup started copying it; retry",
                            entry.name
                        )));
                    }
                    let source = self.root().join("logs").join(&entry.name);
                    match fs.kind(&source).at(&source)? {
                        Some(_) => copy_tree(fs, &source, &dest, &|_| false)?,
                        None => CopyReport::default(),
                    }
                }
            };
            report.add(copied);
            report.logs += 1;
        }
        sync_dir(fs, &target)
    }

    fn open_log_handle(&self, name: &str) -> Option<Log> {
        let logs = self.inner.logs.lock().unwrap_or_else(|p| p.into_inner());
        self.open_log_handle_locked(&logs, name)
    }

    fn open_log_handle_locked(
        &self,
        logs: &std::collections::HashMap<String, Log>,
        name: &str,
    ) -> Option<Log> {
        logs.get(name).filter(|l| !l.is_closed()).cloned()
    }
}

/// Restores the backup in `backup` into the new store directory `target` (through the real
/// file system); see [`restore_with`].
pub fn restore(backup: impl AsRef<Path>, target: impl AsRef<Path>) -> StoreResult<BackupReport> {
    restore_with(
        &*crate::fs::RealFs::shared(),
        backup.as_ref(),
        target.as_ref(),
    )
}

/// Copies the backup in `backup` (a directory [`Store::backup`] wrote) into the new directory
/// `target` through `fs`: into `target.partial`, every file and directory synced, then renamed.
/// After a power cut `target` either does not exist or holds the whole backup.
pub fn restore_with(
    fs: &dyn FileSystem,
    backup: &Path,
    target: &Path,
) -> StoreResult<BackupReport> {
    let Some(mut manifest) = Manifest::load(fs, backup)? else {
        return Err(StoreError::Invalid(format!(
            "{} holds no MANIFEST: not a Strata backup",
            backup.display()
        )));
    };
    refuse_inside(backup, target, "restore (of the backup)")?;
    let partial = check_destination(fs, target)?;
    if let Some(parent) = target.parent().filter(|p| !p.as_os_str().is_empty()) {
        create_dir_durable(fs, parent)?;
    }
    let mut report = BackupReport::default();
    report.add(copy_tree(fs, backup, &partial, &|name| name == "LOCK")?);
    // The restored store is another store: its own id names the objects it writes and the
    // only ones it may delete, so a clone sharing a cold bucket with its original never
    // deletes or sweeps the original's objects.
    manifest.store_id = new_store_id();
    manifest.store(fs, &partial)?;
    report.logs = count_dirs(fs, &backup.join("logs"))?;
    report.groups = count_dirs(fs, &backup.join(GROUPS))?;
    publish(fs, &partial, target)?;
    tracing::info!(backup = %backup.display(), target = %target.display(), ?report, "backup restored");
    Ok(report)
}

fn count_dirs(fs: &dyn FileSystem, dir: &Path) -> StoreResult<usize> {
    if fs.kind(dir).at(dir)?.is_none() {
        return Ok(0);
    }
    let entries = fs.read_dir(dir).at(dir)?;
    Ok(entries.iter().filter(|e| e.kind == EntryKind::Dir).count())
}
