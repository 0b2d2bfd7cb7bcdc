//! Reads: byte ranges of a stream stitched from cold chunks (object store) and hot records
//! (segments), heads and attributes. Reads apply the TTL access rule first, as writes.

use bytes::Bytes;
use ursula_runtime::{
    GetStreamAttrsRequest, GetStreamAttrsResponse, GroupEngineError, HeadStreamRequest,
    HeadStreamResponse, ReadStreamRequest, ReadStreamResponse,
};
use ursula_shard::{BucketStreamId, ShardPlacement};
use ursula_stream::{StreamErrorCode, StreamIntegritySnapshot, StreamRecordRange};

use super::records;
use super::rows::{MessageRow, StreamRow};
use super::state::{is_closed, is_expired, GroupState};
use super::{not_found, stream_error, DiskGroupEngine, GroupError};
use crate::segment::CopyAhead;

/// Largest read a single call serves (bounds memory; callers page with `next_offset`).
pub const MAX_READ_BYTES: usize = 64 << 20;

impl DiskGroupEngine {
    /// `read_stream`.
    pub(crate) async fn read_inner(
        &mut self,
        request: ReadStreamRequest,
        placement: ShardPlacement,
    ) -> Result<ReadStreamResponse, GroupEngineError> {
        let id = request.stream_id.clone();
        self.ensure_access(&id, request.now_ms, true, placement)
            .await?;
        // Borrowed, not cloned: the rest of a read only reads.
        let this = &*self;
        let row = this.state.streams.get(&id).ok_or_else(|| not_found(&id))?;
        if is_expired(&row.metadata, request.now_ms) {
            return Err(not_found(&id));
        }
        let retained_records = records::range(row);
        // A read by record coordinates (JSON streams) becomes a byte range; `max_records`
        // without `record` is ignored, as in ursula.
        let limit = self.options.max_read_bytes as u64;
        let (offset, max_len, record_range) = match request.record {
            None => (request.offset, (request.max_len as u64).min(limit), None),
            Some(record) => {
                let retained = retained_records.ok_or_else(|| {
                    stream_error(
                        StreamErrorCode::InvalidRecordBoundaries,
                        "record coordinates are inactive for this stream",
                    )
                })?;
                if record < retained.first_record {
                    return Err(stream_error(
                        StreamErrorCode::StreamGone,
                        format!(
                            "record {record} is older than first retained record {}",
                            retained.first_record
                        ),
                    ));
                }
                if record > retained.next_record {
                    return Err(stream_error(
                        StreamErrorCode::InvalidRecordBoundaries,
                        format!(
                            "record {record} is beyond record tail {}",
                            retained.next_record
                        ),
                    ));
                }
                let next_record = request
                    .max_records
                    .map_or(retained.next_record, |limit| record.saturating_add(limit))
                    .min(retained.next_record);
                let from = this.offset_for_record(&id, row, record)?;
                let next_record =
                    this.bounded_next_record(&id, row, (record, next_record), from)?;
                let to = this.offset_for_record(&id, row, next_record)?;
                (
                    from,
                    to.saturating_sub(from),
                    Some(StreamRecordRange {
                        first_record: record,
                        next_record,
                    }),
                )
            }
        };
        let tail = row.metadata.tail_offset;
        if offset > tail {
            return Err(GroupEngineError::stream_with_next_offset(
                StreamErrorCode::OffsetOutOfRange,
                format!("offset {offset} is beyond stream '{id}' tail {tail}"),
                Some(tail),
            ));
        }
        if offset < row.retained_offset {
            return Err(GroupEngineError::stream_with_next_offset(
                StreamErrorCode::StreamGone,
                format!(
                    "offset {offset} is older than stream '{id}' retained offset {}",
                    row.retained_offset
                ),
                Some(row.retained_offset),
            ));
        }
        let next_offset = tail.min(offset.saturating_add(max_len));
        let payload = this.read_range_vec(&id, row, offset, next_offset).await?;
        Ok(ReadStreamResponse {
            placement,
            offset,
            next_offset,
            content_type: row.metadata.content_type.clone(),
            payload,
            up_to_date: next_offset == tail,
            closed: is_closed(&row.metadata),
            retained_record_range: retained_records,
            record_range,
        })
    }

    /// The end of a read of records `[first, next)` starting at byte `from`, cut so that it
    /// holds at most `max_read_bytes` (but always at least one whole record): a read by record
    /// coordinates is bounded like a read by offset, and the response's record range says
    /// where to go on.
    fn bounded_next_record(
        &self,
        id: &BucketStreamId,
        row: &StreamRow,
        (first, next): (u64, u64),
        from: u64,
    ) -> Result<u64, GroupEngineError> {
        let limit = self.options.max_read_bytes as u64;
        let fits = |r: u64| -> Result<bool, GroupEngineError> {
            Ok(self.offset_for_record(id, row, r)?.saturating_sub(from) <= limit)
        };
        if next <= first + 1 || fits(next)? {
            return Ok(next);
        }
        // The largest end in [first + 1, next) that fits; first + 1 if none does.
        let (mut lo, mut hi) = (first + 1, next);
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if fits(mid)? {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        Ok(lo)
    }

    /// The bytes `[from, to)` of a stream, stitched from cold chunks, external segments and hot
    /// records, wherever each lies.
    pub(crate) async fn read_range(
        &self,
        id: &BucketStreamId,
        row: &StreamRow,
        from: u64,
        to: u64,
    ) -> Result<Bytes, GroupEngineError> {
        Ok(Bytes::from(self.read_range_vec(id, row, from, to).await?))
    }

    /// [`Self::read_range`] into a vector (what a read response carries), hot bytes copied once.
    async fn read_range_vec(
        &self,
        id: &BucketStreamId,
        row: &StreamRow,
        from: u64,
        to: u64,
    ) -> Result<Vec<u8>, GroupEngineError> {
        let mut out = Vec::with_capacity(to.saturating_sub(from) as usize);
        let externals = self.db()?.externals(id, from, to)?;
        let chunks = &row.cold_chunks;
        let mut cursor = from;
        while cursor < to {
            let at = chunks.partition_point(|c| c.end_offset <= cursor);
            if let Some(chunk) = chunks.get(at).filter(|c| c.start_offset <= cursor) {
                let end = to.min(chunk.end_offset);
                let bytes = self
                    .cold
                    .read_chunk(chunk, cursor - chunk.start_offset, end - cursor)
                    .await
                    .map_err(GroupError::from)?;
                out.extend_from_slice(&bytes);
                cursor = end;
                continue;
            }
            if let Some(segment) = externals
                .iter()
                .find(|e| e.start_offset <= cursor && cursor < e.end_offset)
            {
                let end = to.min(segment.end_offset);
                let skip = segment.object_offset + (cursor - segment.start_offset);
                let bytes = self
                    .cold
                    .get_range(&segment.s3_path, skip..skip + (end - cursor))
                    .await
                    .map_err(GroupError::from)?;
                out.extend_from_slice(&bytes);
                cursor = end;
                continue;
            }
            // A run of hot records, up to the next cold chunk or external segment.
            let next = externals
                .iter()
                .map(|e| e.start_offset)
                .chain(chunks.get(at).map(|c| c.start_offset))
                .filter(|start| *start > cursor)
                .min()
                .unwrap_or(to)
                .min(to);
            crate::blocking::blocking(|| self.read_hot_into(id, row, cursor, next, &mut out))?;
            cursor = next;
        }
        Ok(out)
    }

    /// The hot bytes `[from, to)` of a stream, from its payload records.
    pub(crate) fn read_hot(
        &self,
        id: &BucketStreamId,
        row: &StreamRow,
        from: u64,
        to: u64,
    ) -> Result<Bytes, GroupEngineError> {
        let mut out = Vec::with_capacity(to.saturating_sub(from) as usize);
        self.read_hot_into(id, row, from, to, &mut out)?;
        Ok(Bytes::from(out))
    }

    /// Appends the hot bytes `[from, to)` of a stream to `out`: the message rows say which
    /// payload records hold them, and the records are visited in place in the segments' mappings
    /// (other streams' records in the partition are stepped over), so each byte is copied once.
    pub(crate) fn read_hot_into(
        &self,
        id: &BucketStreamId,
        row: &StreamRow,
        from: u64,
        to: u64,
        out: &mut Vec<u8>,
    ) -> Result<(), GroupEngineError> {
        if from >= to {
            return Ok(());
        }
        let key = super::keys::stream_key(id);
        let messages = self.db()?.messages_covering(&key, from, to)?;
        let mut cursor = from;
        let mut wanted = messages.iter().peekable();
        let (Some(first), Some(last)) = (messages.first(), messages.last()) else {
            return Err(missing_segment(id, to));
        };
        let (low, high) = (first.1.log_offset as i64, last.1.log_offset as i64 + 1);
        let mut ahead = CopyAhead::new();
        let mut visit = |record: crate::segment::RecordRef<'_>| -> Result<(), GroupError> {
            let Some(&&(start, message)) = wanted.peek() else {
                return Ok(());
            };
            if record.offset != message.log_offset as i64 {
                return Ok(());
            }
            wanted.next();
            if start > cursor {
                // A gap: nothing more is copied, and the read reports the missing bytes.
                return Ok(());
            }
            let value = check_payload(id, row, &key, start, &message, &record)?;
            ahead.past(value);
            let lo = (cursor - start) as usize;
            let hi = (to.min(message.end_offset) - start) as usize;
            out.extend_from_slice(&value[lo..hi]);
            cursor = start + hi as u64;
            Ok(())
        };
        self.payloads.visit(row.partition, low, high, &mut visit)?;
        if let Some((_, message)) = wanted.next() {
            return Err(GroupError::Corrupt(format!(
                "payload record {} of partition {} (stream '{id}') is missing",
                message.log_offset, row.partition
            ))
            .into());
        }
        if cursor < to {
            return Err(missing_segment(id, to));
        }
        Ok(())
    }

    /// `head_stream`.
    pub(crate) async fn head_inner(
        &mut self,
        request: HeadStreamRequest,
        placement: ShardPlacement,
    ) -> Result<HeadStreamResponse, GroupEngineError> {
        let id = &request.stream_id;
        let row = self
            .accessed_row(id, request.now_ms, false, placement)
            .await?;
        let m = &row.metadata;
        Ok(HeadStreamResponse {
            placement,
            content_type: m.content_type.clone(),
            tail_offset: m.tail_offset,
            cold_hot_start_offset: GroupState::reported_hot_start(row),
            closed: is_closed(m),
            stream_ttl_seconds: m.stream_ttl_seconds,
            stream_expires_at_ms: m.stream_expires_at_ms,
            snapshot_offset: row.visible_snapshot.as_ref().map(|s| s.offset),
            snapshot_digest: row.visible_snapshot.as_ref().map(|s| s.digest.clone()),
            retained_offset: row.retained_offset,
            integrity: integrity_snapshot(row),
            record_range: records::range(row),
        })
    }

    /// `get_stream_attrs`.
    pub(crate) async fn get_attrs_inner(
        &mut self,
        request: GetStreamAttrsRequest,
        placement: ShardPlacement,
    ) -> Result<GetStreamAttrsResponse, GroupEngineError> {
        let id = &request.stream_id;
        let row = self
            .accessed_row(id, request.now_ms, false, placement)
            .await?;
        Ok(GetStreamAttrsResponse {
            placement,
            attrs: row.attrs.clone(),
        })
    }
}

/// The stream's integrity digest as ursula reports it.
pub(crate) fn integrity_snapshot(row: &StreamRow) -> StreamIntegritySnapshot {
    StreamIntegritySnapshot {
        live_setsum: row.live_setsum.hexdigest(),
        evicted_setsum: setsum::Setsum::default().hexdigest(),
        total_setsum: row.total_setsum.hexdigest(),
        live_start_offset: row.retained_offset,
        tail_offset: row.metadata.tail_offset,
        live_records: row.total_records,
        evicted_records: 0,
        total_records: row.total_records,
    }
}

/// The bytes of the payload record a message row points to, once checked: the record must be
/// the stream's (another stream's record would hand one tenant another's bytes) and hold exactly
/// the row's bytes.
#[inline]
fn check_payload<'a>(
    id: &BucketStreamId,
    row: &StreamRow,
    key: &[u8],
    start: u64,
    message: &MessageRow,
    record: &crate::segment::RecordRef<'a>,
) -> Result<&'a [u8], GroupError> {
    if !record.key.is_some_and(|k| same_bytes(k, key)) {
        return Err(foreign_record(id, row, message));
    }
    let value = record.value.unwrap_or_default();
    if value.len() as u64 != message.end_offset - start {
        return Err(wrong_length(
            id,
            message,
            value.len(),
            message.end_offset - start,
        ));
    }
    Ok(value)
}

/// Whether `a` and `b` hold the same bytes, compared eight at a time in line: a stream key (tens
/// of bytes) is compared once per record of a hot read, where a call to `memcmp` per record
/// showed in profiles.
#[inline]
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let (mut x, mut y) = (a.chunks_exact(8), b.chunks_exact(8));
    let word = |c: &[u8]| u64::from_ne_bytes(c.try_into().unwrap_or_default());
    x.by_ref().zip(y.by_ref()).all(|(p, q)| word(p) == word(q))
        && x.remainder().iter().eq(y.remainder())
}

#[cold]
fn foreign_record(id: &BucketStreamId, row: &StreamRow, message: &MessageRow) -> GroupError {
    GroupError::Corrupt(format!(
        "payload record {} of partition {} belongs to another stream than '{id}'",
        message.log_offset, row.partition
    ))
}

#[cold]
fn wrong_length(id: &BucketStreamId, message: &MessageRow, held: usize, said: u64) -> GroupError {
    GroupError::Corrupt(format!(
        "payload record {} of stream '{id}' holds {held} bytes, its message row says {said}",
        message.log_offset
    ))
}

fn missing_segment(id: &BucketStreamId, next_offset: u64) -> GroupEngineError {
    GroupEngineError::stream_with_next_offset(
        StreamErrorCode::InvalidColdFlush,
        format!("stream '{id}' has missing payload segment metadata"),
        Some(next_offset),
    )
}
