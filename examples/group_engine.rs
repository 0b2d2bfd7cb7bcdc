//! The group engine (ursula's `GroupEngine` on Strata): create a stream, append, flush the
//! sealed bytes to the cold tier, and read them back, across a restart.
//!
//! `cargo run --example group_engine`

use bytes::Bytes;
use strata::group::DiskGroupEngine;
use ursula_runtime::{
    AppendRequest, ColdWriteAdmission, CreateStreamRequest, GroupEngine, ReadStreamRequest,
};
use ursula_shard::{BucketStreamId, CoreId, RaftGroupId, ShardId, ShardPlacement};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let dir = tempfile::tempdir()?;
    let p = ShardPlacement {
        core_id: CoreId(0),
        shard_id: ShardId(0),
        raft_group_id: RaftGroupId(0),
    };
    let none = ColdWriteAdmission::default();
    let id = BucketStreamId::new("tenant", "orders");
    {
        let store = strata::Store::open(dir.path())?;
        // State in <dir>/groups/group-0 (RocksDB), payloads in a Strata log, cold objects in <dir>/cold.
        let mut engine = DiskGroupEngine::open_local(&store, "group-0")?;
        engine
            .create_stream(CreateStreamRequest::new(id.clone(), "text/plain"), p, none)
            .await?;
        for i in 0..3 {
            let mut append =
                AppendRequest::from_bytes(id.clone(), Bytes::from(format!("order {i}\n")));
            append.content_type = "text/plain".into();
            engine.append(append, p, none).await?; // one fdatasync per command
        }
        let flushed = engine.flush_stream_cold(&id, 1 << 20, p).await?;
        println!("flushed to the cold tier: {flushed:?}");
    }
    let store = strata::Store::open(dir.path())?;
    let mut engine = DiskGroupEngine::open_local(&store, "group-0")?;
    let read = ReadStreamRequest {
        stream_id: id,
        offset: 0,
        max_len: 1 << 20,
        now_ms: 0,
        record: None,
        max_records: None,
    };
    let payload = engine.read_stream(read, p).await?.payload;
    println!("after a restart: {:?}", String::from_utf8_lossy(&payload));
    assert_eq!(payload, b"order 0\norder 1\norder 2\n");
    Ok(())
}
