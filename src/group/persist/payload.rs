//! Stream payloads in segment partitions: every accepted append is one record (key = stream
//! key, value = the bytes) in the partition its stream hashes to. Group state keeps, per append,
//! the record's offset (a message row), so reads find their bytes without scanning.
//!
//! The same log holds the commit records (unkeyed, in [`COMMIT_PARTITION`]): payloads are
//! written without waiting, and the command's commit record, appended after them and synced,
//! makes both durable in one round (format/GROUP_STATE.md, "Commit protocol").

use std::collections::BTreeMap;

use bytes::Bytes;
use ursula_shard::BucketStreamId;

use crate::group::commit_record::COMMIT_PARTITION;
use crate::group::keys::stream_key;
use crate::group::GroupError;
use crate::log::{Log, LogOptions, LogOwner};
use crate::segment::NewRecord;
use crate::store::manifest::GROUP_LOG_PREFIX;
use crate::store::Store;

use super::payload_host::PayloadHost;

/// Partitions of a group's payload range (or of its own payload log).
pub const PAYLOAD_PARTITIONS: u32 = 8;

/// The payload partitions of one group: its range of the store's group payload log, or the
/// log of its own that earlier versions created. Partition numbers the group uses (and keeps
/// in its rows and commit records) are its own, `0..PAYLOAD_PARTITIONS`; the range's first
/// partition is added on the way to the log.
pub(crate) struct PayloadLog {
    log: Log,
    base: u32,
}

impl PayloadLog {
    /// Opens group `name`'s payload partitions: the log `__group_<name>` when the store holds
    /// it (a group created by an earlier version), else its range of the store's group payload
    /// log (given to it now if new; the log is opened with `options` by the first group).
    pub fn open(store: &Store, name: &str, options: LogOptions) -> Result<Self, GroupError> {
        let own = format!("{GROUP_LOG_PREFIX}{name}");
        if store.logs().iter().any(|l| l.name == own) {
            let log = store.open_log_as(&own, PAYLOAD_PARTITIONS, options, LogOwner::Layer)?;
            return Ok(Self { log, base: 0 });
        }
        let host = PayloadHost::of_store(store, &options)?;
        let base = host.range_of(store, name)?;
        Ok(Self {
            log: host.log().clone(),
            base,
        })
    }

    /// The log's partition behind the group's partition `partition` (a number read from the
    /// group's rows or records: one out of its range is corruption, never another group's).
    fn at(&self, partition: u32) -> Result<u32, GroupError> {
        if partition >= PAYLOAD_PARTITIONS {
            return Err(GroupError::Corrupt(format!(
                "payload partition {partition} is out of range (a group has {PAYLOAD_PARTITIONS})"
            )));
        }
        Ok(self.base + partition)
    }

    /// The underlying log.
    pub fn log(&self) -> &Log {
        &self.log
    }

    /// The partition a stream's payloads go to (FNV-1a of the stream key, stable forever).
    pub fn partition_for(id: &BucketStreamId) -> u32 {
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for byte in stream_key(id) {
            hash ^= u64::from(byte);
            hash = hash.wrapping_mul(0x0000_0100_0000_01b3);
        }
        (hash % u64::from(PAYLOAD_PARTITIONS)) as u32
    }

    /// Writes `payloads` of one stream as one batch; returns each record's offset once written
    /// (durable with the command's commit record).
    pub async fn append(
        &self,
        id: &BucketStreamId,
        partition: u32,
        payloads: impl IntoIterator<Item = Bytes, IntoIter: ExactSizeIterator>,
        now_ms: u64,
    ) -> Result<Vec<u64>, GroupError> {
        let payloads = payloads.into_iter();
        if payloads.len() == 0 {
            return Ok(Vec::new());
        }
        let count = payloads.len() as u64;
        let records = records_of(id, payloads, now_ms);
        let ranges = self
            .log
            .append_many_unsynced(vec![(self.at(partition)?, records)])
            .await?;
        let (first, _) = ranges
            .first()
            .ok_or_else(|| GroupError::Corrupt("payload append lost a range".into()))?;
        Ok((0..count).map(|i| *first as u64 + i).collect())
    }

    /// Writes payloads of several streams (durable with the command's commit record); offsets
    /// per item, in order.
    pub async fn append_many(
        &self,
        items: Vec<(BucketStreamId, u32, Vec<Bytes>)>,
        now_ms: u64,
    ) -> Result<Vec<Vec<u64>>, GroupError> {
        let counts: Vec<usize> = items.iter().map(|(_, _, p)| p.len()).collect();
        let batches = items
            .into_iter()
            .filter(|(_, _, p)| !p.is_empty())
            .map(|(id, partition, payloads)| {
                Ok((self.at(partition)?, records_of(&id, payloads, now_ms)))
            })
            .collect::<Result<Vec<_>, GroupError>>()?;
        let mut ranges = if batches.is_empty() {
            Vec::new()
        } else {
            self.log.append_many_unsynced(batches).await?
        }
        .into_iter();
        let mut out = Vec::with_capacity(counts.len());
        for count in counts {
            if count == 0 {
                out.push(Vec::new());
                continue;
            }
            let (first, _) = ranges
                .next()
                .ok_or_else(|| GroupError::Corrupt("payload append lost a range".into()))?;
            out.push((0..count as i64).map(|i| (first + i) as u64).collect());
        }
        Ok(out)
    }

    /// Appends a command's commit record and resolves to its offset once it and every payload
    /// written before it are durable ([`Log::append`]: on a current-thread runtime the round
    /// runs on a commit worker, not on the executor's thread). Dropped after its first poll,
    /// the record is written and becomes durable with the log's next round.
    pub async fn commit_async(&self, record: Bytes, now_ms: u64) -> Result<u64, GroupError> {
        let timestamp = i64::try_from(now_ms).unwrap_or(i64::MAX);
        let (offset, _) = self
            .log
            .append(
                self.at(COMMIT_PARTITION)?,
                vec![NewRecord::value(timestamp, record)],
            )
            .await?;
        u64::try_from(offset).map_err(|_| GroupError::Corrupt(format!("commit offset {offset}")))
    }

    /// The offset the next commit record gets: past every record written to the commit
    /// partition, published or not (a command's payloads may share the partition and are
    /// published with its commit record).
    pub fn next_commit_offset(&self) -> Result<u64, GroupError> {
        self.next_offset(COMMIT_PARTITION)
    }

    /// Calls `f` with the records of the group's partition `partition` in `[from, until)`, in
    /// place in the mappings ([`Log::visit`]).
    pub fn visit<E: From<GroupError> + From<crate::error::StoreError>>(
        &self,
        partition: u32,
        from: i64,
        until: i64,
        f: &mut dyn FnMut(crate::segment::RecordRef<'_>) -> Result<(), E>,
    ) -> Result<i64, E> {
        self.log.visit(self.at(partition)?, from, until, f)
    }

    /// Makes everything written so far durable (blocking).
    pub fn sync(&self) -> Result<(), GroupError> {
        Ok(self.log.sync_blocking()?)
    }

    /// Whether every payload record `record` requires (or takes a deferred digest of) is in
    /// the log (each partition keeps a prefix of what was written to it, so a record below the
    /// high-water mark is there).
    pub fn holds_requirements(&self, record: &[u8]) -> Result<bool, GroupError> {
        use crate::group::commit_record::Op;
        let mut holds = true;
        crate::group::commit_record::decode(record, |op| {
            if let Op::Requires { partition, offset }
            | Op::Digest {
                partition, offset, ..
            } = op
            {
                let high = self.log.high_water_mark(self.at(partition)?)?;
                holds &= i64::try_from(offset).is_ok_and(|o| o < high);
            }
            Ok(())
        })?;
        Ok(holds)
    }

    /// The key and value of payload record `offset` of `partition` (blocking), or `Corrupt`
    /// when there is none: a commit record's digest names it, and replay checked that its
    /// partition holds it.
    pub fn payload_record(
        &self,
        partition: u32,
        offset: u64,
    ) -> Result<(Vec<u8>, Vec<u8>), GroupError> {
        let at = i64::try_from(offset)
            .map_err(|_| GroupError::Corrupt(format!("payload offset {offset}")))?;
        let mut found = None;
        self.log
            .visit::<GroupError>(self.at(partition)?, at, at + 1, &mut |record| {
                if record.offset == at {
                    if let (Some(key), Some(value)) = (record.key, record.value) {
                        found = Some((key.to_vec(), value.to_vec()));
                    }
                }
                Ok(())
            })?;
        found.ok_or_else(|| {
            GroupError::Corrupt(format!(
                "no payload record at offset {offset} of partition {partition}"
            ))
        })
    }

    /// The offset the next payload record of `partition` gets (the engine is the log's only
    /// writer, and its commands run one at a time, so a command can plan with it).
    pub fn next_offset(&self, partition: u32) -> Result<u64, GroupError> {
        let next = self.log.next_offset(self.at(partition)?)?;
        u64::try_from(next).map_err(|_| GroupError::Corrupt(format!("next offset {next}")))
    }

    /// Checks that records written at `got` landed where a plan put them, at `planned`.
    pub fn check_planned(planned: u64, got: Option<u64>) -> Result<(), GroupError> {
        match got {
            Some(got) if got == planned => Ok(()),
            got => Err(GroupError::Corrupt(format!(
                "payload records were planned at offset {planned} and written at {got:?}"
            ))),
        }
    }

    /// The offset the next record of the commit partition gets.
    pub fn commit_end(&self) -> Result<u64, GroupError> {
        Ok(self.log.high_water_mark(self.at(COMMIT_PARTITION)?)?.max(0) as u64)
    }

    /// The offset of the oldest commit-partition record still held.
    pub fn commit_low_water_mark(&self) -> Result<u64, GroupError> {
        Ok(self.log.low_water_mark(self.at(COMMIT_PARTITION)?)?.max(0) as u64)
    }

    /// Calls `f(offset, record)` with every commit record at or after `from`, in order
    /// (blocking). Payload records in between are skipped.
    pub fn commit_records(
        &self,
        from: u64,
        mut f: impl FnMut(u64, &[u8]) -> Result<(), GroupError>,
    ) -> Result<(), GroupError> {
        let low = self.log.low_water_mark(self.at(COMMIT_PARTITION)?)?;
        let from = i64::try_from(from).unwrap_or(i64::MAX).max(low);
        self.log.visit(
            self.at(COMMIT_PARTITION)?,
            from,
            i64::MAX,
            &mut |record| match (record.key, record.value) {
                (None, Some(value)) => f(record.offset as u64, value),
                _ => Ok(()),
            },
        )?;
        Ok(())
    }

    /// Deletes sealed segments no hot message references: `lowest` maps each partition to the
    /// lowest log offset still referenced (partitions absent reference nothing below their
    /// high-water mark). Returns the bytes freed.
    pub fn reclaim(&self, lowest: &BTreeMap<u32, u64>) -> Result<u64, GroupError> {
        let mut freed = 0;
        for partition in 0..PAYLOAD_PARTITIONS {
            let below = match lowest.get(&partition) {
                Some(&offset) => offset as i64,
                None => self.log.high_water_mark(self.at(partition)?)?,
            };
            freed += self
                .log
                .delete_segments_before(self.at(partition)?, below)?
                .bytes_deleted;
        }
        Ok(freed)
    }
}

/// The payload records of one stream's appends: keyed by the stream key, stamped `now_ms`.
fn records_of(
    id: &BucketStreamId,
    payloads: impl IntoIterator<Item = Bytes>,
    now_ms: u64,
) -> Vec<NewRecord> {
    let timestamp = i64::try_from(now_ms).unwrap_or(i64::MAX);
    let key = Bytes::from(stream_key(id));
    payloads
        .into_iter()
        .map(|p| NewRecord::keyed(timestamp, key.clone(), Some(p)))
        .collect()
}
