//! Append transactions: appends to several streams of one bucket and affinity key, all or none.
//! The operations are planned and applied in order (each sees the ones before it), with the
//! payload offsets they will get; their payloads are then written in one log round and the whole
//! transaction commits as one commit record.

use std::collections::BTreeMap;

use bytes::Bytes;
use ursula_runtime::{
    AppendTransactionRequest, AppendTransactionResponse, ColdWriteAdmission, GroupEngineError,
};
use ursula_shard::{BucketStreamId, ShardPlacement};
use ursula_stream::StreamErrorCode;

use super::append::{AppendInput, AppendOutcome};
use super::payload::PayloadLog;
use super::tx::Tx;
use super::{not_found, stream_error, DiskGroupEngine};

impl DiskGroupEngine {
    /// `append_transaction`: appends to several streams of one bucket and affinity key, all or
    /// none: every payload is written in one payload-log round and every state change in one
    /// commit. Operations are checked in order against the state the earlier ones leave.
    pub(crate) async fn append_transaction_inner(
        &mut self,
        request: AppendTransactionRequest,
        placement: ShardPlacement,
        admission: ColdWriteAdmission,
    ) -> Result<AppendTransactionResponse, GroupEngineError> {
        let operations = request.operations;
        let Some(first) = operations.first() else {
            return Err(GroupEngineError::new(
                "append transaction must contain at least one operation",
            ));
        };
        let total: u64 = operations.iter().map(|op| op.payload.len() as u64).sum();
        self.check_admission(&self.state, &first.stream_id, admission, total)?;
        let bucket = first.stream_id.bucket_id.clone();
        let Some(affinity) = first.stream_id.affinity_key.clone() else {
            return Err(stream_error(
                StreamErrorCode::InvalidStreamId,
                "append transaction streams must use path affinity",
            ));
        };
        for op in &operations {
            let id = &op.stream_id;
            if id.bucket_id != bucket || id.affinity_key.as_deref() != Some(affinity.as_str()) {
                return Err(stream_error(
                    StreamErrorCode::InvalidStreamId,
                    "append transaction streams must share one bucket and affinity key",
                ));
            }
            let row = self.state.streams.get(id).ok_or_else(|| not_found(id))?;
            if super::state::is_expired(&row.metadata, op.now_ms) {
                return Err(not_found(id));
            }
        }
        let inputs: Vec<AppendInput> = operations.into_iter().map(AppendInput::from).collect();
        let mut tx = Tx::new(&self.state);
        let applied = self.plan_transaction(&mut tx, &inputs)?;
        // A failed payload write drops the planned operations with `tx`.
        let now_ms = inputs.first().map_or(0, |i| i.now_ms);
        tx.start_digests_early();
        self.write_planned(&applied, now_ms).await?;
        let group_hot = tx.state.group_hot_bytes();
        let mut responses = Vec::with_capacity(applied.len());
        for (input, op) in inputs.iter().zip(applied) {
            let mut response =
                self.append_response(&tx.state, &input.stream_id, op.outcome, placement)?;
            response.stream_append_count = op.count;
            response.group_commit_index = op.commit;
            response.group_hot_bytes = group_hot;
            responses.push(response);
        }
        self.commit(tx).await?;
        Ok(AppendTransactionResponse {
            placement,
            items: responses,
        })
    }

    /// Plans and applies the operations in order (each sees the ones before it); an operation
    /// that writes is given the payload offset it will get in its stream's partition.
    fn plan_transaction(
        &self,
        tx: &mut Tx,
        inputs: &[AppendInput],
    ) -> Result<Vec<TransactionOp>, GroupEngineError> {
        let mut next: BTreeMap<u32, u64> = BTreeMap::new();
        let mut out = Vec::with_capacity(inputs.len());
        for input in inputs {
            let partition = tx
                .state
                .streams
                .get(&*input.stream_id)
                .map_or(0, |r| r.partition);
            let (outcome, payload) = match self.plan_append(tx, input.clone())? {
                Err(answer) => (answer, None),
                Ok(plan) if plan.input.payload.is_empty() => {
                    (self.apply_append(tx, plan, None)?, None)
                }
                Ok(plan) => {
                    let offset = match next.get(&partition) {
                        Some(&offset) => offset,
                        None => self.payloads.next_offset(partition)?,
                    };
                    next.insert(partition, offset + 1);
                    let payload = plan.input.payload.clone();
                    (
                        self.apply_append(tx, plan, Some(offset))?,
                        Some((offset, payload)),
                    )
                }
            };
            if matches!(outcome, AppendOutcome::Closed { .. }) {
                return Err(GroupEngineError::new(
                    "append transaction operations must carry payload",
                ));
            }
            let count = tx
                .state
                .streams
                .get(&*input.stream_id)
                .map_or(0, |r| r.append_count);
            out.push(TransactionOp {
                id: BucketStreamId::clone(&input.stream_id),
                partition,
                outcome,
                payload,
                count,
                commit: tx.state.commit_index,
            });
        }
        Ok(out)
    }

    /// Writes the payloads of the planned operations (one log round, a batch per stream) and
    /// checks each landed at its planned offset.
    async fn write_planned(
        &self,
        ops: &[TransactionOp],
        now_ms: u64,
    ) -> Result<(), GroupEngineError> {
        let items: Vec<(BucketStreamId, u32, Vec<Bytes>)> = ops
            .iter()
            .filter_map(|op| {
                let (_, payload) = op.payload.as_ref()?;
                Some((op.id.clone(), op.partition, vec![payload.clone()]))
            })
            .collect();
        let planned: Vec<u64> = ops
            .iter()
            .filter_map(|op| op.payload.as_ref().map(|(offset, _)| *offset))
            .collect();
        let written = self.payloads.append_many(items, now_ms).await?;
        for (offsets, planned) in written.iter().zip(planned) {
            PayloadLog::check_planned(planned, offsets.first().copied())?;
        }
        Ok(())
    }
}

/// One planned operation of a transaction.
struct TransactionOp {
    id: BucketStreamId,
    partition: u32,
    outcome: AppendOutcome,
    /// The payload and the offset planned for it, when the operation writes.
    payload: Option<(u64, Bytes)>,
    /// The stream's append count and the commit index right after the operation.
    count: u64,
    commit: u64,
}
