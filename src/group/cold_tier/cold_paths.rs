//! Where a group's cold objects live (format/COLD_OBJECT.md, "Object names").
//!
//! `strata/<store id>/<group>/s/<stream hash>/chunks/<start>-<end>-<nanos>-<seq>.sco`: the store
//! id and group name keep two stores (or two groups) sharing a bucket apart, and the stream hash
//! (the first 16 bytes of BLAKE3 over the stream's key, in hex) has a fixed length and no `/`, so
//! no stream's prefix can nest inside another's, whatever the stream and bucket names are. The
//! creation time in each name lets the orphan sweep leave young objects (uploads whose commit may
//! still come) alone.

use ursula_shard::BucketStreamId;

use crate::cold::{COLD_OBJECT_SUFFIX, TMP_MARK};
use crate::group::keys::stream_key;

/// The object namespace of one group.
#[derive(Debug, Clone)]
pub struct ColdNamespace {
    root: String,
}

impl ColdNamespace {
    /// The namespace of group `group` of the store whose id is `store_id`.
    pub fn new(store_id: &str, group: &str) -> Self {
        Self {
            root: format!("strata/{store_id}/{group}/"),
        }
    }

    /// The prefix of every object of the group.
    pub fn root(&self) -> &str {
        &self.root
    }

    /// True for an object another store or group named (in Strata's namespace, outside this
    /// group's): a group that came from a restored backup may reference its original's objects,
    /// and must never delete them. Names outside Strata's namespace (objects of builds that named
    /// them by stream alone) are this group's own.
    pub fn is_foreign(&self, path: &str) -> bool {
        path.starts_with("strata/") && !path.starts_with(&self.root)
    }

    /// The prefix of every object of stream `id`.
    pub fn stream_prefix(&self, id: &BucketStreamId) -> String {
        let hash = blake3::hash(&stream_key(id));
        let hex: String = hash.as_bytes()[..16]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        format!("{}s/{hex}/chunks/", self.root)
    }

    /// A fresh, unique name for an object of `id` covering `[start, end)`.
    pub fn new_object_path(&self, id: &BucketStreamId, start: u64, end: u64) -> String {
        use std::sync::atomic::{AtomicU64, Ordering};
        static SEQUENCE: AtomicU64 = AtomicU64::new(0);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let seq = SEQUENCE.fetch_add(1, Ordering::Relaxed);
        format!(
            "{}{start:016x}-{end:016x}-{nanos:032x}-{seq:016x}{COLD_OBJECT_SUFFIX}",
            self.stream_prefix(id)
        )
    }
}

/// True for a Strata object name in some group's namespace, or a leftover temporary file of
/// one (what the orphan sweep may delete).
pub fn is_sweepable(path: &str) -> bool {
    let name = path.rsplit('/').next().unwrap_or(path);
    let object = name.split(TMP_MARK).next().unwrap_or(name);
    object.ends_with(COLD_OBJECT_SUFFIX) && created_at_ms(path).is_some()
}

/// When the object at `path` was named (ms since the Unix epoch), read from its name.
pub fn created_at_ms(path: &str) -> Option<u64> {
    let name = path.rsplit('/').next()?;
    let nanos = name.split('-').nth(2)?;
    let nanos = u128::from_str_radix(nanos, 16).ok()?;
    u64::try_from(nanos / 1_000_000).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_other_stores_and_groups_objects_are_foreign() {
        let ns = ColdNamespace::new("aa11", "g");
        let id = BucketStreamId::new("b", "s");
        assert!(!ns.is_foreign(&ns.new_object_path(&id, 0, 10)));
        assert!(!ns.is_foreign("b/s/chunks/old-object.sco"));
        assert!(ns.is_foreign(&ColdNamespace::new("bb22", "g").new_object_path(&id, 0, 10)));
        assert!(ns.is_foreign(&ColdNamespace::new("aa11", "h").new_object_path(&id, 0, 10)));
    }

    #[test]
    fn stream_prefixes_never_nest_and_names_carry_their_time() {
        let ns = ColdNamespace::new("00ff", "g");
        let a = BucketStreamId::new("tenant", "a");
        let nested = BucketStreamId::with_affinity("tenant", "a", "chunks");
        let (pa, pn) = (ns.stream_prefix(&a), ns.stream_prefix(&nested));
        assert!(!pa.starts_with(&pn) && !pn.starts_with(&pa), "{pa} {pn}");
        assert!(pa.starts_with("strata/00ff/g/s/"));
        let path = ns.new_object_path(&a, 0, 10);
        assert!(path.starts_with(&pa) && is_sweepable(&path));
        let made = created_at_ms(&path).unwrap();
        assert!(made.abs_diff(crate::now_ms() as u64) < 60_000);
        assert!(is_sweepable(&format!("{path}{TMP_MARK}1-2")));
        assert!(!is_sweepable("tenant/a/chunks/00-10-ff-1.bin"));
        let other = ColdNamespace::new("00ff", "h");
        assert!(!other.stream_prefix(&a).starts_with(ns.root()));
    }
}
