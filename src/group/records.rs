//! JSON record coordinates of `application/json` streams (ursula's record index): every
//! appended payload must end each record with a newline; each record gets the next ordinal, and
//! its start offset is kept both ways (`records` and `record_offsets` rows) so reads by record,
//! record preconditions, retention on record boundaries and snapshots can translate.

use ursula_runtime::GroupEngineError;
use ursula_shard::BucketStreamId;
use ursula_stream::{
    canonical_json_record_ends, is_json_record_content_type, ProducerRequest, StreamErrorCode,
    StreamRecordRange,
};

use super::rows::{RecordCursor, StreamRow};
use super::state::GroupState;
use super::tx::Tx;
use super::{not_found, stream_error, DiskGroupEngine, GroupError};

/// The retained record range of a stream with coordinates.
pub(crate) fn range(row: &StreamRow) -> Option<StreamRecordRange> {
    row.records.map(|c| StreamRecordRange {
        first_record: c.first,
        next_record: c.next,
    })
}

/// Record ends (relative to the payload) of `payload` under `content_type`: one per newline for
/// JSON, none otherwise; a JSON payload must end with a newline.
pub(crate) fn record_ends(
    content_type: &str,
    payload: &[u8],
) -> Result<Vec<u64>, GroupEngineError> {
    canonical_json_record_ends(content_type, payload).map_err(|_| {
        stream_error(
            StreamErrorCode::InvalidRecordBoundaries,
            "application/json append payload must use canonical newline boundaries",
        )
    })
}

/// Records an append of `len` bytes with `ends` would add to `row`: the range it gets, or `None`
/// for a stream without coordinates. Binary streams refuse record boundaries, and a JSON stream
/// refuses bytes that are not whole records.
pub(crate) fn prepare(
    row: &StreamRow,
    len: u64,
    ends: &[u64],
) -> Result<Option<StreamRecordRange>, GroupEngineError> {
    let Some(cursor) = row.records else {
        if is_json_record_content_type(&row.metadata.content_type) || ends.is_empty() {
            return Ok(None);
        }
        return Err(stream_error(
            StreamErrorCode::InvalidRecordBoundaries,
            "binary streams cannot carry JSON record boundaries",
        ));
    };
    check_relative_ends(len, ends)?;
    Ok(Some(StreamRecordRange {
        first_record: cursor.next,
        next_record: cursor.next + ends.len() as u64,
    }))
}

/// Record ends relative to a payload of `len` bytes must be strictly increasing, non-zero, and
/// end at `len` (none at all for an empty payload).
pub(crate) fn check_relative_ends(len: u64, ends: &[u64]) -> Result<(), GroupEngineError> {
    let valid = if len == 0 {
        ends.is_empty()
    } else {
        ends.last() == Some(&len)
            && ends.first() != Some(&0)
            && ends.windows(2).all(|pair| pair[0] < pair[1])
    };
    if !valid {
        return Err(stream_error(
            StreamErrorCode::InvalidRecordBoundaries,
            "record boundaries do not match the canonical JSON payload",
        ));
    }
    Ok(())
}

/// `record_match`: the stream's record tail must be `expected` (JSON streams only).
pub(crate) fn check_record_match(row: &StreamRow, expected: u64) -> Result<(), GroupEngineError> {
    match row.records {
        None => Err(stream_error(
            StreamErrorCode::InvalidRecordBoundaries,
            "Stream-Record-Match requires active JSON record coordinates",
        )),
        Some(cursor) if cursor.next != expected => Err(GroupEngineError::stream_with_context(
            StreamErrorCode::RecordPreconditionFailed,
            format!("record tail is {}, expected {expected}", cursor.next),
            Some(row.metadata.tail_offset),
            vec![ursula_stream::StreamErrorContext::RecordTailMismatch {
                current_record: cursor.next,
            }],
        )),
        Some(_) => Ok(()),
    }
}

/// Usage counts one record per JSON record, or one per non-empty binary append.
pub(crate) fn record_count(ends: &[u64], len: u64) -> u64 {
    if ends.is_empty() {
        u64::from(len > 0)
    } else {
        ends.len() as u64
    }
}

fn range_error(what: &str) -> GroupEngineError {
    GroupEngineError::new(format!("record range: {what}"))
}

impl DiskGroupEngine {
    /// Writes the records of an accepted append at `base` and advances the stream's cursor.
    pub(crate) fn commit_records(&self, tx: &mut Tx, id: &BucketStreamId, base: u64, ends: &[u64]) {
        let Some(next) = tx
            .state
            .streams
            .get(id)
            .and_then(|r| r.records)
            .map(|c| c.next)
        else {
            return;
        };
        let mut start = base;
        for (i, end) in ends.iter().enumerate() {
            tx.put_record(id, next + i as u64, start);
            start = base + end;
        }
        if let Some(mut row) = tx.state.streams.get_mut(id) {
            if let Some(cursor) = row.records.as_mut() {
                cursor.next = next + ends.len() as u64;
            }
        }
    }

    /// The start offset of record `record` (the tail for the next record).
    pub(crate) fn offset_for_record(
        &self,
        id: &BucketStreamId,
        row: &StreamRow,
        record: u64,
    ) -> Result<u64, GroupEngineError> {
        let Some(cursor) = row.records else {
            return Err(range_error("record coordinates are inactive"));
        };
        if record == cursor.next {
            return Ok(row.metadata.tail_offset);
        }
        if record < cursor.first || record > cursor.next {
            return Err(range_error(&format!(
                "record {record} outside {}..{}",
                cursor.first, cursor.next
            )));
        }
        self.db()?.record_start(id, record)?.ok_or_else(|| {
            GroupError::Corrupt(format!("record {record} of stream '{id}' has no row")).into()
        })
    }

    /// The ordinal of the record starting at `offset` (the next ordinal at the tail).
    pub(crate) fn record_for_offset(
        &self,
        id: &BucketStreamId,
        row: &StreamRow,
        offset: u64,
    ) -> Result<u64, GroupEngineError> {
        let Some(cursor) = row.records else {
            return Err(range_error("record coordinates are inactive"));
        };
        if offset == row.metadata.tail_offset {
            return Ok(cursor.next);
        }
        self.db()?
            .record_at(id, offset)?
            .filter(|ordinal| *ordinal >= cursor.first)
            .ok_or_else(|| range_error("OffsetNotRecordBoundary"))
    }

    /// ursula's record range of an already committed append `[start, next)`: from the
    /// producer's last items when they cover it, else from the index.
    pub(crate) fn record_range_for(
        &self,
        state: &GroupState,
        id: &BucketStreamId,
        start: u64,
        next: u64,
        producer: Option<&ProducerRequest>,
    ) -> Result<Option<StreamRecordRange>, GroupEngineError> {
        let Some(row) = state.streams.get(id) else {
            return Ok(None);
        };
        if let Some(p) = producer {
            let item = state
                .producers
                .get(id)
                .and_then(|heads| heads.get(&p.producer_id))
                .and_then(|head| {
                    head.last_items
                        .iter()
                        .find(|i| i.start_offset == start && i.next_offset == next)
                });
            if let Some(item) = item {
                if let (Some(first_record), Some(next_record)) =
                    (item.record_start, item.record_next)
                {
                    return Ok(Some(StreamRecordRange {
                        first_record,
                        next_record,
                    }));
                }
            }
        }
        if row.records.is_none() {
            return Ok(None);
        }
        Ok(Some(StreamRecordRange {
            first_record: self.record_for_offset(id, row, start)?,
            next_record: self.record_for_offset(id, row, next)?,
        }))
    }

    /// Drops the records below `retained` (which must start a record or be the tail).
    pub(crate) fn retain_records(
        &self,
        tx: &mut Tx,
        id: &BucketStreamId,
        retained: u64,
    ) -> Result<(), GroupEngineError> {
        let row = tx.state.streams.get(id).ok_or_else(|| not_found(id))?;
        let Some(cursor) = row.records else {
            return Ok(());
        };
        let tail = row.metadata.tail_offset;
        let first = if retained == tail {
            cursor.next
        } else {
            self.db()?.record_at(id, retained)?.filter(|o| *o >= cursor.first).ok_or_else(|| {
                GroupEngineError::stream_with_next_offset(
                    StreamErrorCode::InvalidRecordBoundaries,
                    format!("retention offset {retained} is not a retained record boundary for stream '{id}'"),
                    Some(tail),
                )
            })?
        };
        tx.delete_records(id, cursor.first, first, retained);
        if let Some(mut row) = tx.state.streams.get_mut(id) {
            row.records = Some(RecordCursor {
                first,
                next: cursor.next,
            });
        }
        Ok(())
    }

    /// The stream's message records as ursula keeps them: the flushed or retained prefix merged
    /// into one, then each later append (binary) or record (JSON), cut at the hot start.
    pub(crate) fn message_bounds(
        &self,
        id: &BucketStreamId,
        row: &StreamRow,
    ) -> Result<Vec<(u64, u64)>, GroupEngineError> {
        let tail = row.metadata.tail_offset;
        let frontier = row.hot_start_offset.max(row.retained_offset).min(tail);
        let mut out = Vec::new();
        if frontier > row.retained_offset {
            out.push((row.retained_offset, frontier));
        }
        let db = self.db()?;
        let mut originals: Vec<(u64, u64)> = Vec::new();
        match row.records {
            Some(cursor) => {
                let starts = db.record_starts(id, cursor.first)?;
                for (i, start) in starts.iter().enumerate() {
                    originals.push((*start, starts.get(i + 1).copied().unwrap_or(tail)));
                }
            }
            None => {
                for (start, m) in db.messages(id, 0, u64::MAX)? {
                    originals.push((start, m.end_offset));
                }
                for e in db.externals(id, 0, tail)? {
                    originals.push((e.start_offset, e.end_offset));
                }
                originals.sort_unstable();
            }
        }
        for (start, end) in originals {
            let start = start.max(frontier);
            if end > start {
                out.push((start, end));
            }
        }
        Ok(out)
    }

    /// True when a JSON record of `id` starts at `offset`.
    pub(crate) fn is_record_start(
        &self,
        id: &BucketStreamId,
        row: &StreamRow,
        offset: u64,
    ) -> Result<bool, GroupEngineError> {
        Ok(match row.records {
            Some(cursor) => self
                .db()?
                .record_at(id, offset)?
                .is_some_and(|o| o >= cursor.first),
            None => false,
        })
    }
}
