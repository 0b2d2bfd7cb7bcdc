//! The object store behind the cold tier: a local directory (through Strata's file layer, every
//! object durable before `put` returns) or any `object_store` backend (S3-compatible endpoints).

use std::collections::HashSet;
use std::ops::Range;
use std::path::Path;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::aws::AmazonS3Builder;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutPayload};

use super::cache::ObjectCache;
use super::local::{off_executor, LocalDir};
use super::{decode_cold_object, ColdError, COLD_OBJECT_SUFFIX};
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
    cache: Arc<Mutex<ObjectCache>>,
    /// Objects whose upload began and has not ended: the orphan sweep leaves them alone.
    uploading: Arc<Mutex<HashSet<String>>>,
    /// Backups in progress that need every object kept (see [`ColdStore::hold_deletes`]).
    delete_holds: Holds,
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

/// Settings for an S3-compatible cold store (`S3Config::new(bucket).with_endpoint(...)`).
#[derive(Debug, Clone, Default)]
#[non_exhaustive]
pub struct S3Config {
    /// Bucket name.
    pub bucket: String,
    /// Endpoint URL, e.g. `http://127.0.0.1:9000` (None = AWS).
    pub endpoint: Option<String>,
    /// Region (`us-east-1` when None).
    pub region: Option<String>,
    /// Access key id.
    pub access_key_id: Option<String>,
    /// Secret access key.
    pub secret_access_key: Option<String>,
    /// Allow plain-HTTP endpoints.
    pub allow_http: bool,
}

with_setters!(S3Config {
    with_endpoint => endpoint: Option<String>,
    with_region => region: Option<String>,
    with_access_key_id => access_key_id: Option<String>,
    with_secret_access_key => secret_access_key: Option<String>,
    with_allow_http => allow_http: bool,
});

impl S3Config {
    /// Settings for `bucket` on AWS (set the endpoint for any other S3-compatible server).
    pub fn new(bucket: impl Into<String>) -> Self {
        Self {
            bucket: bucket.into(),
            ..Self::default()
        }
    }
}

impl ColdStore {
    fn with_backend(backend: Backend, description: String) -> Self {
        Self {
            backend,
            description,
            cache: Arc::new(Mutex::new(ObjectCache::new(COLD_CACHE_BYTES))),
            uploading: Arc::new(Mutex::new(HashSet::new())),
            delete_holds: Holds::default(),
        }
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
        self.cache = Arc::new(Mutex::new(ObjectCache::new(bytes)));
        self
    }

    /// Decoded bytes the object cache holds now.
    pub fn cached_bytes(&self) -> usize {
        self.cache.lock().unwrap_or_else(|p| p.into_inner()).bytes()
    }

    /// Wraps any object store.
    pub fn new(store: Arc<dyn ObjectStore>, description: impl Into<String>) -> Self {
        Self::with_backend(Backend::Remote(store), description.into())
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
        ))
    }

    /// An S3-compatible cold store (path-style requests, so any endpoint works).
    pub fn s3(config: &S3Config) -> Result<Self, ColdError> {
        let mut builder = AmazonS3Builder::new()
            .with_bucket_name(&config.bucket)
            .with_region(config.region.as_deref().unwrap_or("us-east-1"))
            .with_allow_http(config.allow_http)
            .with_virtual_hosted_style_request(false);
        if let Some(endpoint) = &config.endpoint {
            builder = builder.with_endpoint(endpoint);
        }
        if let Some(key) = &config.access_key_id {
            builder = builder.with_access_key_id(key);
        }
        if let Some(secret) = &config.secret_access_key {
            builder = builder.with_secret_access_key(secret);
        }
        let store = builder.build()?;
        Ok(Self::new(
            Arc::new(store),
            format!("s3://{}", config.bucket),
        ))
    }

    /// Opens a cold store by URL: `file:///abs/dir` (a local store on the real file system), or `s3://bucket?endpoint=http://host:port`
    /// (credentials and region from `access_key_id`, `secret_access_key`, `region` query
    /// parameters or the usual AWS environment variables; `allow_http=true` for plain HTTP).
    pub fn from_url(url: &str) -> Result<Self, ColdError> {
        let parsed = url::Url::parse(url).map_err(|e| ColdError::Config(format!("{url}: {e}")))?;
        match parsed.scheme() {
            "file" => {
                let path = parsed
                    .to_file_path()
                    .map_err(|_| ColdError::Config(format!("{url}: not a local path")))?;
                Self::local(&path)
            }
            "s3" => {
                let bucket = parsed
                    .host_str()
                    .ok_or_else(|| ColdError::Config(format!("{url}: no bucket")))?;
                let query = |name: &str| {
                    parsed
                        .query_pairs()
                        .find(|(k, _)| k == name)
                        .map(|(_, v)| v.into_owned())
                };
                let env = |name: &str| std::env::var(name).ok();
                let endpoint = query("endpoint").or_else(|| env("AWS_ENDPOINT_URL"));
                let config = S3Config {
                    bucket: bucket.to_string(),
                    allow_http: query("allow_http").as_deref() == Some("true")
                        || endpoint
                            .as_deref()
                            .is_some_and(|e| e.starts_with("http://")),
                    endpoint,
                    region: query("region").or_else(|| env("AWS_REGION")),
                    access_key_id: query("access_key_id").or_else(|| env("AWS_ACCESS_KEY_ID")),
                    secret_access_key: query("secret_access_key")
                        .or_else(|| env("AWS_SECRET_ACCESS_KEY")),
                };
                Self::s3(&config)
            }
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
                store
                    .put(&ObjectPath::from(path), PutPayload::from_bytes(bytes))
                    .await?;
                Ok(())
            }
        }
    }

    /// Reads a whole object.
    pub async fn get(&self, path: &str) -> Result<Bytes, ColdError> {
        match &self.backend {
            Backend::Local(local) => {
                let (local, path) = (local.clone(), path.to_string());
                off_executor(move || local.get(&path)).await
            }
            Backend::Remote(store) => Ok(store.get(&ObjectPath::from(path)).await?.bytes().await?),
        }
    }

    /// Reads a byte range of an object.
    pub async fn get_range(&self, path: &str, range: Range<u64>) -> Result<Bytes, ColdError> {
        match &self.backend {
            Backend::Local(local) => {
                let (local, path) = (local.clone(), path.to_string());
                off_executor(move || local.get_range(&path, range)).await
            }
            Backend::Remote(store) => Ok(store.get_range(&ObjectPath::from(path), range).await?),
        }
    }

    /// The size of object `path`, or `None` when it does not exist.
    pub async fn size(&self, path: &str) -> Result<Option<u64>, ColdError> {
        match &self.backend {
            Backend::Local(local) => {
                let (local, path) = (local.clone(), path.to_string());
                off_executor(move || local.size(&path)).await
            }
            Backend::Remote(store) => match store.head(&ObjectPath::from(path)).await {
                Ok(meta) => Ok(Some(meta.size)),
                Err(object_store::Error::NotFound { .. }) => Ok(None),
                Err(e) => Err(e.into()),
            },
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
        self.cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(path);
        match &self.backend {
            Backend::Local(local) => {
                let (local, path) = (local.clone(), path.to_string());
                off_executor(move || local.delete(&path)).await
            }
            Backend::Remote(store) => match store.delete(&ObjectPath::from(path)).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
                Err(e) => Err(e.into()),
            },
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
                let prefix = ObjectPath::from(prefix);
                let metas: Vec<_> = store.list(Some(&prefix)).try_collect().await?;
                Ok(metas.into_iter().map(|m| m.location.to_string()).collect())
            }
        }
    }

    /// The decoded bytes of the Strata object at `path`, from the cache or the store (the cache
    /// lock is never held across the fetch).
    pub async fn decoded(&self, path: &str) -> Result<Bytes, ColdError> {
        let cached = self
            .cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(path);
        crate::metrics::cold_cache(cached.is_some());
        if let Some(raw) = cached {
            return Ok(raw);
        }
        let raw = decode_cold_object(path, &self.get(path).await?)?;
        self.cache
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(path, raw.clone());
        Ok(raw)
    }

    /// Reads `len` stream bytes starting `skip` bytes into the chunk stored at `path`
    /// (`object_offset` into the object for raw objects); Strata objects are decoded whole.
    pub async fn read_chunk(
        &self,
        path: &str,
        object_offset: u64,
        skip: u64,
        len: u64,
    ) -> Result<Bytes, ColdError> {
        if path.ends_with(COLD_OBJECT_SUFFIX) {
            let raw = self.decoded(path).await?;
            let start = skip as usize;
            let end = start.saturating_add(len as usize);
            return raw
                .get(start..end)
                .map(|_| raw.slice(start..end))
                .ok_or_else(|| ColdError::Corrupt {
                    path: path.to_string(),
                    offset: 0,
                    reason: format!(
                        "object holds {} bytes, read wants {start}..{end}",
                        raw.len()
                    ),
                });
        }
        let start = object_offset + skip;
        self.get_range(path, start..start + len).await
    }
}
