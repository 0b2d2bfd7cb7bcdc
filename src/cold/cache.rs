//! A small cache of decoded cold objects. Strata objects are immutable (every upload has a fresh
//! name), so a cached copy never goes stale; a delete evicts it. Each entry keeps the digest its
//! bytes were checked against, and is found only by a read expecting that digest. Bounded by
//! bytes, least recently used out first.

use std::collections::VecDeque;

use bytes::Bytes;

/// One cached object: its path, the digest its bytes matched, and the bytes.
type Entry = (String, String, Bytes);

/// Decoded objects, most recently used at the back.
#[derive(Debug)]
pub(crate) struct ObjectCache {
    entries: VecDeque<Entry>,
    bytes: usize,
    capacity: usize,
}

impl ObjectCache {
    /// A cache holding at most `capacity` decoded bytes.
    pub fn new(capacity: usize) -> Self {
        Self {
            entries: VecDeque::new(),
            bytes: 0,
            capacity,
        }
    }

    /// The decoded object at `path`, if cached as matching `digest` (and marks it recently
    /// used).
    pub fn get(&mut self, path: &str, digest: &str) -> Option<Bytes> {
        let at = self
            .entries
            .iter()
            .position(|(p, d, _)| p == path && d == digest)?;
        let entry = self.entries.remove(at)?;
        let bytes = entry.2.clone();
        self.entries.push_back(entry);
        Some(bytes)
    }

    /// Caches `bytes` as the decoded object at `path`, checked against `digest` (objects larger
    /// than the cache are not kept).
    pub fn insert(&mut self, path: &str, digest: &str, bytes: Bytes) {
        self.remove(path);
        if bytes.len() > self.capacity {
            return;
        }
        self.bytes += bytes.len();
        self.entries
            .push_back((path.to_string(), digest.to_string(), bytes));
        while self.bytes > self.capacity {
            match self.entries.pop_front() {
                Some((_, _, evicted)) => self.bytes -= evicted.len(),
                None => break,
            }
        }
    }

    /// Decoded bytes held now (at most the capacity).
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Drops `path` from the cache.
    pub fn remove(&mut self, path: &str) {
        if let Some(at) = self.entries.iter().position(|(p, _, _)| p == path) {
            if let Some((_, _, evicted)) = self.entries.remove(at) {
                self.bytes -= evicted.len();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evicts_least_recently_used_within_the_byte_bound() {
        let mut cache = ObjectCache::new(10);
        cache.insert("a", "da", Bytes::from_static(b"aaaa"));
        cache.insert("b", "db", Bytes::from_static(b"bbbb"));
        assert!(cache.get("a", "da").is_some());
        cache.insert("c", "dc", Bytes::from_static(b"cccc"));
        assert!(cache.get("b", "db").is_none(), "b was least recently used");
        assert!(cache.get("a", "da").is_some() && cache.get("c", "dc").is_some());
        assert!(
            cache.get("a", "other").is_none(),
            "a read expecting another digest"
        );
        cache.insert("huge", "dh", Bytes::from(vec![0u8; 11]));
        assert!(cache.get("huge", "dh").is_none());
        cache.remove("a");
        assert!(cache.get("a", "da").is_none());
    }
}
