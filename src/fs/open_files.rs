//! A bound on the descriptors a store keeps open. [`BoundedFs`] hands out files that close their
//! descriptor when the store holds more than its bound, and open it again at their next
//! operation; which ones close is a clock sweep (a file used since the last sweep gets a second
//! chance), the way RocksDB's table cache and Pebble's file cache bound theirs. A partition then
//! costs its directory entries and, while idle, no descriptor.
//!
//! Closing a descriptor changes nothing about the file: its bytes (written through the
//! descriptor, or through a mapping, which outlives it) stay in the page cache, and a later
//! `fdatasync` through another descriptor of the same file makes them durable (Linux syncs an
//! inode's dirty pages whichever descriptor wrote them, and reports a write-back error nobody has
//! seen yet to the next descriptor's sync). What needs care, and gets it here:
//! - a file locked with [`FileHandle::try_lock`] is pinned: its descriptor holds the lock;
//! - a file renamed through this layer is reopened under its new name;
//! - a file unlinked, or replaced by a rename, through this layer while a handle of it lives is
//!   opened first (if it was closed) and pinned, since no name reaches it any more.
//!
//! The bound is soft: a file in the middle of an operation, and a pinned one, are not closed.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use bytes::Bytes;

use super::{
    DirEntry, EntryKind, FileHandle, FileRef, FileSystem, Fs, MapRef, OpenMode, Reservation,
};

/// Descriptors a store keeps open at most by default (`StoreOptions::max_open_files`).
pub const DEFAULT_MAX_OPEN_FILES: usize = 256;
/// The smallest bound a store accepts.
pub const MIN_MAX_OPEN_FILES: usize = 4;
/// The largest bound a store accepts.
pub const MAX_MAX_OPEN_FILES: usize = 1 << 20;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// [`FileSystem`] over `inner` whose files keep at most about `max_open` descriptors open.
#[derive(Debug)]
pub struct BoundedFs {
    inner: Fs,
    files: Arc<OpenFiles>,
}

impl BoundedFs {
    /// `inner` with at most `max_open` descriptors held open (soft: see the module doc).
    pub fn new(inner: Fs, max_open: usize) -> Self {
        assert!(
            max_open > 0,
            "a bound of zero descriptors cannot open a file"
        );
        let files = Arc::new(OpenFiles {
            max_open,
            open: AtomicUsize::new(0),
            next_id: AtomicU64::new(0),
            registry: Mutex::new(Registry::default()),
        });
        Self { inner, files }
    }

    /// Descriptors its files hold open now (in-flight operations on a file just closed aside).
    pub fn open_files(&self) -> usize {
        self.files.open.load(Ordering::Acquire)
    }

    /// Live handles of `path`, pinned open: a rename over it or an unlink is about to take the
    /// only name that reaches them.
    fn pin_all(&self, path: &Path) -> io::Result<()> {
        for file in self.files.live_at(path) {
            match file.pin() {
                // Gone already (removed outside this layer): nothing left to keep.
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                pinned => drop(pinned?),
            }
        }
        Ok(())
    }
}

impl FileSystem for BoundedFs {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<FileRef> {
        let file = self.inner.open(path, mode)?;
        let cached = Arc::new(CachedFile {
            id: self.files.next_id.fetch_add(1, Ordering::Relaxed),
            inner_fs: self.inner.clone(),
            files: self.files.clone(),
            path: Mutex::new(path.to_path_buf()),
            reopen: reopen_mode(mode),
            slot: Mutex::new(Some(file)),
            used: AtomicBool::new(true),
            pinned: AtomicBool::new(false),
            in_clock: AtomicBool::new(true),
        });
        self.files.register(&cached, path);
        Ok(cached)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.pin_all(to)?;
        self.inner.rename(from, to)?;
        self.files.renamed(from, to);
        Ok(())
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.pin_all(path)?;
        self.inner.remove_file(path)?;
        self.files.unlinked(path);
        Ok(())
    }

    fn create_dir(&self, path: &Path) -> io::Result<()> {
        self.inner.create_dir(path)
    }

    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        self.inner.sync_dir(path)
    }

    fn read_dir(&self, path: &Path) -> io::Result<Vec<DirEntry>> {
        self.inner.read_dir(path)
    }

    fn kind(&self, path: &Path) -> io::Result<Option<EntryKind>> {
        self.inner.kind(path)
    }

    fn native_dir(&self, path: &Path) -> io::Result<()> {
        self.inner.native_dir(path)
    }

    fn remove_native_dir(&self, path: &Path) -> io::Result<()> {
        self.inner.remove_native_dir(path)
    }

    fn external_sync(&self, path: &Path) -> io::Result<()> {
        self.inner.external_sync(path)
    }
}

/// The mode a closed file is opened again with: the same access, never creating or cutting.
fn reopen_mode(mode: OpenMode) -> OpenMode {
    match mode {
        OpenMode::Read => OpenMode::Read,
        OpenMode::WriteDirect => OpenMode::WriteDirect,
        OpenMode::ReadWrite | OpenMode::CreateNew | OpenMode::Truncate => OpenMode::ReadWrite,
    }
}

/// The files of one [`BoundedFs`] and how many hold a descriptor.
#[derive(Debug)]
struct OpenFiles {
    max_open: usize,
    open: AtomicUsize,
    next_id: AtomicU64,
    registry: Mutex<Registry>,
}

/// Every live file by id, the files holding a descriptor in clock order, and files by name.
#[derive(Debug, Default)]
struct Registry {
    files: HashMap<u64, Weak<CachedFile>>,
    /// The files holding a descriptor (and a few closed since, until the hand finds them), so a
    /// sweep's cost follows the bound, not the number of files.
    clock: VecDeque<u64>,
    by_path: HashMap<PathBuf, Vec<u64>>,
}

impl OpenFiles {
    /// Records a file just opened (holding its descriptor), then keeps the bound.
    fn register(&self, file: &Arc<CachedFile>, path: &Path) {
        {
            let mut r = lock(&self.registry);
            r.files.insert(file.id, Arc::downgrade(file));
            r.clock.push_back(file.id);
            r.by_path
                .entry(path.to_path_buf())
                .or_default()
                .push(file.id);
        }
        self.opened();
    }

    /// Counts a descriptor opened; closes others while there are more than the bound.
    fn opened(&self) {
        if self.open.fetch_add(1, Ordering::AcqRel) < self.max_open {
            return;
        }
        for victim in self.victims() {
            victim.close();
        }
    }

    /// Files to close so that the count falls to the bound: the clock's hand passes each file
    /// once at most twice, clearing the mark of a used one and taking one unused since. A file
    /// it finds closed leaves the clock until it opens again ([`CachedFile::handle`]).
    fn victims(&self) -> Vec<Arc<CachedFile>> {
        let excess = self
            .open
            .load(Ordering::Acquire)
            .saturating_sub(self.max_open);
        let mut victims = Vec::with_capacity(excess);
        // Files passed over are let go after the lock (declared first, dropped last): the last
        // handle of one may be among them, and its drop takes the lock.
        let mut passed = Vec::new();
        let mut r = lock(&self.registry);
        let mut steps = 2 * r.clock.len();
        while victims.len() < excess && steps > 0 {
            steps -= 1;
            let Some(id) = r.clock.pop_front() else { break };
            let Some(file) = r.files.get(&id).and_then(Weak::upgrade) else {
                continue;
            };
            if file.leaves_clock_if_closed() {
                passed.push(file);
                continue;
            }
            r.clock.push_back(id);
            let holds = file.slot.try_lock().is_ok_and(|slot| slot.is_some());
            if holds
                && !file.used.swap(false, Ordering::AcqRel)
                && !file.pinned.load(Ordering::Acquire)
            {
                victims.push(file);
            } else {
                passed.push(file);
            }
        }
        drop(r);
        drop(passed);
        victims
    }

    /// The live files named `path`.
    fn live_at(&self, path: &Path) -> Vec<Arc<CachedFile>> {
        let r = lock(&self.registry);
        let ids = r.by_path.get(path).map(Vec::as_slice).unwrap_or_default();
        let live = ids
            .iter()
            .filter_map(|id| r.files.get(id).and_then(Weak::upgrade))
            .collect();
        drop(r);
        live
    }

    /// Files named `from` are named `to` now; those named `to` before have no name.
    fn renamed(&self, from: &Path, to: &Path) {
        let moved = {
            let mut r = lock(&self.registry);
            let ids = r.by_path.remove(from).unwrap_or_default();
            let moved: Vec<_> = ids
                .iter()
                .filter_map(|id| r.files.get(id).and_then(Weak::upgrade))
                .collect();
            r.by_path.insert(to.to_path_buf(), ids);
            moved
        };
        for file in moved {
            *lock(&file.path) = to.to_path_buf();
        }
    }

    /// Files named `path` have no name any more.
    fn unlinked(&self, path: &Path) {
        lock(&self.registry).by_path.remove(path);
    }

    /// Forgets file `id` (dropped).
    fn forget(&self, id: u64, path: &Path) {
        let mut r = lock(&self.registry);
        r.files.remove(&id);
        if let Some(ids) = r.by_path.get_mut(path) {
            ids.retain(|i| *i != id);
            if ids.is_empty() {
                r.by_path.remove(path);
            }
        }
        if r.clock.len() > 2 * r.files.len() + 64 {
            let Registry { files, clock, .. } = &mut *r;
            clock.retain(|i| files.contains_key(i));
        }
    }
}

/// A file of a [`BoundedFs`]: its descriptor, while it holds one, and how to get it back.
struct CachedFile {
    id: u64,
    inner_fs: Fs,
    files: Arc<OpenFiles>,
    path: Mutex<PathBuf>,
    reopen: OpenMode,
    slot: Mutex<Option<FileRef>>,
    /// Used since the clock's hand last passed.
    used: AtomicBool,
    /// Never closed (locked, or no name reaches it).
    pinned: AtomicBool,
    /// Its id is in the registry's clock (cleared only with the registry locked, while the
    /// file holds no descriptor; set again when it opens one).
    in_clock: AtomicBool,
}

impl std::fmt::Debug for CachedFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CachedFile")
            .field("path", &*lock(&self.path))
            .field("open", &lock(&self.slot).is_some())
            .finish()
    }
}

impl CachedFile {
    /// The open file, opened again if it was closed.
    fn handle(&self) -> io::Result<FileRef> {
        self.used.store(true, Ordering::Release);
        let mut slot = lock(&self.slot);
        if let Some(file) = &*slot {
            return Ok(file.clone());
        }
        let path = lock(&self.path).clone();
        let file = self.inner_fs.open(&path, self.reopen)?;
        *slot = Some(file.clone());
        drop(slot);
        if !self.in_clock.swap(true, Ordering::AcqRel) {
            lock(&self.files.registry).clock.push_back(self.id);
        }
        self.files.opened();
        Ok(file)
    }

    /// With the registry locked: takes the file out of the clock if it holds no descriptor
    /// (its slot is checked and the mark cleared under the slot's lock, so a reopen either
    /// came first and keeps it, or comes after and puts it back). A file busy in an operation
    /// stays.
    fn leaves_clock_if_closed(&self) -> bool {
        let Ok(slot) = self.slot.try_lock() else {
            return false;
        };
        if slot.is_some() {
            return false;
        }
        self.in_clock.store(false, Ordering::Release);
        true
    }

    /// Pins the file open (opening it again if it was closed).
    fn pin(&self) -> io::Result<FileRef> {
        let slot = lock(&self.slot);
        self.pinned.store(true, Ordering::Release);
        drop(slot);
        self.handle()
    }

    /// Closes the descriptor unless the file is pinned or in the middle of an operation that
    /// holds its slot; an operation that already took the file finishes on it.
    fn close(&self) {
        let Ok(mut slot) = self.slot.try_lock() else {
            return;
        };
        if self.pinned.load(Ordering::Acquire) {
            return;
        }
        if slot.take().is_some() {
            self.files.open.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

impl Drop for CachedFile {
    fn drop(&mut self) {
        if lock(&self.slot).take().is_some() {
            self.files.open.fetch_sub(1, Ordering::AcqRel);
        }
        let path = lock(&self.path).clone();
        self.files.forget(self.id, &path);
    }
}

impl FileHandle for CachedFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.handle()?.read_at(buf, offset)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.handle()?.write_at(buf, offset)
    }

    fn len(&self) -> io::Result<u64> {
        self.handle()?.len()
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.handle()?.set_len(len)
    }

    fn reserve(&self, len: u64) -> io::Result<Reservation> {
        self.handle()?.reserve(len)
    }

    fn data_end(&self) -> io::Result<u64> {
        self.handle()?.data_end()
    }

    fn sync_data(&self) -> io::Result<()> {
        self.handle()?.sync_data()
    }

    fn sync_all(&self) -> io::Result<()> {
        self.handle()?.sync_all()
    }

    fn map(&self) -> io::Result<Bytes> {
        self.handle()?.map()
    }

    fn try_lock(&self) -> io::Result<bool> {
        self.pin()?.try_lock()
    }

    fn map_writable(&self, len: u64) -> io::Result<MapRef> {
        self.handle()?.map_writable(len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::RealFs;

    #[test]
    fn files_past_the_bound_close_and_open_again_with_their_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let fs = BoundedFs::new(RealFs::shared(), 8);
        let files: Vec<FileRef> = (0..64)
            .map(|i| {
                let f = fs
                    .open(&dir.path().join(format!("f{i}")), OpenMode::Truncate)
                    .unwrap();
                f.write_at(format!("file {i}").as_bytes(), 0).unwrap();
                f
            })
            .collect();
        assert!(fs.open_files() <= 8, "{} descriptors open", fs.open_files());
        for (i, f) in files.iter().enumerate() {
            let mut buf = vec![0u8; format!("file {i}").len()];
            f.read_exact_at(&mut buf, 0).unwrap();
            assert_eq!(buf, format!("file {i}").as_bytes());
            f.write_at(b"F", 0).unwrap();
            f.sync_data().unwrap();
        }
        assert!(fs.open_files() <= 8);
        // The clock keeps the files holding a descriptor (and the few closed since its hand
        // last passed), not all 64: a sweep's cost follows the bound.
        let clock = lock(&fs.files.registry).clock.len();
        assert!(clock <= 2 * 8 + 1, "{clock} files in the clock");
        drop(files);
        assert_eq!(fs.open_files(), 0);
        assert_eq!(lock(&fs.files.registry).files.len(), 0);
    }

    #[test]
    fn a_renamed_file_follows_its_name_and_an_unlinked_one_stays_reachable() {
        let dir = tempfile::tempdir().unwrap();
        let fs = BoundedFs::new(RealFs::shared(), 4);
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        let renamed = fs.open(&a, OpenMode::Truncate).unwrap();
        renamed.write_at(b"renamed", 0).unwrap();
        let unlinked = fs.open(&b, OpenMode::Truncate).unwrap();
        unlinked.write_at(b"unlinked", 0).unwrap();
        fs.remove_file(&b).unwrap();
        fs.rename(&a, &b).unwrap();
        // Push both out of the bound, then use them again.
        let others: Vec<_> = (0..16)
            .map(|i| {
                fs.open(&dir.path().join(format!("o{i}")), OpenMode::Truncate)
                    .unwrap()
            })
            .collect();
        let mut buf = [0u8; 8];
        unlinked.read_exact_at(&mut buf, 0).unwrap();
        assert_eq!(&buf, b"unlinked");
        renamed.write_at(b"R", 0).unwrap();
        assert_eq!(std::fs::read(&b).unwrap(), b"Renamed");
        drop(others);
    }

    #[test]
    fn a_locked_file_keeps_its_descriptor_and_its_lock_under_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        let fs = BoundedFs::new(RealFs::shared(), 4);
        let lock_path = dir.path().join("LOCK");
        let locked = fs.open(&lock_path, OpenMode::Truncate).unwrap();
        assert!(locked.try_lock().unwrap());
        let files: Vec<_> = (0..100)
            .map(|i| {
                let f = fs
                    .open(&dir.path().join(format!("f{i}")), OpenMode::Truncate)
                    .unwrap();
                f.write_at(b"x", 0).unwrap();
                f
            })
            .collect();
        assert!(fs.open_files() <= 4, "{} descriptors", fs.open_files());
        let other = RealFs.open(&lock_path, OpenMode::Read).unwrap();
        assert!(!other.try_lock().unwrap(), "the lock was let go");
        drop(files);
    }
}
