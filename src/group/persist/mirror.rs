//! Column families kept in memory as well as in RocksDB: the `messages` family (where each
//! append's bytes are) and the `external` family (appended object references), which every read
//! consults. [`super::db::GroupDb::apply`] changes the mirrors after each RocksDB write succeeds
//! (persist, then apply); they are loaded once at open. Reads find their rows here instead of
//! opening RocksDB iterators; RocksDB stays the durable copy, and `verify` compares the two.
//!
//! Both families are keyed `stream_key ++ u64 start offset (big-endian)` (stream keys never
//! prefix each other, `keys.rs`), so a mirror is an index per stream: stream key -> start offset
//! -> row. A read finds its stream once, finds its first row (interpolated between the stream's
//! first and last offsets, else a binary search) and walks adjacent rows, without comparing or
//! parsing a whole key per row (a 64 KiB hot read of 1 KiB appends walks 64 rows).
//!
//! Memory: one entry per hot message (about 32 bytes, and up to as much again of a stream's vector
//! spare; message rows are deleted once their bytes are cold or retained away, so this is
//! bounded by the hot bytes over the message size), and one per external object reference.

use std::collections::{BTreeMap, VecDeque};
use std::ops::Bound;

use super::commit_record::Op;
use crate::group::GroupError;

/// The rows of one stream, sorted by start offset with no offset twice: a double-ended vector,
/// because a stream's rows are written at its tail (appends) and deleted from its head (cold
/// flush, retention) or all at once, which it does in O(1) per row, and a read walks adjacent
/// memory. A row put or deleted in the middle costs a shift of the rows after it (or before it,
/// whichever are fewer): correct, and no command does it.
#[derive(Debug, Default)]
struct StreamRows {
    rows: VecDeque<(u64, RowValue)>,
}

impl StreamRows {
    /// Index of the first row with an offset at or after `offset`.
    fn first_at_or_after(&self, offset: u64) -> usize {
        self.rows.partition_point(|(o, _)| *o < offset)
    }

    /// Puts `value` at `offset` (replacing a row there).
    fn insert(&mut self, offset: u64, value: RowValue) {
        if self.rows.back().is_none_or(|(last, _)| *last < offset) {
            self.rows.push_back((offset, value));
            return;
        }
        let at = self.first_at_or_after(offset);
        match self.rows.get_mut(at) {
            Some(row) if row.0 == offset => row.1 = value,
            _ => self.rows.insert(at, (offset, value)),
        }
    }

    /// Removes the rows with offsets in `[first, end)` (`None`: no end).
    fn remove(&mut self, first: u64, end: Option<u64>) {
        let from = self.first_at_or_after(first);
        let to = end.map_or(self.rows.len(), |end| self.first_at_or_after(end));
        if from < to {
            self.rows.drain(from..to);
        }
    }

    /// The rows from index `at` on.
    fn starting_at(&self, at: usize) -> impl Iterator<Item = (u64, &[u8])> {
        self.rows
            .range(at..)
            .map(|(offset, row)| (*offset, row.as_slice()))
    }

    /// Index of the row with the greatest offset at or below `offset`, if any. Tried first at
    /// the index interpolated between the first and last rows' offsets (exact when appends are
    /// of one size, as a stream's often are: a read then costs no binary search), then searched.
    fn at_or_before(&self, offset: u64) -> Option<usize> {
        let (&(first, _), &(last, _)) = (self.rows.front()?, self.rows.back()?);
        if offset >= last {
            return Some(self.rows.len() - 1);
        }
        let span = last
            .checked_sub(first)
            .filter(|span| *span > 0 && offset >= first)?;
        let steps = (self.rows.len() - 1) as u128;
        let guess = (u128::from(offset - first) * steps / u128::from(span)) as usize;
        let fits = |at: usize| {
            self.rows.get(at).is_some_and(|(o, _)| *o <= offset)
                && self.rows.get(at + 1).is_some_and(|(o, _)| *o > offset)
        };
        if fits(guess) {
            return Some(guess);
        }
        self.rows
            .partition_point(|(o, _)| *o <= offset)
            .checked_sub(1)
    }
}

/// Longest row kept inside the index's nodes (a message row is 16 bytes).
const INLINE: usize = 16;

/// A row's value: short ones (every message row) inside the index's node, so a walk over a
/// stream's rows reads no other memory; longer ones (external references, JSON) on the heap.
#[derive(Debug, Clone)]
enum RowValue {
    Inline { len: u8, bytes: [u8; INLINE] },
    Heap(Box<[u8]>),
}

impl RowValue {
    fn new(value: &[u8]) -> Self {
        if value.len() > INLINE {
            return RowValue::Heap(value.into());
        }
        let mut bytes = [0u8; INLINE];
        bytes[..value.len()].copy_from_slice(value);
        RowValue::Inline {
            len: value.len() as u8,
            bytes,
        }
    }

    fn as_slice(&self) -> &[u8] {
        match self {
            RowValue::Inline { len, bytes } => &bytes[..usize::from(*len)],
            RowValue::Heap(bytes) => bytes,
        }
    }
}

/// One family's rows, per stream.
#[derive(Debug, Default)]
pub(crate) struct FamilyMirror {
    streams: BTreeMap<Vec<u8>, StreamRows>,
}

/// Splits a row key into its stream key and start offset; `None` if it is shorter than an
/// offset.
fn split_key(key: &[u8]) -> Option<(&[u8], u64)> {
    let at = key.len().checked_sub(8)?;
    let (stream, offset) = key.split_at(at);
    Some((stream, u64::from_be_bytes(offset.try_into().ok()?)))
}

/// The least offset `o` with `stream ++ be(o) >= bound` in byte order, if any.
fn first_at_or_after(stream: &[u8], bound: &[u8]) -> Option<u64> {
    let Some(rest) = bound.strip_prefix(stream) else {
        // `stream` is no prefix of `bound`: either they differ at a byte both have (every key
        // of the stream sorts against `bound` as `stream` does) or `bound` is a proper prefix
        // of `stream` (every key sorts after it, as `stream` does).
        return (stream > bound).then_some(0);
    };
    let mut head = [0u8; 8];
    let n = rest.len().min(8);
    head[..n].copy_from_slice(&rest[..n]);
    let head = u64::from_be_bytes(head);
    // A bound longer than a key sorts after the key with its first 8 bytes equal.
    if rest.len() > 8 {
        head.checked_add(1)
    } else {
        Some(head)
    }
}

impl FamilyMirror {
    /// Adds a row as loaded from RocksDB.
    pub fn load(&mut self, key: &[u8], value: &[u8]) -> Result<(), GroupError> {
        let (stream, offset) = split_key(key)
            .ok_or_else(|| GroupError::Corrupt(format!("a {}-byte row key", key.len())))?;
        self.put(stream, offset, value);
        Ok(())
    }

    fn put(&mut self, stream: &[u8], offset: u64, value: &[u8]) {
        match self.streams.get_mut(stream) {
            Some(rows) => rows.insert(offset, RowValue::new(value)),
            None => {
                let mut rows = StreamRows::default();
                rows.insert(offset, RowValue::new(value));
                self.streams.insert(stream.to_vec(), rows);
            }
        }
    }

    /// Applies one change of a commit record to this family. Every key written to these
    /// families ends in an offset; one that does not is left out (and `verify` reports it).
    pub fn apply(&mut self, op: &Op<'_>) {
        match op {
            Op::Put { key, value, .. } => match split_key(key) {
                Some((stream, offset)) => self.put(stream, offset, value),
                None => tracing::warn!(key = ?key, "a mirrored row key without an offset"),
            },
            Op::Delete { key, .. } => {
                if let Some((stream, offset)) = split_key(key) {
                    self.remove_rows(stream, offset, offset.checked_add(1));
                }
            }
            Op::DeleteRange { from, to, .. } => self.delete_range(from, to),
            Op::Requires { .. } | Op::Digest { .. } => {}
        }
    }

    /// Removes every row whose key is in `[from, to)` (byte order).
    fn delete_range(&mut self, from: &[u8], to: &[u8]) {
        if from >= to {
            return;
        }
        // The streams with keys in range: those whose stream key is in range, and the one
        // (stream keys are prefix-free) whose key is a prefix of `from`: the greatest at or
        // below it.
        let mut touched: Vec<Vec<u8>> = self
            .streams
            .range::<[u8], _>((Bound::Included(from), Bound::Excluded(to)))
            .map(|(stream, _)| stream.clone())
            .collect();
        if let Some((stream, _)) = self
            .streams
            .range::<[u8], _>((Bound::Unbounded, Bound::Excluded(from)))
            .next_back()
            .filter(|(stream, _)| from.starts_with(stream))
        {
            touched.push(stream.clone());
        }
        for stream in touched {
            if let Some(first) = first_at_or_after(&stream, from) {
                let end = first_at_or_after(&stream, to);
                self.remove_rows(&stream, first, end);
            }
        }
    }

    /// Removes the rows of `stream` with offsets in `[first, end)` (`None`: no end).
    fn remove_rows(&mut self, stream: &[u8], first: u64, end: Option<u64>) {
        let Some(rows) = self.streams.get_mut(stream) else {
            return;
        };
        rows.remove(first, end);
        if rows.rows.is_empty() {
            self.streams.remove(stream);
        }
    }

    /// The rows of `stream` from offset `from` on, in offset order.
    pub fn from<'a>(&'a self, stream: &[u8], from: u64) -> impl Iterator<Item = (u64, &'a [u8])> {
        self.rows_of(stream, move |rows| rows.first_at_or_after(from))
    }

    /// The rows of `stream` from the one holding offset `from` on (the row with the greatest
    /// offset at or below `from`, or the first after it), in offset order: one stream lookup.
    pub fn covering<'a>(
        &'a self,
        stream: &[u8],
        from: u64,
    ) -> impl Iterator<Item = (u64, &'a [u8])> {
        self.rows_of(stream, move |rows| {
            rows.at_or_before(from)
                .unwrap_or_else(|| rows.first_at_or_after(from))
        })
    }

    /// The rows of `stream` from the index `start` picks on (none for an unknown stream): one
    /// plain walk of the stream's vector, which a read takes per row.
    fn rows_of<'a>(
        &'a self,
        stream: &[u8],
        start: impl FnOnce(&StreamRows) -> usize,
    ) -> impl Iterator<Item = (u64, &'a [u8])> {
        static NONE: StreamRows = StreamRows {
            rows: VecDeque::new(),
        };
        let rows = self.streams.get(stream).unwrap_or(&NONE);
        rows.starting_at(start(rows))
    }

    /// The row of `stream` with the greatest offset at or below `offset`.
    pub fn at_or_before(&self, stream: &[u8], offset: u64) -> Option<(u64, &[u8])> {
        let rows = self.streams.get(stream)?;
        rows.starting_at(rows.at_or_before(offset)?).next()
    }

    /// Every row with its whole key, in key order (RocksDB's).
    pub fn iter(&self) -> impl Iterator<Item = (Vec<u8>, &[u8])> {
        self.streams.iter().flat_map(|(stream, rows)| {
            rows.starting_at(0).map(move |(offset, row)| {
                let mut key = stream.clone();
                key.extend_from_slice(&offset.to_be_bytes());
                (key, row)
            })
        })
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::group::keys::{message_key, prefix_end, stream_key};
    use ursula_shard::BucketStreamId;

    /// A small deterministic generator (xorshift64*).
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }

        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }

    fn streams() -> Vec<BucketStreamId> {
        vec![
            BucketStreamId::new("b", "a"),
            BucketStreamId::new("b", "ab"),
            BucketStreamId::new("b", "abc"),
            BucketStreamId::new("c", "a"),
            BucketStreamId::with_affinity("b", "x", "a"),
        ]
    }

    /// A bound: a row key, a stream key or its end, or arbitrary bytes.
    fn bound(rng: &mut Rng, ids: &[BucketStreamId]) -> Vec<u8> {
        let id = &ids[rng.below(ids.len() as u64) as usize];
        let offset = match rng.below(4) {
            0 => u64::MAX - rng.below(2),
            _ => rng.below(40),
        };
        match rng.below(6) {
            0 => stream_key(id),
            1 => prefix_end(&stream_key(id)),
            2 => {
                let mut key = message_key(id, offset);
                key.truncate(key.len() - rng.below(8) as usize);
                key
            }
            3 => {
                let mut key = message_key(id, offset);
                key.push(rng.below(256) as u8);
                key
            }
            4 => (0..rng.below(6)).map(|_| rng.below(256) as u8).collect(),
            _ => message_key(id, offset),
        }
    }

    /// The per-stream mirror holds exactly what a byte-keyed map (RocksDB's model) holds after
    /// every random put, delete and range delete, including ranges with arbitrary byte bounds.
    #[test]
    fn the_stream_index_matches_a_byte_keyed_map_under_random_changes() {
        let ids = streams();
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        let mut mirror = FamilyMirror::default();
        let mut model: BTreeMap<Vec<u8>, Vec<u8>> = BTreeMap::new();
        for step in 0..20_000 {
            let key = bound(&mut rng, &ids);
            match rng.below(10) {
                0..=5 => {
                    let id = &ids[rng.below(ids.len() as u64) as usize];
                    let key = message_key(id, rng.below(40));
                    let value = step.to_string().into_bytes();
                    mirror.apply(&Op::Put {
                        cf: 0,
                        key: &key,
                        value: &value,
                    });
                    model.insert(key, value);
                }
                6 => {
                    mirror.apply(&Op::Delete { cf: 0, key: &key });
                    model.remove(&key);
                }
                _ => {
                    let to = bound(&mut rng, &ids);
                    mirror.apply(&Op::DeleteRange {
                        cf: 0,
                        from: &key,
                        to: &to,
                    });
                    if key < to {
                        model.retain(|k, _| *k < key || *k >= to);
                    }
                }
            }
            let rows: Vec<(Vec<u8>, Vec<u8>)> =
                mirror.iter().map(|(k, v)| (k, v.to_vec())).collect();
            let expected: Vec<(Vec<u8>, Vec<u8>)> = model.clone().into_iter().collect();
            assert_eq!(rows, expected, "after step {step}");
        }
    }

    #[test]
    fn at_or_before_matches_a_scan_for_even_and_uneven_offsets() {
        let mut rng = Rng(0x2545_F491_4F6C_DD1D);
        let layouts: Vec<Vec<u64>> = vec![
            (0..500).map(|i| i * 1024).collect(),
            (0..500).map(|i| 7 + i * 100).collect(),
            (0..500).map(|i| i * i).collect(),
            vec![3],
            vec![5, 5_000_000],
            {
                let mut v: Vec<u64> = (0..300).map(|_| rng.below(1 << 40)).collect();
                v.sort_unstable();
                v.dedup();
                v
            },
        ];
        for offsets in layouts {
            let mut rows = StreamRows::default();
            for &o in &offsets {
                rows.insert(o, RowValue::new(&o.to_be_bytes()));
            }
            let last = *offsets.last().unwrap_or(&0);
            let mut probes: Vec<u64> = offsets.iter().flat_map(|&o| [o, o + 1]).collect();
            probes.extend(offsets.iter().filter_map(|&o| o.checked_sub(1)));
            probes.extend((0..500).map(|_| rng.below(last + 10)));
            for probe in probes {
                let expected = offsets.iter().rposition(|&o| o <= probe);
                assert_eq!(rows.at_or_before(probe), expected, "probe {probe}");
            }
        }
    }

    #[test]
    fn lookups_walk_one_stream_by_offset() {
        let [a, ab, ..] = &streams()[..] else {
            unreachable!("five streams")
        };
        let mut mirror = FamilyMirror::default();
        for (id, offset) in [(a, 0), (a, 10), (a, 20), (ab, 5)] {
            mirror
                .load(&message_key(id, offset), &[offset as u8])
                .unwrap();
        }
        let from: Vec<u64> = mirror.from(&stream_key(a), 10).map(|(o, _)| o).collect();
        assert_eq!(from, vec![10, 20]);
        assert_eq!(
            mirror.at_or_before(&stream_key(a), 15).map(|(o, _)| o),
            Some(10)
        );
        assert_eq!(mirror.at_or_before(&stream_key(ab), 4), None);
        assert!(
            mirror.load(&[1, 2, 3], &[]).is_err(),
            "a key shorter than an offset"
        );
    }
}
