//! The default cold store: objects as files in a local directory, through Strata's file layer.
//!
//! An object is written to a temporary name beside its final one, synced, renamed into place,
//! and its directory synced (with every directory created on the way), so it is durable before
//! `put` returns and before any cold chunk can reference it. A delete syncs its directory too, so
//! a collected object never comes back. (object_store's `LocalFileSystem` syncs nothing unless
//! told to, which is why Strata does not use it for its default store.)

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;

use super::ColdError;
use crate::fs::{create_dir_durable, remove_if_present, sync_parent, EntryKind, Fs, OpenMode};
use crate::StoreError;

/// Marks a temporary object file (followed by a unique suffix).
pub const TMP_MARK: &str = ".tmp-";

static TMP_SEQUENCE: AtomicU64 = AtomicU64::new(0);

/// A local directory of objects.
#[derive(Debug, Clone)]
pub struct LocalDir {
    fs: Fs,
    root: PathBuf,
}

fn store_error(e: StoreError) -> ColdError {
    match e {
        StoreError::Io { path, source } => ColdError::Io {
            path: path.display().to_string(),
            source,
        },
        other => ColdError::Io {
            path: String::new(),
            source: std::io::Error::other(other.to_string()),
        },
    }
}

fn io_error(path: &Path, source: std::io::Error) -> ColdError {
    ColdError::Io {
        path: path.display().to_string(),
        source,
    }
}

impl LocalDir {
    /// Objects under `root` (created, durably, when absent).
    pub fn open(fs: Fs, root: &Path) -> Result<Self, ColdError> {
        create_dir_durable(&*fs, root).map_err(store_error)?;
        Ok(Self {
            fs,
            root: root.to_path_buf(),
        })
    }

    /// The file of object `path`; refuses paths that would leave the directory, and names of
    /// temporary files.
    fn file(&self, path: &str) -> Result<PathBuf, ColdError> {
        if path.contains(TMP_MARK) {
            return Err(ColdError::Config(format!(
                "object path {path:?} names a temporary file"
            )));
        }
        self.file_or_leftover(path)
    }

    /// The file of object `path`, or of a temporary file an interrupted `put` left (which only
    /// [`Self::delete`] may name); refuses paths that would leave the directory.
    fn file_or_leftover(&self, path: &str) -> Result<PathBuf, ColdError> {
        let parts: Vec<&str> = path.split('/').collect();
        if parts
            .iter()
            .any(|p| p.is_empty() || *p == "." || *p == "..")
        {
            return Err(ColdError::Config(format!(
                "object path {path:?} is not a plain relative path"
            )));
        }
        Ok(parts.iter().fold(self.root.clone(), |dir, p| dir.join(p)))
    }

    /// Writes object `path` durably (see the module docs).
    pub fn put(&self, path: &str, bytes: &[u8]) -> Result<(), ColdError> {
        let file = self.file(path)?;
        let fs = &*self.fs;
        if let Some(dir) = file.parent() {
            create_dir_durable(fs, dir).map_err(store_error)?;
        }
        let mut tmp = file.as_os_str().to_owned();
        tmp.push(format!(
            "{TMP_MARK}{}-{}",
            std::process::id(),
            TMP_SEQUENCE.fetch_add(1, Ordering::Relaxed)
        ));
        let tmp = PathBuf::from(tmp);
        let written = fs
            .open(&tmp, OpenMode::CreateNew)
            .and_then(|f| f.write_at(bytes, 0).and_then(|()| f.sync_data()))
            .and_then(|()| fs.rename(&tmp, &file));
        if let Err(e) = written {
            // Best effort: the orphan sweep removes a leftover temporary file too.
            if let Err(left) = fs.remove_file(&tmp) {
                tracing::warn!(path = %tmp.display(), error = %left, "could not remove the temporary file of a failed upload");
            }
            return Err(io_error(&file, e));
        }
        sync_parent(fs, &file).map_err(store_error)
    }

    /// Reads a whole object.
    pub fn get(&self, path: &str) -> Result<Bytes, ColdError> {
        let file = self.file(path)?;
        self.fs
            .read_file(&file)
            .map(Bytes::from)
            .map_err(|e| io_error(&file, e))
    }

    /// Reads `range` of an object.
    pub fn get_range(&self, path: &str, range: std::ops::Range<u64>) -> Result<Bytes, ColdError> {
        let file = self.file(path)?;
        let handle = self
            .fs
            .open(&file, OpenMode::Read)
            .map_err(|e| io_error(&file, e))?;
        let len = usize::try_from(range.end.saturating_sub(range.start))
            .map_err(|_| ColdError::Config("range too large".into()))?;
        let mut out = vec![0u8; len];
        handle
            .read_exact_at(&mut out, range.start)
            .map_err(|e| io_error(&file, e))?;
        Ok(Bytes::from(out))
    }

    /// The length of object `path`, or `None` when it does not exist.
    pub fn size(&self, path: &str) -> Result<Option<u64>, ColdError> {
        let file = self.file(path)?;
        match self.fs.open(&file, OpenMode::Read) {
            Ok(handle) => handle.len().map(Some).map_err(|e| io_error(&file, e)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_error(&file, e)),
        }
    }

    /// Deletes an object (or a leftover temporary file) durably; an absent one is fine.
    pub fn delete(&self, path: &str) -> Result<(), ColdError> {
        let file = self.file_or_leftover(path)?;
        let fs = &*self.fs;
        if fs.kind(&file).map_err(|e| io_error(&file, e))?.is_none() {
            return Ok(());
        }
        remove_if_present(fs, &file).map_err(store_error)?;
        sync_parent(fs, &file).map_err(store_error)
    }

    /// Every object (and leftover temporary file) whose path starts with `prefix`.
    pub fn list(&self, prefix: &str) -> Result<Vec<String>, ColdError> {
        let dir_part = prefix.rsplit_once('/').map_or("", |(d, _)| d);
        let start = if dir_part.is_empty() {
            self.root.clone()
        } else {
            self.file(dir_part)?
        };
        let mut out = Vec::new();
        self.walk(&start, &relative(&self.root, &start), &mut out)?;
        out.retain(|p| p.starts_with(prefix));
        Ok(out)
    }

    fn walk(&self, dir: &Path, rel: &str, out: &mut Vec<String>) -> Result<(), ColdError> {
        let entries = match self.fs.read_dir(dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(io_error(dir, e)),
        };
        for entry in entries {
            let path = if rel.is_empty() {
                entry.name.clone()
            } else {
                format!("{rel}/{}", entry.name)
            };
            match entry.kind {
                EntryKind::Dir => self.walk(&dir.join(&entry.name), &path, out)?,
                EntryKind::File => out.push(path),
            }
        }
        Ok(())
    }
}

/// `dir` relative to `root`, with `/` separators.
fn relative(root: &Path, dir: &Path) -> String {
    dir.strip_prefix(root)
        .map(|r| {
            r.components()
                .filter_map(|c| c.as_os_str().to_str())
                .collect::<Vec<_>>()
                .join("/")
        })
        .unwrap_or_default()
}

/// Runs blocking file work of the local store off the async executor.
pub(crate) async fn off_executor<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, ColdError> + Send + 'static,
) -> Result<T, ColdError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| ColdError::Config(format!("cold store task failed: {e}")))?
}
