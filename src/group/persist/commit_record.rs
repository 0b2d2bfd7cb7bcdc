//! The commit record: every state change of one group command, as one record of the payload log
//! (format/GROUP_STATE.md, "Commit records").
//!
//! A command is durable once its commit record is (one fdatasync of the payload log's journal,
//! which also covers the payload records written just before it). RocksDB then applies the same
//! changes without a write-ahead log of its own; recovery replays the commit records past the
//! last one RocksDB holds. Decoding is pure and checks every length, so a damaged record is a
//! typed error, never a panic.

use crate::group::GroupError;

/// Version byte that starts every commit record this build writes (version 2 adds the digest
/// op; version 1 records are still read).
pub const COMMIT_RECORD_VERSION: u8 = 2;

/// The version before the digest op, still read.
const COMMIT_RECORD_VERSION_1: u8 = 1;

/// Partition of the payload log that holds the commit records (unkeyed records; payload records
/// are keyed by their stream).
pub const COMMIT_PARTITION: u32 = 0;

const TAG_PUT: u8 = 1;
const TAG_DELETE: u8 = 2;
const TAG_DELETE_RANGE: u8 = 3;
const TAG_REQUIRES: u8 = 4;
const TAG_DIGEST: u8 = 5;

/// One change to a column family (by its index in the engine's column-family list).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op<'a> {
    /// Write `value` under `key`.
    Put {
        /// Column family index.
        cf: u8,
        /// Key.
        key: &'a [u8],
        /// Value.
        value: &'a [u8],
    },
    /// Remove `key`.
    Delete {
        /// Column family index.
        cf: u8,
        /// Key.
        key: &'a [u8],
    },
    /// Remove every key in `[from, to)`.
    DeleteRange {
        /// Column family index.
        cf: u8,
        /// First key removed.
        from: &'a [u8],
        /// First key kept.
        to: &'a [u8],
    },
    /// The command wrote a payload record at `offset` of `partition` before this record: replay
    /// applies the record only if that payload survived (no change to RocksDB).
    Requires {
        /// Payload-log partition.
        partition: u32,
        /// Offset of the payload record.
        offset: u64,
    },
    /// The stream row this record puts for the stream of payload record `offset` of
    /// `partition` lacks the integrity digest of that inline append, which starts at stream
    /// byte `start` and is as long as the record's value: replay adds it to the row (computed
    /// while the record was syncing; format/GROUP_STATE.md, "Deferred digests").
    Digest {
        /// Payload-log partition.
        partition: u32,
        /// Offset of the payload record.
        offset: u64,
        /// Stream offset of the append's first byte.
        start: u64,
    },
}

/// The encoded changes of one command, built op by op.
#[derive(Debug, Clone)]
pub struct CommitRecord {
    bytes: Vec<u8>,
}

impl Default for CommitRecord {
    fn default() -> Self {
        Self {
            bytes: vec![COMMIT_RECORD_VERSION],
        }
    }
}

impl CommitRecord {
    /// Adds one change.
    pub fn push(&mut self, op: Op<'_>) {
        match op {
            Op::Put { cf, key, value } => self.fields(TAG_PUT, cf, key, Some(value)),
            Op::Delete { cf, key } => self.fields(TAG_DELETE, cf, key, None),
            Op::DeleteRange { cf, from, to } => self.fields(TAG_DELETE_RANGE, cf, from, Some(to)),
            Op::Requires { partition, offset } => {
                self.bytes.push(TAG_REQUIRES);
                self.bytes.extend_from_slice(&partition.to_le_bytes());
                self.bytes.extend_from_slice(&offset.to_le_bytes());
            }
            Op::Digest {
                partition,
                offset,
                start,
            } => {
                self.bytes.push(TAG_DIGEST);
                self.bytes.extend_from_slice(&partition.to_le_bytes());
                self.bytes.extend_from_slice(&offset.to_le_bytes());
                self.bytes.extend_from_slice(&start.to_le_bytes());
            }
        }
    }

    fn fields(&mut self, tag: u8, cf: u8, first: &[u8], second: Option<&[u8]>) {
        self.bytes.extend_from_slice(&[tag, cf]);
        for field in std::iter::once(first).chain(second) {
            let len = u32::try_from(field.len()).unwrap_or(u32::MAX);
            self.bytes.extend_from_slice(&len.to_le_bytes());
            self.bytes.extend_from_slice(field);
        }
    }

    /// A record that starts as a copy of the encoded record `bytes` (for ops added after it).
    pub fn copy_of(bytes: &[u8]) -> Self {
        Self {
            bytes: bytes.to_vec(),
        }
    }

    /// The encoded record, taken.
    pub fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }

    /// Makes room for `bytes` more of encoded changes.
    pub fn reserve(&mut self, bytes: usize) {
        self.bytes.reserve(bytes);
    }

    /// Whether no change was added.
    pub fn is_empty(&self) -> bool {
        self.bytes.len() == 1
    }

    /// The encoded record.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }
}

impl Op<'_> {
    /// The column family a change is to (`u8::MAX` for a `Requires` or a `Digest`, which
    /// name payload records and write no family themselves).
    pub fn cf(&self) -> u8 {
        match self {
            Op::Put { cf, .. } | Op::Delete { cf, .. } | Op::DeleteRange { cf, .. } => *cf,
            Op::Requires { .. } | Op::Digest { .. } => u8::MAX,
        }
    }
}

/// Decodes a commit record, calling `f` with each change in order. Fails (nothing is reported
/// as applied by the caller) on an unknown version or tag, or a length past the end.
pub fn decode<'a>(
    bytes: &'a [u8],
    mut f: impl FnMut(Op<'a>) -> Result<(), GroupError>,
) -> Result<(), GroupError> {
    let version = match bytes.first() {
        Some(&v @ (COMMIT_RECORD_VERSION_1 | COMMIT_RECORD_VERSION)) => v,
        Some(v) => return Err(corrupt(0, &format!("version {v}"))),
        None => return Err(corrupt(0, "no version byte")),
    };
    let mut at = 1;
    while at < bytes.len() {
        let op = match bytes[at] {
            TAG_REQUIRES => {
                let (partition, offset) = fixed_fields(bytes, &mut at, "requirement")?;
                Op::Requires { partition, offset }
            }
            TAG_DIGEST if version >= COMMIT_RECORD_VERSION => {
                let (partition, offset) = fixed_fields(bytes, &mut at, "digest")?;
                let start = le_u64(bytes, at).ok_or_else(|| corrupt(at, "truncated digest"))?;
                at += 8;
                Op::Digest {
                    partition,
                    offset,
                    start,
                }
            }
            _ => keyed_op(bytes, &mut at)?,
        };
        f(op)?;
    }
    Ok(())
}

/// A `GroupError::Corrupt` naming byte `at` of a commit record.
fn corrupt(at: usize, what: &str) -> GroupError {
    GroupError::Corrupt(format!("commit record: {what} at byte {at}"))
}

/// The tag at `*at` and its `u32 LE partition, u64 LE offset`, advancing past them.
fn fixed_fields(bytes: &[u8], at: &mut usize, what: &str) -> Result<(u32, u64), GroupError> {
    let partition = bytes
        .get(*at + 1..*at + 5)
        .and_then(|b| b.try_into().ok())
        .map(u32::from_le_bytes);
    match (partition, le_u64(bytes, *at + 5)) {
        (Some(partition), Some(offset)) => {
            *at += 13;
            Ok((partition, offset))
        }
        _ => Err(corrupt(*at, &format!("truncated {what}"))),
    }
}

/// The `u64 LE` at `at`, if the bytes reach that far.
fn le_u64(bytes: &[u8], at: usize) -> Option<u64> {
    let b = bytes.get(at..at.checked_add(8)?)?;
    b.try_into().ok().map(u64::from_le_bytes)
}

/// A put, delete or delete-range op at `*at` (any other tag is an error), advancing past it.
fn keyed_op<'a>(bytes: &'a [u8], at: &mut usize) -> Result<Op<'a>, GroupError> {
    let (tag, cf) = match bytes.get(*at..*at + 2) {
        Some(&[tag, cf]) => (tag, cf),
        _ => return Err(corrupt(*at, "truncated op")),
    };
    let op_at = *at;
    *at += 2;
    let mut next = |what: &str| field(bytes, at).ok_or_else(|| corrupt(op_at, what));
    Ok(match tag {
        TAG_PUT => Op::Put {
            cf,
            key: next("truncated key")?,
            value: next("truncated value")?,
        },
        TAG_DELETE => Op::Delete {
            cf,
            key: next("truncated key")?,
        },
        TAG_DELETE_RANGE => Op::DeleteRange {
            cf,
            from: next("truncated range start")?,
            to: next("truncated range end")?,
        },
        other => return Err(corrupt(op_at, &format!("op tag {other}"))),
    })
}

/// One `u32 LE` length-prefixed field at `*at`, advancing past it.
fn field<'a>(bytes: &'a [u8], at: &mut usize) -> Option<&'a [u8]> {
    let len = bytes.get(*at..*at + 4)?;
    let len = u32::from_le_bytes(len.try_into().ok()?) as usize;
    let start = *at + 4;
    let value = bytes.get(start..start.checked_add(len)?)?;
    *at = start + len;
    Some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ops(bytes: &[u8]) -> Result<Vec<Op<'_>>, GroupError> {
        let mut out = Vec::new();
        decode(bytes, |op| {
            out.push(op);
            Ok(())
        })?;
        Ok(out)
    }

    #[test]
    fn every_op_round_trips_in_order() {
        let mut record = CommitRecord::default();
        assert!(record.is_empty());
        let written = [
            Op::Put {
                cf: 2,
                key: b"k",
                value: b"value",
            },
            Op::Delete { cf: 0, key: b"" },
            Op::Requires {
                partition: 3,
                offset: u64::MAX - 1,
            },
            Op::DeleteRange {
                cf: 14,
                from: b"a",
                to: b"b\xff",
            },
            Op::Digest {
                partition: 7,
                offset: 9,
                start: u64::MAX,
            },
        ];
        for op in written {
            record.push(op);
        }
        assert!(!record.is_empty());
        assert_eq!(ops(record.as_bytes()).unwrap(), written);
    }

    #[test]
    fn every_truncation_and_a_bad_tag_or_version_is_a_typed_error() {
        let mut record = CommitRecord::default();
        record.push(Op::Put {
            cf: 1,
            key: b"key",
            value: b"value",
        });
        record.push(Op::Requires {
            partition: 1,
            offset: 2,
        });
        record.push(Op::Digest {
            partition: 1,
            offset: 2,
            start: 3,
        });
        let bytes = record.as_bytes();
        // Cuts between ops leave a shorter valid record; any other cut is an error.
        let put_end = 1 + 2 + 4 + 3 + 4 + 5;
        let requires_end = put_end + 13;
        for cut in 0..bytes.len() {
            match cut {
                1 => assert!(ops(&bytes[..cut]).unwrap().is_empty()),
                _ if cut == put_end => assert_eq!(ops(&bytes[..cut]).unwrap().len(), 1),
                _ if cut == requires_end => assert_eq!(ops(&bytes[..cut]).unwrap().len(), 2),
                _ => assert!(ops(&bytes[..cut]).is_err(), "cut at {cut}"),
            }
        }
        assert_eq!(ops(bytes).unwrap().len(), 3);
        let mut old = bytes.to_vec();
        old[0] = COMMIT_RECORD_VERSION_1;
        let err = ops(&old).unwrap_err().to_string();
        assert!(err.contains("op tag 5"), "{err}");
        assert_eq!(
            ops(&old[..requires_end]).unwrap().len(),
            2,
            "version 1 still reads"
        );
        let mut bad = bytes.to_vec();
        bad[1] = 9;
        assert!(ops(&bad).is_err());
        bad[0] = 3;
        assert!(ops(&bad).is_err());
    }
}
