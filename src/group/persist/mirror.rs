//! Column families kept in memory as well as in RocksDB: the `messages` family (where each
//! append's bytes are) and the `external` family (appended object references), which every read
//! consults. [`super::db::GroupDb::apply`] changes the mirrors after each RocksDB write succeeds
//! (persist, then apply); they are loaded once at open. Reads find their rows here instead of
//! opening RocksDB iterators; RocksDB stays the durable copy, and `verify` compares the two.
//!
//! Memory: one entry per hot message (about 100 bytes with its key; message rows are deleted
//! once their bytes are cold or retained away, so this is bounded by the hot bytes over the
//! message size), and one per external object reference.

use std::collections::BTreeMap;
use std::ops::Bound;

use super::commit_record::Op;

/// One family's rows, key -> value, in RocksDB's byte order.
#[derive(Debug, Default)]
pub(crate) struct FamilyMirror {
    rows: BTreeMap<Vec<u8>, Vec<u8>>,
}

impl FamilyMirror {
    /// Adds a row as loaded from RocksDB.
    pub fn load(&mut self, key: &[u8], value: &[u8]) {
        self.rows.insert(key.to_vec(), value.to_vec());
    }

    /// Applies one change of a commit record to this family.
    pub fn apply(&mut self, op: &Op<'_>) {
        match op {
            Op::Put { key, value, .. } => {
                self.rows.insert(key.to_vec(), value.to_vec());
            }
            Op::Delete { key, .. } => {
                self.rows.remove(*key);
            }
            Op::DeleteRange { from, to, .. } => {
                let doomed: Vec<Vec<u8>> = self
                    .rows
                    .range::<[u8], _>((Bound::Included(*from), Bound::Excluded(*to)))
                    .map(|(k, _)| k.clone())
                    .collect();
                for key in doomed {
                    self.rows.remove(&key);
                }
            }
            Op::Requires { .. } => {}
        }
    }

    /// Rows whose key starts with `prefix`, from key `from` on, in key order.
    pub fn from<'a>(
        &'a self,
        prefix: &'a [u8],
        from: &[u8],
    ) -> impl Iterator<Item = (&'a [u8], &'a [u8])> + 'a {
        self.rows
            .range::<[u8], _>((Bound::Included(from), Bound::Unbounded))
            .take_while(move |(k, _)| k.starts_with(prefix))
            .map(|(k, v)| (k.as_slice(), v.as_slice()))
    }

    /// The row with the greatest key at or below `key`, if it starts with `prefix`.
    pub fn at_or_before<'a>(&'a self, prefix: &[u8], key: &[u8]) -> Option<(&'a [u8], &'a [u8])> {
        self.rows
            .range::<[u8], _>((Bound::Unbounded, Bound::Included(key)))
            .next_back()
            .filter(|(k, _)| k.starts_with(prefix))
            .map(|(k, v)| (k.as_slice(), v.as_slice()))
    }

    /// Every row, in key order.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.rows.iter().map(|(k, v)| (k.as_slice(), v.as_slice()))
    }
}

/// The mirrored families of one group.
#[derive(Debug, Default)]
pub(crate) struct Mirrors {
    /// `messages`.
    pub messages: FamilyMirror,
    /// `external`.
    pub external: FamilyMirror,
}
