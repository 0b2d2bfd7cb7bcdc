//! The 32-byte file header at the start of every segment file (format/SEGMENT.md).

use super::error::DecodeError;

/// Length of the segment file header.
pub const SEGMENT_HEADER_LEN: usize = 32;
/// Magic bytes at the start of a segment file.
pub const SEGMENT_MAGIC: [u8; 8] = *b"STRATSEG";
/// Segment file format version written by this build (version 1 files are still read).
pub const SEGMENT_FORMAT_VERSION: u32 = 2;
/// Header flag (version 2): the file is preallocated, longer than its data; the data ends at
/// the first all-zero batch header (or the file's end), and everything after it is zero.
pub const SEGMENT_FLAG_PREALLOCATED: u32 = 1;

/// What a segment file header says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentHeader {
    /// Offset of the segment's first record (equals the file name).
    pub base_offset: i64,
    /// File format version (1 or 2).
    pub version: u32,
    /// Whether the file is preallocated (see [`SEGMENT_FLAG_PREALLOCATED`]).
    pub preallocated: bool,
}

/// Encodes the header of a version 2, preallocated segment whose first offset is `base_offset`.
pub fn encode_segment_header(base_offset: i64) -> [u8; SEGMENT_HEADER_LEN] {
    let mut out = [0u8; SEGMENT_HEADER_LEN];
    out[0..8].copy_from_slice(&SEGMENT_MAGIC);
    out[8..12].copy_from_slice(&SEGMENT_FORMAT_VERSION.to_le_bytes());
    out[12..16].copy_from_slice(&SEGMENT_FLAG_PREALLOCATED.to_le_bytes());
    out[16..24].copy_from_slice(&base_offset.to_le_bytes());
    let crc = crc32fast::hash(&out[0..24]);
    out[24..28].copy_from_slice(&crc.to_le_bytes());
    // [28, 32): reserved, zero.
    out
}

/// Decodes a segment file header and returns its base offset.
pub fn decode_segment_header(buf: &[u8]) -> Result<i64, DecodeError> {
    decode_segment_header_full(buf).map(|h| h.base_offset)
}

/// Decodes a segment file header.
pub fn decode_segment_header_full(buf: &[u8]) -> Result<SegmentHeader, DecodeError> {
    if buf.len() < SEGMENT_HEADER_LEN {
        return Err(DecodeError::Truncated {
            needed: SEGMENT_HEADER_LEN,
            available: buf.len(),
        });
    }
    if buf[0..8] != SEGMENT_MAGIC {
        return Err(DecodeError::BadMagic);
    }
    let stored = u32::from_le_bytes([buf[24], buf[25], buf[26], buf[27]]);
    let computed = crc32fast::hash(&buf[0..24]);
    if stored != computed {
        return Err(DecodeError::CrcMismatch { stored, computed });
    }
    let version = u32::from_le_bytes([buf[8], buf[9], buf[10], buf[11]]);
    if version != 1 && version != SEGMENT_FORMAT_VERSION {
        return Err(DecodeError::UnsupportedVersion(version));
    }
    let flags = u32::from_le_bytes([buf[12], buf[13], buf[14], buf[15]]);
    let allowed = if version == 1 {
        0
    } else {
        SEGMENT_FLAG_PREALLOCATED
    };
    if flags & !allowed != 0 || buf[28..32] != [0; 4] {
        return Err(DecodeError::invalid(
            "segment header",
            "reserved bits or bytes not zero",
        ));
    }
    let mut base = [0u8; 8];
    base.copy_from_slice(&buf[16..24]);
    let base = i64::from_le_bytes(base);
    if base < 0 {
        return Err(DecodeError::invalid("base_offset", "negative"));
    }
    Ok(SegmentHeader {
        base_offset: base,
        version,
        preallocated: flags & SEGMENT_FLAG_PREALLOCATED != 0,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rejects_every_flip() {
        let header = encode_segment_header(42);
        assert_eq!(decode_segment_header(&header), Ok(42));
        for i in 0..SEGMENT_HEADER_LEN {
            let mut bad = header;
            bad[i] ^= 0x01;
            assert!(decode_segment_header(&bad).is_err(), "flip at {i}");
        }
    }
}
