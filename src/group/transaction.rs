//! Append transactions: appends to several streams of one bucket and affinity key, all or none.

use bytes::Bytes;
use ursula_runtime::{
    AppendTransactionRequest, AppendTransactionResponse, ColdWriteAdmission, GroupEngineError,
};
use ursula_shard::{BucketStreamId, ShardPlacement};
use ursula_stream::StreamErrorCode;

use super::append::{AppendInput, AppendOutcome};
use super::db::Tx;
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
        self.check_admission(&first.stream_id, admission, total)?;
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
        // Dry run on a scratch copy of memory: which operations write, and do all of them pass?
        let ids: Vec<BucketStreamId> = inputs.iter().map(|i| i.stream_id.clone()).collect();
        let saved = self.state.stash(&ids);
        let dry = self.run_transaction(&inputs, None);
        self.state.restore(saved);
        let writes = dry?;
        // Payloads of the writing operations, in one durability round.
        let items: Vec<(BucketStreamId, u32, Vec<Bytes>)> = inputs
            .iter()
            .zip(&writes)
            .map(|(input, writes)| {
                let partition = self
                    .state
                    .streams
                    .get(&input.stream_id)
                    .map_or(0, |r| r.partition);
                let payloads = if *writes {
                    vec![input.payload.clone()]
                } else {
                    Vec::new()
                };
                (input.stream_id.clone(), partition, payloads)
            })
            .collect();
        let now_ms = inputs.first().map_or(0, |i| i.now_ms);
        let offsets = self.payloads.append_many(items, now_ms).await?;
        let offsets: Vec<Option<u64>> = offsets.into_iter().map(|o| o.first().copied()).collect();
        let mut tx = Tx::default();
        let saved = self.state.stash(&ids);
        let applied = match self.run_transaction_into(&mut tx, &inputs, Some(&offsets)) {
            Ok(applied) => applied,
            Err(e) => {
                self.state.restore(saved);
                return Err(e);
            }
        };
        let group_hot = self.state.group_hot_bytes();
        let mut responses = Vec::with_capacity(applied.len());
        for (input, (outcome, count, commit)) in inputs.iter().zip(applied) {
            let mut response = self.append_response(&input.stream_id, outcome, placement)?;
            response.stream_append_count = count;
            response.group_commit_index = commit;
            response.group_hot_bytes = group_hot;
            responses.push(response);
        }
        self.commit(tx)?;
        Ok(AppendTransactionResponse {
            placement,
            items: responses,
        })
    }

    /// Dry run of a transaction: which operations append bytes.
    fn run_transaction(
        &mut self,
        inputs: &[AppendInput],
        offsets: Option<&[Option<u64>]>,
    ) -> Result<Vec<bool>, GroupEngineError> {
        let mut scratch = Tx::default();
        let applied = self.run_transaction_into(&mut scratch, inputs, offsets)?;
        Ok(applied
            .iter()
            .map(|(o, _, _)| {
                matches!(
                    o,
                    AppendOutcome::Appended {
                        deduplicated: false,
                        ..
                    }
                )
            })
            .collect())
    }

    /// Plans and applies each operation in order into `tx`; `offsets` are the payload records
    /// (None in a dry run). Returns each outcome with the stream's append count and the commit
    /// index right after it.
    fn run_transaction_into(
        &mut self,
        tx: &mut Tx,
        inputs: &[AppendInput],
        offsets: Option<&[Option<u64>]>,
    ) -> Result<Vec<(AppendOutcome, u64, u64)>, GroupEngineError> {
        let mut out = Vec::with_capacity(inputs.len());
        for (i, input) in inputs.iter().enumerate() {
            let outcome = match self.plan_append(tx, input.clone())? {
                Err(answer) => answer,
                Ok(plan) => {
                    let log_offset = match offsets {
                        Some(offsets) => offsets.get(i).copied().flatten(),
                        None => (!plan.input.payload.is_empty()).then_some(0),
                    };
                    self.apply_append(tx, plan, log_offset)?
                }
            };
            if matches!(outcome, AppendOutcome::Closed { .. }) {
                return Err(GroupEngineError::new(
                    "append transaction operations must carry payload",
                ));
            }
            let count = self
                .state
                .streams
                .get(&input.stream_id)
                .map_or(0, |r| r.append_count);
            out.push((outcome, count, self.state.commit_index));
        }
        Ok(out)
    }
}
