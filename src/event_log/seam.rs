//! The `MetadataEventLog` seam as its contract gives it (seed 000), with its supporting types.
//!
//! `KeyedEvent` and `publish_keyed_group` exist only in the seed text; their shape here is
//! Strata's own: `KeyedEvent { partition, key, event }` with `event == None` a tombstone.

use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;
use futures::Stream;

/// Errors of the metadata event log.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum MetadataLogError {
    /// The transport refused the write; nothing was appended.
    #[error("publish failed: {0}")]
    Publish(String),
    /// A partition outside `[0, count)`.
    #[error("partition {partition} out of range (count {count})")]
    PartitionOutOfRange {
        /// Partition asked for.
        partition: i32,
        /// Partition count of the log.
        count: i32,
    },
    /// The log has been closed; no further operations are served.
    #[error("metadata log is closed")]
    Closed,
    /// Any other failure, such as a storage error.
    #[error("metadata log error: {0}")]
    Other(String),
}

/// Where a subscriber starts reading one partition (inclusive).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PartitionStart {
    /// Partition to consume.
    pub partition: i32,
    /// First offset to deliver; 0 replays from the beginning.
    pub start_offset: i64,
}

/// One record as subscribers and range readers see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetadataEventRecord {
    /// Partition of the record.
    pub partition: i32,
    /// Offset assigned by `publish`.
    pub offset: i64,
    /// Key of a keyed record; `None` for `publish`.
    pub key: Option<Bytes>,
    /// Payload; empty for a tombstone.
    pub payload: Bytes,
    /// True for a keyed record published without a value.
    pub tombstone: bool,
}

/// One record of a keyed group publication (Strata's shape; `event == None` is a tombstone).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyedEvent {
    /// Partition to append to.
    pub partition: i32,
    /// Compaction key.
    pub key: Bytes,
    /// Value, or `None` for a tombstone.
    pub event: Option<Bytes>,
}

/// The live record stream of a subscription.
pub type MetadataEventStream = Pin<Box<dyn Stream<Item = MetadataEventRecord> + Send + 'static>>;

/// The visitor of [`MetadataEventLog::visit_range`]; an `Err` stops the read and is returned.
pub type RangeVisitor<'a> =
    dyn FnMut(MetadataEventRecord) -> Result<(), MetadataLogError> + Send + 'a;

/// Edits the live assignment of a subscription.
pub trait AssignmentHandle: Send + Sync {
    /// Starts delivering `start.partition` from `start.start_offset`; no-op if already assigned.
    fn add(&self, start: PartitionStart);
    /// Stops delivering `partition`; no-op if not assigned.
    fn remove(&self, partition: i32);
    /// Partitions currently assigned.
    fn assigned(&self) -> Vec<i32>;
}

/// Publish/subscribe transport backing a partitioned metadata topic.
///
/// Offsets increase within a partition and the offset `publish` returns is the one every
/// subscriber observes; `subscribe` replays from each start offset then forwards live records;
/// records arrive in publish order per partition.
#[async_trait::async_trait]
pub trait MetadataEventLog: Send + Sync {
    /// Number of partitions, stable for the life of the log.
    fn partition_count(&self) -> i32;

    /// Appends `event` to `partition`; resolves to the assigned offset.
    async fn publish(&self, partition: i32, event: Bytes) -> Result<i64, MetadataLogError>;

    /// Consumes the given partitions from their inclusive start offsets.
    fn subscribe(
        &self,
        assignment: Vec<PartitionStart>,
    ) -> (MetadataEventStream, Arc<dyn AssignmentHandle>);

    /// One past the highest written offset of each partition (0 when empty).
    async fn high_water_marks(&self) -> Result<Vec<i64>, MetadataLogError>;

    /// Appends a keyed value, or a tombstone when `event` is `None`.
    async fn publish_keyed(
        &self,
        _partition: i32,
        _key: Bytes,
        _event: Option<Bytes>,
    ) -> Result<i64, MetadataLogError> {
        Err(MetadataLogError::Publish(
            "this transport does not support keyed publication".into(),
        ))
    }

    /// Appends a group of keyed records and waits until every one is acknowledged.
    async fn publish_keyed_group(
        &self,
        events: Vec<KeyedEvent>,
    ) -> Result<Vec<i64>, MetadataLogError> {
        let mut offsets = Vec::with_capacity(events.len());
        for e in events {
            offsets.push(self.publish_keyed(e.partition, e.key, e.event).await?);
        }
        Ok(offsets)
    }

    /// Earliest retained offset of each partition.
    async fn low_water_marks(&self) -> Result<Vec<i64>, MetadataLogError> {
        Ok(vec![0; self.partition_count().max(0) as usize])
    }

    /// Passes every retained record of `partition` with offset in `[start, end)` to `visit`.
    async fn visit_range(
        &self,
        _partition: i32,
        _start: i64,
        _end: i64,
        _visit: &mut RangeVisitor<'_>,
    ) -> Result<(), MetadataLogError> {
        Err(MetadataLogError::Other(
            "this transport does not serve range reads".into(),
        ))
    }
}
