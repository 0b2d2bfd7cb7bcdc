//! The per-stream integrity digest ursula reports: a setsum over one record digest per accepted
//! append (stream id, offsets, and the bytes or the external object they live in), kept binary in
//! memory and as hex in the stream row.

use ursula_shard::BucketStreamId;

use crate::group::rows::StreamRow;

/// Records one accepted inline append in the integrity setsums.
pub(crate) fn integrity_append(
    row: &mut StreamRow,
    id: &BucketStreamId,
    start: u64,
    end: u64,
    payload: &[u8],
) {
    count_append(row, start, end);
    add_digest(row, inline_digest(id, start, payload));
}

/// Counts one inline append whose digest is added later ([`add_digest`]): an append of
/// [`crate::group::deferred_digests`].
pub(crate) fn count_append(row: &mut StreamRow, start: u64, end: u64) {
    if start != end {
        row.total_records = row.total_records.saturating_add(1);
    }
}

/// Adds record digests (a sum of [`inline_digest`]s) to the row's setsums.
pub(crate) fn add_digest(row: &mut StreamRow, digest: setsum::Setsum) {
    row.live_setsum += digest;
    row.total_setsum += digest;
}

/// The record digest of the inline append of `payload` at stream offset `start` (the empty
/// setsum for an empty payload, which is not a record).
pub(crate) fn inline_digest(id: &BucketStreamId, start: u64, payload: &[u8]) -> setsum::Setsum {
    let end = start + payload.len() as u64;
    record_digest(id, start, end, b"inline", &[payload])
}

/// Records one accepted external append (its object path and size) in the integrity setsums.
pub(crate) fn integrity_external(
    row: &mut StreamRow,
    id: &BucketStreamId,
    start: u64,
    end: u64,
    s3_path: &str,
    object_size: u64,
) {
    let size = object_size.to_le_bytes();
    count_append(row, start, end);
    add_digest(
        row,
        record_digest(id, start, end, b"external", &[s3_path.as_bytes(), &size]),
    );
}

/// ursula's record digest: a tag, the stream id parts, the offsets, the kind, then the pieces
/// (the empty setsum for an empty range, which is not a record).
fn record_digest(
    id: &BucketStreamId,
    start: u64,
    end: u64,
    kind: &[u8],
    pieces: &[&[u8]],
) -> setsum::Setsum {
    let mut record = setsum::Setsum::default();
    if start == end {
        return record;
    }
    let start_b = start.to_le_bytes();
    let end_b = end.to_le_bytes();
    let mut item: Vec<&[u8]> = match &id.affinity_key {
        Some(affinity) => vec![
            b"ursula-stream-record-v2",
            id.bucket_id.as_bytes(),
            b"\0",
            affinity.as_bytes(),
            b"\0",
            id.stream_id.as_bytes(),
            b"\0",
        ],
        None => vec![
            b"ursula-stream-record-v1",
            id.bucket_id.as_bytes(),
            b"\0",
            id.stream_id.as_bytes(),
            b"\0",
        ],
    };
    item.extend_from_slice(&[&start_b, &end_b, kind]);
    item.extend_from_slice(pieces);
    record.insert_vectored(&item);
    record
}
