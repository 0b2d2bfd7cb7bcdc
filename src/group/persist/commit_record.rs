//! The commit record: every state change of one group command, as one record of the payload log
//! (format/GROUP_STATE.md, "Commit records").
//!
//! A command is durable once its commit record is (one fdatasync of the payload log's journal,
//! which also covers the payload records written just before it). RocksDB then applies the same
//! changes without a write-ahead log of its own; recovery replays the commit records past the
//! last one RocksDB holds. Decoding is pure and checks every length, so a damaged record is a
//! typed error, never a panic.

use crate::group::GroupError;

/// Version byte that starts every commit record.
pub const COMMIT_RECORD_VERSION: u8 = 1;

/// Partition of the payload log that holds the commit records (unkeyed records; payload records
/// are keyed by their stream).
pub const COMMIT_PARTITION: u32 = 0;

const TAG_PUT: u8 = 1;
const TAG_DELETE: u8 = 2;
const TAG_DELETE_RANGE: u8 = 3;
const TAG_REQUIRES: u8 = 4;

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
    /// The column family a change is to (`u8::MAX` for a `Requires`, which changes none).
    pub fn cf(&self) -> u8 {
        match self {
            Op::Put { cf, .. } | Op::Delete { cf, .. } | Op::DeleteRange { cf, .. } => *cf,
            Op::Requires { .. } => u8::MAX,
        }
    }
}

/// Decodes a commit record, calling `f` with each change in order. Fails (nothing is reported
/// as applied by the caller) on an unknown version or tag, or a length past the end.
pub fn decode<'a>(
    bytes: &'a [u8],
    mut f: impl FnMut(Op<'a>) -> Result<(), GroupError>,
) -> Result<(), GroupError> {
    let corrupt =
        |at: usize, what: &str| GroupError::Corrupt(format!("commit record: {what} at byte {at}"));
    match bytes.first() {
        Some(&COMMIT_RECORD_VERSION) => {}
        Some(v) => return Err(corrupt(0, &format!("version {v}"))),
        None => return Err(corrupt(0, "no version byte")),
    }
    let mut at = 1;
    while at < bytes.len() {
        if bytes[at] == TAG_REQUIRES {
            let fixed = bytes
                .get(at + 1..at + 13)
                .ok_or_else(|| corrupt(at, "truncated requirement"))?;
            let (partition, offset) = fixed.split_at(4);
            f(Op::Requires {
                partition: u32::from_le_bytes(partition.try_into().unwrap_or_default()),
                offset: u64::from_le_bytes(offset.try_into().unwrap_or_default()),
            })?;
            at += 13;
            continue;
        }
        let (tag, cf) = match bytes.get(at..at + 2) {
            Some(&[tag, cf]) => (tag, cf),
            _ => return Err(corrupt(at, "truncated op")),
        };
        at += 2;
        let first = field(bytes, &mut at).ok_or_else(|| corrupt(at, "truncated key"))?;
        let op = match tag {
            TAG_PUT => Op::Put {
                cf,
                key: first,
                value: field(bytes, &mut at).ok_or_else(|| corrupt(at, "truncated value"))?,
            },
            TAG_DELETE => Op::Delete { cf, key: first },
            TAG_DELETE_RANGE => Op::DeleteRange {
                cf,
                from: first,
                to: field(bytes, &mut at).ok_or_else(|| corrupt(at, "truncated range end"))?,
            },
            other => return Err(corrupt(at - 2, &format!("op tag {other}"))),
        };
        f(op)?;
    }
    Ok(())
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
        let bytes = record.as_bytes();
        // Cuts between ops leave a shorter valid record; any other cut is an error.
        let put_end = 1 + 2 + 4 + 3 + 4 + 5;
        for cut in 0..bytes.len() {
            match cut {
                1 => assert!(ops(&bytes[..cut]).unwrap().is_empty()),
                _ if cut == put_end => assert_eq!(ops(&bytes[..cut]).unwrap().len(), 1),
                _ => assert!(ops(&bytes[..cut]).is_err(), "cut at {cut}"),
            }
        }
        let mut bad = bytes.to_vec();
        bad[1] = 9;
        assert!(ops(&bad).is_err());
        bad[0] = 2;
        assert!(ops(&bad).is_err());
    }
}
