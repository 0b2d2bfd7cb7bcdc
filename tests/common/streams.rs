//! Stream helpers shared by the group engine's cold-tier suites (`group_cold`, `cold_faults`).
#![allow(dead_code)]

use bytes::Bytes;
use strata::group::DiskGroupEngine;
use ursula_runtime::{
    AppendRequest, ColdWriteAdmission, CreateStreamRequest, GroupEngine, GroupEngineError,
    ReadStreamRequest,
};
use ursula_shard::{BucketStreamId, ShardPlacement};

/// The content type of every stream these suites create (binary).
pub const CT: &str = "application/octet-stream";

/// Creates binary stream `id` at time 1.
pub async fn create_stream(engine: &mut DiskGroupEngine, id: &BucketStreamId, p: ShardPlacement) {
    let mut create = CreateStreamRequest::new(id.clone(), CT);
    create.now_ms = 1;
    engine
        .create_stream(create, p, ColdWriteAdmission::default())
        .await
        .expect("create");
}

/// Appends `count` records of 50 to 450 bytes to `id` at time `now`, each acknowledged at the
/// offset `model` predicts, and adds them to `model`.
pub async fn append_many(
    engine: &mut DiskGroupEngine,
    id: &BucketStreamId,
    model: &mut Vec<u8>,
    (count, now): (usize, u64),
    p: ShardPlacement,
) {
    for i in 0..count {
        let payload: Vec<u8> = (0..(50 + (i * 37) % 400))
            .map(|j| (i * 7 + j) as u8)
            .collect();
        let mut r = AppendRequest::from_bytes(id.clone(), Bytes::from(payload.clone()));
        r.content_type = CT.into();
        r.now_ms = now;
        let response = engine
            .append(r, p, ColdWriteAdmission::default())
            .await
            .expect("append");
        assert_eq!(response.start_offset, model.len() as u64);
        model.extend_from_slice(&payload);
    }
}

/// Reads stream `id` from `from` to its end (up to 16 MiB) at time `now`.
pub async fn read_from(
    engine: &mut DiskGroupEngine,
    id: &BucketStreamId,
    (from, now): (u64, u64),
    p: ShardPlacement,
) -> Result<Vec<u8>, GroupEngineError> {
    let r = ReadStreamRequest {
        stream_id: id.clone(),
        offset: from,
        max_len: 1 << 24,
        now_ms: now,
        record: None,
        max_records: None,
    };
    engine.read_stream(r, p).await.map(|r| r.payload)
}
