//! Publish and subscribe on a durable event log, commit how far a consumer got, and resume
//! from there after a restart.
//!
//! `cargo run --example event_log`

use bytes::Bytes;
use futures::StreamExt;
use strata::event_log::{ConsumerPositions, DiskEventLog, MetadataEventLog, PartitionStart};
use strata::{LogOptions, Store};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    {
        let store = Store::open(dir.path())?;
        let events = DiskEventLog::new(store.open_log("orders", 4, LogOptions::default())?);
        let positions = ConsumerPositions::open(&store)?;
        for i in 0..10 {
            // Durable (fdatasync'd through the log's journal) when it returns.
            events
                .publish(i % 4, Bytes::from(format!("order {i}")))
                .await?;
        }
        // A consumer reads partition 1 from the start and commits how far it got.
        let start = PartitionStart {
            partition: 1,
            start_offset: 0,
        };
        let (mut stream, _assignment) = events.subscribe(vec![start]);
        let first = stream.next().await.ok_or("stream ended")?;
        println!("consumed {:?} at offset {}", first.payload, first.offset);
        positions
            .commit("orders", "billing", 1, first.offset + 1)
            .await?;
        println!(
            "lag of billing on partition 1: {}",
            positions.lag(events.log(), "billing", 1)?
        );
        store.close_blocking()?;
    }
    // After a restart the consumer resumes where it committed.
    let store = Store::open(dir.path())?;
    let events = DiskEventLog::new(store.open_log("orders", 4, LogOptions::default())?);
    let positions = ConsumerPositions::open(&store)?;
    let resume = positions.committed("orders", "billing", 1).unwrap_or(0);
    let (mut stream, _assignment) = events.subscribe(vec![PartitionStart {
        partition: 1,
        start_offset: resume,
    }]);
    let next = stream.next().await.ok_or("stream ended")?;
    println!("resumed at offset {resume}: {:?}", next.payload);
    Ok(())
}
