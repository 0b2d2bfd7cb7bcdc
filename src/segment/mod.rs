//! Segment files: the pure batch codec, the file header, the sparse index, the writer, the
//! read-only readers and startup recovery. Byte layouts are in `format/SEGMENT.md` and
//! `format/INDEX.md`. Public: the codecs of what a segment holds (for tools, fuzzing and
//! anyone reading the files) and the record types; the writer, readers and recovery are the
//! log's own.

pub mod codec;
#[cfg(feature = "ursula")]
pub(crate) mod copy_ahead;
pub(crate) mod detached_sync;
pub mod error;
pub mod header;
pub mod index;
pub(crate) mod pin;
pub(crate) mod reader;
pub mod record;
pub(crate) mod recovery;
pub mod scan;
pub(crate) mod writer;

pub use codec::{
    batch_spans, body_crc, check_batch, check_crc, decode_batch, decode_checked, decode_header,
    encode_batch, encode_unsealed, seal_batch, visit_checked, BatchHeader, BodyCrc, Compression,
    BATCH_HEADER_LEN, BATCH_HEADER_LEN_V1, MAX_BATCH_LEN, MAX_RECORDS_LEN, SYNCED_LEN_UNKNOWN,
};
#[cfg(feature = "ursula")]
pub(crate) use copy_ahead::CopyAhead;
pub use error::{DecodeError, EncodeError};
pub use header::{
    decode_segment_header, decode_segment_header_full, encode_segment_header, SegmentHeader,
    SEGMENT_HEADER_LEN,
};
pub use index::{IndexEntry, SegmentIndex};
pub(crate) use pin::PinCounter;
pub(crate) use reader::{ActiveSegment, ReadStop, SealedSegment, Visitor};
pub use record::{NewRecord, Record, RecordRef};
pub use recovery::RecoveryMode;
pub(crate) use recovery::{Confirm, SegmentPlace, SegmentRecovery};
pub use scan::{nonzero_end, scan_segment, Scan, ScanEnd};
pub use writer::{index_file_name, segment_file_name};
pub(crate) use writer::{SegmentWriter, WriterMark};
