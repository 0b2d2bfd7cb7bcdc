//! One page of a partition's records as the seam hands them out (a subscription's refills, and
//! range reads on a current-thread runtime), read without holding up other tasks. A page holds
//! about a bounded number of bytes. It is read with [`Log::read`] (each record's key
//! and payload are zero-copy slices of the segment's mapping, or of its decompressed batch);
//! where that fails, the page is read again with the log's borrowing visitor, which keeps (as
//! copies) the records before the damage, then the error.

use bytes::Bytes;

use super::seam::{MetadataEventRecord, MetadataLogError, RangeVisitor};
use crate::error::StoreError;
use crate::log::Log;
use crate::segment::{Record, RecordRef};

/// Bytes a record costs a page beyond its key and payload (its fields).
const RECORD_OVERHEAD: usize = 32;

/// Records of one partition from an offset on, and where the next page starts. The records are
/// the log's own (zero-copy), turned into the seam's form as they are taken ([`Self::drain`]).
#[derive(Debug, Default)]
pub(crate) struct EventPage {
    /// The partition, as the seam numbers it.
    partition: i32,
    /// The records, in offset order.
    records: Vec<Record>,
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

    /// Takes the records, in the seam's form.
    pub fn drain(&mut self) -> impl Iterator<Item = MetadataEventRecord> + '_ {
        let partition = self.partition;
        self.records
            .drain(..)
            .map(move |r| owned_event(partition, r))
    }

    /// The records, in the seam's form, as an iterator that owns them.
    pub fn into_events(self) -> PageEvents {
        PageEvents {
            partition: self.partition,
            records: self.records.into_iter(),
        }
    }
}

/// The records of a page, handed out in the seam's form one at a time.
#[derive(Debug)]
pub(crate) struct PageEvents {
    partition: i32,
    records: std::vec::IntoIter<Record>,
}

impl Iterator for PageEvents {
    type Item = MetadataEventRecord;

    fn next(&mut self) -> Option<MetadataEventRecord> {
        let record = self.records.next()?;
        Some(owned_event(self.partition, record))
    }
}

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

/// A copy of a borrowed record.
fn copied(r: &RecordRef<'_>) -> Record {
    Record {
        offset: r.offset,
        timestamp: r.timestamp,
        key: r.key.map(Bytes::copy_from_slice),
        value: r.value.map(Bytes::copy_from_slice),
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
    let log = log.clone();
    let read = tokio::task::spawn_blocking(move || page(&log, partition, (from, until), max_bytes));
    read.await.unwrap_or_else(|e| EventPage {
        partition: partition as i32,
        records: Vec::new(),
        next: from,
        failure: Some(MetadataLogError::Other(format!("read task failed: {e}"))),
    })
}

/// [`read_page`] on the calling thread.
fn page(log: &Log, partition: u32, (from, until): (i64, i64), max_bytes: usize) -> EventPage {
    let seam_partition = partition as i32;
    match log.read(partition, from, max_bytes) {
        Ok(page) => {
            let mut records = page.records;
            records.truncate(records.partition_point(|r| r.offset < until));
            let next = match records.last() {
                Some(last) if last.offset + 1 >= until => until,
                _ => page.next_offset,
            };
            EventPage {
                partition: seam_partition,
                records,
                next,
                failure: None,
            }
        }
        Err(StoreError::Closed) => EventPage {
            partition: seam_partition,
            records: Vec::new(),
            next: from,
            failure: Some(MetadataLogError::Closed),
        },
        Err(_) => salvaged(log, partition, (from, until), max_bytes),
    }
}

/// [`page`] through the borrowing visitor: the records before a failure, then the failure.
fn salvaged(log: &Log, partition: u32, (from, until): (i64, i64), max_bytes: usize) -> EventPage {
    let mut records = Vec::new();
    let mut bytes = 0;
    let visited = log.visit(partition, from, until, &mut |r: RecordRef<'_>| {
        bytes += r.key.map_or(0, <[u8]>::len) + r.value.map_or(0, <[u8]>::len) + RECORD_OVERHEAD;
        records.push(copied(&r));
        if bytes >= max_bytes {
            return Err(Stop::Full);
        }
        Ok(())
    });
    let after_last = records.last().map_or(from, |r| r.offset + 1);
    let (next, failure) = match visited {
        Ok(next) => (next, None),
        Err(Stop::Full) => (after_last, None),
        Err(Stop::Failed(e)) => (after_last, Some(e.into())),
    };
    EventPage {
        partition: partition as i32,
        records,
        next,
        failure,
    }
}
