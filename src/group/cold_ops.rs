//! The cold tier lifecycle: plan a flush of the hot prefix, upload it (Strata's own
//! [`DiskGroupEngine::flush_stream_cold`] or any caller), commit the chunk into the cold manifest
//! (`flush_cold`), reclaim hot segments nothing references, merge small chunks
//! (`compact_cold`), and garbage-collect unreferenced objects (`plan_cold_gc` / `ack_cold_gc`).

use std::collections::BTreeMap;
use std::collections::HashMap;

use ursula_runtime::{
    AckColdGcResponse, ColdHotBacklog, CompactColdRequest, CompactColdResponse, FlushColdRequest,
    FlushColdResponse, GroupEngineError, PlanColdFlushRequest, PlanGroupColdFlushRequest,
};
use ursula_shard::{BucketStreamId, ShardPlacement};
use ursula_stream::{
    ColdChunkRef, ColdFlushCandidate, ColdGcEntry, ColdGcTarget, StreamErrorCode,
    StreamErrorContext,
};

use super::db::Tx;
use super::state::{compare_ids, GroupState};
use super::{not_found, stream_error, DiskGroupEngine, GroupError};
use crate::cold::{encode_cold_object, COLD_OBJECT_SUFFIX};

/// What a GC pass reclaimed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ColdGcReport {
    /// Queue entries acknowledged.
    pub entries: u64,
    /// Objects deleted.
    pub objects: u64,
}

fn stale(id: &BucketStreamId, tail: u64, message: String) -> GroupEngineError {
    let _ = id;
    GroupEngineError::stream_with_context(
        StreamErrorCode::InvalidColdFlush,
        message,
        Some(tail),
        vec![StreamErrorContext::StaleColdFlushCandidate],
    )
}

/// A chunk compaction may merge: small, and raw (its own object, not a slice of a pack).
fn compactable(chunk: &ColdChunkRef, small_bytes: u64) -> bool {
    let len = chunk.end_offset - chunk.start_offset;
    len < small_bytes && !chunk.shared_object && chunk.object_size == len
}

/// The prefix under which every cold object of a stream lives (`{stream}/chunks/`).
pub fn cold_chunk_prefix(id: &BucketStreamId) -> String {
    format!("{id}/chunks/")
}

/// A fresh, unique path for a Strata cold object covering `[start, end)` of `id`.
pub fn new_cold_object_path(id: &BucketStreamId, start: u64, end: u64) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static SEQUENCE: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let seq = SEQUENCE.fetch_add(1, Ordering::Relaxed);
    format!("{id}/chunks/{start:016x}-{end:016x}-{nanos:032x}-{seq:016x}{COLD_OBJECT_SUFFIX}")
}

impl DiskGroupEngine {
    /// First hot offset as ursula reports it (the tail when nothing is hot).
    fn reported_hot_start(&self, id: &BucketStreamId) -> u64 {
        self.state
            .streams
            .get(id)
            .map_or(0, GroupState::reported_hot_start)
    }

    /// A flush candidate from `start`, of up to `max` bytes once at least `min` are hot.
    fn candidate_from(
        &self,
        id: &BucketStreamId,
        start: u64,
        min: usize,
        max: usize,
    ) -> Result<Option<ColdFlushCandidate>, GroupEngineError> {
        if max == 0 {
            return Ok(None);
        }
        let row = self.state.streams.get(id).ok_or_else(|| not_found(id))?;
        let tail = row.metadata.tail_offset;
        let start = start.max(row.hot_start_offset.max(row.retained_offset));
        let available = tail.saturating_sub(start);
        let take = available.min(max as u64);
        if take == 0 || (take as usize) < min {
            return Ok(None);
        }
        let payload = self.read_hot(id, row, start, start + take)?;
        Ok(Some(ColdFlushCandidate {
            stream_id: id.clone(),
            start_offset: start,
            end_offset: start + take,
            payload_digest: blake3::hash(&payload).to_hex().to_string(),
            payload: payload.to_vec(),
        }))
    }

    /// `plan_cold_flush`.
    pub(crate) fn plan_cold_flush_inner(
        &self,
        request: PlanColdFlushRequest,
    ) -> Result<Option<ColdFlushCandidate>, GroupEngineError> {
        let start = self.reported_hot_start(&request.stream_id);
        self.candidate_from(
            &request.stream_id,
            start,
            request.min_hot_bytes,
            request.max_flush_bytes,
        )
    }

    /// `plan_next_cold_flush_batch`: streams in id order, each from where the batch left it.
    pub(crate) fn plan_flush_batch_inner(
        &self,
        request: PlanGroupColdFlushRequest,
        max_candidates: usize,
    ) -> Result<Vec<ColdFlushCandidate>, GroupEngineError> {
        if max_candidates == 0 || request.max_flush_bytes == 0 || request.max_batch_bytes == 0 {
            return Ok(Vec::new());
        }
        let mut ids: Vec<BucketStreamId> = self.state.streams.keys().cloned().collect();
        ids.sort_by(compare_ids);
        let mut planned: HashMap<BucketStreamId, u64> = HashMap::new();
        let start_for = |planned: &HashMap<BucketStreamId, u64>, id: &BucketStreamId| {
            planned
                .get(id)
                .copied()
                .unwrap_or_else(|| self.reported_hot_start(id))
        };
        let hot_from = |planned: &HashMap<BucketStreamId, u64>| -> u64 {
            ids.iter()
                .map(|id| {
                    let row = &self.state.streams[id];
                    row.metadata
                        .tail_offset
                        .saturating_sub(start_for(planned, id).max(row.hot_start_offset))
                })
                .sum()
        };
        let drain_group = hot_from(&planned) >= request.min_hot_bytes as u64;
        let mut candidates = Vec::new();
        let mut batch_bytes = 0usize;
        while candidates.len() < max_candidates {
            let min = if drain_group {
                1
            } else {
                request.min_hot_bytes
            };
            let group_hot = hot_from(&planned);
            let mut found = None;
            for id in &ids {
                if let Some(c) =
                    self.candidate_from(id, start_for(&planned, id), min, request.max_flush_bytes)?
                {
                    found = Some(c);
                    break;
                }
            }
            if found.is_none() && group_hot >= min as u64 {
                for id in &ids {
                    if let Some(c) = self.candidate_from(
                        id,
                        start_for(&planned, id),
                        1,
                        request.max_flush_bytes,
                    )? {
                        found = Some(c);
                        break;
                    }
                }
            }
            let Some(candidate) = found else { break };
            let next = batch_bytes + candidate.payload.len();
            if !candidates.is_empty() && next > request.max_batch_bytes {
                break;
            }
            planned.insert(candidate.stream_id.clone(), candidate.end_offset);
            batch_bytes = next;
            candidates.push(candidate);
            if batch_bytes >= request.max_batch_bytes {
                break;
            }
        }
        Ok(candidates)
    }

    /// `flush_cold`: validates the uploaded chunk against the hot prefix and moves the prefix
    /// into the cold manifest.
    pub(crate) fn flush_cold_inner(
        &mut self,
        request: FlushColdRequest,
        placement: ShardPlacement,
    ) -> Result<FlushColdResponse, GroupEngineError> {
        let id = &request.stream_id;
        let chunk = request.chunk;
        self.validate_scope(id)?;
        if chunk.s3_path.trim().is_empty() {
            return Err(stream_error(
                StreamErrorCode::InvalidColdFlush,
                "cold chunk S3 path must not be empty",
            ));
        }
        if chunk.object_size == 0 {
            return Err(stream_error(
                StreamErrorCode::InvalidColdFlush,
                "cold chunk object size must be greater than zero",
            ));
        }
        let row = self.state.streams.get(id).ok_or_else(|| not_found(id))?;
        let tail = row.metadata.tail_offset;
        if chunk.end_offset <= chunk.start_offset {
            return Err(GroupEngineError::stream_with_next_offset(
                StreamErrorCode::InvalidColdFlush,
                "cold chunk must cover at least one byte",
                Some(tail),
            ));
        }
        let logical = chunk.end_offset - chunk.start_offset;
        if chunk
            .object_offset
            .checked_add(logical)
            .is_none_or(|end| end > chunk.object_size)
        {
            return Err(GroupEngineError::stream_with_next_offset(
                StreamErrorCode::InvalidColdFlush,
                "cold chunk slice is outside the physical object",
                Some(tail),
            ));
        }
        if !chunk.shared_object && chunk.object_offset != 0 {
            return Err(GroupEngineError::stream_with_next_offset(
                StreamErrorCode::InvalidColdFlush,
                "exclusive cold chunks must start at physical object offset zero",
                Some(tail),
            ));
        }
        if chunk.end_offset > tail {
            return Err(stale(
                id,
                tail,
                format!(
                    "cold chunk end {} is beyond stream '{id}' tail {tail}",
                    chunk.end_offset
                ),
            ));
        }
        if self.reported_hot_start(id) != chunk.start_offset {
            return Err(stale(
                id,
                tail,
                format!("cold chunk for stream '{id}' must start at the hot prefix"),
            ));
        }
        let row = row.clone();
        if !chunk.payload_digest.is_empty() {
            let bytes = self.read_hot(id, &row, chunk.start_offset, chunk.end_offset)?;
            if blake3::hash(&bytes).to_hex().as_str() != chunk.payload_digest {
                return Err(stale(
                    id,
                    tail,
                    format!("cold chunk payload for stream '{id}' is stale"),
                ));
            }
        }
        let mut tx = Tx::default();
        let end = chunk.end_offset;
        tx.put_chunk(&self.db, id, &chunk);
        if chunk.shared_object {
            *self
                .state
                .shared_refs
                .entry(chunk.s3_path.clone())
                .or_default() += 1;
        }
        if let Some(row) = self.state.streams.get_mut(id) {
            row.cold_chunks.push(chunk);
            row.hot_start_offset = end;
        }
        // Message rows wholly below the new hot start are no longer needed for reads.
        let below: Vec<u64> = self
            .db
            .messages(id, 0, end)?
            .into_iter()
            .filter(|(_, m)| m.end_offset <= end)
            .map(|(s, _)| s)
            .collect();
        if let (Some(first), Some(last)) = (below.first(), below.last()) {
            tx.delete_messages(&self.db, id, *first, last + 1);
        }
        self.save_stream(&mut tx, id);
        self.state.commit_index += 1;
        let response = FlushColdResponse {
            placement,
            hot_start_offset: self.reported_hot_start(id),
            group_commit_index: self.state.commit_index,
        };
        self.commit(tx)?;
        Ok(response)
    }

    /// `compact_cold`: replaces a contiguous run of chunks by one object covering the same range;
    /// the old objects are queued for GC not before `gc_not_before_ms`.
    pub(crate) fn compact_cold_inner(
        &mut self,
        request: CompactColdRequest,
        placement: ShardPlacement,
    ) -> Result<CompactColdResponse, GroupEngineError> {
        let id = &request.stream_id;
        self.validate_scope(id)?;
        let row = self.state.streams.get(id).ok_or_else(|| not_found(id))?;
        if request.old_chunks.len() < 2 {
            return Err(stream_error(
                StreamErrorCode::InvalidColdFlush,
                "cold compaction requires at least two input chunks",
            ));
        }
        let replacement = request.replacement;
        if replacement.s3_path.trim().is_empty() || replacement.object_size == 0 {
            return Err(stream_error(
                StreamErrorCode::InvalidColdFlush,
                "cold compaction replacement must name a non-empty object",
            ));
        }
        let mut expected = request.old_chunks[0].start_offset;
        let mut bytes = 0u64;
        for chunk in &request.old_chunks {
            if chunk.start_offset != expected
                || chunk.end_offset <= chunk.start_offset
                || chunk.object_size != chunk.end_offset - chunk.start_offset
            {
                return Err(stream_error(
                    StreamErrorCode::InvalidColdFlush,
                    "cold compaction inputs must be contiguous raw chunks",
                ));
            }
            expected = chunk.end_offset;
            bytes += chunk.object_size;
        }
        if replacement.start_offset != request.old_chunks[0].start_offset
            || replacement.end_offset != expected
            || replacement.object_size != bytes
        {
            return Err(stream_error(
                StreamErrorCode::InvalidColdFlush,
                "cold compaction replacement must cover the exact input range",
            ));
        }
        let Some(at) = row
            .cold_chunks
            .iter()
            .position(|c| *c == request.old_chunks[0])
        else {
            return Err(stream_error(
                StreamErrorCode::InvalidColdFlush,
                "cold compaction inputs are not the stream's current chunks",
            ));
        };
        let n = request.old_chunks.len();
        if row.cold_chunks.get(at..at + n) != Some(request.old_chunks.as_slice()) {
            return Err(stream_error(
                StreamErrorCode::InvalidColdFlush,
                "cold compaction inputs are not the stream's current chunks",
            ));
        }
        let mut tx = Tx::default();
        let old_paths: Vec<String> = request
            .old_chunks
            .iter()
            .map(|c| c.s3_path.clone())
            .collect();
        for old in &request.old_chunks {
            tx.delete_chunk(&self.db, id, old.start_offset);
        }
        tx.put_chunk(&self.db, id, &replacement);
        if let Some(row) = self.state.streams.get_mut(id) {
            row.cold_chunks.splice(at..at + n, [replacement]);
        }
        self.save_stream(&mut tx, id);
        self.enqueue_gc(
            &mut tx,
            ColdGcTarget::Paths(old_paths),
            request.gc_not_before_ms,
        );
        self.state.commit_index += 1;
        let response = CompactColdResponse {
            placement,
            compacted_chunks: n as u64,
            compacted_bytes: bytes,
            group_commit_index: self.state.commit_index,
        };
        self.commit(tx)?;
        Ok(response)
    }

    /// `plan_cold_gc`: the front of the queue, not removed.
    pub(crate) fn plan_cold_gc_inner(&self, max: usize) -> Vec<ColdGcEntry> {
        self.state.gc.iter().take(max).cloned().collect()
    }

    /// `ack_cold_gc`: removes every entry with `seq <= up_to_seq`.
    pub(crate) fn ack_cold_gc_inner(
        &mut self,
        up_to_seq: u64,
        placement: ShardPlacement,
    ) -> Result<AckColdGcResponse, GroupEngineError> {
        let mut tx = Tx::default();
        let mut removed = 0;
        while self.state.gc.front().is_some_and(|e| e.seq <= up_to_seq) {
            if let Some(entry) = self.state.gc.pop_front() {
                tx.delete_gc(&self.db, entry.seq);
                removed += 1;
            }
        }
        self.state.commit_index += 1;
        let response = AckColdGcResponse {
            placement,
            removed,
            group_commit_index: self.state.commit_index,
        };
        self.commit(tx)?;
        Ok(response)
    }

    /// Bytes of `id` still held hot in segments (0 for an unknown stream).
    pub fn backlog_bytes(&self, id: &BucketStreamId) -> u64 {
        self.state
            .streams
            .get(id)
            .map_or(0, GroupState::stream_hot_bytes)
    }

    /// `cold_hot_backlog`.
    pub(crate) fn backlog_inner(&self, id: BucketStreamId) -> ColdHotBacklog {
        let stream_hot_bytes = self
            .state
            .streams
            .get(&id)
            .map_or(0, GroupState::stream_hot_bytes);
        ColdHotBacklog {
            stream_id: id,
            stream_hot_bytes,
            group_hot_bytes: self.state.group_hot_bytes(),
        }
    }

    /// Moves up to `max_bytes` of a stream's hot prefix to the cold tier: plans, uploads one
    /// zstd cold object, commits it with `flush_cold`, then reclaims segments nothing references.
    /// An upload failure leaves state untouched (the object, if partly written, is unreferenced
    /// and named uniquely, so a retry never collides with it). Returns the new hot start.
    pub async fn flush_stream_cold(
        &mut self,
        id: &BucketStreamId,
        max_bytes: usize,
        placement: ShardPlacement,
    ) -> Result<Option<u64>, GroupEngineError> {
        let Some(candidate) = self.plan_cold_flush_inner(PlanColdFlushRequest {
            stream_id: id.clone(),
            min_hot_bytes: 1,
            max_flush_bytes: max_bytes,
        })?
        else {
            return Ok(None);
        };
        let chunk = self.upload_candidate(&candidate).await?;
        let response = self.flush_cold_inner(
            FlushColdRequest {
                stream_id: id.clone(),
                chunk,
            },
            placement,
        )?;
        self.reclaim_hot_segments()?;
        Ok(Some(response.hot_start_offset))
    }

    /// Uploads a candidate as a Strata cold object and returns its chunk reference
    /// (`object_size` of a Strata object is the decoded length: format/COLD_OBJECT.md).
    pub async fn upload_candidate(
        &self,
        candidate: &ColdFlushCandidate,
    ) -> Result<ColdChunkRef, GroupEngineError> {
        let object = encode_cold_object(&candidate.payload, self.options.cold_zstd_level)
            .map_err(GroupError::from)?;
        let path = new_cold_object_path(
            &candidate.stream_id,
            candidate.start_offset,
            candidate.end_offset,
        );
        self.cold
            .put(&path, object)
            .await
            .map_err(GroupError::from)?;
        Ok(ColdChunkRef {
            start_offset: candidate.start_offset,
            end_offset: candidate.end_offset,
            s3_path: path,
            object_size: candidate.payload.len() as u64,
            object_offset: 0,
            shared_object: false,
            payload_digest: candidate.payload_digest.clone(),
        })
    }

    /// Merges runs of a stream's cold chunks smaller than `small_bytes` into one object each
    /// (at most `max_inputs` per run) through `compact_cold`. Returns chunks replaced.
    pub async fn compact_stream_cold(
        &mut self,
        id: &BucketStreamId,
        small_bytes: u64,
        max_inputs: usize,
        gc_not_before_ms: u64,
        placement: ShardPlacement,
    ) -> Result<u64, GroupEngineError> {
        let row = self
            .state
            .streams
            .get(id)
            .ok_or_else(|| not_found(id))?
            .clone();
        let run: Vec<ColdChunkRef> = row
            .cold_chunks
            .iter()
            .skip_while(|c| !compactable(c, small_bytes))
            .take_while(|c| compactable(c, small_bytes))
            .take(max_inputs.max(2))
            .cloned()
            .collect();
        if run.len() < 2 {
            return Ok(0);
        }
        let start = run[0].start_offset;
        let end = run[run.len() - 1].end_offset;
        let mut merged = Vec::with_capacity((end - start) as usize);
        for chunk in &run {
            let bytes = self
                .cold
                .read_chunk(
                    &chunk.s3_path,
                    chunk.object_offset,
                    0,
                    chunk.end_offset - chunk.start_offset,
                )
                .await
                .map_err(GroupError::from)?;
            merged.extend_from_slice(&bytes);
        }
        let candidate = ColdFlushCandidate {
            stream_id: id.clone(),
            start_offset: start,
            end_offset: end,
            payload_digest: blake3::hash(&merged).to_hex().to_string(),
            payload: merged,
        };
        let mut replacement = self.upload_candidate(&candidate).await?;
        replacement.object_size = run.iter().map(|c| c.object_size).sum();
        let response = self.compact_cold_inner(
            CompactColdRequest {
                stream_id: id.clone(),
                old_chunks: run,
                replacement,
                gc_not_before_ms,
            },
            placement,
        )?;
        Ok(response.compacted_chunks)
    }

    /// Runs one GC pass: deletes the objects of due queue entries (in order, stopping at the
    /// first entry not yet due), then acknowledges them. Deleting is idempotent, so a crash
    /// between delete and ack only repeats deletes.
    pub async fn run_cold_gc(
        &mut self,
        now_ms: u64,
        max: usize,
        placement: ShardPlacement,
    ) -> Result<ColdGcReport, GroupEngineError> {
        let entries = self.plan_cold_gc_inner(max);
        let mut report = ColdGcReport::default();
        let mut acked = None;
        for entry in entries {
            if entry.not_before_ms > now_ms {
                break;
            }
            match &entry.target {
                ColdGcTarget::Stream(id) => {
                    // A stream recreated under the same id owns the prefix again: only delete
                    // objects it does not reference.
                    let live: Vec<String> = self
                        .state
                        .streams
                        .get(id)
                        .map(|r| r.cold_chunks.iter().map(|c| c.s3_path.clone()).collect())
                        .unwrap_or_default();
                    for path in self
                        .cold
                        .list(&cold_chunk_prefix(id))
                        .await
                        .map_err(GroupError::from)?
                    {
                        if !live.contains(&path) {
                            self.cold.delete(&path).await.map_err(GroupError::from)?;
                            report.objects += 1;
                        }
                    }
                }
                ColdGcTarget::Paths(paths) => {
                    for path in paths {
                        self.cold.delete(path).await.map_err(GroupError::from)?;
                        report.objects += 1;
                    }
                }
            }
            acked = Some(entry.seq);
            report.entries += 1;
        }
        if let Some(seq) = acked {
            self.ack_cold_gc_inner(seq, placement)?;
        }
        Ok(report)
    }

    /// Deletes Strata cold objects (`.sco`) under the prefixes of this group's live streams that
    /// no chunk references: uploads whose commit never happened (a crash or a refused
    /// `flush_cold` between upload and commit). Safe against in-flight uploads because Strata's
    /// own upload and commit run inside one `&mut self` call, which this one cannot interleave
    /// with; objects of other writers (other suffixes) are never touched. Returns objects deleted.
    pub async fn sweep_orphan_objects(&mut self) -> Result<u64, GroupEngineError> {
        let mut deleted = 0;
        let streams: Vec<(BucketStreamId, Vec<String>)> = self
            .state
            .streams
            .iter()
            .map(|(id, row)| {
                (
                    id.clone(),
                    row.cold_chunks.iter().map(|c| c.s3_path.clone()).collect(),
                )
            })
            .collect();
        let queued: Vec<String> = self
            .state
            .gc
            .iter()
            .filter_map(|e| match &e.target {
                ColdGcTarget::Paths(paths) => Some(paths.clone()),
                ColdGcTarget::Stream(_) => None,
            })
            .flatten()
            .collect();
        for (id, live) in streams {
            for path in self
                .cold
                .list(&cold_chunk_prefix(&id))
                .await
                .map_err(GroupError::from)?
            {
                if path.ends_with(COLD_OBJECT_SUFFIX)
                    && !live.contains(&path)
                    && !queued.contains(&path)
                {
                    self.cold.delete(&path).await.map_err(GroupError::from)?;
                    deleted += 1;
                }
            }
        }
        Ok(deleted)
    }

    /// Deletes sealed payload segments that no hot message references any more (after cold
    /// flushes, retention and deletes). Returns the bytes freed.
    pub fn reclaim_hot_segments(&self) -> Result<u64, GroupEngineError> {
        let mut lowest: BTreeMap<u32, u64> = BTreeMap::new();
        for (id, row) in &self.state.streams {
            let from = row.hot_start_offset.max(row.retained_offset);
            if from >= row.metadata.tail_offset {
                continue;
            }
            let first = match self.db.message_at_or_before(id, from)? {
                Some((_, m)) if m.end_offset > from => Some(m),
                _ => self
                    .db
                    .messages(id, from, u64::MAX)?
                    .first()
                    .map(|(_, m)| *m),
            };
            if let Some(m) = first {
                let entry = lowest.entry(row.partition).or_insert(m.log_offset);
                *entry = (*entry).min(m.log_offset);
            }
        }
        Ok(self.payloads.reclaim(&lowest)?)
    }
}
