//! Whole-group snapshots in ursula's `GroupSnapshot` shape: `snapshot` builds one from durable
//! state; `install_snapshot` replaces the group with one; `import_group_state` restores one into
//! an empty group as a single committed write.

use std::collections::BTreeMap;

use bytes::Bytes;
use ursula_runtime::{
    GroupEngineError, GroupSnapshot, ImportGroupStateResponse, StreamAppendCount,
};
use ursula_shard::{BucketStreamId, ShardPlacement};
use ursula_stream::{
    BucketQuotaSnapshot, BucketUsageSnapshot, HotPayloadSegment, ProducerReceipt, ProducerSnapshot,
    StreamErrorCode, StreamMessageRecord, StreamRecordIndex, StreamSnapshot, StreamSnapshotEntry,
};

use super::payload::PayloadLog;
use super::read::integrity_snapshot;
use super::rows::{MessageRow, ProducerRow, ReceiptRow, RecordCursor, StreamRow};
use super::state::{compare_ids, GroupState};
use super::tx::Tx;
use super::{stream_error, DiskGroupEngine, GroupError};

impl DiskGroupEngine {
    /// Builds the stream snapshot of the whole group (reads every hot payload).
    pub(crate) async fn stream_snapshot(&self) -> Result<StreamSnapshot, GroupEngineError> {
        let mut ids: Vec<&BucketStreamId> = self.state.streams.keys().collect();
        ids.sort_by(|a, b| compare_ids(a, b));
        let mut streams = Vec::with_capacity(ids.len());
        for id in ids {
            let row = &self.state.streams[id];
            let tail = row.metadata.tail_offset;
            let hot_from = row.hot_start_offset.max(row.retained_offset).min(tail);
            // Hot bytes are the runs between external segments above the hot start.
            let externals = self.db()?.externals(id, 0, tail)?;
            let mut runs = Vec::new();
            let mut cursor = hot_from;
            for segment in externals.iter().filter(|e| e.end_offset > hot_from) {
                if segment.start_offset > cursor {
                    runs.push((cursor, segment.start_offset));
                }
                cursor = cursor.max(segment.end_offset);
            }
            if cursor < tail {
                runs.push((cursor, tail));
            }
            let mut payload = Vec::new();
            let mut hot_segments = Vec::with_capacity(runs.len());
            for (start, end) in runs {
                let bytes = self.read_hot(id, row, start, end)?;
                hot_segments.push(HotPayloadSegment {
                    start_offset: start,
                    end_offset: end,
                    payload_start: payload.len(),
                    payload_end: payload.len() + bytes.len(),
                });
                payload.extend_from_slice(&bytes);
            }
            let message_records = self
                .message_bounds(id, row)?
                .into_iter()
                .map(|(start_offset, end_offset)| StreamMessageRecord {
                    start_offset,
                    end_offset,
                })
                .collect();
            let record_index = match row.records {
                Some(cursor) => Some(
                    StreamRecordIndex::restore(
                        cursor.first,
                        self.db()?.record_starts(id, cursor.first)?,
                        row.retained_offset,
                        tail,
                    )
                    .map_err(|e| {
                        GroupError::Corrupt(format!("record index of stream '{id}': {e:?}"))
                    })?,
                ),
                None => None,
            };
            let mut producer_states = Vec::new();
            for (producer_id, head) in self.state.producers.get(id).into_iter().flatten() {
                let receipts = self
                    .db()?
                    .receipts(id, producer_id)?
                    .into_iter()
                    .map(|(seq, r)| ProducerReceipt {
                        producer_seq: seq,
                        start_offset: r.start_offset,
                        next_offset: r.next_offset,
                        closed: r.closed,
                        items: r.items,
                    })
                    .collect();
                producer_states.push(ProducerSnapshot {
                    producer_id: producer_id.clone(),
                    producer_epoch: head.epoch,
                    producer_seq: head.seq,
                    last_start_offset: head.last_start_offset,
                    last_next_offset: head.last_next_offset,
                    last_closed: head.last_closed,
                    last_items: head.last_items.clone(),
                    receipts,
                });
            }

            streams.push(StreamSnapshotEntry {
                metadata: row.metadata.clone(),
                attrs: row.attrs.clone(),
                hot_start_offset: GroupState::reported_hot_start(row),
                payload,
                hot_segments,
                cold_frontier_offset: row.hot_start_offset.max(row.retained_offset),
                cold_index_generation: 0,
                cold_chunks: row.cold_chunks.to_vec(),
                external_segments: externals,
                message_records,
                record_index,
                integrity: integrity_snapshot(row),
                retained_offset: Some(row.retained_offset),
                visible_snapshot: row.visible_snapshot.clone(),
                producer_states,
            });
        }
        Ok(StreamSnapshot {
            buckets: self.state.buckets.iter().cloned().collect(),
            streams,
            pending_cold_gc: self.state.gc.iter().cloned().collect(),
            next_cold_gc_seq: self.state.next_gc_seq,
            bucket_usage: self
                .state
                .usage
                .iter()
                .map(|(b, u)| BucketUsageSnapshot {
                    bucket_id: b.clone(),
                    usage: *u,
                })
                .collect(),
            bucket_quotas: self
                .state
                .quotas
                .iter()
                .map(|(b, q)| BucketQuotaSnapshot {
                    bucket_id: b.clone(),
                    quota: *q,
                })
                .collect(),
        })
    }

    /// `snapshot`.
    pub(crate) async fn group_snapshot(
        &self,
        placement: ShardPlacement,
    ) -> Result<GroupSnapshot, GroupEngineError> {
        let stream_snapshot = self.stream_snapshot().await?;
        let mut counts: Vec<StreamAppendCount> = self
            .state
            .streams
            .iter()
            .map(|(id, row)| StreamAppendCount {
                stream_id: id.clone(),
                append_count: row.append_count,
            })
            .collect();
        counts.sort_by(|a, b| compare_ids(&a.stream_id, &b.stream_id));
        Ok(GroupSnapshot {
            placement,
            group_commit_index: self.state.commit_index,
            stream_snapshot,
            stream_append_counts: counts,
        })
    }

    /// Replaces the whole group with `snapshot`: hot payloads are rewritten into the payload
    /// log (one record per message), everything else into one state commit.
    pub(crate) async fn install(
        &mut self,
        snapshot: StreamSnapshot,
        commit_index: u64,
        counts: &[StreamAppendCount],
        now_ms: u64,
    ) -> Result<(), GroupEngineError> {
        validate_snapshot(&snapshot)?;
        let counts: BTreeMap<String, u64> = counts
            .iter()
            .map(|c| (c.stream_id.to_string(), c.append_count))
            .collect();
        // Payloads first (unreferenced until the commit below).
        let mut items = Vec::new();
        let mut pieces = Vec::new();
        for entry in &snapshot.streams {
            let id = &entry.metadata.stream_id;
            let partition = PayloadLog::partition_for(id);
            let payload = Bytes::from(entry.payload.clone());
            let mut bounds = Vec::new();
            let mut slices = Vec::new();
            for (start, end, at) in hot_runs(entry) {
                // Split each run at message boundaries: one payload record per message.
                let mut cursor = start;
                for record in &entry.message_records {
                    let (s, e) = (record.start_offset.max(cursor), record.end_offset.min(end));
                    if s < e && s == cursor {
                        bounds.push((s, e));
                        slices.push(
                            payload.slice(at + (s - start) as usize..at + (e - start) as usize),
                        );
                        cursor = e;
                    }
                }
                if cursor < end {
                    bounds.push((cursor, end));
                    slices.push(
                        payload.slice(at + (cursor - start) as usize..at + (end - start) as usize),
                    );
                }
            }
            pieces.push(bounds);
            items.push((id.clone(), partition, slices));
        }
        let offsets = self.payloads.append_many(items, now_ms).await?;
        let mut state = GroupState {
            commit_index,
            next_gc_seq: snapshot.next_cold_gc_seq,
            buckets: snapshot.buckets.iter().cloned().collect(),
            gc: snapshot.pending_cold_gc.iter().cloned().collect(),
            usage: snapshot
                .bucket_usage
                .iter()
                .map(|u| (u.bucket_id.clone(), u.usage))
                .collect(),
            quotas: snapshot
                .bucket_quotas
                .iter()
                .map(|q| (q.bucket_id.clone(), q.quota))
                .collect(),
            ..GroupState::default()
        };
        let mut tx = Tx::new(&self.state);
        tx.clear_all();
        for b in &state.buckets {
            tx.put_bucket(b);
        }
        for e in &state.gc {
            tx.put_gc(e);
        }
        for (b, u) in &state.usage {
            tx.put_usage(b, u);
        }
        for (b, q) in &state.quotas {
            tx.put_quota(b, Some(q));
        }
        for ((entry, bounds), log_offsets) in snapshot.streams.into_iter().zip(pieces).zip(offsets)
        {
            let id = entry.metadata.stream_id.clone();
            let retained = entry.retained_offset.unwrap_or(0);
            let hot_start = entry.hot_start_offset.max(retained);
            for segment in &entry.external_segments {
                tx.put_external(&id, segment);
            }
            let external_hot = entry
                .external_segments
                .iter()
                .filter(|e| e.start_offset >= hot_start)
                .map(|e| e.end_offset - e.start_offset)
                .sum();
            for ((start, end), log_offset) in bounds.iter().zip(log_offsets) {
                tx.put_message(
                    &id,
                    PayloadLog::partition_for(&id),
                    *start,
                    MessageRow {
                        end_offset: *end,
                        log_offset,
                    },
                );
            }
            let row = StreamRow {
                attrs: entry.attrs,
                hot_start_offset: hot_start,
                retained_offset: retained,
                live_setsum: snapshot_setsum(&id, &entry.integrity.live_setsum)?,
                total_setsum: snapshot_setsum(&id, &entry.integrity.total_setsum)?,
                total_records: entry.integrity.total_records,
                snapshot_changed: entry.visible_snapshot.is_some(),
                visible_snapshot: entry.visible_snapshot,
                append_count: counts.get(&id.to_string()).copied().unwrap_or(0),
                cold_chunks: entry.cold_chunks.into(),
                partition: PayloadLog::partition_for(&id),
                records: entry.record_index.as_ref().and_then(|index| {
                    index.range().ok().map(|r| RecordCursor {
                        first: r.first_record,
                        next: r.next_record,
                    })
                }),
                external_hot,
                metadata: entry.metadata,
            };
            if let (Some(index), Some(cursor)) = (&entry.record_index, row.records) {
                for (i, start) in index.record_offsets().iter().enumerate() {
                    tx.put_record(&id, cursor.first + i as u64, *start);
                }
            }
            for p in entry.producer_states {
                let head = ProducerRow {
                    epoch: p.producer_epoch,
                    seq: p.producer_seq,
                    last_start_offset: p.last_start_offset,
                    last_next_offset: p.last_next_offset,
                    last_closed: p.last_closed,
                    last_items: p.last_items.clone(),
                };
                tx.put_producer(&id, &p.producer_id, &head, false);
                let receipts = if p.receipts.is_empty() {
                    vec![ProducerReceipt {
                        producer_seq: p.producer_seq,
                        start_offset: p.last_start_offset,
                        next_offset: p.last_next_offset,
                        closed: p.last_closed,
                        items: p.last_items,
                    }]
                } else {
                    p.receipts
                };
                for r in receipts {
                    tx.put_receipt(
                        &id,
                        &p.producer_id,
                        r.producer_seq,
                        &ReceiptRow {
                            start_offset: r.start_offset,
                            next_offset: r.next_offset,
                            closed: r.closed,
                            items: r.items,
                        },
                    );
                }
                state
                    .producers
                    .entry(id.clone())
                    .or_default()
                    .insert(p.producer_id, head);
            }
            for chunk in row.cold_chunks.iter() {
                tx.put_chunk(&id, chunk);
            }
            tx.put_stream(&id, &row);
            state.streams.insert(id, row);
        }
        state.recount_shared_refs();
        state.recompute_expiry_floor();
        tx.state = state;
        let previous = tx.state.clone();
        self.commit(tx).await?;
        // Pages of the streams replaced are rewritten from the new manifest (or deleted).
        if let Some(index) = self.cold_index.as_mut() {
            index.touch_all(&previous);
            index.touch_all(&self.state);
        }
        self.reclaim_hot_segments()?;
        Ok(())
    }

    /// `import_group_state`: restores a backup into an empty group.
    pub(crate) async fn import_inner(
        &mut self,
        snapshot: StreamSnapshot,
        placement: ShardPlacement,
    ) -> Result<ImportGroupStateResponse, GroupEngineError> {
        if !self.state.buckets.is_empty() || !self.state.streams.is_empty() {
            return Err(stream_error(
                StreamErrorCode::ImportConflict,
                "group state import requires an empty group",
            ));
        }
        validate_snapshot(&snapshot)
            .map_err(|e| stream_error(StreamErrorCode::ImportInvalid, e.message().to_string()))?;
        let buckets = snapshot.buckets.len() as u64;
        let streams = snapshot.streams.len() as u64;
        let commit_index = self.state.commit_index + 1;
        self.install(snapshot, commit_index, &[], crate::now_ms() as u64)
            .await?;
        Ok(ImportGroupStateResponse {
            placement,
            buckets,
            streams,
            group_commit_index: commit_index,
        })
    }
}

/// A snapshot stream's integrity setsum (ursula's hex digest), or `ImportInvalid`.
fn snapshot_setsum(id: &BucketStreamId, hex: &str) -> Result<setsum::Setsum, GroupEngineError> {
    setsum::Setsum::from_hexdigest(hex).ok_or_else(|| {
        stream_error(
            StreamErrorCode::ImportInvalid,
            format!("snapshot stream '{id}' has an unreadable integrity setsum {hex:?}"),
        )
    })
}

/// Checks the invariants a snapshot must hold before it replaces any state.
fn validate_snapshot(snapshot: &StreamSnapshot) -> Result<(), GroupEngineError> {
    let invalid = |m: String| stream_error(StreamErrorCode::ImportInvalid, m);
    let mut buckets = std::collections::BTreeSet::new();
    for b in &snapshot.buckets {
        if !buckets.insert(b) {
            return Err(invalid(format!("snapshot contains duplicate bucket '{b}'")));
        }
    }
    let mut seen = std::collections::HashSet::new();
    for entry in &snapshot.streams {
        let m = &entry.metadata;
        let id = &m.stream_id;
        if !seen.insert(id.clone()) {
            return Err(invalid(format!(
                "snapshot contains duplicate stream '{id}'"
            )));
        }
        if !buckets.contains(&id.bucket_id) {
            return Err(invalid(format!(
                "snapshot stream '{id}' references a missing bucket"
            )));
        }
        snapshot_setsum(id, &entry.integrity.live_setsum)?;
        snapshot_setsum(id, &entry.integrity.total_setsum)?;
        if let Some(index) = &entry.record_index {
            index
                .validate(entry.retained_offset.unwrap_or(0), m.tail_offset)
                .map_err(|e| {
                    invalid(format!(
                        "snapshot stream '{id}' has inconsistent record boundaries: {e:?}"
                    ))
                })?;
        }
        let payload = entry.payload.len() as u64;
        let retained = entry.retained_offset.unwrap_or(0);
        if retained > m.tail_offset {
            return Err(invalid(format!(
                "snapshot stream '{id}' retained offset is beyond its tail {}",
                m.tail_offset
            )));
        }
        let hot: u64 = hot_runs(entry).iter().map(|(s, e, _)| e - s).sum();
        if hot != payload {
            return Err(invalid(format!(
                "snapshot stream '{id}' hot segments do not match payload length {payload}"
            )));
        }
        // Every retained byte must come from a cold chunk, an external segment or the payload
        // (ursula's exclusive chunks live in cold index pages that do not travel).
        let mut sources: Vec<(u64, u64)> = entry
            .cold_chunks
            .iter()
            .map(|c| (c.start_offset, c.end_offset))
            .chain(
                entry
                    .external_segments
                    .iter()
                    .map(|e| (e.start_offset, e.end_offset)),
            )
            .chain(hot_runs(entry).into_iter().map(|(s, e, _)| (s, e)))
            .collect();
        sources.sort_unstable();
        let mut covered = retained;
        for (start, end) in sources {
            if start > covered {
                break;
            }
            covered = covered.max(end);
        }
        if covered < m.tail_offset {
            return Err(invalid(format!(
                "snapshot stream '{id}' has no source for bytes {covered}..{} (cold index pages are not portable)",
                m.tail_offset
            )));
        }
        if entry
            .visible_snapshot
            .as_ref()
            .is_some_and(|s| s.offset > m.tail_offset)
        {
            return Err(invalid(format!(
                "snapshot stream '{id}' visible snapshot offset is beyond its tail"
            )));
        }
        let mut producers = std::collections::HashSet::new();
        for p in &entry.producer_states {
            if !producers.insert(&p.producer_id) {
                return Err(invalid(format!(
                    "snapshot stream '{id}' contains duplicate producer '{}'",
                    p.producer_id
                )));
            }
        }
    }
    Ok(())
}

/// The hot runs of a snapshot entry as `(start, end, payload index)`: its hot segments, or (for
/// a snapshot without them) the whole payload ending at the tail.
fn hot_runs(entry: &StreamSnapshotEntry) -> Vec<(u64, u64, usize)> {
    if entry.hot_segments.is_empty() {
        let len = entry.payload.len() as u64;
        if len == 0 {
            return Vec::new();
        }
        let tail = entry.metadata.tail_offset;
        return vec![(tail.saturating_sub(len), tail, 0)];
    }
    entry
        .hot_segments
        .iter()
        .filter(|h| h.payload_end <= entry.payload.len() && h.payload_start <= h.payload_end)
        .map(|h| {
            (
                h.start_offset,
                h.start_offset + (h.payload_end - h.payload_start) as u64,
                h.payload_start,
            )
        })
        .collect()
}
