//! The work that moves bytes between the tiers, driven by the engine's owner: flush a stream's hot
//! prefix into a zstd cold object, merge small cold objects, run the cold-GC queue, sweep
//! orphaned uploads, and delete payload segments nothing references any more. Each step commits
//! through the same state transitions the seam's methods use (`flush_cold`, `compact_cold`,
//! `ack_cold_gc`), so a crash between the object-store call and the commit loses nothing.

use std::collections::BTreeMap;

use tracing::Instrument;

use ursula_runtime::{
    CompactColdRequest, FlushColdRequest, GroupEngineError, PlanColdFlushRequest,
};
use ursula_shard::{BucketStreamId, ShardPlacement};
use ursula_stream::{ColdChunkRef, ColdFlushCandidate, ColdGcEntry, ColdGcTarget};

use crate::cold::{encode_cold_object, ColdError, UploadGuard, COLD_OBJECT_SUFFIX};
use crate::group::cold_paths::{created_at_ms, is_sweepable};
use crate::group::{not_found, ColdGcFailure, DiskGroupEngine, GroupError};

/// What a GC pass reclaimed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ColdGcReport {
    /// Queue entries acknowledged.
    pub entries: u64,
    /// Objects deleted.
    pub objects: u64,
    /// Entries whose delete failed, set aside for a later pass.
    pub set_aside: u64,
}

/// A chunk compaction may merge: small, and raw (its own object, not a slice of a pack).
fn compactable(chunk: &ColdChunkRef, small_bytes: u64) -> bool {
    let len = chunk.end_offset - chunk.start_offset;
    len < small_bytes && !chunk.shared_object && chunk.object_size == len
}

/// Where objects of `id` lived before cold names were namespaced (`{stream}/chunks/`); only a
/// queued whole-stream GC entry of an older database still points there.
fn legacy_chunk_prefix(id: &BucketStreamId) -> String {
    format!("{id}/chunks/")
}

impl DiskGroupEngine {
    /// Runs one cold-tier task as a command ([`Self::begin`], then the cold-index pages its
    /// commits changed) in a `strata.cold` span, and reports its outcome.
    async fn cold_task<T: std::fmt::Debug>(
        &mut self,
        task: &'static str,
        steps: impl AsyncFnOnce(&mut Self) -> Result<T, GroupEngineError>,
    ) -> Result<T, GroupEngineError> {
        self.begin()?;
        let span = tracing::info_span!("strata.cold", group = %self.name, task);
        let result = steps(self).instrument(span).await;
        self.publish_cold_index().await;
        trace(&self.name, task, &result);
        result
    }

    /// Moves up to `max_bytes` of a stream's hot prefix to the cold tier: plans, uploads one
    /// zstd cold object and checks what the store kept ([`crate::cold::ColdStore::put_verified`]),
    /// commits it with `flush_cold`, then reclaims segments nothing references.
    /// An upload failure leaves state untouched (the object, if partly written, is unreferenced
    /// and named uniquely, so a retry never collides with it). Returns the new hot start.
    pub async fn flush_stream_cold(
        &mut self,
        id: &BucketStreamId,
        max_bytes: usize,
        placement: ShardPlacement,
    ) -> Result<Option<u64>, GroupEngineError> {
        self.cold_task("cold flush", async |e| {
            e.flush_stream_cold_steps(id, max_bytes, placement).await
        })
        .await
    }

    async fn flush_stream_cold_steps(
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
        let (chunk, _in_flight) = self.upload_tracked(&candidate).await?;
        let response = self
            .flush_cold_inner(
                FlushColdRequest {
                    stream_id: id.clone(),
                    chunk,
                },
                placement,
            )
            .await?;
        self.reclaim_hot_segments()?;
        Ok(Some(response.hot_start_offset))
    }

    /// Refuses to commit a chunk whose object does not hold exactly the bytes it references
    /// (missing, short, or another object: [`crate::cold::ColdStore::fetch_chunk`] reads it
    /// and checks its length and digest): a reference must never point at nothing or at
    /// the wrong bytes, as the commit lets the only other copy go.
    pub(crate) async fn check_object(&self, chunk: &ColdChunkRef) -> Result<(), GroupEngineError> {
        match self.cold.fetch_chunk(chunk).await {
            Ok(_) => Ok(()),
            Err(e @ (ColdError::Timeout { .. } | ColdError::Store(_))) => {
                Err(GroupError::from(e).into())
            }
            Err(e) => Err(GroupEngineError::stream(
                ursula_stream::StreamErrorCode::InvalidColdFlush,
                format!("cold object {}: {e}", chunk.s3_path),
            )),
        }
    }

    /// Uploads a candidate as a Strata cold object and returns its chunk reference
    /// (`object_size` of a Strata object is the decoded length: format/COLD_OBJECT.md). Until
    /// `flush_cold` references it, the object is protected from the orphan sweep only by the
    /// sweep's grace period ([`crate::group::GroupOptions::orphan_grace`]).
    pub async fn upload_candidate(
        &self,
        candidate: &ColdFlushCandidate,
    ) -> Result<ColdChunkRef, GroupEngineError> {
        Ok(self.upload_tracked(candidate).await?.0)
    }

    /// Uploads a candidate, keeping it registered as in flight (the sweep skips it) until the
    /// returned guard is dropped.
    async fn upload_tracked(
        &self,
        candidate: &ColdFlushCandidate,
    ) -> Result<(ColdChunkRef, UploadGuard), GroupEngineError> {
        let object = encode_cold_object(&candidate.payload, self.options.cold_zstd_level)
            .map_err(GroupError::from)?;
        let path = self.cold_ns.new_object_path(
            &candidate.stream_id,
            candidate.start_offset,
            candidate.end_offset,
        );
        let guard = self.cold.begin_upload(&path);
        self.cold
            .put_verified(&path, object)
            .await
            .map_err(GroupError::from)?;
        let chunk = ColdChunkRef {
            start_offset: candidate.start_offset,
            end_offset: candidate.end_offset,
            s3_path: path,
            object_size: candidate.payload.len() as u64,
            object_offset: 0,
            shared_object: false,
            payload_digest: candidate.payload_digest.clone(),
        };
        Ok((chunk, guard))
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
        self.cold_task("cold compaction", async |e| {
            e.compact_stream_cold_steps(id, small_bytes, max_inputs, gc_not_before_ms, placement)
                .await
        })
        .await
    }

    async fn compact_stream_cold_steps(
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
                .chunk_bytes(chunk)
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
        let (mut replacement, _in_flight) = self.upload_tracked(&candidate).await?;
        replacement.object_size = run.iter().map(|c| c.object_size).sum();
        let response = self
            .compact_cold_inner(
                CompactColdRequest {
                    stream_id: id.clone(),
                    old_chunks: run,
                    replacement,
                    gc_not_before_ms,
                },
                placement,
            )
            .await?;
        Ok(response.compacted_chunks)
    }

    /// Runs one GC pass over up to `max` due queue entries (in queue order, skipping entries
    /// not due yet): deletes each entry's objects, then acknowledges in one batch the entries
    /// it finished. An entry whose delete fails is set aside: re-queued at the back, due again
    /// after [`crate::group::GroupOptions::cold_gc_backoff`] (doubling with each failure;
    /// [`Self::cold_gc_failures`] lists them), so one object the store refuses to delete never
    /// stops the queue. A timeout ends the pass there (the store is not answering; the rest
    /// wait for the next pass). Deleting is idempotent, so a crash between delete and
    /// acknowledgement only repeats deletes.
    pub async fn run_cold_gc(
        &mut self,
        now_ms: u64,
        max: usize,
        _placement: ShardPlacement,
    ) -> Result<ColdGcReport, GroupEngineError> {
        self.cold_task("cold GC", async |e| e.run_cold_gc_steps(now_ms, max).await)
            .await
    }

    async fn run_cold_gc_steps(
        &mut self,
        now_ms: u64,
        max: usize,
    ) -> Result<ColdGcReport, GroupEngineError> {
        if self.cold.deletes_held() {
            // A backup copies what the queue still names; the entries wait for the next pass.
            return Ok(ColdGcReport::default());
        }
        let due: Vec<ColdGcEntry> = self
            .state
            .gc
            .iter()
            .filter(|e| e.not_before_ms <= now_ms)
            .take(max)
            .cloned()
            .collect();
        let mut report = ColdGcReport::default();
        let (mut done, mut failed) = (Vec::new(), Vec::new());
        for entry in due {
            match self.delete_gc_target(&entry.target).await {
                Ok(objects) => {
                    report.objects += objects;
                    report.entries += 1;
                    done.push(entry.seq);
                }
                // A backup began meanwhile: this entry and the rest wait for the next pass.
                Err(ColdError::DeletesHeld { .. }) => break,
                Err(e) => {
                    tracing::warn!(group = %self.name, seq = entry.seq, error = %e, "cold GC entry set aside");
                    let timed_out = matches!(e, ColdError::Timeout { .. });
                    failed.push((entry.seq, e.to_string()));
                    if timed_out {
                        break;
                    }
                }
            }
        }
        report.set_aside = failed.len() as u64;
        if !done.is_empty() || !failed.is_empty() {
            self.settle_cold_gc_inner(&done, failed, now_ms).await?;
        }
        Ok(report)
    }

    /// Cold-GC entries set aside after failed deletes (since this engine opened), with their
    /// attempts, next try and last error.
    pub fn cold_gc_failures(&self) -> Vec<ColdGcFailure> {
        self.gc_failures.list()
    }

    /// Deletes the objects of one GC queue entry; returns how many.
    async fn delete_gc_target(&self, target: &ColdGcTarget) -> Result<u64, ColdError> {
        let mut deleted = 0;
        match target {
            ColdGcTarget::Stream(id) => {
                // Only an older database queues whole streams (new ones queue exact paths). A
                // stream recreated under the same id owns the prefix again: only delete Strata
                // objects it does not reference.
                let live: Vec<String> = self
                    .state
                    .streams
                    .get(id)
                    .map(|r| r.cold_chunks.iter().map(|c| c.s3_path.clone()).collect())
                    .unwrap_or_default();
                for path in self.cold.list(&legacy_chunk_prefix(id)).await? {
                    if path.ends_with(COLD_OBJECT_SUFFIX) && !live.contains(&path) {
                        self.cold.delete(&path).await?;
                        deleted += 1;
                    }
                }
            }
            ColdGcTarget::Paths(paths) => {
                for path in paths {
                    if self.cold_ns.is_foreign(path) {
                        // Named by another store or group (this group's state came from a
                        // backup restored as a new store): theirs to delete, not ours.
                        tracing::warn!(path = %path, "cold GC leaves an object another store named");
                        continue;
                    }
                    self.cold.delete(path).await?;
                    deleted += 1;
                }
            }
        }
        Ok(deleted)
    }

    /// Deletes this group's orphaned cold objects: Strata objects (and leftover temporary files
    /// of interrupted uploads) in the group's namespace that no chunk references and no GC
    /// entry holds, named more than [`crate::group::GroupOptions::orphan_grace`] ago, and not being
    /// uploaded through this cold store. The grace period fences uploads in flight elsewhere (a
    /// runtime that uploads, then calls `flush_cold` later). Returns objects deleted.
    pub async fn sweep_orphan_objects(&mut self) -> Result<u64, GroupEngineError> {
        self.cold_task("orphan sweep", async |e| {
            e.sweep_orphan_objects_steps().await
        })
        .await
    }

    async fn sweep_orphan_objects_steps(&mut self) -> Result<u64, GroupEngineError> {
        if self.cold.deletes_held() {
            return Ok(0);
        }
        let now = u64::try_from(crate::now_ms()).unwrap_or(0);
        let grace = u64::try_from(self.options.orphan_grace.as_millis()).unwrap_or(u64::MAX);
        let referenced: std::collections::HashSet<&str> = self
            .state
            .streams
            .values()
            .flat_map(|row| row.cold_chunks.iter().map(|c| c.s3_path.as_str()))
            .chain(self.state.gc.iter().flat_map(|e| match &e.target {
                ColdGcTarget::Paths(paths) => paths.iter().map(String::as_str).collect(),
                ColdGcTarget::Stream(_) => Vec::new(),
            }))
            .collect();
        let mut doomed = Vec::new();
        for path in self
            .cold
            .list(self.cold_ns.root())
            .await
            .map_err(GroupError::from)?
        {
            let young = created_at_ms(&path).is_none_or(|at| now.saturating_sub(at) < grace);
            if is_sweepable(&path)
                && !young
                && !referenced.contains(path.as_str())
                && !self.cold.is_uploading(&path)
            {
                doomed.push(path);
            }
        }
        let mut deleted = 0;
        for path in &doomed {
            match self.cold.delete(path).await {
                Ok(()) => deleted += 1,
                // A backup began meanwhile: the rest waits for the next sweep.
                Err(ColdError::DeletesHeld { .. }) => break,
                Err(e) => return Err(GroupError::from(e).into()),
            }
        }
        Ok(deleted)
    }

    /// Deletes sealed payload segments that no hot message references any more (after cold
    /// flushes, retention and deletes). Returns the bytes freed.
    pub fn reclaim_hot_segments(&self) -> Result<u64, GroupEngineError> {
        crate::blocking::blocking(|| self.reclaim_steps())
    }

    fn reclaim_steps(&self) -> Result<u64, GroupEngineError> {
        let db = self.db()?;
        let mut lowest: BTreeMap<u32, u64> = BTreeMap::new();
        for (id, row) in self.state.streams.iter() {
            let from = row.hot_start_offset.max(row.retained_offset);
            if from >= row.metadata.tail_offset {
                continue;
            }
            if let Some((_, m)) = db.first_message_from(id, from)? {
                let entry = lowest.entry(row.partition).or_insert(m.log_offset);
                *entry = (*entry).min(m.log_offset);
            }
        }
        // Commit records from the replay position on may be the only durable copy of their
        // changes until RocksDB flushes: read the position, flush, and keep them.
        let durable = db.replay_from()?;
        db.flush()?;
        let commits = lowest
            .entry(crate::group::commit_record::COMMIT_PARTITION)
            .or_insert(durable);
        *commits = (*commits).min(durable);
        Ok(self.payloads.reclaim(&lowest)?)
    }
}

/// Reports the outcome of a cold-tier task of `group` (an event; a warning when it failed).
fn trace<T: std::fmt::Debug>(
    group: &str,
    task: &'static str,
    result: &Result<T, GroupEngineError>,
) {
    crate::metrics::cold_task(group, task, result.is_ok());
    match result {
        Ok(outcome) => tracing::info!(group, task, ?outcome, "cold-tier task done"),
        Err(error) => tracing::warn!(group, task, %error, "cold-tier task failed"),
    }
}
