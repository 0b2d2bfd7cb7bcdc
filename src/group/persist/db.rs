//! One group's view of the state database: its rows under its key prefix in the store's
//! RocksDB ([`super::state_db`]), one atomic `WriteBatch` per command built from its commit
//! record and written without RocksDB's WAL, and the full load at open (format/GROUP_STATE.md).

use std::sync::{Arc, RwLock};

use bytes::Bytes;

use rocksdb::{Direction, IteratorMode, WriteBatch};
use ursula_shard::BucketStreamId;

use super::mirror::{FamilyMirror, Mirrors};
use super::state_db::StateDb;
use crate::group::commit_record::{self, CommitRecord, Op};
use crate::group::keys::{decode_producer_suffix, decode_stream_key, prefix_end, stream_key};
use crate::group::persist::stream_row::{decode_stream_row, encode_stream_row};
use crate::group::rows::{
    decode_row, encode_row, GcRow, MessageRow, ProducerRow, QuotaRow, ReceiptRow, StreamRow,
    UsageRow,
};
use crate::group::state::{ByStream, GroupState};
use crate::group::streams::Streams;
use crate::group::GroupError;

/// Version of the group-state layout; stored under `meta/format_version`. Versions 1 (checkpoint
/// payloads inside stream rows), 2 (every batch synced, no replay position) and 3 (JSON stream
/// rows only; version 4 writes binary ones and reads both) are upgraded at open.
pub const GROUP_STATE_VERSION: u64 = 4;

pub(crate) const CF_META: &str = "meta";
pub(crate) const CF_BUCKETS: &str = "buckets";
pub(crate) const CF_STREAMS: &str = "streams";
pub(crate) const CF_MESSAGES: &str = "messages";
pub(crate) const CF_PRODUCERS: &str = "producers";
pub(crate) const CF_RECEIPTS: &str = "receipts";
pub(crate) const CF_USAGE: &str = "usage";
pub(crate) const CF_QUOTAS: &str = "quotas";
pub(crate) const CF_COLD_GC: &str = "cold_gc";
pub(crate) const CF_RETIRED_COUNTS: &str = "retired_counts";
pub(crate) const CF_COLD_CHUNKS: &str = "cold_chunks";
pub(crate) const CF_RECORDS: &str = "records";
pub(crate) const CF_RECORD_OFFSETS: &str = "record_offsets";
pub(crate) const CF_EXTERNAL: &str = "external";
pub(crate) const CF_SNAPSHOTS: &str = "snapshots";

/// Record bytes kept for one stream row put (a binary row with its key is ~200 bytes): a
/// guess that spares growing the record by doubling, never a limit.
const ROW_RESERVE: usize = 256;
/// Record bytes kept beside a batch's message rows for the rows a commit writes once per
/// command (stream, usage, counters), by the same guess.
const ROWS_RESERVE: usize = 4 * ROW_RESERVE;

/// Index of [`CF_MESSAGES`] in [`COLUMN_FAMILIES`] (a commit record's `cf` byte).
const MESSAGES_CF_INDEX: u8 = cf_position(CF_MESSAGES);
/// Index of the `streams` family in commit records.
pub(crate) const STREAMS_CF_INDEX: u8 = cf_position(CF_STREAMS);
/// Index of [`CF_EXTERNAL`] in [`COLUMN_FAMILIES`].
const EXTERNAL_CF_INDEX: u8 = cf_position(CF_EXTERNAL);

/// Where `name` is in [`COLUMN_FAMILIES`]: the `cf` byte of a commit record (in a const, a
/// missing name fails the build; at run time it panics: callers pass the `CF_*` constants).
const fn cf_position(name: &str) -> u8 {
    let mut i = 0;
    while i < COLUMN_FAMILIES.len() {
        let (a, b) = (COLUMN_FAMILIES[i].as_bytes(), name.as_bytes());
        if a.len() == b.len() {
            let mut j = 0;
            while j < a.len() && a[j] == b[j] {
                j += 1;
            }
            if j == a.len() {
                return i as u8;
            }
        }
        i += 1;
    }
    panic!("not a column family")
}

/// Every column family, in creation order.
pub(crate) const COLUMN_FAMILIES: [&str; 15] = [
    CF_META,
    CF_BUCKETS,
    CF_STREAMS,
    CF_MESSAGES,
    CF_PRODUCERS,
    CF_RECEIPTS,
    CF_USAGE,
    CF_QUOTAS,
    CF_COLD_GC,
    CF_RETIRED_COUNTS,
    CF_COLD_CHUNKS,
    CF_RECORDS,
    CF_RECORD_OFFSETS,
    CF_EXTERNAL,
    CF_SNAPSHOTS,
];

const META_FORMAT_VERSION: &[u8] = b"format_version";
const META_COMMIT_INDEX: &[u8] = b"commit_index";
const META_NEXT_GC_SEQ: &[u8] = b"next_cold_gc_seq";
const META_REPLAY_FROM: &[u8] = b"replay_from";

/// One group's rows in a state database.
pub(crate) struct GroupDb {
    /// The database (the store's, shared with every group and the backup).
    state: Arc<StateDb>,
    /// The group's key prefix ([`super::state_db::group_prefix`]; empty in a database of the
    /// earlier per-group layout, which holds one group).
    prefix: Vec<u8>,
    /// The `messages` and `external` families in memory (see [`Mirrors`]).
    mirrors: RwLock<Mirrors>,
    /// True when the shared database held no rows of the group at open.
    fresh: bool,
}

/// The rows one command writes (the persisting half of a [`crate::group::tx::Tx`]): a
/// [`CommitRecord`], made durable in the payload log and then applied by [`GroupDb::apply`].
#[derive(Default)]
pub(crate) struct Writes {
    record: CommitRecord,
    error: Option<GroupError>,
    dirty_streams: Vec<BucketStreamId>,
    dirty_usage: Vec<String>,
    /// A key being built (message keys: one per append, not one allocation each).
    key: Vec<u8>,
}

impl GroupDb {
    /// The rows under `prefix` of `state`, checking their format version. `log_end` is the
    /// payload log's next commit-record offset: where replay starts for a group that records
    /// none (version 2, whose every batch was synced). A group the shared database has no rows
    /// of is new: it replays its payload log from the start.
    pub fn open(state: Arc<StateDb>, prefix: Vec<u8>, log_end: u64) -> Result<Self, GroupError> {
        let shared = !prefix.is_empty();
        let mut this = Self {
            state,
            prefix,
            mirrors: RwLock::default(),
            fresh: false,
        };
        this.load_mirrors()?;
        let version = this.get(CF_META, META_FORMAT_VERSION)?;
        let version = version
            .as_deref()
            .map(|v| be_u64(v, "format version"))
            .transpose()?;
        match version {
            Some(GROUP_STATE_VERSION) => {}
            None if shared => {
                this.mark_new()?;
                this.fresh = true;
            }
            None | Some(1) | Some(2) => this.upgrade(version, log_end)?,
            Some(3) => this.upgrade(version, this.replay_from()?)?,
            Some(v) => {
                return Err(GroupError::Corrupt(format!(
                    "group state format version {v}, this build reads {GROUP_STATE_VERSION}"
                )))
            }
        }
        Ok(this)
    }

    /// Writes a new group's format version, replaying from the payload log's start. Not
    /// flushed: a crash before the next flush leaves the group without rows, new again.
    fn mark_new(&self) -> Result<(), GroupError> {
        let mut tx = Writes::default();
        tx.put_raw(
            CF_META,
            META_FORMAT_VERSION,
            &GROUP_STATE_VERSION.to_be_bytes(),
        );
        self.apply(&[tx.take_record()?.as_ref()], 0)
    }

    /// True when the shared database held no rows of the group at open (a new group).
    pub fn is_fresh(&self) -> bool {
        self.fresh
    }

    /// `key` under the group's prefix.
    fn key(&self, key: &[u8]) -> Vec<u8> {
        let mut full = Vec::with_capacity(self.prefix.len() + key.len());
        full.extend_from_slice(&self.prefix);
        full.extend_from_slice(key);
        full
    }

    /// Brings a new or older database to the current version in one durable batch: version 1
    /// checkpoint payloads move from stream rows into the `snapshots` family (the rows are
    /// rewritten binary), and the replay position becomes `replay_from` (for versions 1 and 2,
    /// the log's end: nothing before it is a commit record to apply; version 3 keeps its own).
    /// JSON stream rows of version 3 stay until their stream next changes.
    fn upgrade(&self, from: Option<u64>, replay_from: u64) -> Result<(), GroupError> {
        let mut tx = Writes::default();
        if from == Some(1) {
            self.scan(CF_STREAMS, &[], &[], |k, v| {
                let row: StreamRow = decode_stream_row(v)?;
                if let Some(snapshot) = &row.visible_snapshot {
                    tx.put_raw(CF_SNAPSHOTS, k, &snapshot.payload);
                }
                tx.put_stream_row(k, &row);
                Ok(true)
            })?;
        }
        tx.put_raw(
            CF_META,
            META_FORMAT_VERSION,
            &GROUP_STATE_VERSION.to_be_bytes(),
        );
        if let Some(e) = tx.error {
            return Err(e);
        }
        self.apply(&[tx.record.as_bytes()], replay_from)?;
        self.flush()
    }

    fn cf(&self, name: &str) -> Result<&rocksdb::ColumnFamily, GroupError> {
        self.state.cf(name)
    }

    /// Reads one key of the group.
    pub fn get(&self, cf: &str, key: &[u8]) -> Result<Option<Vec<u8>>, GroupError> {
        Ok(self.state.db().get_cf(self.cf(cf)?, self.key(key))?)
    }

    /// Applies the changes of commit records (in order: a later put of a key wins), and `next`
    /// as the replay position, in one atomic batch without RocksDB's write-ahead log: the
    /// commit record in the payload log is what makes them durable (format/GROUP_STATE.md,
    /// "Commit protocol"; a command's digest rewrites follow its record, "Deferred digests").
    pub fn apply(&self, records: &[&[u8]], next: u64) -> Result<(), GroupError> {
        // The batch holds about the records' bytes (their ops, re-framed): reserved once rather
        // than grown by doubling while the ops are added.
        let bytes: usize = records.iter().map(|r| r.len()).sum();
        let mut batch = WriteBatch::with_capacity_bytes(bytes + 64);
        // Each family's handle looked up once per record, not once per op.
        let mut handles = [None; COLUMN_FAMILIES.len()];
        let mut handle = |cf: u8| match handles.get(usize::from(cf)).copied().flatten() {
            Some(found) => Ok(found),
            None => {
                let found = self.cf_at(cf)?;
                handles[usize::from(cf)] = Some(found);
                Ok::<_, GroupError>(found)
            }
        };
        // Keys under the group's prefix, built in one buffer (the batch copies them).
        let (mut key, mut end) = (self.prefix.clone(), self.prefix.clone());
        let plen = self.prefix.len();
        for record in records {
            commit_record::decode(record, |op| {
                match op {
                    Op::Put { cf, key: k, value } => {
                        key.truncate(plen);
                        key.extend_from_slice(k);
                        batch.put_cf(handle(cf)?, &key, value)
                    }
                    Op::Delete { cf, key: k } => {
                        key.truncate(plen);
                        key.extend_from_slice(k);
                        batch.delete_cf(handle(cf)?, &key)
                    }
                    Op::DeleteRange { cf, from, to } => {
                        key.truncate(plen);
                        key.extend_from_slice(from);
                        end.truncate(plen);
                        end.extend_from_slice(to);
                        batch.delete_range_cf(handle(cf)?, &key, &end)
                    }
                    Op::Requires { .. } | Op::Digest { .. } => {}
                }
                Ok(())
            })?;
        }
        batch.put_cf(
            self.cf(CF_META)?,
            self.key(META_REPLAY_FROM),
            next.to_be_bytes(),
        );
        self.state.write(batch)?;
        // Persisted (as far as a commit record's changes ever are): now the memory mirrors,
        // from a second pass over the records (decoded once already, so it cannot fail):
        // collecting the ops in the first pass grew a vector by doubling, 14% of the apply
        // thread's samples in a perf profile of `append_batch` commands of 32 appends (the
        // reallocations waited on the allocator's lock).
        let mut mirrors = self.lock_mirrors_mut();
        for record in records {
            commit_record::decode(record, |op| {
                match op.cf() {
                    MESSAGES_CF_INDEX => mirrors.messages.apply(&op),
                    EXTERNAL_CF_INDEX => mirrors.external.apply(&op),
                    _ => {}
                }
                Ok(())
            })?;
        }
        Ok(())
    }

    /// Loads the mirrored families into memory (at open).
    fn load_mirrors(&self) -> Result<(), GroupError> {
        let mut mirrors = self.lock_mirrors_mut();
        let Mirrors { messages, external } = &mut *mirrors;
        for (cf, mirror) in [(CF_MESSAGES, messages), (CF_EXTERNAL, external)] {
            self.scan(cf, &[], &[], |k, v| {
                mirror.load(k, v)?;
                Ok(true)
            })?;
        }
        Ok(())
    }

    /// Compares the mirrored families with RocksDB's; the first difference, if any.
    pub fn check_mirrors(&self) -> Result<(), String> {
        let mirrors = self.lock_mirrors();
        for (cf, mirror) in [
            (CF_MESSAGES, &mirrors.messages),
            (CF_EXTERNAL, &mirrors.external),
        ] {
            self.check_mirror(cf, mirror)?;
        }
        Ok(())
    }

    fn check_mirror(&self, cf: &str, mirror: &FamilyMirror) -> Result<(), String> {
        let mut on_disk = Vec::new();
        self.scan(cf, &[], &[], |k, v| {
            on_disk.push((k.to_vec(), v.to_vec()));
            Ok(true)
        })
        .map_err(|e| e.to_string())?;
        let in_memory: Vec<(Vec<u8>, &[u8])> = mirror.iter().collect();
        if in_memory.len() != on_disk.len() {
            return Err(format!(
                "{} {cf} rows in memory, {} in RocksDB",
                in_memory.len(),
                on_disk.len()
            ));
        }
        match in_memory
            .iter()
            .zip(&on_disk)
            .find(|((mk, mv), (dk, dv))| mk != dk || *mv != dv.as_slice())
        {
            Some(((key, _), _)) => Err(format!("{cf} row {key:02x?} differs from RocksDB")),
            None => Ok(()),
        }
    }

    fn lock_mirrors(&self) -> std::sync::RwLockReadGuard<'_, Mirrors> {
        self.mirrors.read().unwrap_or_else(|p| p.into_inner())
    }

    fn lock_mirrors_mut(&self) -> std::sync::RwLockWriteGuard<'_, Mirrors> {
        self.mirrors.write().unwrap_or_else(|p| p.into_inner())
    }

    /// The payload log offset of the first commit record not yet applied.
    pub fn replay_from(&self) -> Result<u64, GroupError> {
        self.meta_u64(META_REPLAY_FROM)
    }

    fn cf_at(&self, index: u8) -> Result<&rocksdb::ColumnFamily, GroupError> {
        let name = COLUMN_FAMILIES
            .get(usize::from(index))
            .ok_or_else(|| GroupError::Corrupt(format!("column family index {index}")))?;
        self.cf(name)
    }

    /// Calls `f` with every `(key, value)` of `cf` whose key starts with `prefix`, from `from`
    /// (a full key at or after the prefix) on, until `f` returns false.
    pub fn scan(
        &self,
        cf: &str,
        prefix: &[u8],
        from: &[u8],
        mut f: impl FnMut(&[u8], &[u8]) -> Result<bool, GroupError>,
    ) -> Result<(), GroupError> {
        let (start, prefix) = (self.key(from), self.key(prefix));
        let iter = self
            .state
            .db()
            .iterator_cf(self.cf(cf)?, IteratorMode::From(&start, Direction::Forward));
        for item in iter {
            let (key, value) = item?;
            if !key.starts_with(&prefix) || !f(&key[self.prefix.len()..], &value)? {
                break;
            }
        }
        Ok(())
    }

    /// The message row whose start is the greatest at or below `offset`, as `(start, row)`.
    pub fn message_at_or_before(
        &self,
        id: &BucketStreamId,
        offset: u64,
    ) -> Result<Option<(u64, MessageRow)>, GroupError> {
        let stream = stream_key(id);
        let mirrors = self.lock_mirrors();
        mirrors
            .messages
            .at_or_before(&stream, offset)
            .map(|(start, v)| Ok((start, MessageRow::decode(v)?)))
            .transpose()
    }

    /// The message rows of the stream with key `stream` that hold bytes of `[from, to)`, in
    /// offset order.
    pub fn messages_covering(
        &self,
        stream: &[u8],
        from: u64,
        to: u64,
    ) -> Result<Vec<(u64, MessageRow)>, GroupError> {
        // Room for a 64 KiB read of 1 KiB appends without growing.
        let mut out = Vec::with_capacity(64);
        self.messages_from(stream, from, |start, row| {
            let keep = start < to;
            if keep {
                out.push((start, row));
            }
            keep
        })?;
        Ok(out)
    }

    /// The first message row of `id` that holds a byte at or after `from`.
    pub fn first_message_from(
        &self,
        id: &BucketStreamId,
        from: u64,
    ) -> Result<Option<(u64, MessageRow)>, GroupError> {
        let mut first = None;
        self.messages_from(&stream_key(id), from, |start, row| {
            first = Some((start, row));
            false
        })?;
        Ok(first)
    }

    /// Calls `f` with the message rows of the stream with key `stream` that end after `from`, in
    /// offset order, until it returns false: the row at or before `from`, then forward (from
    /// memory).
    fn messages_from(
        &self,
        stream: &[u8],
        from: u64,
        mut f: impl FnMut(u64, MessageRow) -> bool,
    ) -> Result<(), GroupError> {
        let mirrors = self.lock_mirrors();
        for (start, value) in mirrors.messages.covering(stream, from) {
            let row = MessageRow::decode(value)?;
            if row.end_offset > from && !f(start, row) {
                break;
            }
        }
        Ok(())
    }

    /// Message rows of `id` with start in `[from, to)`, in offset order.
    pub fn messages(
        &self,
        id: &BucketStreamId,
        from: u64,
        to: u64,
    ) -> Result<Vec<(u64, MessageRow)>, GroupError> {
        let stream = stream_key(id);
        let mirrors = self.lock_mirrors();
        let mut out = Vec::new();
        for (start, value) in mirrors.messages.from(&stream, from) {
            if start >= to {
                break;
            }
            out.push((start, MessageRow::decode(value)?));
        }
        Ok(out)
    }

    /// Start offset of JSON record `ordinal` of `id`.
    pub fn record_start(
        &self,
        id: &BucketStreamId,
        ordinal: u64,
    ) -> Result<Option<u64>, GroupError> {
        self.get(CF_RECORDS, &crate::group::keys::message_key(id, ordinal))?
            .map(|v| be_u64(&v, "record row"))
            .transpose()
    }

    /// Ordinal of the JSON record of `id` that starts at `offset`.
    pub fn record_at(&self, id: &BucketStreamId, offset: u64) -> Result<Option<u64>, GroupError> {
        self.get(
            CF_RECORD_OFFSETS,
            &crate::group::keys::message_key(id, offset),
        )?
        .map(|v| be_u64(&v, "record offset row"))
        .transpose()
    }

    /// Start offsets of the JSON records of `id` from ordinal `from`, in order.
    pub fn record_starts(&self, id: &BucketStreamId, from: u64) -> Result<Vec<u64>, GroupError> {
        let prefix = stream_key(id);
        let mut out = Vec::new();
        self.scan(
            CF_RECORDS,
            &prefix,
            &crate::group::keys::message_key(id, from),
            |_, v| {
                out.push(be_u64(v, "record row")?);
                Ok(true)
            },
        )?;
        Ok(out)
    }

    /// External payload segments of `id` overlapping `[from, to)`, in offset order.
    pub fn externals(
        &self,
        id: &BucketStreamId,
        from: u64,
        to: u64,
    ) -> Result<Vec<ursula_stream::ObjectPayloadRef>, GroupError> {
        let stream = stream_key(id);
        let mut out: Vec<ursula_stream::ObjectPayloadRef> = Vec::new();
        let mirrors = self.lock_mirrors();
        for (start, v) in mirrors.external.covering(&stream, from) {
            let segment: ursula_stream::ObjectPayloadRef = decode_row("external", v)?;
            if start < from {
                // The segment starting before `from` counts if it reaches past it.
                if segment.end_offset > from {
                    out.push(segment);
                }
                continue;
            }
            if segment.start_offset >= to {
                break;
            }
            out.push(segment);
        }
        Ok(out)
    }

    /// The receipt of `seq` for a producer, if kept.
    pub fn receipt(
        &self,
        id: &BucketStreamId,
        producer: &str,
        seq: u64,
    ) -> Result<Option<ReceiptRow>, GroupError> {
        self.get(
            CF_RECEIPTS,
            &crate::group::keys::receipt_key(id, producer, seq),
        )?
        .map(|v| decode_row("receipt", &v))
        .transpose()
    }

    /// Every receipt of a producer, in sequence order.
    pub fn receipts(
        &self,
        id: &BucketStreamId,
        producer: &str,
    ) -> Result<Vec<(u64, ReceiptRow)>, GroupError> {
        let prefix = crate::group::keys::producer_key(id, producer);
        let mut out = Vec::new();
        self.scan(CF_RECEIPTS, &prefix, &prefix, |k, v| {
            let seq = k
                .get(prefix.len()..)
                .and_then(|s| <[u8; 8]>::try_from(s).ok())
                .map(u64::from_be_bytes)
                .ok_or_else(|| GroupError::Corrupt("receipt key".into()))?;
            out.push((seq, decode_row("receipt", v)?));
            Ok(true)
        })?;
        Ok(out)
    }

    /// Loads every small table into memory (messages and receipts stay on disk).
    pub fn load(&self) -> Result<GroupState, GroupError> {
        let mut state = GroupState {
            commit_index: self.meta_u64(META_COMMIT_INDEX)?,
            next_gc_seq: self.meta_u64(META_NEXT_GC_SEQ)?,
            expiry_floor: u64::MAX,
            ..GroupState::default()
        };
        let mut rows: ByStream<StreamRow> = ByStream::default();
        self.scan(CF_BUCKETS, &[], &[], |k, _| {
            let bucket = String::from_utf8(k.to_vec())
                .map_err(|_| GroupError::Corrupt("bucket key".into()))?;
            state.buckets.insert(bucket);
            Ok(true)
        })?;
        self.scan(CF_STREAMS, &[], &[], |k, v| {
            let (id, _) =
                decode_stream_key(k).ok_or_else(|| GroupError::Corrupt("stream key".into()))?;
            rows.insert(id, decode_stream_row(v)?);
            Ok(true)
        })?;
        self.scan(CF_SNAPSHOTS, &[], &[], |k, v| {
            let (id, _) =
                decode_stream_key(k).ok_or_else(|| GroupError::Corrupt("snapshot key".into()))?;
            let snapshot = rows
                .get_mut(&id)
                .and_then(|row| row.visible_snapshot.as_mut())
                .ok_or_else(|| {
                    GroupError::Corrupt(format!("checkpoint of missing stream '{id}'"))
                })?;
            snapshot.payload = v.to_vec();
            Ok(true)
        })?;
        self.scan(CF_COLD_CHUNKS, &[], &[], |k, v| {
            let (id, _) =
                decode_stream_key(k).ok_or_else(|| GroupError::Corrupt("cold chunk key".into()))?;
            let chunk: ursula_stream::ColdChunkRef = decode_row("cold chunk", v)?;
            let row = rows.get_mut(&id).ok_or_else(|| {
                GroupError::Corrupt(format!("cold chunk of missing stream '{id}'"))
            })?;
            Arc::make_mut(&mut row.cold_chunks).push(chunk);
            Ok(true)
        })?;
        state.streams = Streams::from_rows(rows);
        self.scan(CF_PRODUCERS, &[], &[], |k, v| {
            let (id, rest) =
                decode_stream_key(k).ok_or_else(|| GroupError::Corrupt("producer key".into()))?;
            let producer = decode_producer_suffix(rest)
                .ok_or_else(|| GroupError::Corrupt("producer key".into()))?;
            let row: ProducerRow = decode_row("producer", v)?;
            state.producers.entry(id).or_default().insert(producer, row);
            Ok(true)
        })?;
        state.usage = self.bucket_rows::<UsageRow>(CF_USAGE, "usage")?;
        state.quotas = self.bucket_rows::<QuotaRow>(CF_QUOTAS, "quota")?;
        self.scan(CF_RETIRED_COUNTS, &[], &[], |k, v| {
            let (id, _) = decode_stream_key(k)
                .ok_or_else(|| GroupError::Corrupt("retired count key".into()))?;
            let count = <[u8; 8]>::try_from(v)
                .map(u64::from_be_bytes)
                .map_err(|_| GroupError::Corrupt("retired count".into()))?;
            state.retired_counts.insert(id, count);
            Ok(true)
        })?;
        self.scan(CF_COLD_GC, &[], &[], |_, v| {
            state.gc.push_back(decode_row::<GcRow>("cold gc", v)?);
            Ok(true)
        })?;
        state.recount_shared_refs();
        state.recompute_expiry_floor();
        Ok(state)
    }

    /// Every JSON row of a family keyed by bucket id.
    fn bucket_rows<T: serde::de::DeserializeOwned + Clone>(
        &self,
        cf: &str,
        what: &str,
    ) -> Result<imbl::OrdMap<String, T>, GroupError> {
        let mut rows = imbl::OrdMap::new();
        self.scan(cf, &[], &[], |k, v| {
            rows.insert(
                String::from_utf8_lossy(k).into_owned(),
                decode_row(what, v)?,
            );
            Ok(true)
        })?;
        Ok(rows)
    }

    fn meta_u64(&self, key: &[u8]) -> Result<u64, GroupError> {
        match self.get(CF_META, key)? {
            None => Ok(0),
            Some(v) => <[u8; 8]>::try_from(v.as_slice())
                .map(u64::from_be_bytes)
                .map_err(|_| GroupError::Corrupt("meta value".into())),
        }
    }

    /// Makes every applied batch durable: one atomic flush of the state database (every
    /// group's). Until it returns, the commit records since the last flush are the only
    /// durable copy.
    pub fn flush(&self) -> Result<(), GroupError> {
        self.state.flush()
    }
}

fn be_u64(bytes: &[u8], what: &str) -> Result<u64, GroupError> {
    <[u8; 8]>::try_from(bytes)
        .map(u64::from_be_bytes)
        .map_err(|_| GroupError::Corrupt(format!("{what} of {} bytes", bytes.len())))
}

impl Writes {
    /// Adds an op that names payload records (a requirement or a deferred digest).
    pub fn push_op(&mut self, op: Op<'_>) {
        debug_assert!(
            op.cf() == u8::MAX,
            "rows are written through the typed puts"
        );
        self.record.push(op);
    }

    fn put_raw(&mut self, cf: &str, key: &[u8], value: &[u8]) {
        self.record.push(Op::Put {
            cf: cf_position(cf),
            key,
            value,
        });
    }

    fn delete_raw(&mut self, cf: &str, key: &[u8]) {
        self.record.push(Op::Delete {
            cf: cf_position(cf),
            key,
        });
    }

    fn delete_range(&mut self, cf: &str, from: impl AsRef<[u8]>, to: impl AsRef<[u8]>) {
        self.record.push(Op::DeleteRange {
            cf: cf_position(cf),
            from: from.as_ref(),
            to: to.as_ref(),
        });
    }

    fn delete_prefix(&mut self, cf: &str, prefix: &[u8]) {
        self.delete_range(cf, prefix, prefix_end(prefix));
    }

    /// Writes a binary stream row under `key`.
    fn put_stream_row(&mut self, key: &[u8], row: &StreamRow) {
        match encode_stream_row(row) {
            Ok(value) => self.put_raw(CF_STREAMS, key, &value),
            Err(e) => self.error = Some(e),
        }
    }

    fn put_json<T: serde::Serialize>(&mut self, cf: &str, key: &[u8], row: &T) {
        match encode_row(row) {
            Ok(value) => self.put_raw(cf, key, &value),
            Err(e) => self.error = Some(e),
        }
    }

    /// Records the commit index and the next cold-GC sequence.
    pub fn put_counters(&mut self, state: &GroupState) {
        self.put_raw(
            CF_META,
            META_COMMIT_INDEX,
            &state.commit_index.to_be_bytes(),
        );
        self.put_raw(CF_META, META_NEXT_GC_SEQ, &state.next_gc_seq.to_be_bytes());
    }

    /// Writes a bucket marker.
    pub fn put_bucket(&mut self, bucket: &str) {
        self.put_raw(CF_BUCKETS, bucket.as_bytes(), &[]);
    }

    /// Removes a bucket marker.
    pub fn delete_bucket(&mut self, bucket: &str) {
        self.delete_raw(CF_BUCKETS, bucket.as_bytes());
    }

    /// Writes a stream row.
    pub fn put_stream(&mut self, id: &BucketStreamId, row: &StreamRow) {
        self.put_stream_row(&stream_key(id), row);
        if row.snapshot_changed {
            match &row.visible_snapshot {
                Some(s) => self.put_raw(CF_SNAPSHOTS, &stream_key(id), &s.payload),
                None => self.delete_raw(CF_SNAPSHOTS, &stream_key(id)),
            }
        }
    }

    /// Removes a stream row with every message, producer and receipt of the stream.
    pub fn delete_stream(&mut self, id: &BucketStreamId) {
        let key = stream_key(id);
        self.delete_raw(CF_STREAMS, &key);
        self.delete_raw(CF_SNAPSHOTS, &key);
        for cf in [
            CF_MESSAGES,
            CF_PRODUCERS,
            CF_RECEIPTS,
            CF_COLD_CHUNKS,
            CF_RECORDS,
            CF_RECORD_OFFSETS,
            CF_EXTERNAL,
        ] {
            self.delete_prefix(cf, &key);
        }
    }

    /// Writes one cold chunk row (key: stream key ++ start offset).
    pub fn put_chunk(&mut self, id: &BucketStreamId, chunk: &ursula_stream::ColdChunkRef) {
        self.put_json(
            CF_COLD_CHUNKS,
            &crate::group::keys::message_key(id, chunk.start_offset),
            chunk,
        );
    }

    /// Writes JSON record `ordinal` of `id`, starting at `start` (both directions of the index).
    pub fn put_record(&mut self, id: &BucketStreamId, ordinal: u64, start: u64) {
        self.put_raw(
            CF_RECORDS,
            &crate::group::keys::message_key(id, ordinal),
            &start.to_be_bytes(),
        );
        self.put_raw(
            CF_RECORD_OFFSETS,
            &crate::group::keys::message_key(id, start),
            &ordinal.to_be_bytes(),
        );
    }

    /// Removes the JSON records of `id` with ordinals in `[first, end)` and starts below `below`.
    pub fn delete_records(&mut self, id: &BucketStreamId, first: u64, end: u64, below: u64) {
        for (cf, from, to) in [(CF_RECORDS, first, end), (CF_RECORD_OFFSETS, 0, below)] {
            self.delete_range(
                cf,
                crate::group::keys::message_key(id, from),
                crate::group::keys::message_key(id, to),
            );
        }
    }

    /// Writes an external payload segment of `id`.
    pub fn put_external(&mut self, id: &BucketStreamId, segment: &ursula_stream::ObjectPayloadRef) {
        self.put_json(
            CF_EXTERNAL,
            &crate::group::keys::message_key(id, segment.start_offset),
            segment,
        );
    }

    /// Removes the external segments of `id` starting in `[from, to)`.
    pub fn delete_externals(&mut self, id: &BucketStreamId, from: u64, to: u64) {
        self.delete_range(
            CF_EXTERNAL,
            crate::group::keys::message_key(id, from),
            crate::group::keys::message_key(id, to),
        )
    }

    /// Removes the cold chunk row starting at `start`.
    pub fn delete_chunk(&mut self, id: &BucketStreamId, start: u64) {
        self.delete_raw(CF_COLD_CHUNKS, &crate::group::keys::message_key(id, start));
    }

    /// The encoded commit record, taken (writes added after it start a new one), or the first
    /// error met while building it.
    pub fn take_record(&mut self) -> Result<Bytes, GroupError> {
        if let Some(e) = &self.error {
            return Err(GroupError::Corrupt(e.to_string()));
        }
        Ok(Bytes::from(std::mem::take(&mut self.record).into_bytes()))
    }

    /// True when the record holds no write and no stream is marked.
    pub fn is_empty(&self) -> bool {
        self.record.is_empty()
            && self.dirty_streams.is_empty()
            && self.dirty_usage.is_empty()
            && self.error.is_none()
    }

    /// Marks a stream whose row the commit must write (once, however often it changed).
    pub fn mark_stream(&mut self, id: &BucketStreamId) {
        if !self.dirty_streams.contains(id) {
            self.dirty_streams.push(id.clone());
        }
    }

    /// Takes the streams marked so far.
    pub fn take_dirty_streams(&mut self) -> Vec<BucketStreamId> {
        std::mem::take(&mut self.dirty_streams)
    }

    /// Marks a bucket whose usage row the commit must write (once, however often it changed:
    /// an `append_batch` of 32 changes it 32 times).
    pub fn mark_usage(&mut self, bucket: &str) {
        if !self.dirty_usage.iter().any(|b| b == bucket) {
            self.dirty_usage.push(bucket.to_string());
        }
    }

    /// Takes the buckets whose usage was marked so far.
    pub fn take_dirty_usage(&mut self) -> Vec<String> {
        std::mem::take(&mut self.dirty_usage)
    }

    /// Makes room in the commit record for `appends` more message rows of `id` (a requirement,
    /// a put of the row and a digest op each, [`Self::put_message`]), so it is not grown by
    /// doubling while a batch is planned.
    pub fn reserve_messages(&mut self, id: &BucketStreamId, appends: usize) {
        // Requirement 13 bytes, put 10 + key + 16 byte row, digest op 21.
        let per_append = 13 + 10 + crate::group::keys::stream_key_len(id) + 8 + 16 + 21;
        self.record
            .reserve(appends.saturating_mul(per_append) + ROWS_RESERVE);
    }

    /// Makes room in the record for the rows of `streams` streams (written again after the
    /// sync by [`crate::group::tx::Tx::finish_digests`], into a record that starts empty).
    pub fn reserve_rows(&mut self, streams: usize) {
        self.record.reserve(streams.saturating_mul(ROW_RESERVE));
    }

    /// Writes one message row of a stream whose payloads live in `partition` (and records that
    /// the command needs that payload record).
    pub fn put_message(
        &mut self,
        id: &BucketStreamId,
        partition: u32,
        start: u64,
        row: MessageRow,
    ) {
        self.record.push(Op::Requires {
            partition,
            offset: row.log_offset,
        });
        self.key.clear();
        crate::group::keys::push_message_key(&mut self.key, id, start);
        self.record.push(Op::Put {
            cf: MESSAGES_CF_INDEX,
            key: &self.key,
            value: &row.encode(),
        });
    }

    /// Removes the message rows of `id` that end at or below `offset` (a message straddling it
    /// stays).
    pub fn delete_messages_below(
        &mut self,
        db: &GroupDb,
        id: &BucketStreamId,
        offset: u64,
    ) -> Result<(), GroupError> {
        let below: Vec<u64> = db
            .messages(id, 0, offset)?
            .into_iter()
            .filter(|(_, m)| m.end_offset <= offset)
            .map(|(start, _)| start)
            .collect();
        if let (Some(first), Some(last)) = (below.first(), below.last()) {
            self.delete_range(
                CF_MESSAGES,
                crate::group::keys::message_key(id, *first),
                crate::group::keys::message_key(id, last + 1),
            );
        }
        Ok(())
    }

    /// Writes a producer row; `reset` first drops the producer's receipts (a new epoch).
    pub fn put_producer(
        &mut self,
        id: &BucketStreamId,
        producer: &str,
        row: &ProducerRow,
        reset: bool,
    ) {
        let key = crate::group::keys::producer_key(id, producer);
        if reset {
            self.delete_prefix(CF_RECEIPTS, &key);
        }
        self.put_json(CF_PRODUCERS, &key, row);
    }

    /// Writes the receipt of one producer sequence.
    pub fn put_receipt(&mut self, id: &BucketStreamId, producer: &str, seq: u64, row: &ReceiptRow) {
        self.put_json(
            CF_RECEIPTS,
            &crate::group::keys::receipt_key(id, producer, seq),
            row,
        );
    }

    /// Writes a bucket's usage.
    pub fn put_usage(&mut self, bucket: &str, row: &UsageRow) {
        self.put_json(CF_USAGE, bucket.as_bytes(), row);
    }

    /// Writes or (with `None`) removes a bucket's quota.
    pub fn put_quota(&mut self, bucket: &str, row: Option<&QuotaRow>) {
        match row {
            Some(row) => self.put_json(CF_QUOTAS, bucket.as_bytes(), row),
            None => self.delete_raw(CF_QUOTAS, bucket.as_bytes()),
        }
    }

    /// Writes or (with `None`) removes the retired append count of a stream.
    pub fn put_retired_count(&mut self, id: &BucketStreamId, count: Option<u64>) {
        match count {
            Some(n) => self.put_raw(CF_RETIRED_COUNTS, &stream_key(id), &n.to_be_bytes()),
            None => self.delete_raw(CF_RETIRED_COUNTS, &stream_key(id)),
        }
    }

    /// Appends a cold-GC entry (key = its sequence, big-endian).
    pub fn put_gc(&mut self, entry: &GcRow) {
        self.put_json(CF_COLD_GC, &entry.seq.to_be_bytes(), entry);
    }

    /// Removes a cold-GC entry.
    pub fn delete_gc(&mut self, seq: u64) {
        self.delete_raw(CF_COLD_GC, &seq.to_be_bytes());
    }

    /// Drops everything (install of a whole-group snapshot).
    pub fn clear_all(&mut self) {
        for cf in COLUMN_FAMILIES {
            if cf != CF_META {
                self.delete_range(cf, [0u8].as_slice(), [u8::MAX; 300].as_slice());
            }
        }
    }
}
