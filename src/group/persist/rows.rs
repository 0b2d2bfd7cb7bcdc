//! The values stored in the group-state column families (format/GROUP_STATE.md, "Values").
//!
//! Rows are JSON objects (serde) behind a one-byte row version, except message rows, which are
//! fixed 16-byte binary because there is one per append.

use serde::{de::DeserializeOwned, Deserialize, Serialize};
use ursula_stream::{
    BucketQuota, BucketUsage, ColdChunkRef, ColdGcEntry, ProducerAppendRecord, StreamAttrs,
    StreamMetadata, StreamVisibleSnapshot,
};

use crate::group::GroupError;

/// Row version byte written before every JSON row.
pub const ROW_VERSION: u8 = 1;

/// One stream: its metadata, where its bytes live, and its checkpoints.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamRow {
    /// Identity, content type, status, tail, stream seq, TTL and timestamps.
    pub metadata: StreamMetadata,
    /// User attributes (`None` when empty).
    pub attrs: Option<StreamAttrs>,
    /// First byte offset still held hot in segments (or the tail when none is); bytes below it
    /// live in `cold_chunks` or external payload objects.
    pub hot_start_offset: u64,
    /// Destructive-retention floor: bytes below it are gone.
    pub retained_offset: u64,
    /// Live setsum over every record of the stream (hex in the row, binary in memory, so an
    /// append adds to it without parsing or formatting).
    #[serde(with = "hex_setsum")]
    pub live_setsum: setsum::Setsum,
    /// Total setsum; equal to the live one (nothing is evicted from the digest).
    #[serde(with = "hex_setsum")]
    pub total_setsum: setsum::Setsum,
    /// Records counted by the setsums.
    pub total_records: u64,
    /// The stream's published checkpoint, if any. The row stores its offset, content type and
    /// digest only; the payload lives in the `snapshots` family, written only when the
    /// checkpoint changes (so an append never rewrites it).
    #[serde(with = "snapshot_meta")]
    pub visible_snapshot: Option<StreamVisibleSnapshot>,
    /// Set when `visible_snapshot` changed in memory and its payload row must be written.
    #[serde(skip)]
    pub snapshot_changed: bool,
    /// Accepted appends (the `stream_append_count` of responses).
    pub append_count: u64,
    /// Cold chunks in offset order, covering `[cold start, hot_start_offset)`; stored one row
    /// each in the `cold_chunks` family (not in this row), so an append never rewrites them.
    /// Shared between versions of the state: copying a row for a change does not copy them.
    #[serde(skip)]
    pub cold_chunks: std::sync::Arc<Vec<ColdChunkRef>>,
    /// Segment partition that holds this stream's hot payloads.
    pub partition: u32,
    /// JSON record coordinates (`application/json` streams): the first retained record and the
    /// next record's ordinal; each record's start offset is a `records` row. `None` for other
    /// streams.
    #[serde(default)]
    pub records: Option<RecordCursor>,
    /// Bytes of external payload segments at or above `hot_start_offset` (they are not hot:
    /// their bytes live in the object the caller uploaded).
    #[serde(default)]
    pub external_hot: u64,
}

/// The retained record ordinals of a JSON stream: `[first, next)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecordCursor {
    /// First retained record.
    pub first: u64,
    /// Ordinal the next appended record gets.
    pub next: u64,
}

/// The newest accepted sequence of one producer on one stream.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProducerRow {
    /// Producer epoch.
    pub epoch: u64,
    /// Last accepted sequence in that epoch.
    pub seq: u64,
    /// Start offset of the last accepted append.
    pub last_start_offset: u64,
    /// Next offset after the last accepted append.
    pub last_next_offset: u64,
    /// Whether the last accepted append closed the stream.
    pub last_closed: bool,
    /// Items of the last accepted append (one, or several for a batch).
    pub last_items: Vec<ProducerAppendRecord>,
}

/// The response to one accepted producer sequence, kept for the epoch so retries are answered.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReceiptRow {
    /// Start offset of the append.
    pub start_offset: u64,
    /// Next offset after it.
    pub next_offset: u64,
    /// Whether it closed the stream.
    pub closed: bool,
    /// Its items.
    pub items: Vec<ProducerAppendRecord>,
}

/// Where one append's bytes live: `[start (in the key), end)` at `log_offset` of the stream's
/// partition. Encoded as `end u64 BE, log_offset u64 BE`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MessageRow {
    /// One past the last byte of the append.
    pub end_offset: u64,
    /// Offset of the record that holds the bytes, in the stream's partition.
    pub log_offset: u64,
}

impl MessageRow {
    /// The 16-byte encoding.
    pub fn encode(&self) -> [u8; 16] {
        let mut out = [0u8; 16];
        out[..8].copy_from_slice(&self.end_offset.to_be_bytes());
        out[8..].copy_from_slice(&self.log_offset.to_be_bytes());
        out
    }

    /// Decodes a 16-byte message row.
    pub fn decode(bytes: &[u8]) -> Result<Self, GroupError> {
        let bytes: &[u8; 16] = bytes
            .try_into()
            .map_err(|_| GroupError::Corrupt(format!("message row of {} bytes", bytes.len())))?;
        let (end, log) = bytes.split_at(8);
        Ok(Self {
            end_offset: u64::from_be_bytes(end.try_into().unwrap_or_default()),
            log_offset: u64::from_be_bytes(log.try_into().unwrap_or_default()),
        })
    }
}

/// Per-bucket usage row (the ursula `BucketUsage` counters).
pub type UsageRow = BucketUsage;
/// Per-bucket quota row.
pub type QuotaRow = BucketQuota;
/// One cold-GC queue entry.
pub type GcRow = ColdGcEntry;

/// Encodes a JSON row behind the row version byte.
pub fn encode_row<T: Serialize>(row: &T) -> Result<Vec<u8>, GroupError> {
    // Room for a usage or bucket row (~200 bytes) without growing by doubling.
    let mut out = Vec::with_capacity(256);
    out.push(ROW_VERSION);
    serde_json::to_writer(&mut out, row).map_err(|e| GroupError::Corrupt(e.to_string()))?;
    Ok(out)
}

/// Decodes a JSON row, checking the row version byte.
pub fn decode_row<T: DeserializeOwned>(what: &str, bytes: &[u8]) -> Result<T, GroupError> {
    match bytes.split_first() {
        Some((&ROW_VERSION, json)) => serde_json::from_slice(json)
            .map_err(|e| GroupError::Corrupt(format!("{what} row: {e}"))),
        Some((v, _)) => Err(GroupError::Corrupt(format!("{what} row version {v}"))),
        None => Err(GroupError::Corrupt(format!("empty {what} row"))),
    }
}

/// A stream row's checkpoint without its payload (read: with it, for rows of format version 1).
mod snapshot_meta {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    use ursula_stream::StreamVisibleSnapshot;

    #[derive(Serialize)]
    struct Meta<'a> {
        offset: u64,
        content_type: &'a str,
        digest: &'a str,
    }

    #[derive(Deserialize)]
    struct Stored {
        offset: u64,
        content_type: String,
        #[serde(default)]
        payload: Vec<u8>,
        #[serde(default)]
        digest: String,
    }

    pub fn serialize<S: Serializer>(
        value: &Option<StreamVisibleSnapshot>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        value
            .as_ref()
            .map(|s| Meta {
                offset: s.offset,
                content_type: &s.content_type,
                digest: &s.digest,
            })
            .serialize(serializer)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<StreamVisibleSnapshot>, D::Error> {
        Ok(
            Option::<Stored>::deserialize(deserializer)?.map(|s| StreamVisibleSnapshot {
                offset: s.offset,
                content_type: s.content_type,
                payload: s.payload,
                digest: s.digest,
            }),
        )
    }
}

/// A setsum as its hex digest (ursula's text form) in JSON rows.
mod hex_setsum {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(
        value: &setsum::Setsum,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&value.hexdigest())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<setsum::Setsum, D::Error> {
        let hex = String::deserialize(deserializer)?;
        setsum::Setsum::from_hexdigest(&hex)
            .ok_or_else(|| serde::de::Error::custom(format!("setsum {hex:?} is not a hex digest")))
    }
}
