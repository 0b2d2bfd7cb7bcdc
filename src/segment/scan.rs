//! Walking the batches of a segment image, validating each one: the basis of recovery, index
//! rebuilds and `strata verify`.

use super::codec::{check_batch, BatchHeader};
use super::error::DecodeError;
use super::index::{IndexEntry, SegmentIndex};

/// How a scan of a segment image ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScanEnd {
    /// Every byte belongs to a valid batch.
    Clean,
    /// The batch at `position` is invalid and every valid batch after it was written while
    /// `position` was not yet durable: a torn tail (bytes never synced, so never acknowledged).
    TornTail {
        /// Byte position of the first invalid byte.
        position: u64,
        /// Why the batch there is invalid.
        error: DecodeError,
    },
    /// The batch at `position` is invalid but a valid batch after it was written once
    /// `position` was durable: damage to synced bytes.
    Corrupt {
        /// Byte position of the invalid batch.
        position: u64,
        /// Why the batch there is invalid.
        error: DecodeError,
    },
}

/// The result of scanning a segment image.
#[derive(Debug, Clone)]
pub struct Scan {
    /// Index rebuilt over the valid prefix (its `segment_len` is the valid length).
    pub index: SegmentIndex,
    /// Number of valid batches seen from the scan start.
    pub batches: u64,
    /// Number of records in those batches.
    pub records: u64,
    /// How the scan ended.
    pub end: ScanEnd,
}

/// Checks one batch at `position` and that it continues the offsets already in `index`.
fn batch_at(
    image: &[u8],
    position: usize,
    index: &SegmentIndex,
) -> Result<BatchHeader, DecodeError> {
    let header = check_batch(&image[position..])?;
    if header.base_offset <= index.last_offset {
        return Err(DecodeError::invalid(
            "base_offset",
            "does not follow the previous batch",
        ));
    }
    if header.last_offset() - index.base_offset > i64::from(u32::MAX) {
        return Err(DecodeError::invalid(
            "base_offset",
            "beyond the segment's 2^32 offsets",
        ));
    }
    Ok(header)
}

/// One past the last non-zero byte of `image` (0 when it is all zeros). Looks at 8 bytes at a
/// time: a preallocated segment's zero tail can be tens of megabytes.
pub fn nonzero_end(image: &[u8]) -> usize {
    let words = image.len() / 8;
    let tail = &image[words * 8..];
    if let Some(p) = tail.iter().rposition(|&b| b != 0) {
        return words * 8 + p + 1;
    }
    let word = |i: usize| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&image[i * 8..i * 8 + 8]);
        u64::from_ne_bytes(w)
    };
    match (0..words).rev().find(|&i| word(i) != 0) {
        Some(i) => {
            i * 8
                + image[i * 8..i * 8 + 8]
                    .iter()
                    .rposition(|&b| b != 0)
                    .map_or(0, |p| p + 1)
        }
        None => 0,
    }
}

/// Scans `image` (a whole segment file) from byte `start`, trusting `index` for what lies before.
/// In a preallocated file (`zero_tail`) an invalid batch followed only by zeros is the clean end
/// of the data.
///
/// Adds an index entry whenever at least `interval` bytes passed since the last one.
pub fn scan_segment(
    image: &[u8],
    mut index: SegmentIndex,
    start: u64,
    (interval, zero_tail): (u64, bool),
) -> Scan {
    let mut position = start as usize;
    let mut batches = 0;
    let mut records = 0;
    // Where the append whose batches are still `continued` began, and the index before it.
    let mut open_append: Option<(usize, SegmentIndex, u64, u64)> = None;
    let end = loop {
        if position >= image.len() {
            break ScanEnd::Clean;
        }
        match batch_at(image, position, &index) {
            Ok(header) => {
                if !header.continued {
                    open_append = None;
                } else if open_append.is_none() {
                    open_append = Some((position, index.clone(), batches, records));
                }
                note_batch(&mut index, position as u64, &header, interval);
                batches += 1;
                records += u64::from(header.record_count);
                position += header.len();
            }
            Err(error) => {
                let position64 = position as u64;
                let end = nonzero_end(image);
                if zero_tail && position >= end {
                    break ScanEnd::Clean;
                }
                break if synced_batch_after(&image[..end.max(position)], position, &index) {
                    ScanEnd::Corrupt {
                        position: position64,
                        error,
                    }
                } else {
                    ScanEnd::TornTail {
                        position: position64,
                        error,
                    }
                };
            }
        }
    };
    if let (Some((start, before, b, r)), ScanEnd::Clean | ScanEnd::TornTail { .. }) =
        (open_append, &end)
    {
        // The append's last batch never made it: none of it did.
        return Scan {
            index: SegmentIndex {
                segment_len: start as u64,
                ..before
            },
            batches: b,
            records: r,
            end: ScanEnd::TornTail {
                position: start as u64,
                error: DecodeError::invalid("continued", "an append ends before its last batch"),
            },
        };
    }
    index.segment_len = position as u64;
    Scan {
        index,
        batches,
        records,
        end,
    }
}

/// Records a valid batch at `position` in the index and its summary.
pub fn note_batch(index: &mut SegmentIndex, position: u64, header: &BatchHeader, interval: u64) {
    let since_last = position.saturating_sub(index.last_position());
    if index.entries.is_empty() || since_last >= interval {
        let relative = (header.base_offset - index.base_offset) as u32;
        index.push(IndexEntry {
            relative_offset: relative,
            position: position as u32,
        });
    }
    index.last_offset = header.last_offset();
    index.max_timestamp = index.max_timestamp.max(header.max_timestamp);
    index.segment_len = position + header.batch_len as u64;
}

/// True when some byte position after `position` starts a valid batch continuing `index` that
/// was written after `position` had been synced (its `synced_len` lies past `position`; a
/// version 1 batch, which does not say, counts as such).
fn synced_batch_after(image: &[u8], position: usize, index: &SegmentIndex) -> bool {
    (position + 1..image.len()).any(|p| {
        image[p..].len() >= 10
            && image[p + 8..p + 10] == super::codec::BATCH_MAGIC
            && batch_at(image, p, index).is_ok_and(|h| h.synced_len > position as u64)
    })
}

/// Checks an index against the segment image: it describes all of the data (the whole file, or
/// in a preallocated file everything before the zeros), and every entry points at a batch header
/// with the entry's offset. Returns false at the first thing that does not match.
pub fn index_matches(image: &[u8], index: &SegmentIndex, preallocated: bool) -> bool {
    let len = index.segment_len as usize;
    let covers = if preallocated {
        len <= image.len() && image[len..].iter().take(8).all(|&b| b == 0)
    } else {
        len == image.len()
    };
    covers
        && index.entries.iter().all(|e| {
            let p = e.position as usize;
            p < image.len()
                && super::codec::decode_header(&image[p..]).is_ok_and(|h| {
                    h.base_offset == index.base_offset + i64::from(e.relative_offset)
                })
        })
}
