//! Pure codec of record batches (format/SEGMENT.md, batch format version 2; version 1 batches
//! are still read).
//!
//! No I/O and no panics: every decoder takes an arbitrary byte slice and answers with a value or a
//! [`DecodeError`]. Lengths are checked before any allocation, so a hostile length field cannot make
//! the decoder allocate more than [`MAX_BATCH_LEN`] or [`MAX_RECORDS_LEN`] bytes.

use bytes::Bytes;

use super::error::{DecodeError, EncodeError};
use super::record::{Record, RecordRef, RECORD_FIXED_LEN};

/// Length of the fixed batch header this build writes (version 2).
pub const BATCH_HEADER_LEN: usize = 56;
/// Length of the fixed header of a version 1 batch (read, never written).
pub const BATCH_HEADER_LEN_V1: usize = 48;
/// Magic bytes at batch offset 8.
pub const BATCH_MAGIC: [u8; 2] = *b"SB";
/// Batch format version written by this build.
pub const BATCH_FORMAT_VERSION: u8 = 2;
/// `synced_len` of a version 1 batch, which does not record it: "anything may be durable".
pub const SYNCED_LEN_UNKNOWN: u64 = u64::MAX;
/// Largest encoded batch (header included).
pub const MAX_BATCH_LEN: usize = 64 << 20;
/// Largest uncompressed records section.
pub const MAX_RECORDS_LEN: usize = 64 << 20;

const ATTR_COMPRESSION_MASK: u8 = 0b0000_0011;
/// Attribute bit (version 2): another batch of the same append follows on this partition.
const ATTR_CONTINUED: u8 = 0b0000_0100;
const RECORD_HAS_KEY: u8 = 0b01;
const RECORD_HAS_VALUE: u8 = 0b10;

/// Per-batch compression of the records section.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum Compression {
    /// Records stored as they are.
    #[default]
    None,
    /// Records section compressed with zstd at the given level (1..=22).
    Zstd {
        /// zstd level.
        level: i32,
    },
}

impl Compression {
    fn code(self) -> u8 {
        match self {
            Compression::None => 0,
            Compression::Zstd { .. } => 1,
        }
    }
}

/// The decoded fixed header of a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    /// Total batch length in bytes, header included.
    pub batch_len: u32,
    /// CRC-32 (IEEE) over bytes `[0, 4)` and `[8, batch_len)`.
    pub crc: u32,
    /// Compression code: 0 none, 1 zstd.
    pub compression: u8,
    /// Number of records (at least one).
    pub record_count: u32,
    /// Offset of the first record.
    pub base_offset: i64,
    /// Offset of the last record minus `base_offset`.
    pub last_offset_delta: u32,
    /// Length of the uncompressed records section.
    pub records_len: u32,
    /// Timestamp of the first record.
    pub first_timestamp: i64,
    /// Largest timestamp in the batch.
    pub max_timestamp: i64,
    /// Batch format version (1 or 2).
    pub version: u8,
    /// Another batch of the same append follows this one (version 2): recovery keeps the
    /// append's batches all or none.
    pub continued: bool,
    /// Length of the segment file made durable by the last completed sync when this batch was
    /// written (at most the batch's own position); [`SYNCED_LEN_UNKNOWN`] in version 1.
    pub synced_len: u64,
}

impl BatchHeader {
    /// Length of the fixed header of this batch's version.
    pub fn header_len(&self) -> usize {
        if self.version == 1 {
            BATCH_HEADER_LEN_V1
        } else {
            BATCH_HEADER_LEN
        }
    }

    /// Offset of the last record of the batch.
    pub fn last_offset(&self) -> i64 {
        self.base_offset + i64::from(self.last_offset_delta)
    }

    /// Length of the batch as a `usize`.
    pub fn len(&self) -> usize {
        self.batch_len as usize
    }

    /// Always false: a valid batch holds its header at least.
    pub fn is_empty(&self) -> bool {
        false
    }
}

#[inline]
fn u32_at(buf: &[u8], at: usize) -> u32 {
    let mut b = [0u8; 4];
    b.copy_from_slice(&buf[at..at + 4]);
    u32::from_le_bytes(b)
}

#[inline]
fn i64_at(buf: &[u8], at: usize) -> i64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&buf[at..at + 8]);
    i64::from_le_bytes(b)
}

/// Reads the fixed header at the start of `buf`: its length, magic, version and attribute bits
/// are checked, the other fields are not (see [`decode_header`]). For a batch this process has
/// already decoded and CRC-checked (the bytes cannot have changed since), this is enough.
#[inline]
pub fn parse_header(buf: &[u8]) -> Result<BatchHeader, DecodeError> {
    let frame = check_frame(buf)?;
    Ok(header_fields(buf, frame))
}

/// The version and attribute byte of a header whose length, magic, version and attribute bits
/// were checked by [`check_frame`].
#[derive(Debug, Clone, Copy)]
pub struct Frame {
    version: u8,
    attributes: u8,
}

/// Checks the fixed header's length, magic, version and attribute bits at the start of `buf`.
/// Split from [`header_fields`] so a hot reader builds the header once, in place, after the
/// checks (a `Result` around the whole header cost a stack round trip per batch).
#[inline]
pub fn check_frame(buf: &[u8]) -> Result<Frame, DecodeError> {
    if buf.len() < BATCH_HEADER_LEN_V1 {
        return Err(DecodeError::Truncated {
            needed: BATCH_HEADER_LEN_V1,
            available: buf.len(),
        });
    }
    if buf[8..10] != BATCH_MAGIC {
        return Err(DecodeError::BadMagic);
    }
    let version = buf[10];
    let header_len = match version {
        1 => BATCH_HEADER_LEN_V1,
        2 => BATCH_HEADER_LEN,
        other => return Err(DecodeError::UnsupportedVersion(u32::from(other))),
    };
    if buf.len() < header_len {
        return Err(DecodeError::Truncated {
            needed: header_len,
            available: buf.len(),
        });
    }
    let attributes = buf[11];
    let allowed = if version == 1 {
        ATTR_COMPRESSION_MASK
    } else {
        ATTR_COMPRESSION_MASK | ATTR_CONTINUED
    };
    if attributes & !allowed != 0 {
        return Err(DecodeError::invalid("attributes", "reserved bits set"));
    }
    if attributes & ATTR_COMPRESSION_MASK > 1 {
        return Err(DecodeError::invalid("attributes", "unknown compression"));
    }
    Ok(Frame {
        version,
        attributes,
    })
}

/// The header fields at the start of `buf`, whose frame [`check_frame`] accepted.
#[inline]
pub fn header_fields(buf: &[u8], frame: Frame) -> BatchHeader {
    let Frame {
        version,
        attributes,
    } = frame;
    BatchHeader {
        batch_len: u32_at(buf, 0),
        crc: u32_at(buf, 4),
        compression: attributes & ATTR_COMPRESSION_MASK,
        record_count: u32_at(buf, 12),
        base_offset: i64_at(buf, 16),
        last_offset_delta: u32_at(buf, 24),
        records_len: u32_at(buf, 28),
        first_timestamp: i64_at(buf, 32),
        max_timestamp: i64_at(buf, 40),
        version,
        continued: attributes & ATTR_CONTINUED != 0,
        synced_len: if version == 1 {
            SYNCED_LEN_UNKNOWN
        } else {
            i64_at(buf, 48) as u64
        },
    }
}

/// Decodes and checks the fixed header at the start of `buf` (the CRC is not checked here).
pub fn decode_header(buf: &[u8]) -> Result<BatchHeader, DecodeError> {
    let header = parse_header(buf)?;
    check_fields(&header)?;
    Ok(header)
}

/// Checks the header fields [`parse_header`] leaves unchecked: lengths, counts and offsets in
/// range and consistent with each other.
#[inline]
pub fn check_fields(header: &BatchHeader) -> Result<(), DecodeError> {
    let header_len = header.header_len();
    let compression = header.compression;
    let len = header.batch_len as usize;
    if len <= header_len || len > MAX_BATCH_LEN {
        return Err(DecodeError::invalid("batch_len", "out of range"));
    }
    if header.record_count == 0 {
        return Err(DecodeError::invalid("record_count", "zero"));
    }
    if header.last_offset_delta < header.record_count - 1 {
        return Err(DecodeError::invalid(
            "last_offset_delta",
            "smaller than record_count - 1",
        ));
    }
    if header.base_offset < 0
        || header
            .base_offset
            .checked_add(i64::from(header.last_offset_delta))
            .is_none()
    {
        return Err(DecodeError::invalid("base_offset", "out of range"));
    }
    let records_len = header.records_len as usize;
    if records_len > MAX_RECORDS_LEN
        || records_len < RECORD_FIXED_LEN.saturating_mul(header.record_count as usize)
    {
        return Err(DecodeError::invalid("records_len", "out of range"));
    }
    if compression == 0 && records_len != len - header_len {
        return Err(DecodeError::invalid(
            "records_len",
            "differs from the stored length of an uncompressed batch",
        ));
    }
    if header.max_timestamp < header.first_timestamp {
        return Err(DecodeError::invalid(
            "max_timestamp",
            "smaller than first_timestamp",
        ));
    }
    Ok(())
}

fn batch_crc(batch: &[u8]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(&batch[0..4]);
    hasher.update(&batch[8..]);
    hasher.finalize()
}

/// The CRC state of a batch's bytes after its CRC field (`batch[8..]`): both the batch CRC
/// and its journal frame's CRC cover them, so sealing a long batch hashes them once and each
/// CRC combines this state with its own leading bytes.
pub type BodyCrc = crc32fast::Hasher;

/// Bodies shorter than this are hashed again rather than combined: a combine costs about what
/// hashing a few KiB does (crc32fast multiplies bit by bit, once per set bit of the length).
const COMBINE_FROM: usize = 8 * 1024;

/// The [`BodyCrc`] of `batch`, when it is long enough that combining beats hashing again.
pub fn body_crc(batch: &[u8]) -> Option<BodyCrc> {
    let body = batch.get(8..).filter(|b| b.len() >= COMBINE_FROM)?;
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(body);
    Some(hasher)
}

/// The CRC of `prefix` followed by the bytes `body` hashed.
pub fn crc_with_body(prefix: &[u8], body: &BodyCrc) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    hasher.update(prefix);
    hasher.combine(body);
    hasher.finalize()
}

/// Decodes the header at the start of `buf` and verifies the batch CRC.
///
/// On success the whole batch, `buf[..header.len()]`, is present and intact.
pub fn check_batch(buf: &[u8]) -> Result<BatchHeader, DecodeError> {
    let header = decode_header(buf)?;
    check_crc(buf, &header)?;
    Ok(header)
}

/// Verifies the CRC of the batch at the start of `buf` whose header [`decode_header`] returned.
pub fn check_crc(buf: &[u8], header: &BatchHeader) -> Result<(), DecodeError> {
    let len = header.len();
    if buf.len() < len {
        return Err(DecodeError::Truncated {
            needed: len,
            available: buf.len(),
        });
    }
    let computed = batch_crc(&buf[..len]);
    if computed != header.crc {
        return Err(DecodeError::CrcMismatch {
            stored: header.crc,
            computed,
        });
    }
    Ok(())
}

/// Decodes a whole batch at the start of `buf`: header, CRC, decompression and every record.
pub fn decode_batch(buf: &[u8]) -> Result<(BatchHeader, Vec<Record>), DecodeError> {
    let header = check_batch(buf)?;
    let records = decode_checked(buf, &header)?;
    Ok((header, records))
}

/// Decodes the records of a batch that [`check_batch`] already accepted as `header`.
pub fn decode_checked(buf: &[u8], header: &BatchHeader) -> Result<Vec<Record>, DecodeError> {
    let end = header.len();
    if buf.len() < end {
        return Err(DecodeError::Truncated {
            needed: end,
            available: buf.len(),
        });
    }
    let stored = &buf[header.header_len()..end];
    let records = match header.compression {
        0 => Bytes::copy_from_slice(stored),
        _ => decompress(stored, header.records_len as usize)?,
    };
    let mut out = Vec::new();
    decode_records(header, &records, 0..records.len(), ALL_OFFSETS, |r| {
        out.push(r)
    })?;
    Ok(out)
}

/// Like [`decode_checked`], but uncompressed keys and values are zero-copy slices of `buf`.
pub fn decode_checked_shared(
    buf: &Bytes,
    header: &BatchHeader,
) -> Result<Vec<Record>, DecodeError> {
    let mut records = Vec::new();
    decode_checked_shared_into(buf, 0, header, ALL_OFFSETS, &mut records)?;
    Ok(records)
}

/// [`decode_checked_shared`] of the batch at byte `at` of `buf`, keeping the records with
/// offsets in `[from, until)`, pushed onto `out`.
pub fn decode_checked_shared_into(
    buf: &Bytes,
    at: usize,
    header: &BatchHeader,
    range: (i64, i64),
    out: &mut Vec<Record>,
) -> Result<(), DecodeError> {
    out.reserve(header.record_count as usize);
    visit_checked_shared(buf, at, header, range, |r| out.push(r))
}

/// Calls `f` with each record with offset in `[from, until)` of the batch at byte `at` of
/// `buf`, which [`check_batch`] (or a check done once before) accepted as `header`.
/// Uncompressed keys and values are slices of `buf` itself (one reference count taken per key
/// or value, none per batch); a compressed batch is decompressed into a buffer they share.
#[inline]
pub fn visit_checked_shared(
    buf: &Bytes,
    at: usize,
    header: &BatchHeader,
    range: (i64, i64),
    f: impl FnMut(Record),
) -> Result<(), DecodeError> {
    let available = buf.len().saturating_sub(at);
    if available < header.len() {
        return Err(DecodeError::Truncated {
            needed: header.len(),
            available,
        });
    }
    let section = at + header.header_len()..at + header.len();
    match header.compression {
        0 => decode_records(header, buf, section, range, f),
        _ => {
            let records = decompress(&buf[section], header.records_len as usize)?;
            decode_records(header, &records, 0..records.len(), range, f)
        }
    }
}

/// Every offset: the range of a whole batch's decode.
const ALL_OFFSETS: (i64, i64) = (i64::MIN, i64::MAX);

fn decompress(stored: &[u8], expected: usize) -> Result<Bytes, DecodeError> {
    let mut out = Vec::with_capacity(expected);
    let mut decoder = zstd::stream::read::Decoder::new(stored)
        .map_err(|e| DecodeError::Decompress(e.to_string()))?;
    // Read at most one byte past the declared length, so a bomb cannot grow `out` further.
    let limit = (expected as u64) + 1;
    std::io::copy(&mut std::io::Read::take(&mut decoder, limit), &mut out)
        .map_err(|e| DecodeError::Decompress(e.to_string()))?;
    if out.len() != expected {
        return Err(DecodeError::Decompress(format!(
            "produced {} bytes, header declares {expected}",
            out.len()
        )));
    }
    Ok(Bytes::from(out))
}

/// Where one record's parts lie inside its records section.
struct RawRecord {
    offset: i64,
    timestamp: i64,
    key: Option<std::ops::Range<usize>>,
    value: Option<std::ops::Range<usize>>,
}

struct Cursor<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl Cursor<'_> {
    #[inline]
    fn take(
        &mut self,
        n: usize,
        field: &'static str,
    ) -> Result<std::ops::Range<usize>, DecodeError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|end| *end <= self.buf.len())
            .ok_or(DecodeError::invalid(field, "runs past the records section"))?;
        let range = self.pos..end;
        self.pos = end;
        Ok(range)
    }

    #[inline]
    fn u32(&mut self, field: &'static str) -> Result<u32, DecodeError> {
        let r = self.take(4, field)?;
        Ok(u32_at(&self.buf[r], 0))
    }

    #[inline]
    fn i64(&mut self, field: &'static str) -> Result<i64, DecodeError> {
        let r = self.take(8, field)?;
        Ok(i64_at(&self.buf[r], 0))
    }

    #[inline]
    fn u8(&mut self, field: &'static str) -> Result<u8, DecodeError> {
        let r = self.take(1, field)?;
        Ok(self.buf[r.start])
    }

    #[inline]
    fn part(&mut self, field: &'static str) -> Result<std::ops::Range<usize>, DecodeError> {
        let len = self.u32(field)? as usize;
        self.take(len, field)
    }
}

/// Parses and checks every record of a records section (format/SEGMENT.md, "Record"), calling
/// `f` with each in order.
fn parse_records(
    header: &BatchHeader,
    section: &[u8],
    mut f: impl FnMut(RawRecord),
) -> Result<(), DecodeError> {
    let mut cursor = Cursor {
        buf: section,
        pos: 0,
    };
    let mut previous_delta: Option<u32> = None;
    let mut max_timestamp = i64::MIN;
    for index in 0..header.record_count as usize {
        let delta = cursor.u32("offset_delta")?;
        match previous_delta {
            None if delta != 0 => {
                return Err(DecodeError::invalid(
                    "offset_delta",
                    "first record is not at delta 0",
                ))
            }
            Some(prev) if delta <= prev => {
                return Err(DecodeError::invalid(
                    "offset_delta",
                    "not strictly increasing",
                ))
            }
            _ => {}
        }
        previous_delta = Some(delta);
        let timestamp = cursor.i64("timestamp")?;
        if index == 0 && timestamp != header.first_timestamp {
            return Err(DecodeError::invalid(
                "first_timestamp",
                "differs from the first record",
            ));
        }
        max_timestamp = max_timestamp.max(timestamp);
        let attributes = cursor.u8("record attributes")?;
        if attributes & !(RECORD_HAS_KEY | RECORD_HAS_VALUE) != 0 {
            return Err(DecodeError::invalid(
                "record attributes",
                "reserved bits set",
            ));
        }
        if attributes & RECORD_HAS_KEY == 0 && attributes & RECORD_HAS_VALUE == 0 {
            return Err(DecodeError::invalid(
                "record attributes",
                "neither key nor value",
            ));
        }
        let key = (attributes & RECORD_HAS_KEY != 0)
            .then(|| cursor.part("key"))
            .transpose()?;
        let value = (attributes & RECORD_HAS_VALUE != 0)
            .then(|| cursor.part("value"))
            .transpose()?;
        f(RawRecord {
            offset: header.base_offset + i64::from(delta),
            timestamp,
            key,
            value,
        });
    }
    if previous_delta != Some(header.last_offset_delta) {
        return Err(DecodeError::invalid(
            "last_offset_delta",
            "differs from the last record",
        ));
    }
    if max_timestamp != header.max_timestamp {
        return Err(DecodeError::invalid(
            "max_timestamp",
            "differs from the records",
        ));
    }
    if cursor.pos != cursor.buf.len() {
        return Err(DecodeError::invalid(
            "records_len",
            "trailing bytes after the last record",
        ));
    }
    Ok(())
}

/// Calls `f` with the records of the records section `buf[section]` (of the batch `header`
/// describes) with offsets in `[from, until)`, keys and values as slices of `buf`.
#[inline]
fn decode_records(
    header: &BatchHeader,
    buf: &Bytes,
    section: std::ops::Range<usize>,
    (from, until): (i64, i64),
    mut f: impl FnMut(Record),
) -> Result<(), DecodeError> {
    let base = section.start;
    let part = |r: std::ops::Range<usize>| buf.slice(base + r.start..base + r.end);
    parse_records(header, &buf[section], |r| {
        if r.offset >= from && r.offset < until {
            f(Record {
                offset: r.offset,
                timestamp: r.timestamp,
                key: r.key.map(part),
                value: r.value.map(part),
            });
        }
    })
}

/// Calls `f` with each record of the batch at the start of `buf`, which [`check_batch`] (or a
/// check done once before) accepted as `header`, borrowing its keys and values (a compressed
/// batch is decompressed into a buffer first).
#[inline]
pub fn visit_checked(
    buf: &[u8],
    header: &BatchHeader,
    mut f: impl FnMut(RecordRef<'_>),
) -> Result<(), DecodeError> {
    let end = header.len();
    if buf.len() < end {
        return Err(DecodeError::Truncated {
            needed: end,
            available: buf.len(),
        });
    }
    let stored = &buf[header.header_len()..end];
    let decompressed;
    let section: &[u8] = match header.compression {
        0 => stored,
        _ => {
            decompressed = decompress(stored, header.records_len as usize)?;
            &decompressed
        }
    };
    parse_records(header, section, |r| {
        f(RecordRef {
            offset: r.offset,
            timestamp: r.timestamp,
            key: r.key.map(|k| &section[k]),
            value: r.value.map(|v| &section[v]),
        })
    })
}

/// Encodes `records` (offsets already assigned, strictly increasing) as one sealed batch appended
/// to `out`, with `synced_len` 0 (a batch of a file that is synced whole before it is used).
///
/// Returns the header written, equal to what [`decode_header`] reads back.
pub fn encode_batch(
    records: &[Record],
    compression: Compression,
    out: &mut Vec<u8>,
) -> Result<BatchHeader, EncodeError> {
    let start = out.len();
    let mut header = encode_unsealed(records, compression, out)?;
    let base = header.base_offset;
    seal_batch(&mut out[start..], &mut header, base, 0);
    Ok(header)
}

/// Stamps the base offset, `synced_len` and `header.continued` into the unsealed batch `batch`
/// (as [`encode_unsealed`] wrote it; record offsets are relative, so they move with the base)
/// and writes its CRC. `header` is updated to match. Returns the batch's [`BodyCrc`] if it
/// hashed one (for its journal frame).
pub fn seal_batch(
    batch: &mut [u8],
    header: &mut BatchHeader,
    base_offset: i64,
    synced_len: u64,
) -> Option<BodyCrc> {
    assert_eq!(batch.len(), header.len());
    assert_eq!(header.version, BATCH_FORMAT_VERSION);
    batch[11] = header.compression | if header.continued { ATTR_CONTINUED } else { 0 };
    batch[16..24].copy_from_slice(&base_offset.to_le_bytes());
    batch[48..56].copy_from_slice(&synced_len.to_le_bytes());
    let body = body_crc(batch);
    let crc = match &body {
        Some(body) => crc_with_body(&batch[0..4], body),
        None => batch_crc(batch),
    };
    batch[4..8].copy_from_slice(&crc.to_le_bytes());
    header.base_offset = base_offset;
    header.synced_len = synced_len;
    header.crc = crc;
    debug_assert_eq!(crc, batch_crc(batch));
    body
}

/// Encodes `records` as one batch appended to `out`, without its CRC: [`seal_batch`] must stamp
/// it before it is written. Offsets are taken relative to the first record's. An uncompressed
/// batch's records are encoded in place after its header (one copy of each value); on error
/// `out` is left as it was.
pub fn encode_unsealed(
    records: &[Record],
    compression: Compression,
    out: &mut Vec<u8>,
) -> Result<BatchHeader, EncodeError> {
    let first = records.first().ok_or(EncodeError::Empty)?;
    let last = &records[records.len() - 1];
    let base = first.offset;
    if base < 0 {
        return Err(EncodeError::BadOffsets);
    }
    let last_delta = u32::try_from(last.offset - base).map_err(|_| EncodeError::BadOffsets)?;
    let record_count = u32::try_from(records.len()).map_err(|_| EncodeError::BadOffsets)?;
    let records_len: usize = records.iter().map(Record::encoded_len).sum();
    if records_len > MAX_RECORDS_LEN {
        return Err(EncodeError::TooLarge {
            len: records_len,
            limit: MAX_RECORDS_LEN,
        });
    }
    let start = out.len();
    let encoded = encode_body(records, base, compression, records_len, out);
    let batch_len = out.len() - start;
    let max_timestamp = match encoded {
        Ok(_) if batch_len > MAX_BATCH_LEN => Err(EncodeError::TooLarge {
            len: batch_len,
            limit: MAX_BATCH_LEN,
        }),
        other => other,
    }
    .inspect_err(|_| out.truncate(start))?;
    if compression == Compression::None {
        assert_eq!(
            batch_len,
            BATCH_HEADER_LEN + records_len,
            "records encode to the length their header states"
        );
    }
    let header = BatchHeader {
        batch_len: batch_len as u32,
        crc: 0,
        compression: compression.code(),
        record_count,
        base_offset: base,
        last_offset_delta: last_delta,
        records_len: records_len as u32,
        first_timestamp: first.timestamp,
        max_timestamp,
        version: BATCH_FORMAT_VERSION,
        continued: false,
        synced_len: 0,
    };
    out[start..start + BATCH_HEADER_LEN].copy_from_slice(&unsealed_header_bytes(&header));
    Ok(header)
}

/// Appends a batch's header space (zeros) and its records section (offsets relative to `base`,
/// compressed when asked) to `out`; returns the records' largest timestamp.
fn encode_body(
    records: &[Record],
    base: i64,
    compression: Compression,
    records_len: usize,
    out: &mut Vec<u8>,
) -> Result<i64, EncodeError> {
    match compression {
        Compression::None => {
            out.reserve(BATCH_HEADER_LEN + records_len);
            out.resize(out.len() + BATCH_HEADER_LEN, 0);
            encode_records(records, base, out)
        }
        Compression::Zstd { level } => {
            let mut section = Vec::with_capacity(records_len);
            let max_timestamp = encode_records(records, base, &mut section)?;
            let stored = zstd::bulk::compress(&section, level)
                .map_err(|e| EncodeError::Compress(e.to_string()))?;
            out.reserve(BATCH_HEADER_LEN + stored.len());
            out.resize(out.len() + BATCH_HEADER_LEN, 0);
            out.extend_from_slice(&stored);
            Ok(max_timestamp)
        }
    }
}

/// Appends the records section (format/SEGMENT.md) of `records`, offsets relative to `base`,
/// to `out`; returns the largest timestamp.
fn encode_records(records: &[Record], base: i64, out: &mut Vec<u8>) -> Result<i64, EncodeError> {
    let mut previous: Option<i64> = None;
    let mut max_timestamp = i64::MIN;
    for record in records {
        if previous.is_some_and(|p| record.offset <= p) {
            return Err(EncodeError::BadOffsets);
        }
        previous = Some(record.offset);
        if record.key.is_none() && record.value.is_none() {
            return Err(EncodeError::UnkeyedTombstone);
        }
        max_timestamp = max_timestamp.max(record.timestamp);
        let delta = (record.offset - base) as u32;
        out.extend_from_slice(&delta.to_le_bytes());
        out.extend_from_slice(&record.timestamp.to_le_bytes());
        let mut attributes = 0u8;
        if record.key.is_some() {
            attributes |= RECORD_HAS_KEY;
        }
        if record.value.is_some() {
            attributes |= RECORD_HAS_VALUE;
        }
        out.push(attributes);
        for part in [&record.key, &record.value].into_iter().flatten() {
            let len = u32::try_from(part.len()).map_err(|_| EncodeError::TooLarge {
                len: part.len(),
                limit: MAX_RECORDS_LEN,
            })?;
            out.extend_from_slice(&len.to_le_bytes());
            out.extend_from_slice(part);
        }
    }
    Ok(max_timestamp)
}

/// The header bytes of an unsealed batch (CRC and durable floor zero; sealing stamps them).
fn unsealed_header_bytes(h: &BatchHeader) -> [u8; BATCH_HEADER_LEN] {
    let mut b = [0u8; BATCH_HEADER_LEN];
    b[0..4].copy_from_slice(&h.batch_len.to_le_bytes());
    b[8..10].copy_from_slice(&BATCH_MAGIC);
    b[10] = h.version;
    b[11] = h.compression;
    b[12..16].copy_from_slice(&h.record_count.to_le_bytes());
    b[16..24].copy_from_slice(&h.base_offset.to_le_bytes());
    b[24..28].copy_from_slice(&h.last_offset_delta.to_le_bytes());
    b[28..32].copy_from_slice(&h.records_len.to_le_bytes());
    b[32..40].copy_from_slice(&h.first_timestamp.to_le_bytes());
    b[40..48].copy_from_slice(&h.max_timestamp.to_le_bytes());
    b
}

/// Splits `records` into consecutive runs of about `target` encoded bytes (at least one record
/// each), the batches a writer encodes one by one.
pub fn batch_spans(records: &[Record], target: usize) -> impl Iterator<Item = &[Record]> {
    let mut rest = records;
    std::iter::from_fn(move || {
        if rest.is_empty() {
            return None;
        }
        let mut end = 1;
        let mut bytes = rest[0].encoded_len();
        while end < rest.len() && bytes + rest[end].encoded_len() <= target {
            bytes += rest[end].encoded_len();
            end += 1;
        }
        let (span, tail) = rest.split_at(end);
        rest = tail;
        Some(span)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<Record> {
        vec![
            Record {
                offset: 10,
                timestamp: 1000,
                key: None,
                value: Some(Bytes::from_static(b"hello")),
            },
            Record {
                offset: 11,
                timestamp: 999,
                key: Some(Bytes::from_static(b"k")),
                value: None,
            },
            Record {
                offset: 14,
                timestamp: 1002,
                key: Some(Bytes::from_static(b"k2")),
                value: Some(Bytes::new()),
            },
        ]
    }

    #[test]
    fn round_trips_plain_and_zstd() {
        for compression in [Compression::None, Compression::Zstd { level: 3 }] {
            let mut out = Vec::new();
            let written = encode_batch(&sample(), compression, &mut out).unwrap();
            assert_eq!(written.len(), out.len());
            assert_eq!(
                decode_header(&out),
                Ok(written),
                "the returned header is the one written"
            );
            let (header, records) = decode_batch(&out).unwrap();
            assert_eq!(records, sample());
            assert_eq!(header.base_offset, 10);
            assert_eq!(header.last_offset(), 14);
            assert_eq!(header.max_timestamp, 1002);
        }
    }

    #[test]
    fn a_long_batch_is_sealed_with_a_combined_crc_equal_to_a_direct_one() {
        for len in [COMBINE_FROM - 100, COMBINE_FROM, 3 * COMBINE_FROM + 1] {
            let value: Vec<u8> = (0..len).map(|i| (i % 253) as u8).collect();
            let records = [Record {
                offset: 3,
                timestamp: 1,
                key: None,
                value: Some(Bytes::from(value)),
            }];
            let mut out = Vec::new();
            let mut header = encode_unsealed(&records, Compression::None, &mut out).unwrap();
            let body = seal_batch(&mut out, &mut header, 3, 77);
            assert_eq!(body.is_some(), out.len() - 8 >= COMBINE_FROM, "{len}");
            assert_eq!(header.crc, batch_crc(&out), "{len}");
            assert_eq!(check_batch(&out), Ok(header));
        }
    }

    #[test]
    fn rejects_bad_records() {
        let mut out = Vec::new();
        assert_eq!(
            encode_batch(&[], Compression::None, &mut out),
            Err(EncodeError::Empty)
        );
        let mut bad = sample();
        bad[1].offset = 10;
        assert_eq!(
            encode_batch(&bad, Compression::None, &mut out),
            Err(EncodeError::BadOffsets)
        );
        let mut bad = sample();
        bad[0].value = None;
        assert_eq!(
            encode_batch(&bad, Compression::None, &mut out),
            Err(EncodeError::UnkeyedTombstone)
        );
    }

    #[test]
    fn a_refused_batch_leaves_the_buffer_as_it_was() {
        for compression in [Compression::None, Compression::Zstd { level: 3 }] {
            let mut alone = Vec::new();
            encode_unsealed(&sample(), compression, &mut alone).unwrap();
            let mut out = b"earlier".to_vec();
            encode_unsealed(&sample(), compression, &mut out).unwrap();
            assert_eq!(&out[..7], b"earlier");
            assert_eq!(out[7..], alone, "appended after what was there");
            let before = out.clone();
            let mut bad = sample();
            bad[2].offset = 11;
            assert_eq!(
                encode_unsealed(&bad, compression, &mut out),
                Err(EncodeError::BadOffsets)
            );
            let mut bad = sample();
            bad[2].key = None;
            bad[2].value = None;
            assert_eq!(
                encode_unsealed(&bad, compression, &mut out),
                Err(EncodeError::UnkeyedTombstone)
            );
            assert_eq!(out, before, "{compression:?}");
        }
    }

    #[test]
    fn batch_spans_cover_every_record_within_the_target() {
        let records: Vec<Record> = (0..50)
            .map(|i| Record {
                offset: i,
                timestamp: 0,
                key: None,
                value: Some(Bytes::from(vec![0u8; (i as usize * 7) % 90])),
            })
            .collect();
        let spans: Vec<&[Record]> = batch_spans(&records, 200).collect();
        assert_eq!(spans.concat(), records);
        for span in &spans {
            let bytes: usize = span.iter().map(Record::encoded_len).sum();
            assert!(
                !span.is_empty() && (span.len() == 1 || bytes <= 200),
                "{bytes}"
            );
        }
        assert_eq!(
            batch_spans(&records[..1], 0).count(),
            1,
            "one record over the target still forms a batch"
        );
        assert_eq!(batch_spans(&[], 10).count(), 0);
    }

    #[test]
    fn zeros_never_decode() {
        assert!(decode_batch(&[0u8; 256]).is_err());
        assert!(decode_header(&[0u8; BATCH_HEADER_LEN]).is_err());
    }

    #[test]
    fn every_truncation_is_an_error() {
        let mut out = Vec::new();
        encode_batch(&sample(), Compression::None, &mut out).unwrap();
        for cut in 0..out.len() {
            assert!(decode_batch(&out[..cut]).is_err(), "cut at {cut}");
        }
    }
}
