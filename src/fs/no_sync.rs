//! A file system that never syncs: every operation goes to another file system, except file and
//! directory syncs (and engines' announced syncs), which return at once. For temporary stores
//! (test fixtures) that must open and write fast and need not survive a power cut; data still
//! survives a process crash (the page cache keeps it), not a power cut.

use std::io;
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;

use super::{DirEntry, EntryKind, FileHandle, FileRef, FileSystem, Fs, MapRef, OpenMode};

/// [`FileSystem`] over `inner` with every sync a no-op.
#[derive(Debug)]
pub struct NoSyncFs {
    inner: Fs,
}

impl NoSyncFs {
    /// `inner` without syncs, shared.
    pub fn shared(inner: Fs) -> Fs {
        Arc::new(Self { inner })
    }
}

impl FileSystem for NoSyncFs {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<FileRef> {
        let inner = self.inner.open(path, mode)?;
        Ok(Arc::new(NoSyncFile { inner }))
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.inner.rename(from, to)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.inner.remove_file(path)
    }

    fn create_dir(&self, path: &Path) -> io::Result<()> {
        self.inner.create_dir(path)
    }

    fn sync_dir(&self, _path: &Path) -> io::Result<()> {
        Ok(())
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

    fn external_sync(&self, _path: &Path) -> io::Result<()> {
        Ok(())
    }
}

/// A file of a [`NoSyncFs`].
#[derive(Debug)]
struct NoSyncFile {
    inner: FileRef,
}

impl FileHandle for NoSyncFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.inner.read_at(buf, offset)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.inner.write_at(buf, offset)
    }

    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.inner.set_len(len)
    }

    fn reserve(&self, len: u64) -> io::Result<super::Reservation> {
        self.inner.reserve(len)
    }

    fn data_end(&self) -> io::Result<u64> {
        self.inner.data_end()
    }

    fn sync_data(&self) -> io::Result<()> {
        Ok(())
    }

    fn sync_all(&self) -> io::Result<()> {
        Ok(())
    }

    fn map(&self) -> io::Result<Bytes> {
        self.inner.map()
    }

    fn try_lock(&self) -> io::Result<bool> {
        self.inner.try_lock()
    }

    fn map_writable(&self, len: u64) -> io::Result<MapRef> {
        self.inner.map_writable(len)
    }
}
