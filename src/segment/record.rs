//! The record: the unit a partition stores, with its offset, timestamp, optional key and value.

use bytes::Bytes;

/// One stored record: an offset in its partition, a timestamp, an optional key and an optional value.
///
/// A record with a key and no value is a tombstone: keyed compaction keeps it for the
/// delete-retention period and then removes it with every older record of the key.
/// A record without a key must carry a value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Offset inside the partition.
    pub offset: i64,
    /// Milliseconds since the Unix epoch, as given by the writer.
    pub timestamp: i64,
    /// Compaction key, if any.
    pub key: Option<Bytes>,
    /// Value; `None` marks a tombstone (only valid with a key).
    pub value: Option<Bytes>,
}

impl Record {
    /// True when the record is a tombstone (a key without a value).
    pub fn is_tombstone(&self) -> bool {
        self.key.is_some() && self.value.is_none()
    }

    /// A borrowed view of this record.
    pub fn as_ref(&self) -> RecordRef<'_> {
        RecordRef {
            offset: self.offset,
            timestamp: self.timestamp,
            key: self.key.as_deref(),
            value: self.value.as_deref(),
        }
    }

    /// Bytes this record occupies inside an uncompressed records section.
    pub fn encoded_len(&self) -> usize {
        RECORD_FIXED_LEN
            + self.key.as_ref().map_or(0, |k| 4 + k.len())
            + self.value.as_ref().map_or(0, |v| 4 + v.len())
    }
}

/// A record to append: the partition assigns its offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewRecord {
    /// Milliseconds since the Unix epoch.
    pub timestamp: i64,
    /// Compaction key, if any.
    pub key: Option<Bytes>,
    /// Value; `None` marks a tombstone (only valid with a key).
    pub value: Option<Bytes>,
}

impl NewRecord {
    /// An unkeyed record carrying `value`.
    pub fn value(timestamp: i64, value: Bytes) -> Self {
        Self {
            timestamp,
            key: None,
            value: Some(value),
        }
    }

    /// A keyed record; `value == None` is a tombstone.
    pub fn keyed(timestamp: i64, key: Bytes, value: Option<Bytes>) -> Self {
        Self {
            timestamp,
            key: Some(key),
            value,
        }
    }

    /// Gives the record its offset.
    pub fn at(self, offset: i64) -> Record {
        Record {
            offset,
            timestamp: self.timestamp,
            key: self.key,
            value: self.value,
        }
    }
}

/// A record borrowed from the bytes it was decoded from (a segment's mapping): what a scan
/// visits without allocating.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordRef<'a> {
    /// Offset inside the partition.
    pub offset: i64,
    /// Milliseconds since the Unix epoch, as given by the writer.
    pub timestamp: i64,
    /// Compaction key, if any.
    pub key: Option<&'a [u8]>,
    /// Value; `None` marks a tombstone.
    pub value: Option<&'a [u8]>,
}

impl RecordRef<'_> {
    /// True when the record is a tombstone (a key without a value).
    pub fn is_tombstone(&self) -> bool {
        self.key.is_some() && self.value.is_none()
    }

    /// An owned copy.
    pub fn to_record(&self) -> Record {
        Record {
            offset: self.offset,
            timestamp: self.timestamp,
            key: self.key.map(Bytes::copy_from_slice),
            value: self.value.map(Bytes::copy_from_slice),
        }
    }
}

/// Fixed part of an encoded record: offset delta (4), timestamp (8), attributes (1).
pub const RECORD_FIXED_LEN: usize = 13;
