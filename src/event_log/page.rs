//! One page of a partition's records as the seam hands them out (a subscription's refills, and
//! range reads on a current-thread runtime), read without holding up other tasks. A page holds
//! about a bounded number of bytes. It is read with the log's shared visitor: each record's key
//! and payload are zero-copy slices of the segment's mapping (or of its decompressed batch),
//! and a read that fails keeps the records before the damage, then the error.

use super::seam::{MetadataEventRecord, MetadataLogError, RangeVisitor};
use crate::error::StoreError;
use crate::log::Log;
use crate::segment::Record;

/// Bytes a record costs a page beyond its key and payload (its fields).
const RECORD_OVERHEAD: usize = 32;

/// Records of one partition from an offset on, in the seam's form, and where the next page
/// starts.
#[derive(Debug, Default)]
pub(crate) struct EventPage {
    /// The partition, as the seam numbers it.
    partition: i32,
    /// The records, in offset order.
    records: Vec<MetadataEventRecord>,
    /// Where the next page starts (past compacted gaps the page stepped over).
    pub next: i64,
    /// The error that ended the page early (after `records`), if any.
    pub failure: Option<MetadataLogError>,
}

impl EventPage {
    /// True when the page holds no record.
    pub fn is_empty(&self) -> bool {
        self.records.is_empty()
    }

    /// Passes the page's records (read from `from` on, up to `until`) to `visit`; returns where
    /// the next page starts, or the error that ended the page or the visit.
    pub fn visit(
        mut self,
        from: i64,
        until: i64,
        visit: &mut RangeVisitor<'_>,
    ) -> Result<i64, MetadataLogError> {
        for record in self.drain() {
            visit(record)?;
        }
        if let Some(e) = self.failure.take() {
            return Err(e);
        }
        if self.next <= from {
            return Err(MetadataLogError::Other(format!(
                "partition {} returned no record before {until}",
                self.partition
            )));
        }
        Ok(self.next)
    }

    /// Takes the records.
    pub fn drain(&mut self) -> std::vec::Drain<'_, MetadataEventRecord> {
        self.records.drain(..)
    }

    /// The records, as an iterator that owns them.
    pub fn into_events(self) -> PageEvents {
        self.records.into_iter()
    }
}

/// The records of a page, handed out one at a time.
pub(crate) type PageEvents = std::vec::IntoIter<MetadataEventRecord>;

/// Why a visit stopped before `until`.
enum Stop {
    /// The page holds its bytes.
    Full,
    /// The read failed.
    Failed(StoreError),
}

impl From<StoreError> for Stop {
    fn from(e: StoreError) -> Self {
        Stop::Failed(e)
    }
}

/// The seam's form of a record of `partition`.
pub(crate) fn owned_event(partition: i32, record: Record) -> MetadataEventRecord {
    let tombstone = record.is_tombstone();
    MetadataEventRecord {
        partition,
        offset: record.offset,
        key: record.key,
        payload: record.value.unwrap_or_default(),
        tombstone,
    }
}

/// Reads the records of `partition` in `[from, until)` holding about `max_bytes` (at least
/// one record) without holding up other tasks: under `block_in_place` on a multi-thread runtime
/// (and inline outside a runtime), on the blocking pool on a current-thread runtime.
pub(crate) async fn read_page(
    log: &Log,
    partition: u32,
    (from, until): (i64, i64),
    max_bytes: usize,
) -> EventPage {
    if !crate::blocking::runs_inline_on_executor() {
        return crate::blocking::blocking(|| page(log, partition, (from, until), max_bytes));
    }
    spawn_page(log, partition, (from, until), max_bytes)
        .page()
        .await
}

/// A page being read on the blocking pool.
#[derive(Debug)]
pub(crate) struct PageRead {
    partition: u32,
    from: i64,
    task: tokio::task::JoinHandle<EventPage>,
}

impl PageRead {
    /// The page, once read (a read task that failed is the page's failure).
    pub async fn page(self) -> EventPage {
        self.task.await.unwrap_or_else(|e| EventPage {
            partition: self.partition as i32,
            records: Vec::new(),
            next: self.from,
            failure: Some(MetadataLogError::Other(format!("read task failed: {e}"))),
        })
    }
}

/// Starts reading what [`read_page`] reads on the blocking pool; the caller awaits it when it
/// wants the page (or drops it: the read then ends unobserved).
pub(crate) fn spawn_page(
    log: &Log,
    partition: u32,
    (from, until): (i64, i64),
    max_bytes: usize,
) -> PageRead {
    let log = log.clone();
    let task = tokio::task::spawn_blocking(move || page(&log, partition, (from, until), max_bytes));
    PageRead {
        partition,
        from,
        task,
    }
}

/// [`read_page`] on the calling thread: the records before a failure, then the failure.
fn page(log: &Log, partition: u32, (from, until): (i64, i64), max_bytes: usize) -> EventPage {
    let seam_partition = partition as i32;
    let mut records = Vec::new();
    let mut bytes = 0;
    let visited = log.visit_shared(partition, from, until, &mut |r: Record| {
        let parts = r.key.as_ref().map_or(0, |k| k.len()) + r.value.as_ref().map_or(0, |v| v.len());
        bytes += parts + RECORD_OVERHEAD;
        records.push(owned_event(seam_partition, r));
        match bytes >= max_bytes {
            true => Err(Stop::Full),
            false => Ok(()),
        }
    });
    let after_last = records.last().map_or(from, |r| r.offset + 1);
    let (next, failure) = match visited {
        Ok(next) => (next, None),
        Err(Stop::Full) => (after_last, None),
        Err(Stop::Failed(e)) => (after_last, Some(e.into())),
    };
    EventPage {
        partition: seam_partition,
        records,
        next,
        failure,
    }
}
