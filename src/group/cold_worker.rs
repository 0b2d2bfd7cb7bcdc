//! The work that moves bytes between the tiers, driven by the engine's owner: flush a stream's hot
//! prefix into a zstd cold object, merge small cold objects, run the cold-GC queue, sweep
//! orphaned uploads, and delete payload segments nothing references any more. Each step commits
//! through the same state transitions the seam's methods use (`flush_cold`, `compact_cold`,
//! `ack_cold_gc`), so a crash between the object-store call and the commit loses nothing.

use std::collections::BTreeMap;

use ursula_runtime::{
    CompactColdRequest, FlushColdRequest, GroupEngineError, PlanColdFlushRequest,
};
use ursula_shard::{BucketStreamId, ShardPlacement};
use ursula_stream::{ColdChunkRef, ColdFlushCandidate, ColdGcTarget};

use super::{not_found, DiskGroupEngine, GroupError};
use crate::cold::{encode_cold_object, COLD_OBJECT_SUFFIX};

/// What a GC pass reclaimed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ColdGcReport {
    /// Queue entries acknowledged.
    pub entries: u64,
    /// Objects deleted.
    pub objects: u64,
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
