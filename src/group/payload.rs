//! Stream payloads in segment partitions: every accepted append is one record (key = stream
//! key, value = the bytes) in the partition its stream hashes to. Group state keeps, per append,
//! the record's offset (a message row), so reads find their bytes without scanning.

use std::collections::BTreeMap;

use bytes::Bytes;
use ursula_shard::BucketStreamId;

use super::keys::stream_key;
use super::GroupError;
use crate::log::{Log, LogOptions, LogOwner};
use crate::segment::NewRecord;
use crate::store::Store;

/// Partitions of a group's payload log.
pub const PAYLOAD_PARTITIONS: u32 = 8;

/// The payload log of one group.
pub(crate) struct PayloadLog {
    log: Log,
}

impl PayloadLog {
    /// Opens (creating) the payload log `name` of `store`.
    pub fn open(store: &Store, name: &str, options: LogOptions) -> Result<Self, GroupError> {
        Ok(Self {
            log: store.open_log_as(name, PAYLOAD_PARTITIONS, options, LogOwner::Layer)?,
        })
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

    /// Appends `payloads` of one stream as one batch; returns each record's offset once durable.
    pub async fn append(
        &self,
        id: &BucketStreamId,
        partition: u32,
        payloads: &[Bytes],
        now_ms: u64,
    ) -> Result<Vec<u64>, GroupError> {
        Ok(self
            .append_many(vec![(id.clone(), partition, payloads.to_vec())], now_ms)
            .await?
            .pop()
            .unwrap_or_default())
    }

    /// Appends payloads of several streams in one durability round; offsets per item, in order.
    pub async fn append_many(
        &self,
        items: Vec<(BucketStreamId, u32, Vec<Bytes>)>,
        now_ms: u64,
    ) -> Result<Vec<Vec<u64>>, GroupError> {
        let timestamp = i64::try_from(now_ms).unwrap_or(i64::MAX);
        let counts: Vec<usize> = items.iter().map(|(_, _, p)| p.len()).collect();
        let batches = items
            .into_iter()
            .filter(|(_, _, p)| !p.is_empty())
            .map(|(id, partition, payloads)| {
                let key = Bytes::from(stream_key(&id));
                let records = payloads
                    .into_iter()
                    .map(|p| NewRecord::keyed(timestamp, key.clone(), Some(p)))
                    .collect();
                (partition, records)
            })
            .collect::<Vec<_>>();
        let mut ranges = if batches.is_empty() {
            Vec::new()
        } else {
            self.log.append_many(batches).await?
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

    /// Records of `partition` from `log_offset` on, about `max_bytes` of batches.
    pub fn read_page(
        &self,
        partition: u32,
        log_offset: u64,
        max_bytes: usize,
    ) -> Result<Vec<crate::segment::Record>, GroupError> {
        let offset = i64::try_from(log_offset)
            .map_err(|_| GroupError::Corrupt(format!("log offset {log_offset}")))?;
        Ok(self.log.read(partition, offset, max_bytes)?.records)
    }

    /// Deletes sealed segments no hot message references: `lowest` maps each partition to the
    /// lowest log offset still referenced (partitions absent reference nothing below their
    /// high-water mark). Returns the bytes freed.
    pub fn reclaim(&self, lowest: &BTreeMap<u32, u64>) -> Result<u64, GroupError> {
        let mut freed = 0;
        for partition in 0..PAYLOAD_PARTITIONS {
            let below = match lowest.get(&partition) {
                Some(&offset) => offset as i64,
                None => self.log.high_water_mark(partition)?,
            };
            freed += self
                .log
                .delete_segments_before(partition, below)?
                .bytes_deleted;
        }
        Ok(freed)
    }
}
