//! The 32-byte file header at the start of every segment file (format/SEGMENT.md).

use super::error::DecodeError;

/// Length of the segment file header.
pub const SEGMENT_HEADER_LEN: usize = 32;
/// Magic bytes at the start of a segment file.
pub const SEGMENT_MAGIC: [u8; 8] = *b"STRATSEG";
/// Segment file format version written by this build.
pub const SEGMENT_FORMAT_VERSION: u32 = 1;

/// Encodes the header of a segment whose first offset is `base_offset`.
pub fn encode_segment_header(base_offset: i64) -> [u8; SEGMENT_HEADER_LEN] {
    let mut out = [0u8; SEGMENT_HEADER_LEN];
    out[0..8].copy_from_slice(&SEGMENT_MAGIC);
    out[8..12].copy_from_slice(&SEGMENT_FORMAT_VERSION.to_le_bytes());
    // [12, 16): flags, zero in version 1.
    out[16..24].copy_from_slice(&base_offset.to_le_bytes());
    let crc = crc32fast::hash(&out[0..24]);
    out[24..28].copy_from_slice(&crc.to_le_bytes());
    // [28, 32): reserved, zero.
    out
}

/// Decodes a segment file header and returns its base offset.
pub fn decode_segment_header(buf: &[u8]) -> Result<i64, DecodeError> {
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
    if version != SEGMENT_FORMAT_VERSION {
        return Err(DecodeError::UnsupportedVersion(version));
    }
    if buf[12..16] != [0; 4] || buf[28..32] != [0; 4] {
        return Err(DecodeError::invalid(
            "segment header",
            "reserved bytes not zero",
        ));
    }
    let mut base = [0u8; 8];
    base.copy_from_slice(&buf[16..24]);
    let base = i64::from_le_bytes(base);
    if base < 0 {
        return Err(DecodeError::invalid("base_offset", "negative"));
    }
    Ok(base)
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
