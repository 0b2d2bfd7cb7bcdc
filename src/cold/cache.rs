//! A cache of decoded cold objects, on quick_cache (sharded, scan-resistant, bounded by bytes).
//! Strata objects are immutable (every upload has a fresh name), so a cached copy never goes
//! stale; a delete evicts it. Each entry keeps the digest its bytes were checked against, and
//! serves only a read expecting that digest. Concurrent misses of one object fetch it once: the
//! first reader fetches, the others wait for its bytes (or, if it fails, one of them fetches).

use std::future::Future;

use bytes::Bytes;
use quick_cache::sync::Cache;
use quick_cache::Weighter;

use super::ColdError;

/// Objects a cache is sized for per MiB of its bound (quick_cache spreads the bound over
/// shards of at least 32 entries each, so the largest object it keeps is about the bound
/// divided by the shards: with one entry per MiB, half the bound at 64 MiB).
const ENTRIES_PER_MIB: u64 = 1;

/// A cached object: the digest its bytes matched, and the bytes.
type Entry = (String, Bytes);

/// Weighs an entry by its bytes (at least 1, so an empty object can be evicted too).
#[derive(Debug, Clone, Copy)]
struct ByBytes;

impl Weighter<String, Entry> for ByBytes {
    fn weight(&self, _path: &String, (_, bytes): &Entry) -> u64 {
        (bytes.len() as u64).max(1)
    }
}

/// Decoded objects by path (`None` when the bound is 0: nothing is kept).
pub(crate) struct ObjectCache {
    cache: Option<Cache<String, Entry, ByBytes>>,
}

impl std::fmt::Debug for ObjectCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ObjectCache")
            .field("bytes", &self.bytes())
            .finish()
    }
}

impl ObjectCache {
    /// A cache holding at most `capacity` decoded bytes.
    pub fn new(capacity: usize) -> Self {
        let capacity = capacity as u64;
        let entries = (capacity >> 20).max(1) * ENTRIES_PER_MIB;
        let cache = (capacity > 0).then(|| {
            let entries = usize::try_from(entries).unwrap_or(usize::MAX);
            Cache::with_weighter(entries, capacity, ByBytes)
        });
        Self { cache }
    }

    /// The decoded object at `path` as checked against `digest`: from the cache, or from
    /// `fetch` (then kept). Answers whether it came from the cache too. A reader waiting for
    /// another's fetch of the same object counts as a hit.
    pub async fn get_or_fetch(
        &self,
        path: &str,
        digest: &str,
        fetch: impl Future<Output = Result<Bytes, ColdError>>,
    ) -> Result<(Bytes, bool), ColdError> {
        let Some(cache) = &self.cache else {
            return Ok((fetch.await?, false));
        };
        match cache.get_value_or_guard_async(path).await {
            Ok((cached_digest, bytes)) if cached_digest == digest => Ok((bytes, true)),
            // Kept as matching another digest: a read that expects this one fetches and
            // checks its own copy (objects are immutable: one of the two readers is wrong).
            Ok(_) => Ok((fetch.await?, false)),
            Err(guard) => {
                let bytes = fetch.await?;
                // Refused only when the entry was evicted meanwhile; the bytes are served anyway.
                let _ = guard.insert((digest.to_string(), bytes.clone()));
                Ok((bytes, false))
            }
        }
    }

    /// Decoded bytes held now (at most the bound).
    pub fn bytes(&self) -> usize {
        self.cache.as_ref().map_or(0, |c| c.weight() as usize)
    }

    /// Drops `path` from the cache.
    pub fn remove(&self, path: &str) {
        if let Some(cache) = &self.cache {
            cache.remove(path);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use super::*;

    fn block_on<T>(f: impl Future<Output = T>) -> T {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .map(|rt| rt.block_on(f))
            .unwrap_or_else(|e| panic!("a runtime: {e}"))
    }

    #[test]
    fn keeps_checked_bytes_within_the_bound_and_serves_only_their_digest() {
        let cache = ObjectCache::new(10);
        let get = |path: &'static str, digest: &'static str, bytes: &'static [u8]| {
            cache.get_or_fetch(path, digest, async move { Ok(Bytes::from_static(bytes)) })
        };
        let (a, hit) = block_on(get("a", "da", b"aaaa")).unwrap();
        assert_eq!((a.as_ref(), hit), (&b"aaaa"[..], false));
        assert!(block_on(get("a", "da", b"xxxx")).unwrap().1, "a hit");
        let (other, hit) = block_on(get("a", "other", b"yyyy")).unwrap();
        assert_eq!(
            (other.as_ref(), hit),
            (&b"yyyy"[..], false),
            "another digest"
        );
        block_on(get("b", "db", b"bbbb")).unwrap();
        block_on(get("c", "dc", b"cccc")).unwrap();
        assert!(cache.bytes() <= 10, "{} bytes", cache.bytes());
        block_on(get("huge", "dh", &[0; 11])).unwrap();
        assert!(cache.bytes() <= 10);
        cache.remove("a");
        assert!(!block_on(get("a", "da", b"aaaa")).unwrap().1);
        let none = ObjectCache::new(0);
        let fetch = async { Ok(Bytes::from_static(b"n")) };
        assert!(!block_on(none.get_or_fetch("n", "d", fetch)).unwrap().1);
        assert_eq!(none.bytes(), 0);
    }

    #[test]
    fn concurrent_misses_of_one_object_fetch_it_once() {
        let cache = Arc::new(ObjectCache::new(1 << 20));
        let fetches = Arc::new(AtomicUsize::new(0));
        let (release, wait) = tokio::sync::watch::channel(false);
        block_on(async {
            let readers: Vec<_> = (0..8)
                .map(|_| {
                    let (cache, fetches, mut wait) = (cache.clone(), fetches.clone(), wait.clone());
                    tokio::spawn(async move {
                        let fetch = async move {
                            fetches.fetch_add(1, Ordering::SeqCst);
                            let _ = wait.wait_for(|go| *go).await;
                            Ok(Bytes::from_static(b"object"))
                        };
                        cache.get_or_fetch("p", "d", fetch).await
                    })
                })
                .collect();
            tokio::task::yield_now().await;
            let _ = release.send(true);
            for reader in readers {
                let (bytes, _) = reader.await.unwrap().unwrap();
                assert_eq!(bytes.as_ref(), b"object");
            }
        });
        assert_eq!(fetches.load(Ordering::SeqCst), 1);
    }
}
