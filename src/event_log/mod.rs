//! The `MetadataEventLog` seam on a Strata [`Log`]: durable publish, keyed publish and groups,
//! live subscriptions, water marks and bounded range reads.

mod page;
pub mod positions;
mod seam;
mod subscription;

pub use subscription::CheckedEventStream;

use std::sync::Arc;

use bytes::Bytes;

pub use positions::{positions_log_options, CommittedPosition, ConsumerPositions, POSITIONS_LOG};
pub use seam::{
    AssignmentHandle, KeyedEvent, MetadataEventLog, MetadataEventRecord, MetadataEventStream,
    MetadataLogError, PartitionStart, RangeVisitor,
};

use crate::error::StoreError;
use crate::log::Log;
use crate::segment::NewRecord;

/// Bytes of records (keys and payloads, plus 32 per record) one page of a range read holds, on
/// a current-thread runtime (a multi-thread one visits records one at a time).
pub const RANGE_PAGE_BYTES: usize = 1 << 20;

/// A disk-backed [`MetadataEventLog`]: every acknowledged record is on disk (per the log's
/// durability) and everything survives a reopen of the store.
#[derive(Debug, Clone)]
pub struct DiskEventLog {
    log: Log,
}

impl From<StoreError> for MetadataLogError {
    fn from(e: StoreError) -> Self {
        match e {
            StoreError::Closed => MetadataLogError::Closed,
            StoreError::PartitionOutOfRange { partition, count } => {
                MetadataLogError::PartitionOutOfRange { partition, count }
            }
            other => MetadataLogError::Other(other.to_string()),
        }
    }
}

/// The error of a failed append. An append is all or nothing, so every refusal and every
/// write failure (a full disk included) is `Publish`: nothing was appended. A failed sync is
/// not: the records were written and may or may not be durable (and may be delivered), so it
/// is `Other`, saying so.
fn publish_error(e: StoreError) -> MetadataLogError {
    match e {
        StoreError::Encode(_)
        | StoreError::NoSpace { .. }
        | StoreError::Io { .. }
        | StoreError::Rejected
        | StoreError::Invalid(_) => MetadataLogError::Publish(e.to_string()),
        other => other.into(),
    }
}

impl DiskEventLog {
    /// Serves the seam on `log`.
    pub fn new(log: Log) -> Self {
        Self { log }
    }

    /// The underlying log (for compaction, retention, statistics).
    pub fn log(&self) -> &Log {
        &self.log
    }

    /// [`MetadataEventLog::subscribe`] whose stream ends with the error of a failed read (a
    /// corrupt segment, an I/O error) as its last item, so a consumer can tell damage from a
    /// close (the seam's stream, whose items cannot carry an error, logs it and ends).
    pub fn subscribe_checked(
        &self,
        assignment: Vec<PartitionStart>,
    ) -> (CheckedEventStream, Arc<dyn AssignmentHandle>) {
        subscription::subscribe_checked(&self.log, assignment)
    }

    /// Closes the log: later operations fail with [`MetadataLogError::Closed`], streams end.
    pub async fn close(&self) -> Result<(), MetadataLogError> {
        self.log.close().await.map_err(Into::into)
    }

    fn partition(&self, partition: i32) -> Result<u32, MetadataLogError> {
        if self.log.is_closed() {
            return Err(MetadataLogError::Closed);
        }
        let count = self.partition_count();
        if partition < 0 || partition >= count {
            return Err(MetadataLogError::PartitionOutOfRange { partition, count });
        }
        Ok(partition as u32)
    }

    async fn append_one(&self, partition: i32, record: NewRecord) -> Result<i64, MetadataLogError> {
        let partition = self.partition(partition)?;
        let (first, _) = self
            .log
            .append(partition, vec![record])
            .await
            .map_err(publish_error)?;
        Ok(first)
    }

    fn marks(
        &self,
        f: impl Fn(u32) -> Result<i64, StoreError>,
    ) -> Result<Vec<i64>, MetadataLogError> {
        if self.log.is_closed() {
            return Err(MetadataLogError::Closed);
        }
        (0..self.log.partition_count())
            .map(|p| f(p).map_err(Into::into))
            .collect()
    }
}

#[async_trait::async_trait]
impl MetadataEventLog for DiskEventLog {
    fn partition_count(&self) -> i32 {
        self.log.partition_count() as i32
    }

    async fn publish(&self, partition: i32, event: Bytes) -> Result<i64, MetadataLogError> {
        self.append_one(partition, NewRecord::value(crate::now_ms(), event))
            .await
    }

    fn subscribe(
        &self,
        assignment: Vec<PartitionStart>,
    ) -> (MetadataEventStream, Arc<dyn AssignmentHandle>) {
        subscription::subscribe(&self.log, assignment)
    }

    async fn high_water_marks(&self) -> Result<Vec<i64>, MetadataLogError> {
        self.marks(|p| self.log.high_water_mark(p))
    }

    async fn publish_keyed(
        &self,
        partition: i32,
        key: Bytes,
        event: Option<Bytes>,
    ) -> Result<i64, MetadataLogError> {
        self.append_one(partition, NewRecord::keyed(crate::now_ms(), key, event))
            .await
    }

    /// Validates every partition first, then submits the whole group as one write request: one
    /// durability round trip, records of a partition appended in the order given.
    async fn publish_keyed_group(
        &self,
        events: Vec<KeyedEvent>,
    ) -> Result<Vec<i64>, MetadataLogError> {
        if events.is_empty() {
            return Ok(Vec::new());
        }
        for e in &events {
            self.partition(e.partition)?;
        }
        let now = crate::now_ms();
        let items = events
            .into_iter()
            .map(|e| {
                (
                    e.partition as u32,
                    vec![NewRecord::keyed(now, e.key, e.event)],
                )
            })
            .collect();
        let ranges = self.log.append_many(items).await.map_err(publish_error)?;
        Ok(ranges.into_iter().map(|(first, _)| first).collect())
    }

    async fn low_water_marks(&self) -> Result<Vec<i64>, MetadataLogError> {
        self.marks(|p| self.log.low_water_mark(p))
    }

    /// On a multi-thread runtime (or outside one) the records are visited straight from the
    /// segments' mappings under `block_in_place` (the worker's other tasks move to another
    /// worker first), holding one record at a time. On a current-thread runtime a page of at
    /// most [`RANGE_PAGE_BYTES`] at a time is read on the blocking pool and visited before the
    /// next is read. Compacted offsets are stepped over.
    async fn visit_range(
        &self,
        partition: i32,
        start: i64,
        end: i64,
        visit: &mut RangeVisitor<'_>,
    ) -> Result<(), MetadataLogError> {
        let p = self.partition(partition)?;
        if start >= end {
            return Ok(());
        }
        let high = self.log.high_water_mark(p)?;
        if end > high {
            return Err(StoreError::RangePastEnd {
                partition: p,
                high_water_mark: high,
                end,
            }
            .into());
        }
        if !crate::blocking::runs_inline_on_executor() {
            let mut visit_one = |r| visit(page::owned_event(partition, r));
            let visited = || self.log.visit_shared(p, start, end, &mut visit_one);
            return crate::blocking::blocking(visited).map(drop);
        }
        let mut next = start;
        while next < end {
            let page = page::read_page(&self.log, p, (next, end), RANGE_PAGE_BYTES).await;
            next = page.visit(next, end, visit)?;
        }
        Ok(())
    }
}
