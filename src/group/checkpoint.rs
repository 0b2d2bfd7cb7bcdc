//! Per-stream checkpoints (one visible snapshot per stream), bootstrap (snapshot plus the
//! appends after it), and destructive retention up to the checkpoint.

use ursula_runtime::{
    AdvanceRetentionRequest, AdvanceRetentionResponse, BootstrapStreamRequest,
    BootstrapStreamResponse, BootstrapUpdate, DeleteSnapshotRequest, GroupEngineError,
    PublishSnapshotRequest, PublishSnapshotResponse, ReadSnapshotRequest, ReadSnapshotResponse,
};
use ursula_shard::{BucketStreamId, ShardPlacement};
use ursula_stream::{ColdGcTarget, StreamErrorCode, StreamVisibleSnapshot};

use super::records;
use super::state::{is_closed, is_expired, GroupState};
use super::tx::Tx;
use super::{not_found, stream_error, DiskGroupEngine};

/// BLAKE3 over the content type length, the content type and the payload (ursula's digest).
pub(crate) fn snapshot_digest(content_type: &str, payload: &[u8]) -> String {
    let mut hasher = blake3::Hasher::new();
    hasher.update(&(content_type.len() as u64).to_le_bytes());
    hasher.update(content_type.as_bytes());
    hasher.update(payload);
    hasher.finalize().to_hex().to_string()
}

impl DiskGroupEngine {
    /// True when `offset` sits on a committed message boundary of `id` (or at/below the
    /// flushed or retained prefix).
    fn aligned(
        &self,
        state: &GroupState,
        id: &BucketStreamId,
        offset: u64,
        retained: u64,
    ) -> Result<bool, GroupEngineError> {
        let Some(row) = state.streams.get(id) else {
            return Ok(false);
        };
        let reported = GroupState::reported_hot_start(row);
        if offset == retained || offset <= row.hot_start_offset || offset <= reported {
            return Ok(true);
        }
        let db = self.db()?;
        Ok(
            matches!(db.message_at_or_before(id, offset - 1)?, Some((_, m)) if m.end_offset == offset)
                || self.is_record_start(id, row, offset)?
                || db
                    .externals(id, offset - 1, offset)?
                    .iter()
                    .any(|e| e.end_offset == offset),
        )
    }

    /// Removes `id` if expired (committing that) and answers `StreamNotFound`.
    fn expired_or_missing(
        &self,
        tx: &mut Tx,
        id: &BucketStreamId,
        now_ms: u64,
    ) -> Result<(), GroupEngineError> {
        let row = tx.state.streams.get(id).ok_or_else(|| not_found(id))?;
        if is_expired(&row.metadata, now_ms) {
            self.remove_stream(tx, id);
            return Err(not_found(id));
        }
        Ok(())
    }

    /// `publish_snapshot`.
    pub(crate) async fn publish_snapshot_inner(
        &mut self,
        request: PublishSnapshotRequest,
        placement: ShardPlacement,
    ) -> Result<PublishSnapshotResponse, GroupEngineError> {
        let id = request.stream_id.clone();
        self.ensure_access(&id, request.now_ms, false, placement)
            .await?;
        let mut tx = Tx::new(&self.state);
        let outcome = (|| {
            self.validate_scope(&tx.state, &id)?;
            if request.content_type.trim().is_empty() {
                return Err(stream_error(
                    StreamErrorCode::InvalidSnapshot,
                    "snapshot content type must not be empty",
                ));
            }
            self.expired_or_missing(&mut tx, &id, request.now_ms)?;
            let row = tx.state.streams.get(&id).ok_or_else(|| not_found(&id))?;
            let tail = row.metadata.tail_offset;
            let retained = row.retained_offset;
            let offset = request.snapshot_offset;
            if offset < retained {
                return Err(GroupEngineError::stream_with_next_offset(
                    StreamErrorCode::StreamGone,
                    format!("snapshot offset {offset} is older than stream '{id}' retained offset {retained}"),
                    Some(retained),
                ));
            }
            if offset > tail {
                return Err(conflict(
                    format!("snapshot offset {offset} is beyond stream '{id}' tail {tail}"),
                    tail,
                ));
            }
            let digest = snapshot_digest(&request.content_type, &request.payload);
            let current = row.visible_snapshot.as_ref();
            if let Some(expected) = request.expected_digest.as_deref() {
                if current.map(|s| s.digest.as_str()) != Some(expected) {
                    return Err(conflict(
                        "current snapshot digest does not match Stream-Snapshot-Match".into(),
                        tail,
                    ));
                }
            }
            if let Some(current) = current {
                if offset < current.offset {
                    return Err(conflict(
                        format!(
                            "snapshot offset {offset} is older than latest snapshot offset {}",
                            current.offset
                        ),
                        tail,
                    ));
                }
                if offset == current.offset {
                    if current.digest == digest {
                        return Ok((offset, digest, false));
                    }
                    return Err(conflict(
                        format!("snapshot offset {offset} already has a different payload digest"),
                        tail,
                    ));
                }
            }
            if !self.aligned(&tx.state, &id, offset, retained)? {
                return Err(GroupEngineError::stream_with_next_offset(
                    StreamErrorCode::InvalidSnapshot,
                    format!("snapshot offset {offset} is not aligned to a committed message boundary for stream '{id}'"),
                    Some(tail),
                ));
            }
            if let Some(mut row) = tx.state.streams.get_mut(&id) {
                row.visible_snapshot = Some(StreamVisibleSnapshot {
                    offset,
                    content_type: request.content_type.clone(),
                    payload: request.payload.to_vec(),
                    digest: digest.clone(),
                });
                row.snapshot_changed = true;
            }
            self.save_stream(&mut tx, &id);
            Ok((offset, digest, true))
        })();
        self.sweep_expired(&mut tx, request.now_ms);
        let response = outcome.map(|(snapshot_offset, snapshot_digest, _)| {
            tx.state.commit_index += 1;
            PublishSnapshotResponse {
                placement,
                snapshot_offset,
                snapshot_digest,
                group_commit_index: tx.state.commit_index,
                record_range: tx.state.streams.get(&id).and_then(|r| records::range(r)),
            }
        });
        self.finish(tx, response).await
    }

    /// `read_snapshot`: the latest, or the one at a given offset.
    pub(crate) async fn read_snapshot_inner(
        &mut self,
        request: ReadSnapshotRequest,
        placement: ShardPlacement,
    ) -> Result<ReadSnapshotResponse, GroupEngineError> {
        let id = &request.stream_id;
        let row = self
            .accessed_row(id, request.now_ms, true, placement)
            .await?;
        let snapshot = match (request.snapshot_offset, &row.visible_snapshot) {
            (Some(offset), Some(s)) if s.offset == offset => s.clone(),
            (Some(offset), _) => {
                return Err(stream_error(
                    StreamErrorCode::SnapshotNotFound,
                    format!("snapshot {offset} for stream '{id}' does not exist"),
                ))
            }
            (None, Some(s)) => s.clone(),
            (None, None) => {
                return Err(stream_error(
                    StreamErrorCode::SnapshotNotFound,
                    format!("stream '{id}' has no visible snapshot"),
                ))
            }
        };
        Ok(ReadSnapshotResponse {
            placement,
            snapshot_offset: snapshot.offset,
            next_offset: snapshot.offset,
            up_to_date: snapshot.offset == row.metadata.tail_offset,
            content_type: snapshot.content_type,
            snapshot_digest: snapshot.digest,
            payload: snapshot.payload,
            record_range: records::range(row),
        })
    }

    /// `delete_snapshot`: the visible snapshot is the stream's only checkpoint and backs its
    /// retention, so deleting it is a conflict; any other offset does not exist.
    pub(crate) async fn delete_snapshot_inner(
        &mut self,
        request: DeleteSnapshotRequest,
        placement: ShardPlacement,
    ) -> Result<(), GroupEngineError> {
        let id = &request.stream_id;
        let row = self
            .accessed_row(id, request.now_ms, false, placement)
            .await?;
        let offset = request.snapshot_offset;
        match &row.visible_snapshot {
            Some(s) if s.offset == offset => Err(stream_error(
                StreamErrorCode::SnapshotConflict,
                format!("snapshot {offset} for stream '{id}' is the latest visible snapshot"),
            )),
            _ => Err(stream_error(
                StreamErrorCode::SnapshotNotFound,
                format!("snapshot {offset} for stream '{id}' does not exist"),
            )),
        }
    }

    /// `bootstrap_stream`: the visible snapshot and every append after it, payloads read from
    /// the hot or cold tier.
    pub(crate) async fn bootstrap_inner(
        &mut self,
        request: BootstrapStreamRequest,
        placement: ShardPlacement,
    ) -> Result<BootstrapStreamResponse, GroupEngineError> {
        let id = request.stream_id.clone();
        let row = self
            .accessed_row(&id, request.now_ms, true, placement)
            .await?
            .clone();
        let from = row.visible_snapshot.as_ref().map_or(0, |s| s.offset);
        let ranges: Vec<(u64, u64)> = self
            .message_bounds(&id, &row)?
            .into_iter()
            .filter(|(start, _)| *start >= from)
            .collect();
        let mut updates = Vec::with_capacity(ranges.len());
        for (start, end) in ranges {
            let payload = self.read_range(&id, &row, start, end).await?;
            updates.push(BootstrapUpdate {
                start_offset: start,
                next_offset: end,
                content_type: row.metadata.content_type.clone(),
                payload: payload.to_vec(),
            });
        }
        Ok(BootstrapStreamResponse {
            placement,
            snapshot_offset: row.visible_snapshot.as_ref().map(|s| s.offset),
            // Without a snapshot ursula reports its default content type, not the stream's.
            snapshot_content_type: row.visible_snapshot.as_ref().map_or_else(
                || "application/octet-stream".to_string(),
                |s| s.content_type.clone(),
            ),
            snapshot_payload: row
                .visible_snapshot
                .as_ref()
                .map_or_else(Vec::new, |s| s.payload.clone()),
            updates,
            next_offset: row.metadata.tail_offset,
            up_to_date: true,
            closed: is_closed(&row.metadata),
            record_range: records::range(&row),
        })
    }

    /// `advance_retention`: drops the prefix below `retained_offset` (at most the checkpoint):
    /// hot message rows, cold chunks (queued for GC) and retained-bytes usage.
    pub(crate) async fn advance_retention_inner(
        &mut self,
        request: AdvanceRetentionRequest,
        placement: ShardPlacement,
    ) -> Result<AdvanceRetentionResponse, GroupEngineError> {
        let id = request.stream_id.clone();
        self.ensure_access(&id, request.now_ms, false, placement)
            .await?;
        let mut tx = Tx::new(&self.state);
        let outcome = (|| {
            self.validate_scope(&tx.state, &id)?;
            self.expired_or_missing(&mut tx, &id, request.now_ms)?;
            let row = tx.state.streams.get(&id).ok_or_else(|| not_found(&id))?;
            let tail = row.metadata.tail_offset;
            let current = row.retained_offset;
            let target = request.retained_offset;
            if target < current {
                return Err(conflict(
                    format!(
                        "retention offset {target} is older than current retained offset {current}"
                    ),
                    tail,
                ));
            }
            let Some(snapshot) = &row.visible_snapshot else {
                return Err(conflict(
                    "retention requires a published checkpoint".into(),
                    tail,
                ));
            };
            if target > snapshot.offset {
                return Err(conflict(
                    format!(
                        "retention offset {target} is beyond latest checkpoint offset {}",
                        snapshot.offset
                    ),
                    tail,
                ));
            }
            if target == current {
                return Ok(target);
            }
            if !self.aligned(&tx.state, &id, target, current)? {
                return Err(GroupEngineError::stream_with_next_offset(
                    StreamErrorCode::InvalidSnapshot,
                    format!("retention offset {target} is not aligned to a committed message boundary for stream '{id}'"),
                    Some(tail),
                ));
            }
            self.retain_records(&mut tx, &id, target)?;
            let mut dropped = Vec::new();
            if let Some(mut row) = tx.state.streams.get_mut(&id) {
                row.retained_offset = target;
                std::sync::Arc::make_mut(&mut row.cold_chunks).retain(|c| {
                    let keep = c.end_offset > target;
                    if !keep {
                        dropped.push(c.clone());
                    }
                    keep
                });
            }
            for chunk in &dropped {
                tx.delete_chunk(&id, chunk.start_offset);
            }
            tx.touch_cold_pages(&id, &dropped);
            // Exclusive objects are unreferenced now; shared ones lose one reference.
            let (shared, exclusive): (Vec<_>, Vec<_>) =
                dropped.iter().partition(|c| c.shared_object);
            let objects = exclusive.into_iter().map(|c| c.s3_path.clone()).collect();
            let dropped: Vec<String> = self.gc_paths_with_pages(&id, &dropped, objects);
            let released: Vec<String> = shared.into_iter().map(|c| c.s3_path.clone()).collect();
            tx.delete_messages_below(self.db()?, &id, target)?;
            let usage = tx.state.usage.entry(id.bucket_id.clone()).or_default();
            usage.retained_bytes = usage.retained_bytes.saturating_sub(target - current);
            self.save_usage(&mut tx, &id.bucket_id);
            if !dropped.is_empty() {
                self.enqueue_gc(&mut tx, ColdGcTarget::Paths(dropped), 0);
            }
            self.release_shared(&mut tx, released, 0);
            let gone: Vec<u64> = self
                .db()?
                .externals(&id, 0, target)?
                .into_iter()
                .filter(|e| e.end_offset <= target)
                .map(|e| e.start_offset)
                .collect();
            if let (Some(first), Some(last)) = (gone.first(), gone.last()) {
                tx.delete_externals(&id, *first, last + 1);
            }
            self.settle_hot_start(&mut tx, &id)?;
            self.save_stream(&mut tx, &id);
            Ok(target)
        })();
        self.sweep_expired(&mut tx, request.now_ms);
        let response = outcome.map(|retained_offset| {
            tx.state.commit_index += 1;
            AdvanceRetentionResponse {
                placement,
                retained_offset,
                group_commit_index: tx.state.commit_index,
                record_range: tx.state.streams.get(&id).and_then(|r| records::range(r)),
            }
        });
        self.finish(tx, response).await
    }
}

fn conflict(message: String, tail: u64) -> GroupEngineError {
    GroupEngineError::stream_with_next_offset(
        StreamErrorCode::SnapshotConflict,
        message,
        Some(tail),
    )
}
