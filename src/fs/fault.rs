//! [`FaultFs`]: real files, plus what a power cut would keep, plus injected faults.
//!
//! Operations act on real files under a root directory (so memory maps and engines with their
//! own I/O work as usual) and are recorded in a [`Tree`](super::tree) that knows what each sync
//! made durable. A [`FaultPlan`] cuts the power at the Nth operation of some kinds (that
//! operation and every later one fail; [`FaultFs::write_crash_image`] then writes what survives),
//! fails the Nth operation once with an I/O error, or runs the disk full. Syncs are recorded,
//! not performed: durability is what the tree says, so thousands of crash points run fast.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;

use super::image::{write_image, CrashMode, ImageReport};
use super::interleave::{HoldReport, Interleaving, ThreadHold};
use super::real::{data_end_real, kind_real, map_real, open_real, reserve_real, RealMap};
use super::tree::{DirNode, Ino, Node, Tree};
use super::{
    DirEntry, EntryKind, FileHandle, FileRef, FileSystem, MapRef, OpenMode, Reservation,
    WritableMap,
};

/// A kind of operation the plan can count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpKind {
    /// A file or directory created.
    Create,
    /// Bytes written.
    Write,
    /// A file cut, extended or preallocated.
    Resize,
    /// A file synced (fdatasync or fsync).
    Sync,
    /// A directory synced.
    DirSync,
    /// A rename.
    Rename,
    /// An unlink.
    Unlink,
    /// A durability point of an engine with its own I/O (a synced RocksDB write).
    ExternalSync,
}

/// A set of [`OpKind`]s.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpKinds(u16);

impl OpKinds {
    /// Every kind.
    pub const ALL: OpKinds = OpKinds(0xff);
    /// The points where a power cut is most telling: file and directory syncs (the layer's and
    /// native engines'), renames and unlinks.
    pub const SYNC_RENAME_UNLINK: OpKinds = OpKinds(
        1 << OpKind::Sync as u16
            | 1 << OpKind::DirSync as u16
            | 1 << OpKind::ExternalSync as u16
            | 1 << OpKind::Rename as u16
            | 1 << OpKind::Unlink as u16,
    );

    /// Just `kind`.
    pub const fn only(kind: OpKind) -> OpKinds {
        OpKinds(1 << kind as u16)
    }

    /// Whether `kind` is in the set.
    pub fn contains(self, kind: OpKind) -> bool {
        self.0 & (1 << kind as u16) != 0
    }
}

/// What the layer injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FaultPlan {
    /// Nothing: every operation succeeds as on the real file system.
    #[default]
    None,
    /// The power fails just before operation number `n` (counted from 0) among those of
    /// `kinds`: it and every later operation fail with an I/O error.
    CrashAt {
        /// Index of the operation that never happens.
        n: u64,
        /// Kinds counted.
        kinds: OpKinds,
    },
    /// Operation number `n` among those of `kinds` fails once with an I/O error (EIO).
    FailAt {
        /// Index of the failing operation.
        n: u64,
        /// Kinds counted.
        kinds: OpKinds,
    },
    /// Writes, extensions and preallocations fail with ENOSPC once files grew by `bytes` in
    /// all (counted from when the plan was set).
    DiskFull {
        /// Bytes of growth allowed.
        bytes: u64,
    },
}

#[derive(Debug)]
struct State {
    tree: Tree,
    plan: FaultPlan,
    /// Operations counted toward the plan since it was set.
    counted: u64,
    /// Operations of each kind since the layer was made.
    totals: [u64; 8],
    /// Growth since the plan was set.
    grown: u64,
    /// Why the power is off, once it is.
    crashed: Option<String>,
    /// How long each sync takes (a slow disk); default zero.
    sync_delay: std::time::Duration,
    /// What [`FileHandle::reserve`] answers: a file system without fallocate says
    /// [`Reservation::Unsupported`] and reserves nothing.
    reservation: Reservation,
    /// A mapped write that a full disk would have answered with SIGBUS (the file had no blocks
    /// there), if one was made.
    sigbus: Option<String>,
}

impl State {
    /// Counts one operation of `kind` and applies the plan to it.
    fn admit(&mut self, kind: OpKind, what: &Path) -> io::Result<()> {
        if let Some(reason) = &self.crashed {
            return Err(io::Error::other(format!("power is off ({reason})")));
        }
        self.totals[kind as usize] += 1;
        match self.plan {
            FaultPlan::CrashAt { n, kinds } if kinds.contains(kind) => {
                self.counted += 1;
                if self.counted - 1 == n {
                    let reason = format!("power cut at {kind:?} #{n} on {}", what.display());
                    self.crashed = Some(reason.clone());
                    return Err(io::Error::other(reason));
                }
            }
            FaultPlan::FailAt { n, kinds } if kinds.contains(kind) => {
                self.counted += 1;
                if self.counted - 1 == n {
                    return Err(io::Error::from_raw_os_error(
                        rustix::io::Errno::IO.raw_os_error(),
                    ));
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Charges `growth` bytes against a disk-full plan.
    fn grow(&mut self, growth: u64) -> io::Result<()> {
        if let FaultPlan::DiskFull { bytes } = self.plan {
            if self.grown + growth > bytes {
                return Err(io::Error::from_raw_os_error(
                    rustix::io::Errno::NOSPC.raw_os_error(),
                ));
            }
        }
        self.grown += growth;
        Ok(())
    }

    fn check_alive(&self) -> io::Result<()> {
        match &self.crashed {
            Some(reason) => Err(io::Error::other(format!("power is off ({reason})"))),
            None => Ok(()),
        }
    }
}

/// A file system for crash and fault tests (see the module docs of [`crate::fs`]).
#[derive(Debug, Clone)]
pub struct FaultFs {
    state: Arc<Mutex<State>>,
    hold: Arc<Interleaving>,
    root: PathBuf,
}

static GRAVEYARDS: AtomicU64 = AtomicU64::new(0);

impl FaultFs {
    /// A layer over the existing directory `root`, whose current contents count as durable.
    /// Every path Strata uses must lie under `root`.
    pub fn new(root: &Path) -> io::Result<Self> {
        let name = root.file_name().and_then(|n| n.to_str()).unwrap_or("root");
        let graveyard = root.with_file_name(format!(
            ".{name}.graveyard-{}-{}",
            std::process::id(),
            GRAVEYARDS.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&graveyard)?;
        let tree = Tree::scan(root, graveyard)?;
        Ok(Self {
            state: Arc::new(Mutex::new(State {
                tree,
                plan: FaultPlan::None,
                counted: 0,
                totals: [0; 8],
                grown: 0,
                crashed: None,
                sync_delay: std::time::Duration::ZERO,
                reservation: Reservation::Reserved,
                sigbus: None,
            })),
            hold: Arc::default(),
            root: root.to_path_buf(),
        })
    }

    /// The layer as a shared file system handle.
    pub fn shared(&self) -> super::Fs {
        Arc::new(self.clone())
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Replaces the plan; the counts it uses start again from zero.
    pub fn set_plan(&self, plan: FaultPlan) {
        let mut state = self.lock();
        state.plan = plan;
        state.counted = 0;
        state.grown = 0;
    }

    /// Disk space files took since the plan was last set: bytes written past a file's end and
    /// blocks reserved (what a disk-full plan counts; a sparse extension takes none).
    pub fn grown(&self) -> u64 {
        self.lock().grown
    }

    /// Operations of `kinds` performed (or refused by the plan) since the layer was made.
    pub fn count(&self, kinds: OpKinds) -> u64 {
        let state = self.lock();
        (0..8u16)
            .filter(|k| kinds.0 & (1 << k) != 0)
            .map(|k| state.totals[k as usize])
            .sum()
    }

    /// Makes every file, directory and native-engine sync take `delay` (a slow disk), so tests
    /// can see who waits for syncs. The wait happens outside the layer's lock.
    pub fn set_sync_delay(&self, delay: std::time::Duration) {
        self.lock().sync_delay = delay;
    }

    fn sync_pause(state: &Mutex<State>) {
        let delay = state.lock().unwrap_or_else(|p| p.into_inner()).sync_delay;
        if !delay.is_zero() {
            std::thread::sleep(delay);
        }
    }

    /// Holds a thread before one of its operations while the others go on (see
    /// `fs::interleave`); `None` lifts the hold.
    pub fn hold_thread(&self, hold: Option<ThreadHold>) {
        self.hold.set(hold);
    }

    /// What the current thread hold saw.
    pub fn hold_report(&self) -> HoldReport {
        self.hold.report()
    }

    /// Makes the layer a file system that cannot reserve blocks (no fallocate): every
    /// [`FileHandle::reserve`] answers [`Reservation::Unsupported`] and reserves nothing.
    pub fn set_reservation(&self, reservation: Reservation) {
        self.lock().reservation = reservation;
    }

    /// The mapped write a full disk would have killed the process for (SIGBUS), if one was
    /// made: a write through a mapping into blocks the file does not have, refused by a
    /// disk-full plan. The layer answers it with an error instead, and remembers it here.
    pub fn sigbus(&self) -> Option<String> {
        self.lock().sigbus.clone()
    }

    /// Why the power is off, if a [`FaultPlan::CrashAt`] fired.
    pub fn crashed(&self) -> Option<String> {
        self.lock().crashed.clone()
    }

    /// Cuts the power now: every later operation fails.
    pub fn cut_power(&self) {
        let mut state = self.lock();
        state
            .crashed
            .get_or_insert_with(|| "power cut by the test".into());
    }

    /// Writes into `dest` (created if absent, must be empty) what a power cut now would leave,
    /// choosing unsynced outcomes as `mode` says. Call it once the store above has stopped
    /// (native engines closed), normally after the power was cut.
    pub fn write_crash_image(&self, dest: &Path, mode: CrashMode) -> io::Result<ImageReport> {
        std::fs::create_dir_all(dest)?;
        write_image(&self.lock().tree, dest, mode)
    }

    fn file(&self, ino: Ino, file: File) -> FileRef {
        Arc::new(FaultFile {
            state: self.state.clone(),
            hold: self.hold.clone(),
            ino,
            file: Arc::new(file),
        })
    }
}

impl Drop for State {
    fn drop(&mut self) {
        // The graveyard may never have been created (nothing was unlinked).
        if let Err(e) = std::fs::remove_dir_all(&self.tree.graveyard) {
            if e.kind() != io::ErrorKind::NotFound {
                tracing::warn!(dir = %self.tree.graveyard.display(), error = %e, "could not remove the fault layer's graveyard");
            }
        }
    }
}

impl FileSystem for FaultFs {
    fn open(&self, path: &Path, mode: OpenMode) -> io::Result<FileRef> {
        match mode {
            OpenMode::Read => {}
            OpenMode::Truncate => self.pass(OpKind::Resize),
            OpenMode::ReadWrite | OpenMode::WriteDirect => self.pass(OpKind::Write),
            OpenMode::CreateNew => self.pass(OpKind::Create),
        }
        let mut state = self.lock();
        let existing = state.tree.lookup(path)?;
        if mode == OpenMode::Read && existing.is_none() && self.inside_native(&state, path) {
            // An engine's own file (a backup reading a RocksDB checkpoint): reading it changes
            // nothing the layer tracks.
            state.check_alive()?;
            return super::RealFs.open(path, mode);
        }
        match (mode, existing) {
            (OpenMode::Read, _) => state.check_alive()?,
            (OpenMode::ReadWrite | OpenMode::WriteDirect, _) => state.admit(OpKind::Write, path)?,
            (OpenMode::CreateNew, Some(_)) => {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    path.display().to_string(),
                ))
            }
            (OpenMode::Truncate, Some(_)) => state.admit(OpKind::Resize, path)?,
            (_, None) => state.admit(OpKind::Create, path)?,
        }
        let ino = match existing {
            Some(ino) => ino,
            None => {
                let file = open_real(path, mode)?;
                let ino = state.tree.create_file(path)?;
                return Ok(self.file(ino, file));
            }
        };
        // Cutting an existing file: save its durable bytes before they are gone.
        // The layer records every write itself; its real file needs no direct I/O.
        let real_mode = if matches!(mode, OpenMode::Truncate | OpenMode::WriteDirect) {
            OpenMode::ReadWrite
        } else {
            mode
        };
        let file = open_real(path, real_mode)?;
        if mode == OpenMode::Truncate {
            if let Some(node) = state.tree.file_mut(ino) {
                node.preserve(&file, 0, u64::MAX)?;
                node.allocated = 0;
            }
            file.set_len(0)?;
        }
        Ok(self.file(ino, file))
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.pass(OpKind::Rename);
        let mut state = self.lock();
        state.admit(OpKind::Rename, from)?;
        let (_, replaced) = state.tree.rename(from, to)?;
        if let Some(old) = replaced {
            state.tree.bury(old)?;
        }
        std::fs::rename(from, to)
    }

    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.pass(OpKind::Unlink);
        let mut state = self.lock();
        state.admit(OpKind::Unlink, path)?;
        let ino = state.tree.unlink(path)?;
        state.tree.bury(ino)
    }

    fn create_dir(&self, path: &Path) -> io::Result<()> {
        self.pass(OpKind::Create);
        let mut state = self.lock();
        if state.tree.lookup(path)?.is_some() {
            return Err(io::Error::new(
                io::ErrorKind::AlreadyExists,
                path.display().to_string(),
            ));
        }
        state.admit(OpKind::Create, path)?;
        std::fs::create_dir(path)?;
        state.tree.create_dir(path)?;
        Ok(())
    }

    fn sync_dir(&self, path: &Path) -> io::Result<()> {
        self.pass(OpKind::DirSync);
        Self::sync_pause(&self.state);
        let mut state = self.lock();
        state.admit(OpKind::DirSync, path)?;
        if self.root.starts_with(path) && self.root != path {
            // A directory holding the layer's root: its entries are not the layer's to track
            // (the root itself counts as durable).
            return Ok(());
        }
        let ino = state
            .tree
            .lookup(path)?
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, path.display().to_string()))?;
        if let Ok(dir) = state.tree.dir_mut(ino) {
            dir.durable = dir.current.clone();
            dir.pending.clear();
        }
        state.tree.collect_garbage()
    }

    fn read_dir(&self, path: &Path) -> io::Result<Vec<DirEntry>> {
        let state = self.lock();
        state.check_alive()?;
        let ino = state.tree.lookup(path)?;
        let native = ino.and_then(|i| state.tree.nodes.get(&i));
        if matches!(native, Some(Node::Native(_)))
            || (ino.is_none() && self.inside_native(&state, path))
        {
            // The engine's names, as they are on disk.
            return super::RealFs.read_dir(path);
        }
        let Some(Node::Dir(dir)) = ino.and_then(|i| state.tree.nodes.get(&i)) else {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                path.display().to_string(),
            ));
        };
        Ok(dir
            .current
            .iter()
            .map(|(name, ino)| DirEntry {
                name: name.clone(),
                kind: match state.tree.nodes.get(ino) {
                    Some(Node::File(_)) => EntryKind::File,
                    _ => EntryKind::Dir,
                },
            })
            .collect())
    }

    fn kind(&self, path: &Path) -> io::Result<Option<EntryKind>> {
        let state = self.lock();
        state.check_alive()?;
        match state.tree.lookup(path)? {
            Some(ino) => Ok(Some(match state.tree.nodes.get(&ino) {
                Some(Node::File(_)) => EntryKind::File,
                _ => EntryKind::Dir,
            })),
            // Inside a native directory the layer does not track names.
            None => kind_real(path).map(|k| k.filter(|_| self.inside_native(&state, path))),
        }
    }

    fn native_dir(&self, path: &Path) -> io::Result<()> {
        let mut state = self.lock();
        state.check_alive()?;
        let Some(ino) = state.tree.lookup(path)? else {
            // A directory the engine made itself (a checkpoint): its entry in the parent is
            // the layer's from now on, unsynced until the parent is synced.
            if !std::fs::metadata(path)?.is_dir() {
                return Err(io::Error::other(format!(
                    "{} is not a directory",
                    path.display()
                )));
            }
            state
                .tree
                .link_new(path, Node::Native(path.to_path_buf()))?;
            return Ok(());
        };
        match state.tree.nodes.get(&ino) {
            Some(Node::Dir(DirNode { current, .. })) if !current.is_empty() => {
                // Whatever the layer tracked inside is the engine's now.
                state
                    .tree
                    .nodes
                    .insert(ino, Node::Native(path.to_path_buf()));
                state.tree.collect_garbage()
            }
            Some(Node::Dir(_)) | Some(Node::Native(_)) => {
                state
                    .tree
                    .nodes
                    .insert(ino, Node::Native(path.to_path_buf()));
                Ok(())
            }
            _ => Err(io::Error::other(format!(
                "{} is not a directory",
                path.display()
            ))),
        }
    }

    fn remove_native_dir(&self, path: &Path) -> io::Result<()> {
        // One name gone, as a file's: the tree buries an engine's directory whole.
        self.remove_file(path)
    }

    fn external_sync(&self, path: &Path) -> io::Result<()> {
        self.pass(OpKind::ExternalSync);
        Self::sync_pause(&self.state);
        self.lock().admit(OpKind::ExternalSync, path)
    }
}

/// Lets `hold` count (or hold) an operation of `kind` by the calling thread, cutting the power
/// first when the hold says so.
fn pass(hold: &Interleaving, state: &Mutex<State>, kind: OpKind) {
    if hold.pass(kind) {
        let mut state = state.lock().unwrap_or_else(|p| p.into_inner());
        state
            .crashed
            .get_or_insert_with(|| format!("power cut after a held operation, before {kind:?}"));
    }
}

impl FaultFs {
    fn pass(&self, kind: OpKind) {
        pass(&self.hold, &self.state, kind);
    }

    fn inside_native(&self, state: &State, path: &Path) -> bool {
        path.ancestors().skip(1).any(|a| {
            matches!(
                state
                    .tree
                    .lookup(a)
                    .ok()
                    .flatten()
                    .and_then(|i| state.tree.nodes.get(&i)),
                Some(Node::Native(_))
            )
        })
    }
}

/// An open file of a [`FaultFs`].
#[derive(Debug)]
struct FaultFile {
    state: Arc<Mutex<State>>,
    hold: Arc<Interleaving>,
    ino: Ino,
    file: Arc<File>,
}

impl FaultFile {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn what(&self, state: &State) -> PathBuf {
        match state.tree.nodes.get(&self.ino) {
            Some(Node::File(f)) => f.real.clone(),
            _ => PathBuf::from(format!("<unlinked file {}>", self.ino)),
        }
    }

    /// Applies the plan to a change of `[start, end)` that takes the disk space `space` says,
    /// saving the durable bytes it overwrites first.
    fn change(
        &self,
        kind: OpKind,
        (start, end): (u64, u64),
        space: Space,
        new: Option<&[u8]>,
    ) -> io::Result<MutexGuard<'_, State>> {
        pass(&self.hold, &self.state, kind);
        let mut state = self.lock();
        let what = self.what(&state);
        state.admit(kind, &what)?;
        let meta = self.file.metadata()?;
        let allocated = state.tree.file_mut(self.ino).map_or(0, |n| n.allocated);
        let growth = match space {
            Space::Extends(new_len) => new_len.saturating_sub(meta.len()),
            Space::Reserves(_) if state.reservation == Reservation::Unsupported => 0,
            Space::Reserves(len) => {
                len.saturating_sub(std::os::unix::fs::MetadataExt::blocks(&meta) * 512)
            }
            Space::Maps(end) => end.saturating_sub(allocated),
            Space::None => 0,
        };
        if let Err(e) = state.grow(growth) {
            if let Space::Maps(_) = space {
                // The real kernel answers this page fault with SIGBUS.
                let at = format!("{} at {start}..{end}", what.display());
                state.sigbus.get_or_insert(at);
                return Err(io::Error::from_raw_os_error(
                    rustix::io::Errno::FAULT.raw_os_error(),
                ));
            }
            return Err(e);
        }
        let reserved = state.reservation == Reservation::Reserved;
        if let Some(node) = state.tree.file_mut(self.ino) {
            match space {
                Space::Maps(end) => node.allocated = node.allocated.max(end),
                Space::Reserves(len) if reserved => node.allocated = node.allocated.max(len),
                _ => {}
            }
            if kind == OpKind::Resize && start != u64::MAX {
                node.allocated = node.allocated.min(start);
            }
            if let Some(new) = new {
                node.keep_versions(&self.file, start, new)?;
            }
            node.preserve(&self.file, start, end)?;
        }
        Ok(state)
    }

    fn synced(&self) -> io::Result<()> {
        pass(&self.hold, &self.state, OpKind::Sync);
        FaultFs::sync_pause(&self.state);
        let mut state = self.lock();
        let what = self.what(&state);
        state.admit(OpKind::Sync, &what)?;
        let len = self.file.metadata()?.len();
        if let Some(node) = state.tree.file_mut(self.ino) {
            node.synced(len);
        }
        Ok(())
    }
}

/// The disk space a change takes (what a disk-full plan charges).
#[derive(Debug, Clone, Copy)]
enum Space {
    /// Written bytes: what they add past the file's length.
    Extends(u64),
    /// Blocks reserved for `[0, len)`: what is not allocated yet.
    Reserves(u64),
    /// Bytes written through a mapping up to this end: what lies past the blocks the file has
    /// (reserved or mapped before).
    Maps(u64),
    /// Nothing (a sparse extension, a cut).
    None,
}

impl FileHandle for FaultFile {
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<usize> {
        self.lock().check_alive()?;
        std::os::unix::fs::FileExt::read_at(&*self.file, buf, offset)
    }

    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        let end = offset + buf.len() as u64;
        let _state = self.change(OpKind::Write, (offset, end), Space::Extends(end), Some(buf))?;
        std::os::unix::fs::FileExt::write_all_at(&*self.file, buf, offset)
    }

    fn len(&self) -> io::Result<u64> {
        self.lock().check_alive()?;
        Ok(self.file.metadata()?.len())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        let _state = self.change(OpKind::Resize, (len, u64::MAX), Space::None, None)?;
        self.file.set_len(len)
    }

    /// Counted as a resize; changes no byte and no length, so a power cut keeps nothing of it
    /// to model.
    fn reserve(&self, len: u64) -> io::Result<Reservation> {
        let state = self.change(
            OpKind::Resize,
            (u64::MAX, u64::MAX),
            Space::Reserves(len),
            None,
        )?;
        match state.reservation {
            Reservation::Unsupported => Ok(Reservation::Unsupported),
            Reservation::Reserved => reserve_real(&self.file, len),
        }
    }

    fn data_end(&self) -> io::Result<u64> {
        self.lock().check_alive()?;
        data_end_real(&self.file)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.synced()
    }

    fn sync_all(&self) -> io::Result<()> {
        self.synced()
    }

    fn map(&self) -> io::Result<Bytes> {
        self.lock().check_alive()?;
        map_real(&self.file)
    }

    fn try_lock(&self) -> io::Result<bool> {
        self.lock().check_alive()?;
        match self.file.try_lock() {
            Ok(()) => Ok(true),
            Err(std::fs::TryLockError::WouldBlock) => Ok(false),
            Err(std::fs::TryLockError::Error(e)) => Err(e),
        }
    }

    fn map_writable(&self, len: u64) -> io::Result<MapRef> {
        self.lock().check_alive()?;
        Ok(Arc::new(FaultMap {
            map: RealMap::map(&self.file, len)?,
            handle: FaultFile {
                state: self.state.clone(),
                hold: self.hold.clone(),
                ino: self.ino,
                file: self.file.clone(),
            },
        }))
    }
}

/// A writable mapping of a [`FaultFs`] file: each write is an operation the plan counts, and
/// the durable bytes it overwrites are saved first, as for a positioned write.
#[derive(Debug)]
struct FaultMap {
    map: RealMap,
    handle: FaultFile,
}

impl WritableMap for FaultMap {
    fn len(&self) -> usize {
        self.map.len()
    }

    fn write(&self, offset: usize, bytes: &[u8]) -> io::Result<()> {
        let (start, end) = (offset as u64, (offset + bytes.len()) as u64);
        let _state =
            self.handle
                .change(OpKind::Write, (start, end), Space::Maps(end), Some(bytes))?;
        self.map.write(offset, bytes)
    }

    fn view(&self, len: usize) -> Bytes {
        self.map.view(len)
    }

    /// Passed through: prefaulting changes no byte, so the record of what a power cut keeps
    /// is not touched.
    fn prefault(&self, start: usize, end: usize) -> io::Result<()> {
        self.map.prefault(start, end)
    }

    /// Passed through, like a prefault: no byte changes.
    fn read_ahead(&self, start: usize, end: usize) -> io::Result<()> {
        self.map.read_ahead(start, end)
    }

    /// Passed through, like a prefault: no byte changes.
    fn unmap_from(&self, from: usize) -> io::Result<()> {
        self.map.unmap_from(from)
    }
}
