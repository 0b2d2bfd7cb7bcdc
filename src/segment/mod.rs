//! Segment files: the pure batch codec, the file header, the sparse index, the writer, the
//! read-only readers and startup recovery. Byte layouts are in `format/SEGMENT.md` and
//! `format/INDEX.md`.

pub mod codec;
pub mod copy_ahead;
pub mod detached_sync;
pub mod error;
pub mod header;
pub mod index;
pub mod pin;
pub mod reader;
pub mod record;
pub mod recovery;
pub mod scan;
pub mod writer;

pub use codec::{
    batch_spans, body_crc, check_batch, check_crc, decode_batch, decode_checked, decode_header,
    encode_batch, encode_unsealed, seal_batch, visit_checked, BatchHeader, BodyCrc, Compression,
    BATCH_HEADER_LEN, BATCH_HEADER_LEN_V1, MAX_BATCH_LEN, MAX_RECORDS_LEN, SYNCED_LEN_UNKNOWN,
};
pub use copy_ahead::CopyAhead;
pub use detached_sync::DetachedSync;
pub use error::{DecodeError, EncodeError};
pub use header::{
    decode_segment_header, decode_segment_header_full, encode_segment_header, SegmentHeader,
    SEGMENT_HEADER_LEN,
};
pub use index::{IndexEntry, SegmentIndex};
pub use pin::PinCounter;
pub use reader::{ActiveSegment, ReadStop, SealedSegment, Visitor};
pub use record::{NewRecord, Record, RecordRef};
pub use recovery::{Confirm, LastSegment, RecoveryMode, SegmentPlace, SegmentRecovery};
pub use scan::{nonzero_end, scan_segment, Scan, ScanEnd};
pub use writer::{index_file_name, segment_file_name, SegmentWriter, WriterMark};
