//! The sparse offset index of a segment (format/INDEX.md): codec and lookup.
//!
//! An index is derived data. It maps a batch's base offset to its byte position in the segment,
//! one entry per `index_interval_bytes` of log, plus a summary of the segment (last offset, largest
//! timestamp, the segment length it describes). A loaded index is trusted only after every entry has
//! been checked against the segment; otherwise it is rebuilt by scanning.

use super::error::DecodeError;
use super::header::SEGMENT_HEADER_LEN;

/// Magic bytes at the start of an index file.
pub const INDEX_MAGIC: [u8; 8] = *b"STRATIDX";
/// Index format version written by this build.
pub const INDEX_FORMAT_VERSION: u32 = 1;
/// Length of the index file header.
pub const INDEX_HEADER_LEN: usize = 56;
/// Length of one index entry.
pub const INDEX_ENTRY_LEN: usize = 8;

/// One sparse index entry: the batch whose base offset is `base + relative_offset` starts at `position`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexEntry {
    /// Batch base offset minus the segment base offset.
    pub relative_offset: u32,
    /// Byte position of the batch in the segment file.
    pub position: u32,
}

/// What an index file says about its segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentIndex {
    /// Base offset of the segment.
    pub base_offset: i64,
    /// Offset of the last record in the segment, `base_offset - 1` when it holds none.
    pub last_offset: i64,
    /// Largest record timestamp, `i64::MIN` when the segment holds no record.
    pub max_timestamp: i64,
    /// Length in bytes of the segment file this index describes.
    pub segment_len: u64,
    /// Entries, strictly increasing in both fields.
    pub entries: Vec<IndexEntry>,
}

impl SegmentIndex {
    /// An index of a segment that holds no batch yet.
    pub fn empty(base_offset: i64) -> Self {
        Self {
            base_offset,
            last_offset: base_offset - 1,
            max_timestamp: i64::MIN,
            segment_len: SEGMENT_HEADER_LEN as u64,
            entries: Vec::new(),
        }
    }

    /// Byte position from which a scan for `offset` should start.
    pub fn lookup(&self, offset: i64) -> u64 {
        let relative = offset.saturating_sub(self.base_offset);
        if relative < 0 {
            return SEGMENT_HEADER_LEN as u64;
        }
        let relative = u32::try_from(relative).unwrap_or(u32::MAX);
        let after = self
            .entries
            .partition_point(|e| e.relative_offset <= relative);
        match after {
            0 => SEGMENT_HEADER_LEN as u64,
            n => u64::from(self.entries[n - 1].position),
        }
    }

    /// Position of the last entry (or the end of the header): where recovery starts scanning.
    pub fn last_position(&self) -> u64 {
        self.entries
            .last()
            .map_or(SEGMENT_HEADER_LEN as u64, |e| u64::from(e.position))
    }

    /// Adds an entry if it keeps the entries strictly increasing; returns whether it was added.
    pub fn push(&mut self, entry: IndexEntry) -> bool {
        let fits = entry.position as usize >= SEGMENT_HEADER_LEN
            && self.entries.last().is_none_or(|l| {
                entry.relative_offset > l.relative_offset && entry.position > l.position
            });
        if fits {
            self.entries.push(entry);
        }
        fits
    }

    /// Encodes the index file.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(INDEX_HEADER_LEN + self.entries.len() * INDEX_ENTRY_LEN);
        out.extend_from_slice(&INDEX_MAGIC);
        out.extend_from_slice(&INDEX_FORMAT_VERSION.to_le_bytes());
        out.extend_from_slice(&(self.entries.len() as u32).to_le_bytes());
        out.extend_from_slice(&self.base_offset.to_le_bytes());
        out.extend_from_slice(&self.last_offset.to_le_bytes());
        out.extend_from_slice(&self.max_timestamp.to_le_bytes());
        out.extend_from_slice(&self.segment_len.to_le_bytes());
        out.extend_from_slice(&[0u8; 8]);
        for e in &self.entries {
            out.extend_from_slice(&e.relative_offset.to_le_bytes());
            out.extend_from_slice(&e.position.to_le_bytes());
        }
        let crc = index_crc(&out);
        out[48..52].copy_from_slice(&crc.to_le_bytes());
        out
    }

    /// Decodes an index file. Entries are checked for order and range, not against the segment.
    pub fn decode(buf: &[u8]) -> Result<Self, DecodeError> {
        if buf.len() < INDEX_HEADER_LEN {
            return Err(DecodeError::Truncated {
                needed: INDEX_HEADER_LEN,
                available: buf.len(),
            });
        }
        if buf[0..8] != INDEX_MAGIC {
            return Err(DecodeError::BadMagic);
        }
        let u32_at =
            |at: usize| u32::from_le_bytes([buf[at], buf[at + 1], buf[at + 2], buf[at + 3]]);
        let u64_at = |at: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&buf[at..at + 8]);
            u64::from_le_bytes(b)
        };
        let version = u32_at(8);
        if version != INDEX_FORMAT_VERSION {
            return Err(DecodeError::UnsupportedVersion(version));
        }
        let count = u32_at(12) as usize;
        let needed = count
            .checked_mul(INDEX_ENTRY_LEN)
            .and_then(|n| n.checked_add(INDEX_HEADER_LEN))
            .ok_or(DecodeError::invalid("entry_count", "overflows"))?;
        if buf.len() != needed {
            return Err(DecodeError::invalid(
                "entry_count",
                "differs from the file length",
            ));
        }
        let stored = u32_at(48);
        let computed = index_crc(buf);
        if stored != computed {
            return Err(DecodeError::CrcMismatch { stored, computed });
        }
        if buf[52..56] != [0; 4] {
            return Err(DecodeError::invalid(
                "index header",
                "reserved bytes not zero",
            ));
        }
        let base_offset = u64_at(16) as i64;
        let last_offset = u64_at(24) as i64;
        let max_timestamp = u64_at(32) as i64;
        let segment_len = u64_at(40);
        if base_offset < 0 || last_offset < base_offset - 1 {
            return Err(DecodeError::invalid(
                "last_offset",
                "before the base offset",
            ));
        }
        if segment_len < SEGMENT_HEADER_LEN as u64 || segment_len > u64::from(u32::MAX) {
            return Err(DecodeError::invalid("segment_len", "out of range"));
        }
        let mut index = SegmentIndex {
            base_offset,
            last_offset,
            max_timestamp,
            segment_len,
            entries: Vec::with_capacity(count),
        };
        for i in 0..count {
            let at = INDEX_HEADER_LEN + i * INDEX_ENTRY_LEN;
            let entry = IndexEntry {
                relative_offset: u32_at(at),
                position: u32_at(at + 4),
            };
            if u64::from(entry.position) >= segment_len
                || i64::from(entry.relative_offset) > last_offset - base_offset
                || !index.push(entry)
            {
                return Err(DecodeError::invalid(
                    "index entry",
                    "out of order or out of range",
                ));
            }
        }
        Ok(index)
    }
}

fn index_crc(buf: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&buf[0..48]);
    hasher.update(&buf[INDEX_HEADER_LEN..]);
    hasher.finalize()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> SegmentIndex {
        let mut index = SegmentIndex::empty(100);
        assert!(index.push(IndexEntry {
            relative_offset: 0,
            position: 32
        }));
        assert!(index.push(IndexEntry {
            relative_offset: 7,
            position: 4200
        }));
        assert!(!index.push(IndexEntry {
            relative_offset: 7,
            position: 9000
        }));
        index.last_offset = 120;
        index.max_timestamp = 5;
        index.segment_len = 9000;
        index
    }

    #[test]
    fn round_trips_and_looks_up() {
        let index = sample();
        assert_eq!(SegmentIndex::decode(&index.encode()), Ok(index.clone()));
        assert_eq!(index.lookup(99), 32);
        assert_eq!(index.lookup(106), 32);
        assert_eq!(index.lookup(107), 4200);
        assert_eq!(index.lookup(500), 4200);
    }

    #[test]
    fn zero_entries_never_decode() {
        let mut bytes = sample().encode();
        bytes[INDEX_HEADER_LEN..INDEX_HEADER_LEN + 8].fill(0);
        assert!(SegmentIndex::decode(&bytes).is_err());
        assert!(SegmentIndex::decode(&[0u8; INDEX_HEADER_LEN]).is_err());
    }
}
