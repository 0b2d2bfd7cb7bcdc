//! The group state held in memory: every small table of the database (streams, producers,
//! buckets, usage, quotas, the cold-GC queue and the counters), loaded at open and kept equal to
//! the durable rows.
//!
//! The state is a persistent value: its tables are `imbl` collections, so a clone costs a few
//! reference counts and shares every row, and changing a clone copies only the path to what
//! changed. A command plans on a clone (the state its [`crate::group::tx::Tx`] leaves), never on
//! the engine's state, which is replaced by that clone once the commit record is durable.

pub mod integrity;
#[cfg(target_arch = "x86_64")]
mod keccak_avx;
pub mod sha3_lanes;
pub mod streams;

use imbl::shared_ptr::DefaultSharedPtr;
use imbl::{GenericHashMap, HashMap, OrdMap, OrdSet, Vector};

use ursula_shard::BucketStreamId;
use ursula_stream::{StreamMetadata, StreamStatus};

use crate::group::rows::{GcRow, ProducerRow, QuotaRow, StreamRow, UsageRow};
use crate::group::streams::Streams;

/// The hasher of the maps keyed by stream id: aHash, faster than the standard SipHash on a short
/// id, with keys drawn at random per process so callers cannot predict which ids collide.
pub(crate) type IdHasher = ahash::RandomState;

/// A persistent map keyed by stream id.
pub(crate) type ByStream<V> = GenericHashMap<BucketStreamId, V, IdHasher, DefaultSharedPtr>;

/// Everything but messages and receipts, which stay on disk.
#[derive(Debug, Clone, Default)]
pub(crate) struct GroupState {
    /// Mutating outcomes so far.
    pub commit_index: u64,
    /// Sequence the next cold-GC entry gets.
    pub next_gc_seq: u64,
    /// Buckets that exist.
    pub buckets: OrdSet<String>,
    /// Live streams.
    pub streams: Streams,
    /// Producer heads per stream.
    pub producers: ByStream<OrdMap<String, ProducerRow>>,
    /// Per-bucket usage.
    pub usage: OrdMap<String, UsageRow>,
    /// Per-bucket quotas.
    pub quotas: OrdMap<String, QuotaRow>,
    /// Cold-GC queue, oldest first.
    pub gc: Vector<GcRow>,
    /// Append counts of streams removed by expiry or purge: a stream recreated under the same
    /// id continues its count (only an explicit delete forgets it), as in ursula.
    pub retired_counts: ByStream<u64>,
    /// Live references to shared (packed) cold objects, derived from the streams' chunks.
    pub shared_refs: HashMap<String, u64>,
    /// A lower bound of every stream's expiry (`u64::MAX` when none expires): before it, the
    /// TTL sweep has nothing to find and skips its scan. Renewals only raise expiries, so only
    /// new streams lower it.
    pub expiry_floor: u64,
}

impl GroupState {
    /// Hot bytes of one stream: what its segments still hold.
    pub fn stream_hot_bytes(row: &StreamRow) -> u64 {
        row.metadata
            .tail_offset
            .saturating_sub(row.hot_start_offset.max(row.retained_offset))
            .saturating_sub(row.external_hot)
    }

    /// The first hot offset as ursula reports it: where the segments' bytes start, or the tail
    /// when nothing is hot.
    pub fn reported_hot_start(row: &StreamRow) -> u64 {
        let from = row.hot_start_offset.max(row.retained_offset);
        from.min(row.metadata.tail_offset)
    }

    /// [`Self::reported_hot_start`] of stream `id` (0 for an unknown stream).
    pub fn hot_start_of(&self, id: &BucketStreamId) -> u64 {
        self.streams
            .get(id)
            .map_or(0, |r| Self::reported_hot_start(r))
    }

    /// Recomputes the expiry lower bound from every stream.
    pub fn recompute_expiry_floor(&mut self) {
        self.expiry_floor = self
            .streams
            .values()
            .filter_map(|r| expiry_at_ms(&r.metadata))
            .min()
            .unwrap_or(u64::MAX);
    }

    /// Recounts the references to shared cold objects from every stream's chunks.
    pub fn recount_shared_refs(&mut self) {
        self.shared_refs.clear();
        for row in self.streams.values() {
            for chunk in row.cold_chunks.iter().filter(|c| c.shared_object) {
                *self.shared_refs.entry(chunk.s3_path.clone()).or_default() += 1;
            }
        }
    }

    /// Hot bytes of the whole group.
    pub fn group_hot_bytes(&self) -> u64 {
        self.streams.hot_bytes()
    }
}

/// When the stream expires, if it ever does.
pub(crate) fn expiry_at_ms(stream: &StreamMetadata) -> Option<u64> {
    if let Some(at) = stream.stream_expires_at_ms {
        return Some(at);
    }
    stream.stream_ttl_seconds.map(|ttl| {
        stream
            .last_ttl_touch_at_ms
            .saturating_add(ttl.saturating_mul(1000))
    })
}

/// True once `now_ms` reached the stream's expiry.
pub(crate) fn is_expired(stream: &StreamMetadata, now_ms: u64) -> bool {
    expiry_at_ms(stream).is_some_and(|at| now_ms >= at)
}

/// True when a read at `now_ms` should renew a sliding TTL (a quarter of it has elapsed).
pub(crate) fn renewal_due(stream: &StreamMetadata, now_ms: u64) -> bool {
    let Some(ttl) = stream.stream_ttl_seconds else {
        return false;
    };
    if stream.stream_expires_at_ms.is_some() {
        return false;
    }
    let interval = ttl.saturating_mul(1000).div_ceil(4).max(1);
    now_ms.saturating_sub(stream.last_ttl_touch_at_ms) >= interval
}

/// Renews a sliding TTL (absolute expiry is never renewed).
pub(crate) fn renew_ttl(stream: &mut StreamMetadata, now_ms: u64) {
    if stream.stream_ttl_seconds.is_some() && stream.stream_expires_at_ms.is_none() {
        stream.last_ttl_touch_at_ms = now_ms;
    }
}

/// True when the stream is closed.
pub(crate) fn is_closed(stream: &StreamMetadata) -> bool {
    stream.status == StreamStatus::Closed
}

/// Stream ids in ursula's order (bucket, then stream), affinity breaking ties.
pub(crate) fn compare_ids(a: &BucketStreamId, b: &BucketStreamId) -> std::cmp::Ordering {
    a.bucket_id
        .cmp(&b.bucket_id)
        .then_with(|| a.stream_id.cmp(&b.stream_id))
        .then_with(|| a.affinity_key.cmp(&b.affinity_key))
}
