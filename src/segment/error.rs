//! Errors of the pure decoders: what is wrong with a byte string, never where it came from.
//!
//! Callers that know the file and position wrap these in `StoreError::Corrupt`.

/// Why a byte string is not a valid Strata structure.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// Fewer bytes than the structure needs.
    #[error("truncated: needs {needed} bytes, {available} available")]
    Truncated {
        /// Bytes the structure needs.
        needed: usize,
        /// Bytes present.
        available: usize,
    },
    /// The magic bytes do not name this structure.
    #[error("bad magic bytes")]
    BadMagic,
    /// A format version this build cannot read.
    #[error("unsupported format version {0}")]
    UnsupportedVersion(u32),
    /// The stored checksum does not match the bytes.
    #[error("crc mismatch: stored {stored:#010x}, computed {computed:#010x}")]
    CrcMismatch {
        /// CRC found in the structure.
        stored: u32,
        /// CRC computed over the bytes.
        computed: u32,
    },
    /// A field holds a value the format forbids.
    #[error("invalid {field}: {reason}")]
    Invalid {
        /// The field at fault.
        field: &'static str,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The zstd payload did not decompress to the declared length.
    #[error("zstd decompression failed: {0}")]
    Decompress(String),
}

impl DecodeError {
    /// Shorthand for [`DecodeError::Invalid`].
    pub(crate) fn invalid(field: &'static str, reason: &'static str) -> Self {
        DecodeError::Invalid { field, reason }
    }
}

/// Why records could not be encoded into a batch.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EncodeError {
    /// The batch would hold no record.
    #[error("a batch needs at least one record")]
    Empty,
    /// A record without a key and without a value.
    #[error("a record without a key must carry a value")]
    UnkeyedTombstone,
    /// Offsets are not strictly increasing or leave the 32-bit delta range.
    #[error("record offsets must increase strictly within 2^32 of the batch base")]
    BadOffsets,
    /// The batch exceeds [`crate::segment::MAX_BATCH_LEN`].
    #[error("batch of {len} bytes exceeds the limit of {limit} bytes")]
    TooLarge {
        /// Encoded length.
        len: usize,
        /// The limit.
        limit: usize,
    },
    /// zstd failed to compress.
    #[error("zstd compression failed: {0}")]
    Compress(String),
}
