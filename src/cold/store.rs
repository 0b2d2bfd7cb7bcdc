//! The object store behind the cold tier: a local directory (through Strata's file layer, every
//! object durable before `put` returns) or any `object_store` backend (S3-compatible endpoints with the `s3` feature).

use std::collections::HashSet;
use std::ops::Range;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};
use ursula_stream::ColdChunkRef;

use super::cache::ObjectCache;
use super::local::{off_executor, LocalDir};
use super::{decode_cold_object, ColdError, ColdTimeouts, COLD_OBJECT_SUFFIX};
use crate::fs::{Fs, RealFs};
use crate::hold::Holds;

/// Where the objects are.
#[derive(Clone)]
enum Backend {
    /// A local directory through the file layer.
    Local(LocalDir),
    /// Any object store.
    Remote(Arc<dyn ObjectStore>),
}

/// A handle on the object store that holds cold objects (cheap to clone).
#[derive(Clone)]
pub struct ColdStore {
    backend: Backend,
    description: String,
    cache: Arc<ObjectCache>,
    /// Objects whose upload began and has not ended: the orphan sweep leaves them alone.
    uploading: Arc<Mutex<HashSet<String>>>,
    /// Backups in progress that need every object kept (see [`ColdStore::hold_deletes`]).
    delete_holds: Holds,
    /// How uploads are checked ([`ColdStore::put_verified`]).
    upload_check: UploadCheck,
    /// Longest one call to a remote store may take ([`ColdTimeouts::deadline`]).
    deadline: Duration,
}

/// Refuses [`ColdStore::delete`] until dropped (a backup copying what the objects' group
/// state references).
pub type DeleteHold = crate::hold::Hold;

/// An upload in flight, registered with its [`ColdStore`] until dropped.
#[derive(Debug)]
pub struct UploadGuard {
    path: String,
    uploading: Arc<Mutex<HashSet<String>>>,
}

impl Drop for UploadGuard {
    fn drop(&mut self) {
        self.uploading
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&self.path);
    }
}

/// Decoded bytes the object cache of a [`ColdStore`] holds at most, unless
/// [`ColdStore::with_cache_bytes`] says otherwise.
pub const COLD_CACHE_BYTES: usize = 64 << 20;

impl std::fmt::Debug for ColdStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ColdStore")
            .field("at", &self.description)
            .finish()
    }
}

/// How [`ColdStore::put_verified`] checks an upload before a chunk may reference it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum UploadCheck {
    /// The stored size must be exactly the uploaded length (one HEAD). Enough where the store
    /// itself verifies the body: the local store (it writes through the file layer), and S3
    /// with a checksum the server checks (`S3Config::checksum`).
    Size,
    /// The object is read back and compared byte for byte (one GET of the whole object): for
    /// stores that verify nothing.
    ReadBack,
}

impl ColdStore {
    fn with_backend(backend: Backend, description: String, upload_check: UploadCheck) -> Self {
        Self {
            backend,
            description,
            cache: Arc::new(ObjectCache::new(COLD_CACHE_BYTES)),
            uploading: Arc::new(Mutex::new(HashSet::new())),
            delete_holds: Holds::default(),
            upload_check,
            deadline: ColdTimeouts::default().deadline,
        }
    }

    /// The same store failing any call to a remote store that takes longer than `deadline`
    /// with [`ColdError::Timeout`] (default [`ColdTimeouts::deadline`], 30 s; 1 ms to 10
    /// minutes). The local store is not bounded by it.
    pub fn with_deadline(mut self, deadline: Duration) -> Result<Self, ColdError> {
        ColdTimeouts::default()
            .with_request(deadline.min(ColdTimeouts::default().request))
            .with_deadline(deadline)
            .validate()?;
        self.deadline = deadline;
        Ok(self)
    }

    /// Runs one request `operation` on `path` of a remote store within the deadline.
    async fn bounded<T>(
        &self,
        operation: &'static str,
        path: &str,
        request: impl std::future::Future<Output = Result<T, ColdError>>,
    ) -> Result<T, ColdError> {
        match tokio::time::timeout(self.deadline, request).await {
            Ok(answer) => answer,
            Err(_) => Err(ColdError::Timeout {
                operation,
                path: path.to_string(),
                after: self.deadline,
            }),
        }
    }

    /// The same store checking uploads with `check` (default: [`UploadCheck::Size`] for the
    /// local store and S3 with checksums, [`UploadCheck::ReadBack`] otherwise).
    pub fn with_upload_check(mut self, check: UploadCheck) -> Self {
        self.upload_check = check;
        self
    }

    /// How uploads are checked.
    pub fn upload_check(&self) -> UploadCheck {
        self.upload_check
    }

    /// Holds every deletion through this store (and its clones) until the guard drops:
    /// [`ColdStore::delete`] fails with [`ColdError::DeletesHeld`], and cold GC and the orphan
    /// sweep leave their work (from the first refused delete on) for a later run.
    pub fn hold_deletes(&self) -> DeleteHold {
        self.delete_holds.hold()
    }

    /// True while a [`DeleteHold`] is alive.
    pub fn deletes_held(&self) -> bool {
        self.delete_holds.held()
    }

    /// The same store with an object cache of at most `bytes` decoded bytes (default
    /// [`COLD_CACHE_BYTES`], 64 MiB; any value, 0 turns caching off). Clones made after this
    /// share the new cache.
    pub fn with_cache_bytes(mut self, bytes: usize) -> Self {
        self.cache = Arc::new(ObjectCache::new(bytes));
        self
    }

    /// Decoded bytes the object cache holds now.
    pub fn cached_bytes(&self) -> usize {
        self.cache.bytes()
    }

    /// Wraps any object store; uploads are read back ([`UploadCheck::ReadBack`]) unless
    /// [`ColdStore::with_upload_check`] says the store verifies them itself.
    pub fn new(store: Arc<dyn ObjectStore>, description: impl Into<String>) -> Self {
        Self::with_backend(
            Backend::Remote(store),
            description.into(),
            UploadCheck::ReadBack,
        )
    }

    /// A local-directory cold store rooted at `dir` (created when absent) on the real file
    /// system; every object is durable before `put` returns.
    pub fn local(dir: &Path) -> Result<Self, ColdError> {
        Self::local_with_fs(RealFs::shared(), dir)
    }

    /// A local-directory cold store rooted at `dir` through the file layer `fs`.
    pub fn local_with_fs(fs: Fs, dir: &Path) -> Result<Self, ColdError> {
        let local = LocalDir::open(fs, dir)?;
        Ok(Self::with_backend(
            Backend::Local(local),
            format!("file://{}", dir.display()),
            UploadCheck::Size,
        ))
    }

    /// Opens a cold store by URL: `file:///abs/dir` (a local store on the real file system), or
    /// `s3://bucket?endpoint=http://host:port` (credentials and region from `access_key_id`,
    /// `secret_access_key`, `region` query parameters or the usual AWS environment variables;
    /// `allow_http=true` for plain HTTP; `checksum=false` to send no upload checksum;
    /// `connect_timeout_ms`, `request_timeout_ms`, `retries` and `deadline_ms` for
    /// [`ColdTimeouts`]).
    pub fn from_url(url: &str) -> Result<Self, ColdError> {
        let parsed = url::Url::parse(url).map_err(|e| ColdError::Config(format!("{url}: {e}")))?;
        match parsed.scheme() {
            "file" => {
                let path = parsed
                    .to_file_path()
                    .map_err(|_| ColdError::Config(format!("{url}: not a local path")))?;
                Self::local(&path)
            }
            #[cfg(feature = "s3")]
            "s3" => Self::from_s3_url(&parsed, url),
            #[cfg(not(feature = "s3"))]
            "s3" => Err(ColdError::Config(format!(
                "{url}: this build of Strata has no S3 backend (enable its `s3` feature)"
            ))),
            other => Err(ColdError::Config(format!("unsupported scheme {other}"))),
        }
    }

    /// Where the objects live, for messages.
    pub fn description(&self) -> &str {
        &self.description
    }

    /// Registers an upload of `path` as in flight until the guard is dropped (see
    /// [`ColdStore::is_uploading`]).
    pub fn begin_upload(&self, path: &str) -> UploadGuard {
        self.uploading
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(path.to_string());
        UploadGuard {
            path: path.to_string(),
            uploading: self.uploading.clone(),
        }
    }

    /// True while an upload of `path` through this store (or a clone) is in flight.
    pub fn is_uploading(&self, path: &str) -> bool {
        self.uploading
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(path)
    }

    /// Writes an object (durably, for the local store).
    pub async fn put(&self, path: &str, bytes: Bytes) -> Result<(), ColdError> {
        match &self.backend {
            Backend::Local(local) => {
                let (local, path) = (local.clone(), path.to_string());
                off_executor(move || local.put(&path, &bytes)).await
            }
            Backend::Remote(store) => {
                let put = async {
                    store
                        .put(&ObjectPath::from(path), PutPayload::from_bytes(bytes))
                        .await?;
                    Ok(())
                };
                self.bounded("put", path, put).await
            }
        }
    }

    /// Writes an object and checks what the store kept before returning (a store that answers
    /// 200 but keeps a short or altered body must not get a chunk committed on it, as the
    /// flush then reclaims the only other copy): the exact size always, and with
    /// [`UploadCheck::ReadBack`] the bytes themselves.
    pub async fn put_verified(&self, path: &str, bytes: Bytes) -> Result<(), ColdError> {
        let expected = bytes.len() as u64;
        let kept = match self.upload_check {
            UploadCheck::ReadBack => Some(bytes.clone()),
            UploadCheck::Size => None,
        };
        self.put(path, bytes).await?;
        let mismatch = |reason: String| ColdError::Mismatch {
            path: path.to_string(),
            reason,
        };
        match kept {
            Some(sent) => {
                let stored = self.get(path).await?;
                if stored != sent {
                    return Err(mismatch(format!(
                        "read back {} bytes that differ from the {expected} uploaded",
                        stored.len()
                    )));
                }
            }
            None => match self.size(path).await? {
                Some(size) if size == expected => {}
                found => {
                    return Err(mismatch(format!(
                        "the store keeps {} after an upload of {expected} bytes",
                        found.map_or("nothing".to_string(), |s| format!("{s} bytes"))
                    )))
                }
            },
        }
        Ok(())
    }

    /// Reads a whole object.
    pub async fn get(&self, path: &str) -> Result<Bytes, ColdError> {
        match &self.backend {
            Backend::Local(local) => {
                let (local, path) = (local.clone(), path.to_string());
                off_executor(move || local.get(&path)).await
            }
            Backend::Remote(store) => {
                let get = async { Ok(store.get(&ObjectPath::from(path)).await?.bytes().await?) };
                self.bounded("get", path, get).await
            }
        }
    }

    /// Reads a byte range of an object.
    pub async fn get_range(&self, path: &str, range: Range<u64>) -> Result<Bytes, ColdError> {
        match &self.backend {
            Backend::Local(local) => {
                let (local, path) = (local.clone(), path.to_string());
                off_executor(move || local.get_range(&path, range)).await
            }
            Backend::Remote(store) => {
                let get = async { Ok(store.get_range(&ObjectPath::from(path), range).await?) };
                self.bounded("get", path, get).await
            }
        }
    }

    /// The size of object `path`, or `None` when it does not exist.
    pub async fn size(&self, path: &str) -> Result<Option<u64>, ColdError> {
        match &self.backend {
            Backend::Local(local) => {
                let (local, path) = (local.clone(), path.to_string());
                off_executor(move || local.size(&path)).await
            }
            Backend::Remote(store) => {
                let head = async {
                    match store.head(&ObjectPath::from(path)).await {
                        Ok(meta) => Ok(Some(meta.size)),
                        Err(object_store::Error::NotFound { .. }) => Ok(None),
                        Err(e) => Err(e.into()),
                    }
                };
                self.bounded("head", path, head).await
            }
        }
    }

    /// Deletes an object (durably, for the local store); deleting an absent object succeeds
    /// (GC is idempotent).
    pub async fn delete(&self, path: &str) -> Result<(), ColdError> {
        if self.deletes_held() {
            return Err(ColdError::DeletesHeld {
                path: path.to_string(),
            });
        }
        self.cache.remove(path);
        match &self.backend {
            Backend::Local(local) => {
                let (local, path) = (local.clone(), path.to_string());
                off_executor(move || local.delete(&path)).await
            }
            Backend::Remote(store) => {
                let delete = async {
                    match store.delete(&ObjectPath::from(path)).await {
                        Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
                        Err(e) => Err(e.into()),
                    }
                };
                self.bounded("delete", path, delete).await
            }
        }
    }

    /// Paths of every object under `prefix` (a local store lists leftover temporary files of
    /// interrupted uploads too).
    pub async fn list(&self, prefix: &str) -> Result<Vec<String>, ColdError> {
        match &self.backend {
            Backend::Local(local) => {
                let (local, prefix) = (local.clone(), prefix.to_string());
                off_executor(move || local.list(&prefix)).await
            }
            Backend::Remote(store) => {
                let list = async {
                    let prefix = ObjectPath::from(prefix);
                    let metas: Vec<_> = store.list(Some(&prefix)).try_collect().await?;
                    Ok(metas.into_iter().map(|m| m.location.to_string()).collect())
                };
                self.bounded("list", prefix, list).await
            }
        }
    }

    /// The bytes `[skip, skip + len)` of `chunk` (see [`ColdStore::chunk_bytes`]).
    pub async fn read_chunk(
        &self,
        chunk: &ColdChunkRef,
        skip: u64,
        len: u64,
    ) -> Result<Bytes, ColdError> {
        let whole = self.chunk_bytes(chunk).await?;
        let start = usize::try_from(skip).unwrap_or(usize::MAX);
        let end = start.saturating_add(usize::try_from(len).unwrap_or(usize::MAX));
        whole
            .get(start..end)
            .map(|_| whole.slice(start..end))
            .ok_or_else(|| ColdError::Mismatch {
                path: chunk.s3_path.clone(),
                reason: format!(
                    "chunk holds {} bytes, read wants {start}..{end}",
                    whole.len()
                ),
            })
    }

    /// The stream bytes `[start_offset, end_offset)` that `chunk` references, checked against
    /// its length and (when it records one) its BLAKE3 payload digest, so that no intact but
    /// wrong object is ever served as a stream's bytes. A Strata object (`.sco`) is decoded
    /// whole and cached (readers missing the same object at once share one fetch); a raw
    /// object's range is read and checked on every call.
    pub async fn chunk_bytes(&self, chunk: &ColdChunkRef) -> Result<Bytes, ColdError> {
        let (path, digest) = (chunk.s3_path.as_str(), chunk.payload_digest.as_str());
        if !path.ends_with(COLD_OBJECT_SUFFIX) {
            return self.fetch_chunk(chunk).await;
        }
        let fetched = self
            .cache
            .get_or_fetch(path, digest, self.fetch_chunk(chunk));
        let (bytes, hit) = fetched.await?;
        crate::metrics::cold_cache(hit);
        Ok(bytes)
    }

    /// [`ColdStore::chunk_bytes`] from the object store itself, never the cache (what `verify`
    /// reads).
    pub async fn fetch_chunk(&self, chunk: &ColdChunkRef) -> Result<Bytes, ColdError> {
        let path = chunk.s3_path.as_str();
        let len = chunk.end_offset.saturating_sub(chunk.start_offset);
        let bytes = if path.ends_with(COLD_OBJECT_SUFFIX) {
            decode_cold_object(path, &self.get(path).await?)?
        } else {
            let from = chunk.object_offset;
            self.get_range(path, from..from.saturating_add(len)).await?
        };
        check_chunk(chunk, &bytes, len)?;
        Ok(bytes)
    }
}

/// Checks that `bytes`, read for `chunk`, are `len` bytes long and match its payload digest.
fn check_chunk(chunk: &ColdChunkRef, bytes: &[u8], len: u64) -> Result<(), ColdError> {
    let mismatch = |reason: String| ColdError::Mismatch {
        path: chunk.s3_path.clone(),
        reason,
    };
    if bytes.len() as u64 != len {
        return Err(mismatch(format!(
            "holds {} bytes, the chunk [{}, {}) is {len}",
            bytes.len(),
            chunk.start_offset,
            chunk.end_offset
        )));
    }
    if !chunk.payload_digest.is_empty()
        && blake3::hash(bytes).to_hex().as_str() != chunk.payload_digest
    {
        return Err(mismatch(format!(
            "its bytes' BLAKE3 digest differs from the chunk [{}, {})'s",
            chunk.start_offset, chunk.end_offset
        )));
    }
    Ok(())
}
