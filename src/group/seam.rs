//! `ursula_runtime::GroupEngine` (0.4.1) for [`DiskGroupEngine`]: every one of the 38 methods,
//! the provided ones the in-memory engine leaves unsupported included, plus a factory for the
//! shard runtime.

use std::sync::Arc;

use ursula_runtime::{
    AdvanceRetentionRequest, AppendBatchRequest, AppendExternalRequest, AppendRequest,
    AppendTransactionRequest, BootstrapStreamRequest, CloseStreamRequest, ColdWriteAdmission,
    CompactColdRequest, CreateStreamExternalRequest, CreateStreamRequest, DeleteSnapshotRequest,
    DeleteStreamRequest, FlushColdRequest, GetStreamAttrsRequest, GroupAckColdGcFuture,
    GroupAdvanceRetentionFuture, GroupAppendBatchFuture, GroupAppendFuture,
    GroupAppendTransactionFuture, GroupBootstrapStreamFuture, GroupBucketUsageFuture,
    GroupCloseStreamFuture, GroupColdHotBacklogFuture, GroupCompactColdFuture,
    GroupCreateStreamFuture, GroupDeleteSnapshotFuture, GroupDeleteStreamFuture, GroupEngine,
    GroupEngineCreateFuture, GroupEngineError, GroupEngineFactory, GroupEngineMetrics,
    GroupFlushColdFuture, GroupGetStreamAttrsFuture, GroupHeadStreamFuture,
    GroupImportGroupStateFuture, GroupInstallSnapshotFuture, GroupPlanColdFlushFuture,
    GroupPlanColdGcFuture, GroupPlanNextColdFlushBatchFuture, GroupPublishSnapshotFuture,
    GroupPurgeBucketFuture, GroupReadSnapshotFuture, GroupReadStreamFuture,
    GroupSetBucketQuotaFuture, GroupShutdownFuture, GroupSnapshot, GroupSnapshotFuture,
    GroupTouchStreamAccessFuture, GroupUpdateStreamAttrsFuture, HeadStreamRequest,
    ImportGroupStateRequest, PlanColdFlushRequest, PlanGroupColdFlushRequest,
    PublishSnapshotRequest, ReadSnapshotRequest, ReadStreamRequest, SetBucketQuotaRequest,
    UpdateStreamAttrsRequest,
};
use ursula_shard::{BucketStreamId, ShardPlacement};
use ursula_stream::BucketUsageSnapshot;

use super::{DiskGroupEngine, GroupOptions};
use crate::cold::ColdStore;
use crate::store::Store;

/// Runs one command of the seam: first settles a commit that failed before it
/// ([`DiskGroupEngine::begin`]); before returning it writes the runtime cold-index pages that
/// commits changed (a no-op without a runtime cold index).
macro_rules! command {
    ($engine:ident, $body:block) => {
        Box::pin(async move {
            $engine.begin()?;
            let result = async { $body }.await;
            $engine.publish_cold_index().await;
            result
        })
    };
}

impl GroupEngine for DiskGroupEngine {
    fn create_stream<'a>(
        &'a mut self,
        request: CreateStreamRequest,
        placement: ShardPlacement,
        admission: ColdWriteAdmission,
    ) -> GroupCreateStreamFuture<'a> {
        command!(self, {
            self.create_stream_inner(request, placement, admission)
                .await
        })
    }

    fn head_stream<'a>(
        &'a mut self,
        request: HeadStreamRequest,
        placement: ShardPlacement,
    ) -> GroupHeadStreamFuture<'a> {
        command!(self, { self.head_inner(request, placement).await })
    }

    fn bucket_usage<'a>(&'a mut self, _placement: ShardPlacement) -> GroupBucketUsageFuture<'a> {
        command!(self, {
            Ok(self
                .state
                .usage
                .iter()
                .map(|(bucket_id, usage)| BucketUsageSnapshot {
                    bucket_id: bucket_id.clone(),
                    usage: *usage,
                })
                .collect::<Vec<_>>())
        })
    }

    fn read_stream<'a>(
        &'a mut self,
        request: ReadStreamRequest,
        placement: ShardPlacement,
    ) -> GroupReadStreamFuture<'a> {
        command!(self, { self.read_inner(request, placement).await })
    }

    fn touch_stream_access<'a>(
        &'a mut self,
        stream_id: BucketStreamId,
        now_ms: u64,
        renew_ttl: bool,
        placement: ShardPlacement,
    ) -> GroupTouchStreamAccessFuture<'a> {
        command!(self, {
            self.touch_inner(&stream_id, now_ms, renew_ttl, placement)
                .await
        })
    }

    fn close_stream<'a>(
        &'a mut self,
        request: CloseStreamRequest,
        placement: ShardPlacement,
    ) -> GroupCloseStreamFuture<'a> {
        command!(self, { self.close_inner(request, placement).await })
    }

    fn delete_stream<'a>(
        &'a mut self,
        request: DeleteStreamRequest,
        placement: ShardPlacement,
    ) -> GroupDeleteStreamFuture<'a> {
        command!(self, {
            let response = self
                .delete_stream_inner(&request.stream_id, placement)
                .await?;
            self.reclaim_hot_segments()?;
            Ok(response)
        })
    }

    fn append<'a>(
        &'a mut self,
        request: AppendRequest,
        placement: ShardPlacement,
        admission: ColdWriteAdmission,
    ) -> GroupAppendFuture<'a> {
        command!(self, {
            self.append_inner(request, placement, admission).await
        })
    }

    fn append_batch<'a>(
        &'a mut self,
        request: AppendBatchRequest,
        placement: ShardPlacement,
        admission: ColdWriteAdmission,
    ) -> GroupAppendBatchFuture<'a> {
        command!(self, {
            self.append_batch_inner(request, placement, admission).await
        })
    }

    fn snapshot<'a>(&'a mut self, placement: ShardPlacement) -> GroupSnapshotFuture<'a> {
        command!(self, { self.group_snapshot(placement).await })
    }

    fn install_snapshot<'a>(
        &'a mut self,
        snapshot: GroupSnapshot,
    ) -> GroupInstallSnapshotFuture<'a> {
        command!(self, {
            let GroupSnapshot {
                group_commit_index,
                stream_snapshot,
                stream_append_counts,
                ..
            } = snapshot;
            self.install(
                stream_snapshot,
                group_commit_index,
                &stream_append_counts,
                crate::now_ms() as u64,
            )
            .await
        })
    }

    fn create_stream_external<'a>(
        &'a mut self,
        request: CreateStreamExternalRequest,
        placement: ShardPlacement,
    ) -> GroupCreateStreamFuture<'a> {
        command!(self, {
            self.create_external_inner(request, placement).await
        })
    }

    fn append_external<'a>(
        &'a mut self,
        request: AppendExternalRequest,
        placement: ShardPlacement,
    ) -> GroupAppendFuture<'a> {
        command!(self, {
            self.append_external_inner(request, placement).await
        })
    }

    fn get_stream_attrs<'a>(
        &'a mut self,
        request: GetStreamAttrsRequest,
        placement: ShardPlacement,
    ) -> GroupGetStreamAttrsFuture<'a> {
        command!(self, { self.get_attrs_inner(request, placement).await })
    }

    fn publish_snapshot<'a>(
        &'a mut self,
        request: PublishSnapshotRequest,
        placement: ShardPlacement,
    ) -> GroupPublishSnapshotFuture<'a> {
        command!(self, {
            self.publish_snapshot_inner(request, placement).await
        })
    }

    fn advance_retention<'a>(
        &'a mut self,
        request: AdvanceRetentionRequest,
        placement: ShardPlacement,
    ) -> GroupAdvanceRetentionFuture<'a> {
        command!(self, {
            let response = self.advance_retention_inner(request, placement).await?;
            self.reclaim_hot_segments()?;
            Ok(response)
        })
    }

    fn import_group_state<'a>(
        &'a mut self,
        request: ImportGroupStateRequest,
        placement: ShardPlacement,
    ) -> GroupImportGroupStateFuture<'a> {
        command!(self, {
            self.import_inner(*request.snapshot, placement).await
        })
    }

    fn set_bucket_quota<'a>(
        &'a mut self,
        request: SetBucketQuotaRequest,
        placement: ShardPlacement,
    ) -> GroupSetBucketQuotaFuture<'a> {
        command!(self, { self.set_quota_inner(request, placement).await })
    }

    fn read_snapshot<'a>(
        &'a mut self,
        request: ReadSnapshotRequest,
        placement: ShardPlacement,
    ) -> GroupReadSnapshotFuture<'a> {
        command!(self, { self.read_snapshot_inner(request, placement).await })
    }

    fn delete_snapshot<'a>(
        &'a mut self,
        request: DeleteSnapshotRequest,
        placement: ShardPlacement,
    ) -> GroupDeleteSnapshotFuture<'a> {
        command!(self, {
            self.delete_snapshot_inner(request, placement).await
        })
    }

    fn bootstrap_stream<'a>(
        &'a mut self,
        request: BootstrapStreamRequest,
        placement: ShardPlacement,
    ) -> GroupBootstrapStreamFuture<'a> {
        command!(self, { self.bootstrap_inner(request, placement).await })
    }

    fn update_stream_attrs<'a>(
        &'a mut self,
        request: UpdateStreamAttrsRequest,
        placement: ShardPlacement,
    ) -> GroupUpdateStreamAttrsFuture<'a> {
        command!(self, { self.update_attrs_inner(request, placement).await })
    }

    fn ack_cold_gc<'a>(
        &'a mut self,
        up_to_seq: u64,
        placement: ShardPlacement,
    ) -> GroupAckColdGcFuture<'a> {
        command!(self, { self.ack_cold_gc_inner(up_to_seq, placement).await })
    }

    fn purge_bucket<'a>(
        &'a mut self,
        bucket_id: String,
        placement: ShardPlacement,
    ) -> GroupPurgeBucketFuture<'a> {
        command!(self, {
            let response = self.purge_bucket_inner(&bucket_id, placement).await?;
            self.reclaim_hot_segments()?;
            Ok(response)
        })
    }

    fn plan_cold_gc<'a>(
        &'a mut self,
        max: usize,
        _placement: ShardPlacement,
    ) -> GroupPlanColdGcFuture<'a> {
        command!(self, { Ok(self.plan_cold_gc_inner(max)) })
    }

    fn append_transaction<'a>(
        &'a mut self,
        request: AppendTransactionRequest,
        placement: ShardPlacement,
        admission: ColdWriteAdmission,
    ) -> GroupAppendTransactionFuture<'a> {
        command!(self, {
            self.append_transaction_inner(request, placement, admission)
                .await
        })
    }

    fn flush_cold<'a>(
        &'a mut self,
        request: FlushColdRequest,
        placement: ShardPlacement,
    ) -> GroupFlushColdFuture<'a> {
        command!(self, {
            self.check_object(&request.chunk).await?;
            let response = self.flush_cold_inner(request, placement).await?;
            self.reclaim_hot_segments()?;
            Ok(response)
        })
    }

    fn compact_cold<'a>(
        &'a mut self,
        request: CompactColdRequest,
        placement: ShardPlacement,
    ) -> GroupCompactColdFuture<'a> {
        command!(self, {
            self.check_object(&request.replacement).await?;
            self.compact_cold_inner(request, placement).await
        })
    }

    fn plan_cold_flush<'a>(
        &'a mut self,
        request: PlanColdFlushRequest,
        _placement: ShardPlacement,
    ) -> GroupPlanColdFlushFuture<'a> {
        command!(self, { self.plan_cold_flush_inner(request) })
    }

    fn plan_next_cold_flush_batch<'a>(
        &'a mut self,
        request: PlanGroupColdFlushRequest,
        _placement: ShardPlacement,
        max_candidates: usize,
    ) -> GroupPlanNextColdFlushBatchFuture<'a> {
        command!(self, {
            self.plan_flush_batch_inner(request, max_candidates)
        })
    }

    fn cold_hot_backlog<'a>(
        &'a mut self,
        stream_id: BucketStreamId,
        _placement: ShardPlacement,
    ) -> GroupColdHotBacklogFuture<'a> {
        command!(self, { Ok(self.backlog_inner(stream_id)) })
    }

    fn shutdown<'a>(&'a mut self) -> GroupShutdownFuture<'a> {
        command!(self, {
            self.db()?.flush()?;
            self.payloads
                .log()
                .sync()
                .await
                .map_err(|e| GroupEngineError::new(e.to_string()))?;
            Ok(())
        })
    }
}

/// Creates one [`DiskGroupEngine`] per raft group (`group-<id>`) of a store, for
/// `ShardRuntime::spawn_with_engine_factory`.
pub struct DiskGroupEngineFactory {
    store: Arc<Store>,
    cold: ColdStore,
    options: GroupOptions,
    runtime_cold: Option<ursula_runtime::ColdStoreHandle>,
}

impl DiskGroupEngineFactory {
    /// A factory over `store` with cold objects in `cold`.
    pub fn new(store: Arc<Store>, cold: ColdStore, options: GroupOptions) -> Self {
        Self {
            store,
            cold,
            options,
            runtime_cold: None,
        }
    }

    /// Engines keep ursula's cold-index pages in `runtime_cold`, the cold store given to the
    /// runtime (`ShardRuntime::spawn_with_engine_factory_and_cold_store`), so that the runtime's
    /// background cold compaction finds their chunks
    /// ([`DiskGroupEngine::with_runtime_cold_index`]). Default: no pages (the runtime's
    /// compaction then finds no work in Strata groups).
    pub fn with_runtime_cold_index(
        mut self,
        runtime_cold: ursula_runtime::ColdStoreHandle,
    ) -> Self {
        self.runtime_cold = Some(runtime_cold);
        self
    }
}

impl GroupEngineFactory for DiskGroupEngineFactory {
    fn create<'a>(
        &'a self,
        placement: ShardPlacement,
        metrics: GroupEngineMetrics,
    ) -> GroupEngineCreateFuture<'a> {
        Box::pin(async move {
            let group = placement.raft_group_id.0;
            let engine = DiskGroupEngine::open(
                &self.store,
                &format!("group-{group}"),
                self.cold.clone(),
                self.options.clone(),
            )?
            .with_metrics(metrics, placement);
            let engine = match &self.runtime_cold {
                Some(runtime_cold) => engine.with_runtime_cold_index(runtime_cold.clone()),
                None => engine,
            };
            Ok(Box::new(engine) as Box<dyn GroupEngine>)
        })
    }
}
