//! What a power cut would keep, as [`super::FaultFs`] tracks it.
//!
//! Every file and directory under the root is a node (an inode). A file node knows the length
//! its last sync made durable and, for each page changed since, the bytes that sync made durable
//! (saved just before the first change) and the versions written since and overwritten (any of
//! which write-back may have made durable before it was overwritten). A directory node knows its entries as of its last sync
//! and the operations (links and unlinks) since, in order. A file whose name is gone but that a
//! power cut could bring back (its unlink or replacement is not yet durable) keeps its bytes in
//! a graveyard directory outside the root.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Component, Path, PathBuf};

/// Size of the unit a power cut keeps or loses whole (or tears).
pub(super) const PAGE: u64 = 4096;

/// A node number.
pub(super) type Ino = u64;

/// A file's durability record.
#[derive(Debug)]
pub(super) struct FileNode {
    /// Where the file's current bytes live: its name, or the graveyard.
    pub real: PathBuf,
    /// Length made durable by the last sync.
    pub durable_len: u64,
    /// Page number -> that page's durable bytes (clipped to `durable_len`), for every page
    /// changed since the last sync.
    pub saved: BTreeMap<u64, Vec<u8>>,
    /// Page number -> versions of that page written since the last sync and then overwritten
    /// (oldest first, at most [`MAX_VERSIONS`]): write-back may have made any of them durable
    /// before the write that replaced it.
    pub versions: BTreeMap<u64, Vec<Vec<u8>>>,
    /// Bytes from the file's start that have disk blocks (reserved, or written through a
    /// mapping): a mapped write past it needs new blocks, which a full disk answers with
    /// SIGBUS.
    pub allocated: u64,
}

/// Overwritten versions kept per page (the first ones and the latest: a failed write undone by
/// the next one is the case that matters, and it is always the latest).
pub(super) const MAX_VERSIONS: usize = 4;

impl FileNode {
    fn new(real: PathBuf, durable_len: u64) -> Self {
        Self {
            real,
            durable_len,
            saved: BTreeMap::new(),
            versions: BTreeMap::new(),
            allocated: durable_len,
        }
    }

    /// Before `new` is written at `offset` of `file`: keeps the current bytes of every page the
    /// write changes where a byte it changes was written since the last sync (a non-zero byte
    /// of a page changed since, or past the durable length). That version may have reached the
    /// disk by write-back before this write (an undo that zeroes a failed write is one). The
    /// first change of a synced page keeps no version: [`Self::preserve`] keeps its durable
    /// bytes. Call it before `preserve`.
    pub fn keep_versions(&mut self, file: &File, offset: u64, new: &[u8]) -> io::Result<()> {
        let end = offset + new.len() as u64;
        for page in offset / PAGE..end.div_ceil(PAGE) {
            let from = page * PAGE;
            if !self.saved.contains_key(&page) && from + PAGE <= self.durable_len {
                continue;
            }
            let bytes = read_at_most(file, from, PAGE)?;
            let (a, b) = (offset.max(from), end.min(from + PAGE));
            let changes_written = (a..b).any(|i| {
                let current = bytes[(i - from) as usize];
                current != 0 && current != new[(i - offset) as usize]
            });
            if !changes_written {
                continue;
            }
            let kept = self.versions.entry(page).or_default();
            if kept.len() == MAX_VERSIONS {
                kept.remove(MAX_VERSIONS - 2);
            }
            kept.push(bytes);
        }
        Ok(())
    }

    /// Saves the durable bytes of every page of `[start, end)` about to change, reading them
    /// from `file` (still unchanged there, since a page is saved before its first change).
    pub fn preserve(&mut self, file: &File, start: u64, end: u64) -> io::Result<()> {
        let end = end.min(self.durable_len);
        if start >= end {
            return Ok(());
        }
        for page in start / PAGE..end.div_ceil(PAGE) {
            if self.saved.contains_key(&page) {
                continue;
            }
            let from = page * PAGE;
            let to = ((page + 1) * PAGE).min(self.durable_len);
            let bytes = read_at_most(file, from, to - from)?;
            self.saved.insert(page, bytes);
        }
        Ok(())
    }

    /// Everything up to `len` is durable now.
    pub fn synced(&mut self, len: u64) {
        self.durable_len = len;
        self.saved.clear();
        self.versions.clear();
    }
}

/// `len` bytes of `file` from `from`, zeros where the file ends sooner.
fn read_at_most(file: &File, from: u64, len: u64) -> io::Result<Vec<u8>> {
    let mut bytes = vec![0u8; len as usize];
    let mut read = 0;
    while read < bytes.len() {
        match file.read_at(&mut bytes[read..], from + read as u64)? {
            0 => break,
            n => read += n,
        }
    }
    Ok(bytes)
}

/// One change to a directory's entries.
#[derive(Debug, Clone)]
pub(super) enum DirOp {
    /// `name` now names the node.
    Link(String, Ino),
    /// `name` no longer names anything.
    Unlink(String),
}

/// A directory's durability record.
#[derive(Debug, Default)]
pub(super) struct DirNode {
    /// Entries now.
    pub current: BTreeMap<String, Ino>,
    /// Entries as of the last sync of the directory.
    pub durable: BTreeMap<String, Ino>,
    /// Changes since that sync, oldest first.
    pub pending: Vec<DirOp>,
}

impl DirNode {
    fn apply(&mut self, op: DirOp) {
        match &op {
            DirOp::Link(name, ino) => self.current.insert(name.clone(), *ino),
            DirOp::Unlink(name) => self.current.remove(name),
        };
        self.pending.push(op);
    }

    /// The entries after the durable state plus the first `kept` pending operations.
    pub fn entries_after(&self, kept: usize) -> BTreeMap<String, Ino> {
        let mut entries = self.durable.clone();
        for op in self.pending.iter().take(kept) {
            match op {
                DirOp::Link(name, ino) => entries.insert(name.clone(), *ino),
                DirOp::Unlink(name) => entries.remove(name),
            };
        }
        entries
    }
}

/// A node.
#[derive(Debug)]
pub(super) enum Node {
    /// A regular file.
    File(FileNode),
    /// A directory whose entries the layer tracks.
    Dir(DirNode),
    /// A directory an engine with its own I/O owns; its real contents are copied as they are.
    Native(PathBuf),
}

/// Every node under the root.
#[derive(Debug)]
pub(super) struct Tree {
    pub root: PathBuf,
    pub graveyard: PathBuf,
    pub nodes: HashMap<Ino, Node>,
    next: Ino,
}

/// The root's node number.
pub(super) const ROOT: Ino = 0;

fn not_found(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        format!("{} is not tracked", path.display()),
    )
}

impl Tree {
    /// Tracks the existing tree at `root` as fully durable.
    pub fn scan(root: &Path, graveyard: PathBuf) -> io::Result<Self> {
        let mut tree = Tree {
            root: root.to_path_buf(),
            graveyard,
            nodes: HashMap::new(),
            next: ROOT + 1,
        };
        let dir = tree.scan_dir(root)?;
        tree.nodes.insert(ROOT, Node::Dir(dir));
        Ok(tree)
    }

    fn scan_dir(&mut self, dir: &Path) -> io::Result<DirNode> {
        let mut node = DirNode::default();
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let Ok(name) = entry.file_name().into_string() else {
                continue;
            };
            let path = entry.path();
            let child = if entry.file_type()?.is_dir() {
                Node::Dir(self.scan_dir(&path)?)
            } else {
                let len = entry.metadata()?.len();
                Node::File(FileNode::new(path, len))
            };
            let ino = self.alloc(child);
            node.current.insert(name.clone(), ino);
            node.durable.insert(name, ino);
        }
        Ok(node)
    }

    fn alloc(&mut self, node: Node) -> Ino {
        let ino = self.next;
        self.next += 1;
        self.nodes.insert(ino, node);
        ino
    }

    /// The components of `path` below the root.
    fn components(&self, path: &Path) -> io::Result<Vec<String>> {
        let rel = path.strip_prefix(&self.root).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "{} is outside the fault layer's root {}",
                    path.display(),
                    self.root.display()
                ),
            )
        })?;
        rel.components()
            .filter(|c| !matches!(c, Component::CurDir))
            .map(|c| match c {
                Component::Normal(s) => s
                    .to_str()
                    .map(str::to_string)
                    .ok_or_else(|| not_found(path)),
                _ => Err(not_found(path)),
            })
            .collect()
    }

    /// The node `path` names now, if the layer tracks it.
    pub fn lookup(&self, path: &Path) -> io::Result<Option<Ino>> {
        let mut ino = ROOT;
        for name in self.components(path)? {
            match self.nodes.get(&ino) {
                Some(Node::Dir(dir)) => match dir.current.get(&name) {
                    Some(&child) => ino = child,
                    None => return Ok(None),
                },
                _ => return Ok(None),
            }
        }
        Ok(Some(ino))
    }

    /// The tracked directory holding `path`, and `path`'s name in it.
    pub fn parent_of(&self, path: &Path) -> io::Result<(Ino, String)> {
        let mut names = self.components(path)?;
        let name = names.pop().ok_or_else(|| not_found(path))?;
        let parent = self.root.join(names.iter().collect::<PathBuf>());
        match self.lookup(&parent)? {
            Some(ino) if matches!(self.nodes.get(&ino), Some(Node::Dir(_))) => Ok((ino, name)),
            _ => Err(not_found(path)),
        }
    }

    /// The directory node `ino`.
    pub fn dir_mut(&mut self, ino: Ino) -> io::Result<&mut DirNode> {
        match self.nodes.get_mut(&ino) {
            Some(Node::Dir(dir)) => Ok(dir),
            _ => Err(io::Error::other(format!("node {ino} is not a directory"))),
        }
    }

    /// The file node `ino`, if it is still tracked.
    pub fn file_mut(&mut self, ino: Ino) -> Option<&mut FileNode> {
        match self.nodes.get_mut(&ino) {
            Some(Node::File(file)) => Some(file),
            _ => None,
        }
    }

    /// Records a new file or directory named `path` (already created for real).
    pub fn link_new(&mut self, path: &Path, node: Node) -> io::Result<Ino> {
        let (parent, name) = self.parent_of(path)?;
        let ino = self.alloc(node);
        self.dir_mut(parent)?.apply(DirOp::Link(name, ino));
        Ok(ino)
    }

    /// Records a new file named `path`.
    pub fn create_file(&mut self, path: &Path) -> io::Result<Ino> {
        self.link_new(path, Node::File(FileNode::new(path.to_path_buf(), 0)))
    }

    /// Records a new directory named `path`.
    pub fn create_dir(&mut self, path: &Path) -> io::Result<Ino> {
        self.link_new(path, Node::Dir(DirNode::default()))
    }

    /// Removes the name `path`; returns the node it named.
    pub fn unlink(&mut self, path: &Path) -> io::Result<Ino> {
        let (parent, name) = self.parent_of(path)?;
        let dir = self.dir_mut(parent)?;
        let ino = *dir.current.get(&name).ok_or_else(|| not_found(path))?;
        dir.apply(DirOp::Unlink(name));
        Ok(ino)
    }

    /// Moves the name `from` to `to` (replacing what `to` named); returns the moved node and
    /// the replaced one.
    pub fn rename(&mut self, from: &Path, to: &Path) -> io::Result<(Ino, Option<Ino>)> {
        let ino = self.unlink(from)?;
        let (parent, name) = self.parent_of(to)?;
        let dir = self.dir_mut(parent)?;
        let replaced = dir.current.get(&name).copied();
        dir.apply(DirOp::Link(name, ino));
        // The real paths under a renamed directory move with it.
        let moved = |real: &Path| {
            let rest = real.strip_prefix(from).ok()?;
            Some(match rest.as_os_str().is_empty() {
                true => to.to_path_buf(),
                false => to.join(rest),
            })
        };
        for node in self.nodes.values_mut() {
            match node {
                Node::File(file) => {
                    if let Some(new) = moved(&file.real) {
                        file.real = new;
                    }
                }
                Node::Native(real) => {
                    if let Some(new) = moved(real) {
                        *real = new;
                    }
                }
                Node::Dir(_) => {}
            }
        }
        Ok((ino, replaced.filter(|&r| r != ino)))
    }

    /// Every node some directory names now, names durably, or may name after a power cut.
    fn referenced(&self) -> HashSet<Ino> {
        let mut set = HashSet::from([ROOT]);
        for node in self.nodes.values() {
            if let Node::Dir(dir) = node {
                set.extend(dir.current.values());
                set.extend(dir.durable.values());
                set.extend(dir.pending.iter().filter_map(|op| match op {
                    DirOp::Link(_, ino) => Some(*ino),
                    DirOp::Unlink(_) => None,
                }));
            }
        }
        set
    }

    /// True when a power cut could bring back a name for `ino`.
    pub fn may_come_back(&self, ino: Ino) -> bool {
        self.nodes.values().any(|node| match node {
            Node::Dir(dir) => {
                dir.durable.values().any(|&i| i == ino)
                    || dir
                        .pending
                        .iter()
                        .any(|op| matches!(op, DirOp::Link(_, i) if *i == ino))
            }
            _ => false,
        })
    }

    /// Moves the bytes of `ino` (whose name is gone: a file, or an engine's directory) into
    /// the graveyard, or deletes them when no power cut could bring them back.
    pub fn bury(&mut self, ino: Ino) -> io::Result<()> {
        let keep = self.may_come_back(ino);
        let graveyard = self.graveyard.join(ino.to_string());
        let real = match self.nodes.get_mut(&ino) {
            Some(Node::File(file)) => &mut file.real,
            Some(Node::Native(real)) => real,
            _ => return Ok(()),
        };
        if keep {
            std::fs::rename(&*real, &graveyard)?;
            *real = graveyard;
        } else {
            remove_real(real)?;
            self.nodes.remove(&ino);
        }
        Ok(())
    }

    /// After a directory sync: forgets nodes nothing can name any more (deleting their buried
    /// bytes).
    pub fn collect_garbage(&mut self) -> io::Result<()> {
        let referenced = self.referenced();
        let dead: Vec<Ino> = self
            .nodes
            .keys()
            .copied()
            .filter(|ino| !referenced.contains(ino))
            .collect();
        for ino in dead {
            let real = match self.nodes.remove(&ino) {
                Some(Node::File(file)) => file.real,
                Some(Node::Native(real)) => real,
                _ => continue,
            };
            if real.starts_with(&self.graveyard) {
                remove_real(&real)?;
            }
        }
        Ok(())
    }
}

/// Deletes a real file, or a real directory with everything in it.
fn remove_real(path: &Path) -> io::Result<()> {
    match std::fs::symlink_metadata(path)?.is_dir() {
        true => std::fs::remove_dir_all(path),
        false => std::fs::remove_file(path),
    }
}
