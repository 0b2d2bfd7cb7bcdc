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
    add_record(row, id, start, end, b"inline", &[payload]);
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
    add_record(
        row,
        id,
        start,
        end,
        b"external",
        &[s3_path.as_bytes(), &size],
    );
}

/// ursula's record digest: a tag, the stream id parts, the offsets, the kind, then the pieces.
fn add_record(
    row: &mut StreamRow,
    id: &BucketStreamId,
    start: u64,
    end: u64,
    kind: &[u8],
    pieces: &[&[u8]],
) {
    if start == end {
        return;
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
    let mut record = setsum::Setsum::default();
    record.insert_vectored(&item);
    row.live_setsum += record;
    row.total_setsum += record;
    row.total_records = row.total_records.saturating_add(1);
}
