//! The cold tier's state transitions, as the seam names them: plan a flush of the hot prefix
//! (`plan_cold_flush`, `plan_next_cold_flush_batch`), commit an uploaded chunk into the cold
//! manifest (`flush_cold`), swap small chunks for a merged one (`compact_cold`), and read and pop
//! the cold-GC queue (`plan_cold_gc`, `ack_cold_gc`). The work that talks to the object store is
//! in `cold_worker.rs`.

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

use crate::group::cold_tier::gc_failures;
use crate::group::rows::StreamRow;
use crate::group::state::{compare_ids, GroupState};
use crate::group::tx::Tx;
use crate::group::{not_found, stream_error, DiskGroupEngine};

/// Whether a compaction input names manifest chunk `current`: the same range in the same object
/// of the same size (what ursula's cold-index pages carry; they drop the payload digest).
fn same_chunk(current: &ColdChunkRef, input: &ColdChunkRef) -> bool {
    fn fields(c: &ColdChunkRef) -> (u64, u64, u64, u64, bool, &str) {
        let ColdChunkRef {
            start_offset,
            end_offset,
            object_offset,
            object_size,
            shared_object,
            ref s3_path,
            payload_digest: _,
        } = *c;
        (
            start_offset,
            end_offset,
            object_offset,
            object_size,
            shared_object,
            s3_path,
        )
    }
    fields(current) == fields(input)
}

fn stale(tail: u64, message: String) -> GroupEngineError {
    GroupEngineError::stream_with_context(
        StreamErrorCode::InvalidColdFlush,
        message,
        Some(tail),
        vec![StreamErrorContext::StaleColdFlushCandidate],
    )
}

impl DiskGroupEngine {
    /// Hot bytes of `id` from `start` on (external segments are not hot).
    pub(crate) fn hot_bytes_from(&self, id: &BucketStreamId, row: &StreamRow, start: u64) -> u64 {
        let tail = row.metadata.tail_offset;
        let from = start.max(row.hot_start_offset.max(row.retained_offset));
        let external: u64 = self
            .db()
            .and_then(|db| db.externals(id, from, tail))
            .map(|segments| {
                segments
                    .iter()
                    .map(|e| e.end_offset.min(tail) - e.start_offset.max(from))
                    .sum()
            })
            .unwrap_or(0);
        tail.saturating_sub(from).saturating_sub(external)
    }

    /// Moves the hot start past external segments that begin at it (they are not hot) and
    /// recounts the external bytes above it.
    pub(crate) fn settle_hot_start(
        &self,
        tx: &mut Tx,
        id: &BucketStreamId,
    ) -> Result<(), GroupEngineError> {
        let Some(row) = tx.state.streams.get(id) else {
            return Ok(());
        };
        let tail = row.metadata.tail_offset;
        let mut hot_start = row.hot_start_offset.max(row.retained_offset).min(tail);
        let externals = self.db()?.externals(id, hot_start, tail)?;
        for segment in &externals {
            if segment.start_offset <= hot_start && segment.end_offset > hot_start {
                hot_start = segment.end_offset;
            }
        }
        let external_hot = externals
            .iter()
            .filter(|e| e.start_offset >= hot_start)
            .map(|e| e.end_offset - e.start_offset)
            .sum();
        if let Some(mut row) = tx.state.streams.get_mut(id) {
            row.hot_start_offset = hot_start;
            row.external_hot = external_hot;
        }
        Ok(())
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
        // Only contiguous hot bytes flush together: stop at the next external segment.
        let hot_end = self
            .db()?
            .externals(id, start, tail)?
            .iter()
            .map(|e| e.start_offset)
            .find(|s| *s >= start)
            .unwrap_or(tail);
        let available = hot_end.saturating_sub(start);
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
        let start = self.state.hot_start_of(&request.stream_id);
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
                .unwrap_or_else(|| self.state.hot_start_of(id))
        };
        let hot_from = |planned: &HashMap<BucketStreamId, u64>| -> u64 {
            ids.iter()
                .map(|id| {
                    let row = &self.state.streams[id];
                    match planned.get(id) {
                        Some(start) => self.hot_bytes_from(id, row, *start),
                        None => GroupState::stream_hot_bytes(row),
                    }
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
    pub(crate) async fn flush_cold_inner(
        &mut self,
        request: FlushColdRequest,
        placement: ShardPlacement,
    ) -> Result<FlushColdResponse, GroupEngineError> {
        let id = &request.stream_id;
        let chunk = request.chunk;
        self.validate_scope(&self.state, id)?;
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
                tail,
                format!(
                    "cold chunk end {} is beyond stream '{id}' tail {tail}",
                    chunk.end_offset
                ),
            ));
        }
        if self.state.hot_start_of(id) != chunk.start_offset {
            return Err(stale(
                tail,
                format!("cold chunk for stream '{id}' must start at the hot prefix"),
            ));
        }
        if !self
            .db()?
            .externals(id, chunk.start_offset, chunk.end_offset)?
            .is_empty()
        {
            return Err(stale(
                tail,
                format!("cold chunk for stream '{id}' does not cover contiguous hot payload"),
            ));
        }
        let row = row.clone();
        if !chunk.payload_digest.is_empty() {
            let bytes = self.read_hot(id, &row, chunk.start_offset, chunk.end_offset)?;
            if blake3::hash(&bytes).to_hex().as_str() != chunk.payload_digest {
                return Err(stale(
                    tail,
                    format!("cold chunk payload for stream '{id}' is stale"),
                ));
            }
        }
        let mut tx = Tx::new(&self.state);
        let end = chunk.end_offset;
        tx.put_chunk(id, &chunk);
        tx.touch_cold_pages(id, [&chunk]);
        if chunk.shared_object {
            *tx.state
                .shared_refs
                .entry(chunk.s3_path.clone())
                .or_default() += 1;
        }
        if let Some(mut row) = tx.state.streams.get_mut(id) {
            std::sync::Arc::make_mut(&mut row.cold_chunks).push(chunk);
            row.hot_start_offset = end;
        }
        self.settle_hot_start(&mut tx, id)?;
        // Message rows wholly below the new hot start are no longer needed for reads.
        tx.delete_messages_below(self.db()?, id, end)?;
        self.save_stream(&mut tx, id);
        tx.state.commit_index += 1;
        let response = FlushColdResponse {
            placement,
            hot_start_offset: tx.state.hot_start_of(id),
            group_commit_index: tx.state.commit_index,
        };
        self.commit(tx).await?;
        Ok(response)
    }

    /// `compact_cold`: replaces a contiguous run of chunks by one object covering the same range;
    /// the old objects are queued for GC not before `gc_not_before_ms`.
    pub(crate) async fn compact_cold_inner(
        &mut self,
        request: CompactColdRequest,
        placement: ShardPlacement,
    ) -> Result<CompactColdResponse, GroupEngineError> {
        let id = &request.stream_id;
        self.validate_scope(&self.state, id)?;
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
            .position(|c| same_chunk(c, &request.old_chunks[0]))
        else {
            return Err(stream_error(
                StreamErrorCode::InvalidColdFlush,
                "cold compaction inputs are not the stream's current chunks",
            ));
        };
        let n = request.old_chunks.len();
        let current = row.cold_chunks.get(at..at + n).unwrap_or_default();
        if current.len() != n
            || !current
                .iter()
                .zip(&request.old_chunks)
                .all(|(c, o)| same_chunk(c, o))
        {
            return Err(stream_error(
                StreamErrorCode::InvalidColdFlush,
                "cold compaction inputs are not the stream's current chunks",
            ));
        }
        let mut tx = Tx::new(&self.state);
        let old_paths: Vec<String> = request
            .old_chunks
            .iter()
            .map(|c| c.s3_path.clone())
            .collect();
        for old in &request.old_chunks {
            tx.delete_chunk(id, old.start_offset);
        }
        tx.put_chunk(id, &replacement);
        tx.touch_cold_pages(id, [&replacement]);
        if let Some(mut row) = tx.state.streams.get_mut(id) {
            std::sync::Arc::make_mut(&mut row.cold_chunks).splice(at..at + n, [replacement]);
        }
        self.save_stream(&mut tx, id);
        let paths = self.gc_paths_with_pages(id, &request.old_chunks, old_paths);
        self.enqueue_gc(
            &mut tx,
            ColdGcTarget::Paths(paths),
            request.gc_not_before_ms,
        );
        tx.state.commit_index += 1;
        let response = CompactColdResponse {
            placement,
            compacted_chunks: n as u64,
            compacted_bytes: bytes,
            group_commit_index: tx.state.commit_index,
        };
        self.commit(tx).await?;
        Ok(response)
    }

    /// `plan_cold_gc`: the front of the queue, not removed.
    pub(crate) fn plan_cold_gc_inner(&self, max: usize) -> Vec<ColdGcEntry> {
        self.state.gc.iter().take(max).cloned().collect()
    }

    /// Ends a GC pass in one transaction: removes the entries in `done` (their objects are
    /// deleted), and re-queues each entry in `failed` at the back, due again after its backoff
    /// ([`crate::group::GroupOptions::cold_gc_backoff`]), so the entries behind it go on.
    pub(crate) async fn settle_cold_gc_inner(
        &mut self,
        done: &[u64],
        failed: Vec<(u64, String)>,
        now_ms: u64,
    ) -> Result<(), GroupEngineError> {
        let mut tx = Tx::new(&self.state);
        let mut failures = Vec::with_capacity(failed.len());
        for seq in done {
            if let Some(entry) = remove_gc_entry(&mut tx, *seq) {
                if let ColdGcTarget::Paths(paths) = &entry.target {
                    tx.touch_collected_pages(paths);
                }
            }
        }
        for (seq, error) in failed {
            if let Some(entry) = remove_gc_entry(&mut tx, seq) {
                let new_seq = tx.state.next_gc_seq;
                let retry_at = now_ms.saturating_add(self.gc_backoff_ms(seq));
                self.enqueue_gc(&mut tx, entry.target, retry_at);
                failures.push(((seq, new_seq), error, retry_at));
            }
        }
        tx.state.commit_index += 1;
        self.commit(tx).await?;
        // Memory follows once the batch is durable (persist, then apply).
        for seq in done {
            self.gc_failures.done(*seq);
        }
        let set = failures.len() as u64;
        for (seqs, error, retry_at) in failures {
            self.gc_failures.failed(seqs, error, retry_at);
        }
        crate::metrics::cold_gc_set_aside(&self.name, set, self.gc_failures.len());
        Ok(())
    }

    /// The backoff before entry `seq` is tried again after one more failure.
    fn gc_backoff_ms(&self, seq: u64) -> u64 {
        let attempts = self.gc_failures.attempts(seq) + 1;
        gc_failures::backoff_ms(self.options.cold_gc_backoff, attempts)
    }

    /// `ack_cold_gc`: removes every entry with `seq <= up_to_seq`.
    pub(crate) async fn ack_cold_gc_inner(
        &mut self,
        up_to_seq: u64,
        placement: ShardPlacement,
    ) -> Result<AckColdGcResponse, GroupEngineError> {
        let mut tx = Tx::new(&self.state);
        let mut removed = 0;
        while tx.state.gc.front().is_some_and(|e| e.seq <= up_to_seq) {
            if let Some(entry) = tx.state.gc.pop_front() {
                tx.delete_gc(entry.seq);
                removed += 1;
                // Pages this entry deleted may have named live chunks too: write them again.
                if let ColdGcTarget::Paths(paths) = &entry.target {
                    tx.touch_collected_pages(paths);
                }
            }
        }
        tx.state.commit_index += 1;
        let response = AckColdGcResponse {
            placement,
            removed,
            group_commit_index: tx.state.commit_index,
        };
        self.commit(tx).await?;
        Ok(response)
    }

    /// Bytes of `id` still held hot in segments (0 for an unknown stream).
    pub fn backlog_bytes(&self, id: &BucketStreamId) -> u64 {
        self.state
            .streams
            .get(id)
            .map_or(0, |r| GroupState::stream_hot_bytes(r))
    }

    /// `cold_hot_backlog`.
    pub(crate) fn backlog_inner(&self, id: BucketStreamId) -> ColdHotBacklog {
        let stream_hot_bytes = self
            .state
            .streams
            .get(&id)
            .map_or(0, |r| GroupState::stream_hot_bytes(r));
        ColdHotBacklog {
            stream_id: id,
            stream_hot_bytes,
            group_hot_bytes: self.state.group_hot_bytes(),
        }
    }
}

/// Removes GC entry `seq` from the queue (and its row), wherever it stands.
fn remove_gc_entry(tx: &mut Tx, seq: u64) -> Option<ColdGcEntry> {
    let at = tx.state.gc.iter().position(|e| e.seq == seq)?;
    let entry = tx.state.gc.remove(at);
    tx.delete_gc(seq);
    Some(entry)
}
