//! Writing the crash image: the tree a power cut at this instant could leave behind.
//!
//! A directory keeps its synced entries plus a prefix of the changes made since (a journal
//! writes them back in order; none of them when strict). A file keeps its synced bytes; each page
//! changed since its last sync is kept (new bytes), lost (the synced bytes, zeros past the synced
//! length), an older version written since the sync and overwritten later (write-back may have
//! made it durable at any moment before the overwrite, and a crash keeps the last version written
//! back: so a page may hold any version ever written since its sync, independently of the other
//! pages), filled with stale garbage past the synced length (blocks a file system allocated but
//! never wrote), or torn (each 512-byte sector old or new: sectors are written atomically, so
//! synced bytes are never damaged), and its length is the synced one, the current one, or a page
//! boundary in between. A native directory (RocksDB's) is copied as it is: the engine keeps what
//! it promised (every write it synced) by its own means.

use std::collections::BTreeSet;
use std::io;
use std::path::Path;

use super::tree::{FileNode, Ino, Node, Tree, PAGE, ROOT};

/// Which unsynced state a crash image keeps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashMode {
    /// Nothing unsynced survives: the strictest power cut.
    Strict,
    /// Everything written survives (what a process crash, SIGKILL, leaves).
    KeepAll,
    /// Like [`CrashMode::KeepAll`], except that each page overwritten since its last sync
    /// holds the first version overwritten: write-back ran just before the overwrite, and the
    /// overwrite itself never reached the disk (an undo of a failed write lost, the failed
    /// bytes kept).
    Overwritten,
    /// Each unsynced page and each directory's unsynced changes survive or not, chosen by a
    /// generator seeded with `seed` (print it to replay a failure).
    Random {
        /// Seed of the choices.
        seed: u64,
    },
}

/// What a crash image kept and lost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ImageReport {
    /// Files written into the image.
    pub files: u64,
    /// Unsynced pages kept whole.
    pub pages_kept: u64,
    /// Unsynced pages lost (their synced bytes, or zeros, instead).
    pub pages_lost: u64,
    /// Unsynced pages whose never-synced bytes hold stale garbage.
    pub pages_garbage: u64,
    /// Unsynced pages torn sector by sector.
    pub pages_torn: u64,
    /// Unsynced pages holding an older version written since their sync and overwritten later.
    pub pages_older: u64,
    /// Unsynced directory changes kept.
    pub dir_ops_kept: u64,
    /// Unsynced directory changes lost.
    pub dir_ops_lost: u64,
}

/// SplitMix64: small, seedable, good enough to pick crash outcomes.
struct Chooser {
    mode: CrashMode,
    state: u64,
}

impl Chooser {
    fn next(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `[0, n]`, or the strict (`0`) / keep-all (`n`) extreme.
    fn upto(&mut self, n: u64) -> u64 {
        match self.mode {
            CrashMode::Strict => 0,
            CrashMode::KeepAll | CrashMode::Overwritten => n,
            CrashMode::Random { .. } => self.next() % (n + 1),
        }
    }
}

/// The fate of one unsynced page.
enum Fate {
    Kept,
    Lost,
    /// The overwritten version with this index.
    Older(usize),
    Garbage,
    Torn,
}

impl Chooser {
    /// The fate of a page with `older` overwritten versions.
    fn fate(&mut self, older: usize) -> Fate {
        match self.mode {
            CrashMode::Strict => Fate::Lost,
            CrashMode::KeepAll => Fate::Kept,
            CrashMode::Overwritten if older > 0 => Fate::Older(0),
            CrashMode::Overwritten => Fate::Kept,
            CrashMode::Random { .. } => match self.next() % 20 {
                0..=5 => Fate::Kept,
                6..=11 => Fate::Lost,
                12..=14 if older > 0 => Fate::Older(self.next() as usize % older),
                12..=14 => Fate::Kept,
                15..=16 => Fate::Garbage,
                _ => Fate::Torn,
            },
        }
    }

    /// The length a file with synced length `durable` and current length `current` has.
    fn length(&mut self, durable: u64, current: u64) -> u64 {
        if durable == current {
            return durable;
        }
        match self.mode {
            CrashMode::Strict => durable,
            CrashMode::KeepAll | CrashMode::Overwritten => current,
            CrashMode::Random { .. } => match self.next() % 3 {
                0 => durable,
                1 => current,
                _ => {
                    let (lo, hi) = (durable.min(current), durable.max(current));
                    let pages = (hi - lo).div_ceil(PAGE);
                    (lo + (self.next() % (pages + 1)) * PAGE).min(hi)
                }
            },
        }
    }
}

/// Writes the crash image of `tree` into `dest` (which must exist and be empty).
pub(super) fn write_image(tree: &Tree, dest: &Path, mode: CrashMode) -> io::Result<ImageReport> {
    let seed = match mode {
        CrashMode::Random { seed } => seed,
        _ => 0,
    };
    let mut chooser = Chooser { mode, state: seed };
    let mut report = ImageReport::default();
    write_dir(tree, ROOT, dest, &mut chooser, &mut report)?;
    Ok(report)
}

fn write_dir(
    tree: &Tree,
    ino: Ino,
    dest: &Path,
    chooser: &mut Chooser,
    report: &mut ImageReport,
) -> io::Result<()> {
    let Some(Node::Dir(dir)) = tree.nodes.get(&ino) else {
        return Ok(());
    };
    let kept = chooser.upto(dir.pending.len() as u64) as usize;
    report.dir_ops_kept += kept as u64;
    report.dir_ops_lost += (dir.pending.len() - kept) as u64;
    for (name, child) in dir.entries_after(kept) {
        let target = dest.join(&name);
        match tree.nodes.get(&child) {
            Some(Node::Dir(_)) => {
                std::fs::create_dir(&target)?;
                write_dir(tree, child, &target, chooser, report)?;
            }
            Some(Node::Native(real)) => copy_tree(real, &target)?,
            Some(Node::File(file)) => {
                report.files += 1;
                std::fs::write(&target, file_image(file, chooser, report)?)?;
            }
            None => {}
        }
    }
    Ok(())
}

/// The bytes a power cut leaves of one file.
fn file_image(
    file: &FileNode,
    chooser: &mut Chooser,
    report: &mut ImageReport,
) -> io::Result<Vec<u8>> {
    let current = std::fs::read(&file.real)?;
    let (durable, now) = (file.durable_len, current.len() as u64);
    let len = chooser.length(durable, now);
    // The synced bytes: saved pages where they changed since, the current bytes elsewhere.
    let mut image = vec![0u8; len as usize];
    let old_end = durable.min(len) as usize;
    let copy = old_end.min(current.len());
    image[..copy].copy_from_slice(&current[..copy]);
    for (&page, bytes) in &file.saved {
        let start = (page * PAGE) as usize;
        if start < old_end {
            let end = (start + bytes.len()).min(old_end);
            image[start..end].copy_from_slice(&bytes[..end - start]);
        }
    }
    let old = image.clone();
    // Pages holding bytes between the synced and the current length changed too.
    let resized = match now.cmp(&durable) {
        std::cmp::Ordering::Equal => 0..0,
        _ => (durable.min(now) / PAGE)..now.max(durable).div_ceil(PAGE),
    };
    let changed: BTreeSet<u64> = file
        .saved
        .keys()
        .chain(file.versions.keys())
        .copied()
        .chain(resized)
        .collect();
    for page in changed {
        let start = (page * PAGE) as usize;
        if start >= image.len() {
            break;
        }
        let end = (start + PAGE as usize).min(image.len());
        let new = |i: usize| current.get(i).copied().unwrap_or(0);
        let older = file.versions.get(&page).map_or(&[][..], Vec::as_slice);
        match chooser.fate(older.len()) {
            Fate::Kept => {
                report.pages_kept += 1;
                (start..end).for_each(|i| image[i] = new(i));
            }
            Fate::Lost => report.pages_lost += 1,
            Fate::Older(k) => {
                report.pages_older += 1;
                let version = &older[k];
                (start..end).for_each(|i| image[i] = version[i - start]);
            }
            Fate::Garbage => {
                report.pages_garbage += 1;
                let from = start.max(durable as usize).min(end);
                for byte in image[from..end].iter_mut() {
                    *byte = chooser.next() as u8;
                }
            }
            Fate::Torn => {
                report.pages_torn += 1;
                for sector in (start..end).step_by(512) {
                    let sector_end = (sector + 512).min(end);
                    let keep_new = chooser.next().is_multiple_of(2);
                    for i in sector..sector_end {
                        image[i] = if keep_new { new(i) } else { old[i] };
                    }
                }
            }
        }
    }
    Ok(image)
}

/// Copies a real directory tree as it is.
fn copy_tree(from: &Path, to: &Path) -> io::Result<()> {
    std::fs::create_dir(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}
