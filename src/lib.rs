//! # Strata
//!
//! A persistent embedded storage engine: durable, partitioned, append-only logs on
//! memory-mapped, CRC-checked segment files, with group commit, retention, keyed compaction and
//! the `MetadataEventLog` and `CoordinationTransport` seams on top.
//!
//! ```
//! use bytes::Bytes;
//! use futures::StreamExt;
//! use strata::event_log::{DiskEventLog, MetadataEventLog, PartitionStart};
//! use strata::{LogOptions, Store};
//!
//! # #[tokio::main(flavor = "multi_thread", worker_threads = 2)]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let dir = tempfile::tempdir()?;
//! let store = Store::open(dir.path())?;
//! let events = DiskEventLog::new(store.open_log("events", 4, LogOptions::default())?);
//!
//! // Durable before it returns (fdatasync; concurrent publishers share one sync).
//! let offset = events.publish(2, Bytes::from_static(b"hello")).await?;
//! assert_eq!(offset, 0);
//!
//! // Replay from offset 0, then tail new records.
//! let (mut stream, _handle) = events.subscribe(vec![PartitionStart { partition: 2, start_offset: 0 }]);
//! let record = stream.next().await.expect("a record");
//! assert_eq!(record.payload, Bytes::from_static(b"hello"));
//! assert_eq!(events.high_water_marks().await?, vec![0, 0, 1, 0]);
//! # Ok(())
//! # }
//! ```
//!
//! Layout: [`fs`] (the file layer every file operation goes through: the real file system, and a
//! fault-injecting one that can cut the power and write crash images), [`segment`] (pure codec,
//! writer, mmap reader, index, recovery), [`log`] (partitions, group commit, retention,
//! compaction, maintenance), [`store`] (directory lock and MANIFEST),
//! [`event_log`] and [`coordination`] (the seams), [`tools`] (inspect, verify, dump, bench).

#![deny(missing_docs)]

// Strata maps segment files, reserves blocks with `fallocate`, finds data with `SEEK_DATA` and
// syncs with `fdatasync`, as Linux provides them.
#[cfg(not(target_os = "linux"))]
compile_error!("Strata supports Linux only (memory-mapped segments, fallocate, SEEK_DATA)");

#[macro_use]
mod setters;
mod background;

mod blocking;
pub mod cold;
pub mod coordination;
pub mod error;
pub mod event_log;
pub mod fs;
#[cfg(feature = "ursula")]
pub mod group;
mod hold;
pub mod log;
mod metrics;
pub mod segment;
pub mod store;
pub mod tools;

pub use error::{StoreError, StoreResult};
pub use log::{Durability, Log, LogOptions};
pub use segment::{Compression, NewRecord, Record, RecoveryMode};
pub use store::{Store, StoreOptions, TemporaryStore};

/// Milliseconds since the Unix epoch by the system clock (0 if the clock is before 1970).
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis().min(i64::MAX as u128) as i64)
}
