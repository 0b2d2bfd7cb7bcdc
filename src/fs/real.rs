//! [`RealFs`]: the operating system's file calls, one to one.

use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

use std::sync::Arc;

use bytes::Bytes;
use memmap2::{Mmap, MmapOptions, MmapRaw};

use super::{
    DirEntry, EntryKind, FileHandle, FileRef, FileSystem, MapRef, OpenMode, Reservation,
    WritableMap,
};

/// The real file system (the default under every store).
#[derive(Debug, Default, Clone, Copy)]
pub struct RealFs;

impl RealFs {
    /// The real file system as a shared handle.
    pub fn shared() -> super::Fs {
        std::sync::Arc::new(RealFs)
    }
}

/// An open file of the real file system.
#[derive(Debug)]
pub struct RealFile {
    file: File,
}

impl RealFile {
    /// Wraps an open file.
    pub fn new(file: File) -> Self {
        Self { file }
    }
}

/// Opens `path` on the real file system as `mode` says.
pub(super) fn open_real(path: &Path, mode: OpenMode) -> io::Result<File> {
    let mut options = OpenOptions::new();
    options.read(true);
    match mode {
        OpenMode::Read => {}
        OpenMode::ReadWrite => {
            options.write(true);
        }
        OpenMode::CreateNew => {
            options.write(true).create_new(true);
        }
        OpenMode::Truncate => {
            options.write(true).create(true).truncate(true);
        }
        OpenMode::WriteDirect => return open_direct(path),
    }
    options.open(path)
}

/// Opens an existing `path` for reading and `O_DIRECT` writes; where the file system refuses
/// `O_DIRECT` (`EINVAL`, as tmpfs does), for ordinary writes.
fn open_direct(path: &Path) -> io::Result<File> {
    let mut options = OpenOptions::new();
    options.read(true).write(true);
    #[cfg(target_os = "linux")]
    {
        use std::os::unix::fs::OpenOptionsExt;
        let direct = rustix::fs::OFlags::DIRECT.bits() as i32;
        match options.clone().custom_flags(direct).open(path) {
            Err(e) if e.raw_os_error() == Some(rustix::io::Errno::INVAL.raw_os_error()) => {}
            opened => return opened,
        }
    }
    options.open(path)
}

/// Lists a real directory.
pub(super) fn list_real(path: &Path) -> io::Result<Vec<DirEntry>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(path)? {
        let entry = entry?;
        let Ok(name) = entry.file_name().into_string() else {
            continue;
        };
        let kind = if entry.file_type()?.is_dir() {
            EntryKind::Dir
        } else {
            EntryKind::File
        };
        out.push(DirEntry { name, kind });
    }
    Ok(out)
}

/// What a real path names.
pub(super) fn kind_real(path: &Path) -> io::Result<Option<EntryKind>> {
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => Ok(Some(EntryKind::Dir)),
        Ok(_) => Ok(Some(EntryKind::File)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
}

/// Reserves blocks for `[0, len)` of a real file, leaving its length alone (a range already
/// reserved costs one system call). Nothing is reserved where the file system cannot
/// preallocate (`EOPNOTSUPP`: ext2/ext3-format, many FUSE file systems, NFSv3) or where a
/// preallocated block is no promise for an overwrite (copy-on-write: btrfs, ZFS, bcachefs).
pub(super) fn reserve_real(file: &File, len: u64) -> io::Result<Reservation> {
    if copy_on_write(file)? {
        return Ok(Reservation::Unsupported);
    }
    match rustix::fs::fallocate(file, rustix::fs::FallocateFlags::KEEP_SIZE, 0, len) {
        Ok(()) => Ok(Reservation::Reserved),
        Err(rustix::io::Errno::OPNOTSUPP) => Ok(Reservation::Unsupported),
        Err(e) => Err(e.into()),
    }
}

/// True when `file` lives on a copy-on-write file system, whose overwrites take new blocks.
fn copy_on_write(file: &File) -> io::Result<bool> {
    const BTRFS: i64 = 0x9123_683E;
    const ZFS: i64 = 0x2FC1_2FC1;
    const BCACHEFS: i64 = 0xCA45_1A4E;
    let stat = rustix::fs::fstatfs(file)?;
    #[allow(clippy::unnecessary_cast, clippy::useless_conversion)]
    let kind = i64::from(stat.f_type as i64);
    Ok(matches!(kind, BTRFS | ZFS | BCACHEFS))
}

/// One past the end of the last data region of a real file (its length where the file system
/// cannot tell): a scan for the file's last non-zero byte need not read the holes after it.
pub(super) fn data_end_real(file: &File) -> io::Result<u64> {
    use rustix::fs::{seek, SeekFrom};
    let len = file.metadata()?.len();
    let (mut end, mut at) = (0, 0);
    while at < len {
        let data = match seek(file, SeekFrom::Data(at)) {
            Ok(data) => data,
            Err(rustix::io::Errno::NXIO) => break,
            Err(rustix::io::Errno::INVAL | rustix::io::Errno::OPNOTSUPP) => return Ok(len),
            Err(e) => return Err(e.into()),
        };
        let hole = seek(file, SeekFrom::Hole(data))?;
        if hole <= data {
            // Not what SEEK_HOLE promises (a data region holds a byte): trust the length.
            return Ok(len);
        }
        (end, at) = (hole, hole);
    }
    Ok(end.min(len))
}

/// Maps a real file read-only.
pub(super) fn map_real(file: &File) -> io::Result<Bytes> {
    // SAFETY: the mapping is read-only and shared. Strata maps a file only where its format
    // guarantees the mapped range is never cut or rewritten while mapped: sealed segments are
    // never written, truncated or rewritten in place (compaction renames a new file over the
    // name, retention unlinks it; the mapped inode stays intact), and the store's LOCK keeps
    // other Strata processes out. Bytes past a concurrent append are simply not in the range.
    let map = unsafe { Mmap::map(file) }?;
    Ok(Bytes::from_owner(map))
}

/// Hints the processor to bring the cache line holding `byte` into its caches (a no-op on
/// targets without a prefetch instruction). Readers of long mappings use it to start the
/// memory miss of a page they will reach soon.
#[inline]
pub fn prefetch(byte: &u8) {
    prefetch_at(std::ptr::from_ref(byte));
}

/// [`prefetch`] of any address, mapped or not, inside an allocation or past it: the hint is
/// dropped where there is no memory to fetch.
#[inline]
pub fn prefetch_at(at: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0 is a hint: it never faults (an address with no mapping or no page is
    // ignored), reads no value into the program and changes no memory, so no address makes it
    // unsound. SSE (which holds the instruction) is part of the x86_64 baseline.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(at.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = at;
}

/// Bytes at the start of a writable mapping that are faulted in one page at a time, without
/// read-around: a small log's first appends never zero-fill a readahead window.
pub const RANDOM_HEAD: usize = 256 << 10;

/// A writable shared mapping of a real file.
#[derive(Debug, Clone)]
pub struct RealMap {
    raw: Arc<MmapRaw>,
}

impl RealMap {
    /// Maps `[0, len)` of `file` writable and shared, with the kernel's default read-around
    /// past its first [`RANDOM_HEAD`] bytes: a fault in a fresh region of a file whose length
    /// does not change (a segment is created at its full length) puts the region in the page
    /// cache as large folios, and each write fault then maps a whole folio. 1 GiB of buffered
    /// 1 KiB appends took ~32k faults, against ~180k with `MADV_RANDOM` everywhere (one 4 KiB
    /// page per fault, as segments that grew by 4 MiB chunks also took). The cost: a fault in a
    /// fresh region zero-fills up to the device's readahead window (8 MiB here, ~3 ms), which the
    /// prefault thread mostly takes ahead of the writer. The head is `MADV_RANDOM`, so a small
    /// log's first appends fault page by page instead (a first 32 KiB append into a fresh log:
    /// ~0.4 ms, against ~3 ms with read-around from the start).
    pub fn map(file: &File, len: u64) -> io::Result<Self> {
        let len = usize::try_from(len).map_err(io::Error::other)?;
        let raw = MmapOptions::new().len(len).map_raw(file)?;
        raw.advise_range(memmap2::Advice::Random, 0, len.min(RANDOM_HEAD))?;
        Ok(Self { raw: Arc::new(raw) })
    }
}

/// The owner of a read-only view of a [`RealMap`]'s prefix.
struct MapView {
    raw: Arc<MmapRaw>,
    len: usize,
}

impl AsRef<[u8]> for MapView {
    fn as_ref(&self) -> &[u8] {
        // SAFETY: `len <= raw.len()` (checked by `view`), so the range lies inside the live
        // mapping, which `raw` keeps alive, and inside the file (callers view only bytes they
        // wrote). Strata views published prefixes, which it never writes again (appends go past
        // them; a rollback or recovery only touches bytes never published), or a writer's own
        // unsynced bytes while it alone may write them; so the bytes do not change while this
        // slice lives.
        unsafe { std::slice::from_raw_parts(self.raw.as_ptr(), self.len) }
    }
}

/// Granularity at which a writer's finished pages are released (see [`RealMap::release`]).
const RELEASE_CHUNK: usize = 2 << 20;

/// Bytes per `madvise` call of a prefault or a read-ahead (see [`RealMap::advise_in_pieces`]).
#[cfg(target_os = "linux")]
const PREFAULT_PIECE: usize = 256 << 10;

impl RealMap {
    /// Releases the chunks a write at `[offset, end)` finished. Writes are appends, so a chunk
    /// the writer moved past is complete; releasing its pages in one call (one TLB flush for the
    /// range) spares writeback a write-protect and a cross-CPU TLB shootdown per page, which
    /// otherwise cost more than the copy itself.
    fn release_behind(&self, offset: usize, end: usize) -> io::Result<()> {
        let boundary = end / RELEASE_CHUNK * RELEASE_CHUNK;
        if offset >= boundary {
            return Ok(());
        }
        self.release(offset / RELEASE_CHUNK * RELEASE_CHUNK, boundary)
    }

    /// Drops this process's page-table entries for the pages of `[start, end)` (memmap2 widens
    /// the range to its first page; the bytes stay, dirty or not, and a later access faults the
    /// page back in).
    fn release(&self, start: usize, end: usize) -> io::Result<()> {
        assert!(start < end && end <= self.raw.len());
        // SAFETY: `[start, end)` lies inside the live mapping (`start < end <= len`; memmap2
        // aligns the start down to its page, still inside the mapping), which is shared and
        // file-backed: MADV_DONTNEED only removes the pages from this process's page tables
        // (dirty bits move to the page cache), so the file's bytes, and every view of them, read
        // the same afterwards, and a concurrent write into the range lands in the same
        // page-cache page (through a fresh fault if need be).
        unsafe {
            self.raw
                .unchecked_advise_range(memmap2::UncheckedAdvice::DontNeed, start, end - start)
        }
    }
}

impl RealMap {
    /// Gives `advice` for `[start, end)` (clamped to the mapping) in [`PREFAULT_PIECE`] pieces,
    /// in order: one call holds the process's mmap lock for its whole range, and every page
    /// fault or mapping change of another thread that queues behind it waits as long (2 MiB of
    /// prefault at once stalled an append's 37 KB pwrite for 2.4 ms).
    #[cfg(target_os = "linux")]
    fn advise_in_pieces(
        &self,
        advice: memmap2::Advice,
        start: usize,
        end: usize,
    ) -> io::Result<()> {
        let end = end.min(self.raw.len());
        for at in (start..end).step_by(PREFAULT_PIECE) {
            self.raw
                .advise_range(advice, at, PREFAULT_PIECE.min(end - at))?;
        }
        Ok(())
    }
}

impl WritableMap for RealMap {
    fn len(&self) -> usize {
        self.raw.len()
    }

    fn write(&self, offset: usize, bytes: &[u8]) -> io::Result<()> {
        let end = offset
            .checked_add(bytes.len())
            .filter(|end| *end <= self.raw.len())
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "write past the mapping"))?;
        assert!(end <= self.raw.len());
        // SAFETY: `[offset, end)` lies inside the live mapping (checked above) and inside the
        // file: callers allocate the file's blocks before they write there (so the store cannot
        // fault past the end or for lack of space), and the file is never cut while mapped. No
        // view covers these bytes: views are of published prefixes (or the writer's own unsynced
        // bytes, read back under its lock), and writers only write past them, one writer at a
        // time (the partition's or the journal's lock).
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                self.raw.as_mut_ptr().add(offset),
                bytes.len(),
            );
        }
        self.release_behind(offset, end)
    }

    /// MADV_POPULATE_WRITE (Linux 5.14+): the write faults of the pages of `[start, end)`
    /// (clamped to the mapping; memmap2 aligns the start to its page) taken now, in the calling
    /// thread. The kernel refuses (EFAULT) rather than signal for pages past the end of the file.
    fn prefault(&self, start: usize, end: usize) -> io::Result<()> {
        #[cfg(target_os = "linux")]
        self.advise_in_pieces(memmap2::Advice::PopulateWrite, start, end)?;
        let _ = (start, end);
        Ok(())
    }

    /// MADV_WILLNEED (clamped to the mapping): the kernel reads the range into the page cache
    /// (zero-filled where the file has no data) without read-around past it.
    fn read_ahead(&self, start: usize, end: usize) -> io::Result<()> {
        #[cfg(target_os = "linux")]
        self.advise_in_pieces(memmap2::Advice::WillNeed, start, end)?;
        let _ = (start, end);
        Ok(())
    }

    fn unmap_from(&self, from: usize) -> io::Result<()> {
        match from < self.raw.len() {
            true => self.release(from, self.raw.len()),
            false => Ok(()),
        }
    }

    fn view(&self, len: usize) -> Bytes {
        assert!(len <= self.raw.len(), "a view past the mapping");
        Bytes::from_owner(MapView {
            raw: self.raw.clone(),
            len,
        })
    }
}

impl FileSystem for RealFs {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<FileRef> {
        Ok(std::sync::Arc::new(RealFile::new(open_real(path, mode)?)))
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }

    fn create_dir(&self, path: &Path) -> io::Result<()> {
        std::fs::create_dir(path)
    }

    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        File::open(path)?.sync_all()
    }

    fn read_dir(&self, path: &Path) -> io::Result<Vec<DirEntry>> {
        list_real(path)
    }

    fn kind(&self, path: &Path) -> io::Result<Option<EntryKind>> {
        kind_real(path)
    }

    fn native_dir(&self, _path: &Path) -> io::Result<()> {
        Ok(())
    }

    fn remove_native_dir(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_dir_all(path)
    }

    fn external_sync(&self, _path: &Path) -> io::Result<()> {
        Ok(())
    }

    fn read_file(&self, path: &Path) -> io::Result<Vec<u8>> {
        std::fs::read(path)
    }
}

impl FileHandle for RealFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.file.read_at(buf, offset)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        self.file.write_all_at(buf, offset)
    }

    fn len(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.file.set_len(len)
    }

    fn reserve(&self, len: u64) -> io::Result<Reservation> {
        reserve_real(&self.file, len)
    }

    fn data_end(&self) -> io::Result<u64> {
        data_end_real(&self.file)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn sync_all(&self) -> io::Result<()> {
        self.file.sync_all()
    }

    fn map(&self) -> io::Result<Bytes> {
        map_real(&self.file)
    }

    fn try_lock(&self) -> io::Result<bool> {
        match self.file.try_lock() {
            Ok(()) => Ok(true),
            Err(std::fs::TryLockError::WouldBlock) => Ok(false),
            Err(std::fs::TryLockError::Error(e)) => Err(e),
        }
    }

    fn map_writable(&self, len: u64) -> io::Result<MapRef> {
        Ok(Arc::new(RealMap::map(&self.file, len)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fs::DIRECT_ALIGN;

    #[test]
    fn a_direct_handle_writes_aligned_blocks_that_an_ordinary_handle_reads() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("direct");
        std::fs::write(&path, vec![0u8; 3 * DIRECT_ALIGN]).unwrap();
        let direct = RealFs.open(&path, OpenMode::WriteDirect).unwrap();
        let mut buf = vec![0u8; 3 * DIRECT_ALIGN];
        let at = buf.as_ptr().align_offset(DIRECT_ALIGN);
        let block = &mut buf[at..at + 2 * DIRECT_ALIGN];
        block.iter_mut().enumerate().for_each(|(i, b)| *b = i as u8);
        direct.write_at(block, DIRECT_ALIGN as u64).unwrap();
        direct.sync_data().unwrap();
        let read = std::fs::read(&path).unwrap();
        assert!(read[..DIRECT_ALIGN].iter().all(|&b| b == 0));
        assert_eq!(&read[DIRECT_ALIGN..], &*block);
    }

    #[test]
    fn reading_a_mapping_ahead_changes_no_byte_and_stops_at_its_end() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sparse");
        let file = RealFs.open(&path, OpenMode::CreateNew).unwrap();
        let len = 4usize << 20;
        file.set_len(len as u64).unwrap();
        let map = file.map_writable(len as u64).unwrap();
        map.write(RANDOM_HEAD + 5000, b"written").unwrap();
        // Past the end (clamped), across written, never written and unallocated pages.
        map.read_ahead(RANDOM_HEAD, 2 * len).unwrap();
        map.read_ahead(len + 1, 2 * len).unwrap();
        let view = map.view(len);
        assert_eq!(&view[RANDOM_HEAD + 5000..RANDOM_HEAD + 5007], b"written");
        let zeros = view.iter().filter(|&&b| b == 0).count();
        assert_eq!(zeros, len - 7, "every other byte still reads as zero");
        assert_eq!(file.len().unwrap(), len as u64, "the file keeps its length");
    }
}
