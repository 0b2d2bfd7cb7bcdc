//! The group state held in memory: every small table of the database (streams, producers,
//! buckets, usage, quotas, the cold-GC queue and the counters), loaded at open and kept equal to
//! the durable rows by writing each change through a [`super::db::Tx`].

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

use ursula_shard::BucketStreamId;
use ursula_stream::{StreamMetadata, StreamStatus};

use super::rows::{GcRow, ProducerRow, QuotaRow, StreamRow, UsageRow};

/// Everything but messages and receipts, which stay on disk.
#[derive(Debug, Clone, Default)]
pub(crate) struct GroupState {
    /// Mutating outcomes so far.
    pub commit_index: u64,
    /// Sequence the next cold-GC entry gets.
    pub next_gc_seq: u64,
    /// Buckets that exist.
    pub buckets: BTreeSet<String>,
    /// Live streams.
    pub streams: HashMap<BucketStreamId, StreamRow>,
    /// Producer heads per stream.
    pub producers: HashMap<BucketStreamId, BTreeMap<String, ProducerRow>>,
    /// Per-bucket usage.
    pub usage: BTreeMap<String, UsageRow>,
    /// Per-bucket quotas.
    pub quotas: BTreeMap<String, QuotaRow>,
    /// Cold-GC queue, oldest first.
    pub gc: VecDeque<GcRow>,
    /// Append counts of streams removed by expiry or purge: a stream recreated under the same
    /// id continues its count (only an explicit delete forgets it), as in ursula.
    pub retired_counts: HashMap<BucketStreamId, u64>,
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
        self.streams.values().map(Self::stream_hot_bytes).sum()
    }
}

/// What appends to some streams can change in memory, saved so a dry run can be undone without
/// copying the whole group (appends touch only their streams, their producers, their bucket's
/// usage, the counters and, on expiry, the GC queue and retired counts).
#[derive(Debug)]
pub(crate) struct Stash {
    streams: Vec<StreamStash>,
    usage: Vec<(String, Option<UsageRow>)>,
    shared_refs: Vec<(String, Option<u64>)>,
    commit_index: u64,
    next_gc_seq: u64,
    gc_len: usize,
}

#[derive(Debug)]
struct StreamStash {
    id: BucketStreamId,
    row: Option<StreamRow>,
    producers: Option<BTreeMap<String, ProducerRow>>,
    retired: Option<u64>,
}

impl GroupState {
    /// Saves what appends to `ids` can change.
    pub fn stash<'a>(&self, ids: impl IntoIterator<Item = &'a BucketStreamId>) -> Stash {
        let mut streams: Vec<StreamStash> = Vec::new();
        let mut usage: Vec<(String, Option<UsageRow>)> = Vec::new();
        for id in ids {
            if streams.iter().any(|s| &s.id == id) {
                continue;
            }
            streams.push(StreamStash {
                id: id.clone(),
                row: self.streams.get(id).cloned(),
                producers: self.producers.get(id).cloned(),
                retired: self.retired_counts.get(id).copied(),
            });
            if !usage.iter().any(|(b, _)| *b == id.bucket_id) {
                usage.push((id.bucket_id.clone(), self.usage.get(&id.bucket_id).copied()));
            }
        }
        let mut shared_refs: Vec<(String, Option<u64>)> = Vec::new();
        for s in &streams {
            for chunk in s
                .row
                .iter()
                .flat_map(|r| r.cold_chunks.iter())
                .filter(|c| c.shared_object)
            {
                if !shared_refs.iter().any(|(p, _)| *p == chunk.s3_path) {
                    shared_refs.push((
                        chunk.s3_path.clone(),
                        self.shared_refs.get(&chunk.s3_path).copied(),
                    ));
                }
            }
        }
        Stash {
            streams,
            usage,
            shared_refs,
            commit_index: self.commit_index,
            next_gc_seq: self.next_gc_seq,
            gc_len: self.gc.len(),
        }
    }

    /// Puts back what `stash` saved.
    pub fn restore(&mut self, stash: Stash) {
        fn put<K: Eq + std::hash::Hash, V>(map: &mut HashMap<K, V>, key: K, value: Option<V>) {
            match value {
                Some(v) => map.insert(key, v),
                None => map.remove(&key),
            };
        }
        for s in stash.streams {
            put(&mut self.producers, s.id.clone(), s.producers);
            put(&mut self.retired_counts, s.id.clone(), s.retired);
            put(&mut self.streams, s.id, s.row);
        }
        for (bucket, usage) in stash.usage {
            match usage {
                Some(u) => self.usage.insert(bucket, u),
                None => self.usage.remove(&bucket),
            };
        }
        for (path, refs) in stash.shared_refs {
            put(&mut self.shared_refs, path, refs);
        }
        self.commit_index = stash.commit_index;
        self.next_gc_seq = stash.next_gc_seq;
        self.gc.truncate(stash.gc_len);
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
