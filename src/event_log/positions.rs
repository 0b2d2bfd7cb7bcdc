//! Durable consumer positions: a consumer commits the offset it has processed up to, under its
//! name, per log and partition, and resumes from it after a restart (Kafka's committed offsets).
//!
//! Positions live in the internal log `__positions` (one partition, keyed by log, consumer and
//! partition, compacted in the background so it keeps about one record per key). A commit is
//! one append with the log's durability (`Sync` by default: durable when it returns), then
//! memory: persist, then apply; a deletion is a tombstone appended the same way. Concurrent
//! commits and deletions of one key keep the one the log ordered last.
//! Open one [`ConsumerPositions`] per store and share it (it is `Send + Sync`). The record
//! format is format/POSITIONS.md.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use bytes::Bytes;

use crate::error::{StoreError, StoreResult};
use crate::log::{CompactionPolicy, Log, LogOptions};
use crate::segment::{NewRecord, RecordRef};
use crate::store::Store;

/// Name of the internal log that holds the positions.
pub const POSITIONS_LOG: &str = "__positions";

/// Options of the positions log: small segments, compacted every minute when half dirty.
pub fn positions_log_options() -> LogOptions {
    LogOptions {
        segment_bytes: 1 << 20,
        journal_bytes: 4 << 20,
        compaction: CompactionPolicy {
            enabled: true,
            ..CompactionPolicy::default()
        },
        maintenance_interval: Some(Duration::from_secs(60)),
        ..LogOptions::default()
    }
}

/// Which position: the log, the consumer's name and the partition.
type PositionKey = (String, String, u32);

/// One committed position (see [`ConsumerPositions::positions`]).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct CommittedPosition {
    /// The log the consumer reads.
    pub log: String,
    /// The consumer's name.
    pub consumer: String,
    /// The partition.
    pub partition: u32,
    /// The committed offset (the next one the consumer reads).
    pub offset: i64,
}

/// The committed positions of every consumer of a store.
#[derive(Debug)]
pub struct ConsumerPositions {
    log: Log,
    /// Per key, the committed offset (`None`: deleted) with the offset of the record that set
    /// it (the log's order decides between concurrent commits and deletions).
    committed: Mutex<Committed>,
}

/// Per key, the committed offset (`None`: deleted) and the offset of the record that set it.
pub(crate) type Committed = HashMap<PositionKey, (Option<i64>, i64)>;

/// Replays one record of the positions log (in the log's order) into `committed`: a commit sets
/// its key, a tombstone deletes it, other bytes are skipped (format/POSITIONS.md).
pub(crate) fn replay(committed: &mut Committed, record: &RecordRef<'_>) {
    let Some(key) = record.key.and_then(decode_key) else {
        return;
    };
    match record.value.map(decode_value) {
        Some(Some(offset)) => apply(committed, key, Some(offset), record.offset),
        None => apply(committed, key, None, record.offset),
        Some(None) => {}
    }
}

/// How many records of a partition with water marks `(low, high)` a consumer that committed
/// `committed` has not processed: from its committed offset, or from `low` when it committed
/// none or one below it.
pub fn records_behind(committed: Option<i64>, (low, high): (i64, i64)) -> i64 {
    (high - committed.unwrap_or(low).max(low)).max(0)
}

/// The positions `committed` holds, ordered by log, consumer and partition.
pub(crate) fn listed(committed: &Committed) -> Vec<CommittedPosition> {
    let mut all: Vec<CommittedPosition> = committed
        .iter()
        .filter_map(|((log, consumer, partition), (offset, _))| {
            Some(CommittedPosition {
                log: log.clone(),
                consumer: consumer.clone(),
                partition: *partition,
                offset: (*offset)?,
            })
        })
        .collect();
    all.sort();
    all
}

/// Sets `key` to `offset` as the record at `at` says, unless a record the log ordered later
/// already set it.
fn apply(committed: &mut Committed, key: PositionKey, offset: Option<i64>, at: i64) {
    let entry = committed.entry(key).or_insert((offset, at));
    if at >= entry.1 {
        *entry = (offset, at);
    }
}

impl ConsumerPositions {
    /// [`Self::open`] on tokio's blocking pool (reading the positions never holds up the
    /// caller's executor thread).
    pub async fn open_async(store: &Store) -> StoreResult<Self> {
        let store = store.clone();
        crate::blocking::off_executor(move || Self::open(&store)).await
    }

    /// Opens (creating) the positions of `store` and loads them (blocking: it reads the log).
    pub fn open(store: &Store) -> StoreResult<Self> {
        let log = store.open_log(POSITIONS_LOG, 1, positions_log_options())?;
        let mut committed = HashMap::new();
        let low = log.low_water_mark(0)?;
        log.visit(0, low, i64::MAX, &mut |record: RecordRef<'_>| {
            replay(&mut committed, &record);
            Ok::<(), StoreError>(())
        })?;
        Ok(Self {
            log,
            committed: Mutex::new(committed),
        })
    }

    /// Durably records that `consumer` has processed `partition` of `log_name` up to (not
    /// including) `offset`: a restart resumes there. Names are non-empty and hold no NUL byte;
    /// `offset` is at least 0.
    pub async fn commit(
        &self,
        log_name: &str,
        consumer: &str,
        partition: u32,
        offset: i64,
    ) -> StoreResult<()> {
        let key = validate(log_name, consumer, offset)?;
        let record = NewRecord::keyed(
            crate::now_ms(),
            Bytes::from(encode_key(log_name, consumer, partition)),
            Some(Bytes::copy_from_slice(&offset.to_be_bytes())),
        );
        let (at, _) = self.log.append(0, vec![record]).await?;
        apply(
            &mut self.lock(),
            (key.0, key.1, partition),
            Some(offset),
            at,
        );
        Ok(())
    }

    /// Durably removes what `consumer` committed for `log_name`: the position of `partition`,
    /// or of every partition when `None` (one batch of tombstones: all or none). Answers how
    /// many positions it removed; a consumer without one removes nothing and writes nothing.
    pub async fn delete(
        &self,
        log_name: &str,
        consumer: &str,
        partition: Option<u32>,
    ) -> StoreResult<usize> {
        validate(log_name, consumer, 0)?;
        let mut keys: Vec<PositionKey> = self
            .lock()
            .iter()
            .filter(|((l, c, p), (offset, _))| {
                offset.is_some()
                    && l == log_name
                    && c == consumer
                    && partition.is_none_or(|want| *p == want)
            })
            .map(|(key, _)| key.clone())
            .collect();
        keys.sort();
        if keys.is_empty() {
            return Ok(0);
        }
        let tombstones = keys
            .iter()
            .map(|(l, c, p)| NewRecord::keyed(crate::now_ms(), encode_key(l, c, *p).into(), None))
            .collect();
        let (first, _) = self.log.append(0, tombstones).await?;
        let mut committed = self.lock();
        for (at, key) in (first..).zip(keys.iter().cloned()) {
            apply(&mut committed, key, None, at);
        }
        Ok(keys.len())
    }

    /// The offset `consumer` committed for `partition` of `log_name`, if any.
    pub fn committed(&self, log_name: &str, consumer: &str, partition: u32) -> Option<i64> {
        let key = (log_name.to_string(), consumer.to_string(), partition);
        self.lock().get(&key).and_then(|(offset, _)| *offset)
    }

    /// Every committed position, ordered by log, consumer and partition.
    pub fn positions(&self) -> Vec<CommittedPosition> {
        listed(&self.lock())
    }

    /// How many records of `partition` of `log` `consumer` has not processed: the high-water
    /// mark minus its committed offset (or minus the low-water mark when it committed none, or
    /// committed one below it).
    pub fn lag(&self, log: &Log, consumer: &str, partition: u32) -> StoreResult<i64> {
        let marks = (
            log.low_water_mark(partition)?,
            log.high_water_mark(partition)?,
        );
        let lag = records_behind(self.committed(log.name(), consumer, partition), marks);
        crate::metrics::consumer_lag(log.name(), consumer, partition, lag);
        Ok(lag)
    }

    /// The positions log (for compaction and statistics).
    pub fn log(&self) -> &Log {
        &self.log
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Committed> {
        self.committed.lock().unwrap_or_else(|p| p.into_inner())
    }
}

fn validate(log_name: &str, consumer: &str, offset: i64) -> StoreResult<(String, String)> {
    for (what, name) in [("log name", log_name), ("consumer name", consumer)] {
        if name.is_empty() || name.contains('\0') {
            return Err(StoreError::Invalid(format!(
                "{what} {name:?} must be non-empty and hold no NUL byte"
            )));
        }
    }
    if offset < 0 {
        return Err(StoreError::Invalid(format!(
            "a committed offset is at least 0, not {offset}"
        )));
    }
    Ok((log_name.to_string(), consumer.to_string()))
}

/// The key of a position record: `log NUL consumer NUL partition (u32 BE)` (format/POSITIONS.md).
pub fn encode_key(log_name: &str, consumer: &str, partition: u32) -> Vec<u8> {
    let mut key = Vec::with_capacity(log_name.len() + consumer.len() + 6);
    key.extend_from_slice(log_name.as_bytes());
    key.push(0);
    key.extend_from_slice(consumer.as_bytes());
    key.push(0);
    key.extend_from_slice(&partition.to_be_bytes());
    key
}

/// The key's parts; `None` for bytes that are not a position key (skipped at load).
pub fn decode_key(key: &[u8]) -> Option<PositionKey> {
    let (names, partition) = key.split_at_checked(key.len().checked_sub(4)?)?;
    let names = names.strip_suffix(&[0])?;
    let split = names.iter().position(|b| *b == 0)?;
    let log_name = std::str::from_utf8(&names[..split]).ok()?;
    let consumer = std::str::from_utf8(&names[split + 1..]).ok()?;
    let partition = u32::from_be_bytes(partition.try_into().ok()?);
    Some((log_name.to_string(), consumer.to_string(), partition))
}

/// The committed offset a position record's value holds (`i64 BE`); `None` for other bytes.
pub fn decode_value(value: &[u8]) -> Option<i64> {
    Some(i64::from_be_bytes(value.try_into().ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_and_garbage_is_skipped() {
        let key = encode_key("orders", "billing", 7);
        assert_eq!(
            decode_key(&key),
            Some(("orders".into(), "billing".into(), 7))
        );
        assert_eq!(decode_key(b""), None);
        assert_eq!(decode_key(b"abc"), None);
        assert_eq!(decode_key(b"no-nul\0\0\0\0\x01"), None);
        assert_eq!(decode_value(&5i64.to_be_bytes()), Some(5));
        assert_eq!(decode_value(b"short"), None);
        assert!(validate("", "c", 0).is_err());
        assert!(validate("l", "a\0b", 0).is_err());
        assert!(validate("l", "c", -1).is_err());
    }
}
