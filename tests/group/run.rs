//! Applies one [`Op`] to Strata's engine and to ursula's in-memory engine (the oracle) and
//! returns both answers in a comparable form.

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;
use strata::group::DiskGroupEngine;
use strata::Store;
use ursula_runtime::{
    ColdStore as UrsulaColdStore, ColdWriteAdmission, FlushColdRequest, GroupEngine,
    GroupEngineError, HeadStreamRequest, InMemoryGroupEngine, PublishSnapshotRequest,
    ReadStreamRequest,
};
use ursula_shard::{BucketStreamId, ShardPlacement};
use ursula_stream::{ColdChunkRef, ColdFlushCandidate};

use super::ops::{Op, CT};

/// The placement every command names (the engines ignore it but echo it back).
const P: ShardPlacement = ShardPlacement {
    core_id: ursula_shard::CoreId(0),
    shard_id: ursula_shard::ShardId(0),
    raft_group_id: ursula_shard::RaftGroupId(1),
};

/// Both engines and what the comparison must know about their history.
pub struct Pair {
    pub dir: PathBuf,
    /// Strata's store (`None` only inside [`Pair::reopen`]).
    pub store: Option<Arc<Store>>,
    /// Strata's engine (`None` only inside [`Pair::reopen`]).
    pub strata: Option<DiskGroupEngine>,
    pub oracle: InMemoryGroupEngine,
    pub oracle_cold: Arc<UrsulaColdStore>,
    /// Streams that had cold chunks.
    pub flushed: HashSet<BucketStreamId>,
    /// Streams recreated after they had cold chunks: ursula 0.4.1's in-memory engine keys its
    /// cold index pages by stream id and generation, so it reads the old incarnation's bytes for
    /// them. Their reads are compared by shape only (Strata's own bytes for them are checked in
    /// `recreated_stream_reads_its_own_cold_bytes`).
    pub tainted: HashSet<BucketStreamId>,
    /// How Strata is (re)opened.
    pub open: fn(&std::path::Path) -> (Arc<Store>, DiskGroupEngine),
}

/// Errors compare by code and next offset (messages are free text).
pub fn key<T: std::fmt::Debug>(r: &Result<T, GroupEngineError>) -> String {
    match r {
        Ok(v) => format!("ok {v:?}"),
        Err(e) => format!(
            "err {:?} next {:?} ctx {:?} infra {}",
            e.code(),
            e.next_offset(),
            e.context(),
            e.infra().is_some()
        ),
    }
}

/// A read compared without its bytes.
pub fn read_shape(r: &Result<ursula_runtime::ReadStreamResponse, GroupEngineError>) -> String {
    key(&r
        .as_ref()
        .map(|r| {
            (
                r.offset,
                r.next_offset,
                r.payload.len(),
                r.up_to_date,
                r.closed,
            )
        })
        .map_err(Clone::clone))
}

impl Pair {
    /// Applies `op` to both engines; returns Strata's and the oracle's answers.
    pub async fn run(&mut self, op: &Op) -> (String, String) {
        let (p, none) = (P, ColdWriteAdmission::default());
        let s = self.strata.as_mut().expect("Strata is open");
        let o = &mut self.oracle;
        match op.clone() {
            Op::Create(r) => {
                let id = r.stream_id.clone();
                let a = s.create_stream(r.clone(), p, none).await;
                let b = o.create_stream(r, p, none).await;
                if a.as_ref().is_ok_and(|r| !r.already_exists) && self.flushed.contains(&id) {
                    self.tainted.insert(id);
                }
                (key(&a), key(&b))
            }
            Op::Append(r, admission) => {
                let a = s.append(r.clone(), p, admission).await;
                (key(&a), key(&o.append(r, p, admission).await))
            }
            Op::Batch(r) => {
                let a = s.append_batch(r.clone(), p, none).await;
                (key(&a), key(&o.append_batch(r, p, none).await))
            }
            Op::Read(r) => self.read(r).await,
            Op::Head(r) => {
                let a = s.head_stream(r.clone(), p).await;
                (key(&a), key(&o.head_stream(r, p).await))
            }
            Op::Touch { id, now, renew } => {
                let a = s.touch_stream_access(id.clone(), now, renew, p).await;
                (
                    key(&a),
                    key(&o.touch_stream_access(id, now, renew, p).await),
                )
            }
            Op::Close(r) => {
                let a = s.close_stream(r.clone(), p).await;
                (key(&a), key(&o.close_stream(r, p).await))
            }
            Op::Delete(r) => {
                let a = s.delete_stream(r.clone(), p).await;
                (key(&a), key(&o.delete_stream(r, p).await))
            }
            Op::SetQuota(r) => {
                let a = s.set_bucket_quota(r.clone(), p).await;
                (key(&a), key(&o.set_bucket_quota(r, p).await))
            }
            Op::FlushCold {
                request,
                shared_pack,
                step,
            } => self.flush_cold(request, shared_pack, step).await,
            Op::CheckpointAtTail { id, now } => self.checkpoint_at_tail(id, now).await,
            Op::Retention(r) => {
                let a = s.advance_retention(r.clone(), p).await;
                (key(&a), key(&o.advance_retention(r, p).await))
            }
            Op::Transaction(r) => {
                let a = s.append_transaction(r.clone(), p, none).await;
                (key(&a), key(&o.append_transaction(r, p, none).await))
            }
            Op::WriteBatch(batch) => {
                let a = s.write_batch(batch.clone(), p).await;
                (key(&a), key(&o.write_batch(batch, p).await))
            }
            op => self.run_more(op).await,
        }
    }

    /// The operations that answer with two results, and the rest.
    async fn run_more(&mut self, op: Op) -> (String, String) {
        let p = P;
        let s = self.strata.as_mut().expect("Strata is open");
        let o = &mut self.oracle;
        match op {
            Op::Attrs(update, get) => {
                let a = s.update_stream_attrs(update.clone(), p).await;
                let b = o.update_stream_attrs(update, p).await;
                let ga = s.get_stream_attrs(get.clone(), p).await;
                let gb = o.get_stream_attrs(get, p).await;
                (
                    format!("{} {}", key(&a), key(&ga)),
                    format!("{} {}", key(&b), key(&gb)),
                )
            }
            Op::Snapshots(read, delete) => {
                let a = s.read_snapshot(read.clone(), p).await;
                let b = o.read_snapshot(read, p).await;
                let da = s.delete_snapshot(delete.clone(), p).await;
                let db = o.delete_snapshot(delete, p).await;
                (
                    format!("{} {}", key(&a), key(&da)),
                    format!("{} {}", key(&b), key(&db)),
                )
            }
            Op::Bootstrap(r) => self.bootstrap(r).await,
            Op::PlanGroupFlush {
                request,
                max,
                backlog_of,
            } => {
                let a = s.plan_next_cold_flush_batch(request.clone(), p, max).await;
                let b = o.plan_next_cold_flush_batch(request, p, max).await;
                let ba = s.cold_hot_backlog(backlog_of.clone(), p).await;
                let bb = o.cold_hot_backlog(backlog_of, p).await;
                (
                    format!("{} {}", key(&a), key(&ba)),
                    format!("{} {}", key(&b), key(&bb)),
                )
            }
            Op::BatchMany(batches) => {
                let none = ColdWriteAdmission::default();
                let a = s.append_batch_many(batches.clone(), p, none).await;
                (key(&a), key(&o.append_batch_many(batches, p, none).await))
            }
            Op::ReadParts(r) => self.read_parts(r).await,
            Op::Purge(bucket) => {
                let a = s.purge_bucket(bucket.clone(), p).await;
                (key(&a), key(&o.purge_bucket(bucket, p).await))
            }
            Op::Reopen => {
                self.reopen();
                (String::new(), String::new())
            }
            op => unreachable!("run handles {op:?}"),
        }
    }

    /// Strata's engine.
    pub fn strata(&mut self) -> &mut DiskGroupEngine {
        self.strata.as_mut().expect("Strata is open")
    }

    /// Closes Strata's engine and store and opens them again.
    pub fn reopen(&mut self) {
        drop(self.strata.take());
        if let Some(store) = self.store.take() {
            store.close_blocking().expect("close");
        }
        let (store, strata) = (self.open)(&self.dir);
        self.store = Some(store);
        self.strata = Some(strata);
    }

    async fn read(&mut self, r: ReadStreamRequest) -> (String, String) {
        let a = self.strata().read_stream(r.clone(), P).await;
        let b = self.oracle.read_stream(r.clone(), P).await;
        self.compare_reads(&r.stream_id, a, b)
    }

    async fn read_parts(&mut self, r: ReadStreamRequest) -> (String, String) {
        let a = match self.strata().read_stream_parts(r.clone(), P).await {
            Ok(parts) => parts.into_response().await,
            Err(e) => Err(e),
        };
        let b = match self.oracle.read_stream_parts(r.clone(), P).await {
            Ok(parts) => parts.into_response().await,
            Err(e) => Err(e),
        };
        self.compare_reads(&r.stream_id, a, b)
    }

    fn compare_reads(
        &self,
        id: &BucketStreamId,
        a: Result<ursula_runtime::ReadStreamResponse, GroupEngineError>,
        b: Result<ursula_runtime::ReadStreamResponse, GroupEngineError>,
    ) -> (String, String) {
        if self.tainted.contains(id) {
            (read_shape(&a), read_shape(&b))
        } else {
            (key(&a), key(&b))
        }
    }

    async fn bootstrap(&mut self, r: ursula_runtime::BootstrapStreamRequest) -> (String, String) {
        let a = self.strata().bootstrap_stream(r.clone(), P).await;
        let b = self.oracle.bootstrap_stream(r.clone(), P).await;
        if !self.tainted.contains(&r.stream_id) {
            return (key(&a), key(&b));
        }
        let shape = |r: &Result<ursula_runtime::BootstrapStreamResponse, GroupEngineError>| {
            key(&r
                .as_ref()
                .map(|r| {
                    (
                        r.snapshot_offset,
                        r.updates
                            .iter()
                            .map(|u| (u.start_offset, u.next_offset))
                            .collect::<Vec<_>>(),
                        r.next_offset,
                    )
                })
                .map_err(Clone::clone))
        };
        (shape(&a), shape(&b))
    }

    async fn checkpoint_at_tail(&mut self, id: BucketStreamId, now: u64) -> (String, String) {
        let head = HeadStreamRequest {
            stream_id: id.clone(),
            now_ms: now,
        };
        let head = self.oracle.head_stream(head, P).await;
        let r = PublishSnapshotRequest {
            stream_id: id,
            snapshot_offset: head.map(|h| h.tail_offset).unwrap_or(0),
            content_type: CT.into(),
            payload: Bytes::from_static(b"snap"),
            expected_digest: None,
            now_ms: now,
        };
        let a = self.strata().publish_snapshot(r.clone(), P).await;
        (key(&a), key(&self.oracle.publish_snapshot(r, P).await))
    }

    /// Cold flush: both plan; each uploads to its own store (or one shared pack object, as
    /// ursula's cold worker writes, the chunk a slice after 7 bytes of other data); both commit.
    async fn flush_cold(
        &mut self,
        r: ursula_runtime::PlanColdFlushRequest,
        shared_pack: bool,
        step: usize,
    ) -> (String, String) {
        let id = r.stream_id.clone();
        let a = self.strata().plan_cold_flush(r.clone(), P).await;
        let b = self.oracle.plan_cold_flush(r, P).await;
        let (ka, kb) = (key(&a), key(&b));
        if let (Ok(Some(ca)), Ok(Some(cb))) = (a, b) {
            self.flushed.insert(id.clone());
            let (chunk_a, chunk_b) = if shared_pack {
                let chunk = self.upload_pack(&ca, step).await;
                (chunk.clone(), chunk)
            } else {
                let chunk_a = self.strata().upload_candidate(&ca).await.expect("upload");
                (chunk_a, self.upload_oracle(&id, &cb, step).await)
            };
            let commit = |chunk| FlushColdRequest {
                stream_id: id.clone(),
                chunk,
            };
            let fa = self.strata().flush_cold(commit(chunk_a), P).await;
            let fb = self.oracle.flush_cold(commit(chunk_b), P).await;
            assert_eq!(key(&fa), key(&fb), "flush_cold of {id} at step {step}");
        }
        (ka, kb)
    }

    /// The oracle's own upload: a raw ursula chunk.
    async fn upload_oracle(
        &self,
        id: &BucketStreamId,
        cb: &ColdFlushCandidate,
        step: usize,
    ) -> ColdChunkRef {
        let path = format!(
            "{}/chunks/{:016x}-{:016x}-{step}.bin",
            id, cb.start_offset, cb.end_offset
        );
        let size = self
            .oracle_cold
            .write_chunk(&path, &cb.payload)
            .await
            .expect("oracle upload");
        ColdChunkRef {
            start_offset: cb.start_offset,
            end_offset: cb.end_offset,
            s3_path: path,
            object_size: size,
            object_offset: 0,
            shared_object: false,
            payload_digest: cb.payload_digest.clone(),
        }
    }

    /// One shared pack object in both cold stores holding `ca`'s bytes after 7 other bytes.
    async fn upload_pack(&self, ca: &ColdFlushCandidate, step: usize) -> ColdChunkRef {
        let path = format!("_packs/00000001/{step:08}.bin");
        let mut pack = b"other..".to_vec();
        pack.extend_from_slice(&ca.payload);
        self.strata
            .as_ref()
            .expect("Strata is open")
            .cold_store()
            .put(&path, Bytes::from(pack.clone()))
            .await
            .expect("pack upload");
        let size = self
            .oracle_cold
            .write_chunk(&path, &pack)
            .await
            .expect("oracle pack upload");
        ColdChunkRef {
            start_offset: ca.start_offset,
            end_offset: ca.end_offset,
            s3_path: path,
            object_size: size,
            object_offset: 7,
            shared_object: true,
            payload_digest: ca.payload_digest.clone(),
        }
    }
}
