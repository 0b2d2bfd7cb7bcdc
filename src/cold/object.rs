//! The cold object format (format/COLD_OBJECT.md): a 32-byte header, then the stream bytes,
//! zstd-compressed. Strata writes every cold chunk it uploads in this format; the path suffix
//! [`COLD_OBJECT_SUFFIX`] marks such objects (anything else is read as raw bytes).

use bytes::Bytes;

use super::ColdError;

/// Magic bytes at offset 0.
pub const COLD_OBJECT_MAGIC: [u8; 8] = *b"STRATCO\x01";
/// Format version this build writes and reads.
pub const COLD_OBJECT_VERSION: u16 = 1;
/// Header length.
pub const COLD_OBJECT_HEADER_LEN: usize = 32;
/// Path suffix of Strata cold objects.
pub const COLD_OBJECT_SUFFIX: &str = ".sco";
/// Codec value: body is raw bytes.
pub const CODEC_NONE: u16 = 0;
/// Codec value: body is one zstd frame.
pub const CODEC_ZSTD: u16 = 1;
/// Largest raw payload an object may declare (bounds decompression memory).
pub const MAX_RAW_LEN: u64 = 1 << 30;

/// Encodes `payload` as a cold object, zstd level `level` (stored raw when that is not smaller).
pub fn encode_cold_object(payload: &[u8], level: i32) -> Result<Bytes, ColdError> {
    let compressed = zstd::bulk::compress(payload, level)
        .map_err(|e| ColdError::Encode(format!("zstd: {e}")))?;
    let (codec, body) = if compressed.len() < payload.len() {
        (CODEC_ZSTD, compressed.as_slice())
    } else {
        (CODEC_NONE, payload)
    };
    let mut out = Vec::with_capacity(COLD_OBJECT_HEADER_LEN + body.len());
    out.extend_from_slice(&COLD_OBJECT_MAGIC);
    out.extend_from_slice(&COLD_OBJECT_VERSION.to_le_bytes());
    out.extend_from_slice(&codec.to_le_bytes());
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    out.extend_from_slice(&(body.len() as u64).to_le_bytes());
    let mut crc = crc32fast::Hasher::new();
    crc.update(&out[..28]);
    crc.update(body);
    out.extend_from_slice(&crc.finalize().to_le_bytes());
    out.extend_from_slice(body);
    Ok(Bytes::from(out))
}

/// Decodes a cold object, checking magic, version, lengths and CRC; `path` names it in errors.
pub fn decode_cold_object(path: &str, object: &[u8]) -> Result<Bytes, ColdError> {
    let corrupt = |offset: usize, reason: &str| ColdError::Corrupt {
        path: path.to_string(),
        offset: offset as u64,
        reason: reason.to_string(),
    };
    let header = object
        .get(..COLD_OBJECT_HEADER_LEN)
        .ok_or_else(|| corrupt(0, "object shorter than its header"))?;
    if header[..8] != COLD_OBJECT_MAGIC {
        return Err(corrupt(0, "bad magic"));
    }
    let u16_at = |at: usize| u16::from_le_bytes([header[at], header[at + 1]]);
    let u64_at = |at: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&header[at..at + 8]);
        u64::from_le_bytes(b)
    };
    if u16_at(8) != COLD_OBJECT_VERSION {
        return Err(corrupt(8, "unsupported version"));
    }
    let codec = u16_at(10);
    let raw_len = u64_at(12);
    let body_len = u64_at(20);
    let stored_crc = u32::from_le_bytes([header[28], header[29], header[30], header[31]]);
    let body = &object[COLD_OBJECT_HEADER_LEN..];
    if body.len() as u64 != body_len {
        return Err(corrupt(20, "body length does not match the object size"));
    }
    let mut crc = crc32fast::Hasher::new();
    crc.update(&header[..28]);
    crc.update(body);
    if crc.finalize() != stored_crc {
        return Err(corrupt(28, "CRC mismatch"));
    }
    if raw_len > MAX_RAW_LEN {
        return Err(corrupt(12, "declared length too large"));
    }
    let raw = match codec {
        CODEC_NONE => body.to_vec(),
        CODEC_ZSTD => zstd::bulk::decompress(body, raw_len as usize)
            .map_err(|_| corrupt(COLD_OBJECT_HEADER_LEN, "zstd body does not decode"))?,
        _ => return Err(corrupt(10, "unknown codec")),
    };
    if raw.len() as u64 != raw_len {
        return Err(corrupt(12, "decoded length differs from the header"));
    }
    Ok(Bytes::from(raw))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_detects_every_flipped_byte() {
        let payload = b"hello cold tier hello cold tier hello cold tier".repeat(8);
        let object = encode_cold_object(&payload, 3).unwrap();
        assert_eq!(decode_cold_object("p", &object).unwrap(), payload);
        for i in 0..object.len() {
            let mut bad = object.to_vec();
            bad[i] ^= 0x40;
            assert!(decode_cold_object("p", &bad).is_err(), "byte {i}");
        }
    }
}
