//! Online backup of a whole store, and restore.
//!
//! [`Store::backup`] writes a copy of the store into a new directory while the store keeps
//! serving writes. The copy is itself a store directory (format/BACKUP.md): `strata verify`
//! checks it and [`restore`] copies it into place. What it holds:
//!
//! - the state every open part writes by its own means (the RocksDB of group state) as a
//!   checkpoint ([`BackupSource`]), taken first, while every open group's payload segments and
//!   cold objects are held from deletion ([`BackupHold`]);
//! - every log, open ones as one snapshot per partition (`Log::copy_segments`: appends
//!   acknowledged before the backup began are in it), logs not open file by file;
//! - every other entry under the root (a local cold store in `cold/`, a state database no
//!   part has open) file by file;
//! - the MANIFEST, last.
//!
//! A group's payload log is copied after the state checkpoint, with deletions held from before
//! it, so the copy holds every payload and commit record the checkpoint needs, and the restored
//! group replays the commit records after it (format/GROUP_STATE.md). A group that is not open
//! trims nothing, so its log holds them too.
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
    /// Group payload logs among the logs (the store's shared one, and each own log of a group
    /// created by an earlier version).
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

/// A part of the store that writes its own state under a directory of the root (the RocksDB
/// of group state): registered with [`Store::register_backup_source`] while open.
pub trait BackupSource: Send + Sync {
    /// Writes a consistent checkpoint of the state into `dir` (which does not exist yet).
    fn checkpoint(&self, dir: &Path) -> StoreResult<()>;
}

/// A part whose state needs files that it may delete (a group engine: payload segments and
/// cold objects): registered with [`Store::register_backup_hold`] while open.
pub trait BackupHold: Send + Sync {
    /// Holds those files from deletion until the returned guard is dropped (after the backup
    /// has copied the logs and the rest of the root).
    fn hold(&self) -> Box<dyn Send>;
}

/// A registry of parts by name, held weakly (a part registers itself while it lives).
pub(crate) type Registry<T> = std::sync::Mutex<Vec<(String, Weak<T>)>>;

fn register<T: ?Sized>(registry: &Registry<T>, name: &str, part: Weak<T>) {
    let mut parts = registry.lock().unwrap_or_else(|p| p.into_inner());
    parts.retain(|(n, s)| s.strong_count() > 0 && n != name);
    parts.push((name.to_string(), part));
}

fn live<T: ?Sized>(registry: &Registry<T>) -> Vec<(String, Arc<T>)> {
    let parts = registry.lock().unwrap_or_else(|p| p.into_inner());
    let mut live: Vec<_> = parts
        .iter()
        .filter_map(|(n, s)| s.upgrade().map(|s| (n.clone(), s)))
        .collect();
    live.sort_by(|a, b| a.0.cmp(&b.0));
    live
}

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
    /// Registers `source`, which writes its own state in the root's directory `dir`, for
    /// backups while it lives.
    pub fn register_backup_source(&self, dir: &str, source: Weak<dyn BackupSource>) {
        register(&self.inner.backup_sources, dir, source);
    }

    /// Registers `hold` (the part named `name`) for backups while it lives.
    pub fn register_backup_hold(&self, name: &str, hold: Weak<dyn BackupHold>) {
        register(&self.inner.backup_holds, name, hold);
    }

    /// Writes a consistent copy of the whole store into the new directory `dest` while the
    /// store keeps serving (see the module docs for what "consistent" covers).
    ///
    /// Refused before anything is written: a `dest` that exists or lies inside the store
    /// (however it is spelled: `..` and symbolic links are resolved), a leftover
    /// `dest.partial`. A failure while copying leaves `dest.partial` for the caller to remove
    /// (the error says what failed); `dest` itself appears only complete.
    pub fn backup(&self, dest: impl AsRef<Path>) -> StoreResult<BackupReport> {
        let (fs, root, dest) = (&**self.fs(), self.root(), dest.as_ref());
        let _span = tracing::info_span!("strata.backup", dest = %dest.display()).entered();
        refuse_inside(root, dest, "backup (of the store)")?;
        let partial = check_destination(fs, dest)?;
        create_dir_durable(fs, &partial)?;
        let holds: Vec<Box<dyn Send>> = live(&self.inner.backup_holds)
            .iter()
            .map(|(_, h)| h.hold())
            .collect();
        let checkpointed = self.checkpoint_sources(&partial)?;
        let manifest = self.lock_manifest().clone();
        let mut report = BackupReport {
            groups: manifest.group_logs(),
            ..BackupReport::default()
        };
        self.copy_logs(&manifest, &partial, &mut report)?;
        let skip = |name: &str| {
            matches!(name, "LOCK" | "MANIFEST" | "MANIFEST.tmp" | "logs")
                || checkpointed.iter().any(|c| c == name)
        };
        report.add(copy_tree(fs, root, &partial, &skip)?);
        drop(holds);
        manifest.store(fs, &partial)?;
        publish(fs, &partial, dest)?;
        tracing::info!(store = %root.display(), dest = %dest.display(), ?report, "backup written");
        Ok(report)
    }

    /// Checkpoints every open [`BackupSource`] into its directory under `partial`; returns
    /// the directories written.
    fn checkpoint_sources(&self, partial: &Path) -> StoreResult<Vec<String>> {
        let fs = &**self.fs();
        let mut written = Vec::new();
        for (dir, source) in live(&self.inner.backup_sources) {
            let target = partial.join(&dir);
            // The source writes and syncs its checkpoint itself, into a directory it creates;
            // the directory is then the engine's, its entry made durable with `partial`'s.
            source.checkpoint(&target)?;
            fs.native_dir(&target).at(&target)?;
            written.push(dir);
        }
        Ok(written)
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
    report.groups = manifest.group_logs();
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
