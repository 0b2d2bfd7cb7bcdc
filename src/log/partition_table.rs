//! The partitions of a log: a table that only grows, read without a lock.
//!
//! A log's partitions are looked up on every append and read, and a log that hosts many tenants
//! (the store's group payload log, one range of partitions per group) gains partitions while
//! others are being written. The table hands out `&Arc<Partition>` for the life of the log:
//! entries live in chunks that never move (chunk `k` holds `FIRST << k` entries), each set once;
//! `len` is published after the entry it counts, so a reader that sees an index below `len`
//! finds its entry set.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use super::partition::Partition;

/// Entries of the first chunk.
const FIRST: usize = 64;
/// Chunks: enough for `i32::MAX` partitions (a log's limit).
const CHUNKS: usize = 26;

/// A chunk of entries, each set once.
type Chunk = Box<[OnceLock<Arc<Partition>>]>;

/// The partitions of a log, indexed by id; grows at the end, never shrinks.
pub(crate) struct PartitionTable {
    chunks: [OnceLock<Chunk>; CHUNKS],
    len: AtomicUsize,
    /// Serializes growth (one pusher at a time keeps ids dense).
    grow: Mutex<()>,
}

/// The chunk holding entry `index`, and its slot there.
fn place(index: usize) -> (usize, usize) {
    let scaled = index / FIRST + 1;
    let chunk = (usize::BITS - 1 - scaled.leading_zeros()) as usize;
    (chunk, index - FIRST * ((1 << chunk) - 1))
}

impl PartitionTable {
    /// A table holding `partitions`, ids `0..len`.
    pub fn new(partitions: Vec<Arc<Partition>>) -> Self {
        let table = Self {
            chunks: [const { OnceLock::new() }; CHUNKS],
            len: AtomicUsize::new(0),
            grow: Mutex::new(()),
        };
        let guard = table.lock_growth();
        for p in partitions {
            table.push(&guard, p);
        }
        drop(guard);
        table
    }

    /// Holds growth off until the guard drops.
    pub fn lock_growth(&self) -> std::sync::MutexGuard<'_, ()> {
        self.grow.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Number of partitions.
    pub fn len(&self) -> usize {
        self.len.load(Ordering::Acquire)
    }

    /// Partition `id`, if the table holds it.
    pub fn get(&self, id: usize) -> Option<&Arc<Partition>> {
        if id >= self.len() {
            return None;
        }
        let (chunk, slot) = place(id);
        self.chunks[chunk].get()?.get(slot)?.get()
    }

    /// Every partition, in id order (those added while iterating may or may not be seen).
    pub fn iter(&self) -> impl Iterator<Item = &Arc<Partition>> + '_ {
        (0..self.len()).filter_map(|id| self.get(id))
    }

    /// Adds `partition` as the next id (the caller holds the growth lock).
    pub fn push(&self, _growth: &std::sync::MutexGuard<'_, ()>, partition: Arc<Partition>) {
        let id = self.len.load(Ordering::Acquire);
        let (chunk, slot) = place(id);
        assert!(chunk < CHUNKS, "partition table is full");
        let entries = self.chunks[chunk]
            .get_or_init(|| (0..FIRST << chunk).map(|_| OnceLock::new()).collect());
        let set = entries[slot].set(partition).is_ok();
        assert!(set, "partition {id} added twice");
        self.len.store(id + 1, Ordering::Release);
    }
}

impl std::ops::Index<usize> for PartitionTable {
    type Output = Arc<Partition>;

    /// Partition `id`; the caller checked the id against [`PartitionTable::len`].
    fn index(&self, id: usize) -> &Arc<Partition> {
        match self.get(id) {
            Some(p) => p,
            None => panic!("partition {id} out of range ({})", self.len()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn places_fill_each_chunk_before_the_next() {
        assert_eq!(place(0), (0, 0));
        assert_eq!(place(FIRST - 1), (0, FIRST - 1));
        assert_eq!(place(FIRST), (1, 0));
        assert_eq!(place(3 * FIRST - 1), (1, 2 * FIRST - 1));
        assert_eq!(place(3 * FIRST), (2, 0));
        let mut expected = (0, 0);
        for index in 0..100_000 {
            assert_eq!(place(index), expected, "index {index}");
            expected.1 += 1;
            if expected.1 == FIRST << expected.0 {
                expected = (expected.0 + 1, 0);
            }
        }
        assert!(place(i32::MAX as usize).0 < CHUNKS);
    }
}
