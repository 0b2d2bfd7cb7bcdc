//! Idempotent producers: per stream and producer id, an epoch and the last accepted sequence,
//! with a receipt per accepted sequence so retries (even delayed ones) get their original answer.

use ursula_runtime::GroupEngineError;
use ursula_shard::BucketStreamId;
use ursula_stream::{
    ProducerAppendRecord, ProducerRequest, StreamErrorCode, StreamErrorContext, StreamRecordRange,
};

use super::rows::{ProducerRow, ReceiptRow};
use super::state::GroupState;
use super::tx::Tx;
use super::{stream_error, DiskGroupEngine};

/// What the producer header means for an append.
pub(crate) enum ProducerDecision {
    Accept,
    Duplicate {
        receipt: ReceiptRow,
        producer: ProducerRequest,
    },
}

impl DiskGroupEngine {
    pub(crate) fn evaluate_producer(
        &self,
        state: &GroupState,
        id: &BucketStreamId,
        producer: Option<&ProducerRequest>,
    ) -> Result<ProducerDecision, GroupEngineError> {
        let Some(p) = producer else {
            return Ok(ProducerDecision::Accept);
        };
        let Some(head) = state.producers.get(id).and_then(|m| m.get(&p.producer_id)) else {
            if p.producer_seq == 0 || !state.streams.contains_key(id) {
                return Ok(ProducerDecision::Accept);
            }
            return Err(seq_conflict(
                p,
                0,
                format!(
                    "producer '{}' expected sequence 0, received {}",
                    p.producer_id, p.producer_seq
                ),
            ));
        };
        if p.producer_epoch < head.epoch {
            return Err(GroupEngineError::stream_with_context(
                StreamErrorCode::ProducerEpochStale,
                format!(
                    "producer '{}' epoch {} is stale; current epoch is {}",
                    p.producer_id, p.producer_epoch, head.epoch
                ),
                None,
                vec![StreamErrorContext::ProducerEpochStale {
                    current_epoch: head.epoch,
                }],
            ));
        }
        if p.producer_epoch > head.epoch {
            if p.producer_seq == 0 {
                return Ok(ProducerDecision::Accept);
            }
            return Err(stream_error(
                StreamErrorCode::InvalidProducer,
                format!(
                    "producer '{}' new epoch {} must start at sequence 0",
                    p.producer_id, p.producer_epoch
                ),
            ));
        }
        if p.producer_seq <= head.seq {
            let Some(receipt) = self.db()?.receipt(id, &p.producer_id, p.producer_seq)? else {
                return Err(seq_conflict(p, head.seq + 1, format!(
                    "producer '{}' sequence {} is older than the retained receipt window ending at {}",
                    p.producer_id, p.producer_seq, head.seq
                )));
            };
            return Ok(ProducerDecision::Duplicate {
                receipt,
                producer: ProducerRequest {
                    producer_id: p.producer_id.clone(),
                    producer_epoch: head.epoch,
                    producer_seq: p.producer_seq,
                },
            });
        }
        if p.producer_seq == head.seq + 1 {
            return Ok(ProducerDecision::Accept);
        }
        Err(seq_conflict(
            p,
            head.seq + 1,
            format!(
                "producer '{}' expected sequence {}, received {}",
                p.producer_id,
                head.seq + 1,
                p.producer_seq
            ),
        ))
    }

    /// Records an accepted producer sequence with its receipt.
    pub(crate) fn record_producer(
        &self,
        tx: &mut Tx,
        id: &BucketStreamId,
        p: &ProducerRequest,
        items: Vec<ProducerAppendRecord>,
    ) {
        let Some(last) = items.last().cloned() else {
            return;
        };
        let reset = tx
            .state
            .producers
            .get(id)
            .and_then(|heads| heads.get(&p.producer_id))
            .is_none_or(|h| h.epoch != p.producer_epoch);
        let row = ProducerRow {
            epoch: p.producer_epoch,
            seq: p.producer_seq,
            last_start_offset: last.start_offset,
            last_next_offset: last.next_offset,
            last_closed: last.closed,
            last_items: items.clone(),
        };
        tx.put_producer(id, &p.producer_id, &row, reset);
        tx.put_receipt(
            id,
            &p.producer_id,
            p.producer_seq,
            &ReceiptRow {
                start_offset: last.start_offset,
                next_offset: last.next_offset,
                closed: last.closed,
                items,
            },
        );
        let heads = tx.state.producers.entry(id.clone()).or_default();
        heads.insert(p.producer_id.clone(), row);
    }
}

/// The producer's record of one accepted append: its offsets, closed flag and record range.
pub(crate) fn producer_item(
    start_offset: u64,
    next_offset: u64,
    closed: bool,
    records: Option<StreamRecordRange>,
) -> ProducerAppendRecord {
    ProducerAppendRecord {
        start_offset,
        next_offset,
        closed,
        record_start: records.map(|r| r.first_record),
        record_next: records.map(|r| r.next_record),
    }
}

/// `ProducerSeqConflict`: the sequence `p` carries is not the `expected` one.
pub(crate) fn seq_conflict(
    p: &ProducerRequest,
    expected: u64,
    message: String,
) -> GroupEngineError {
    GroupEngineError::stream_with_context(
        StreamErrorCode::ProducerSeqConflict,
        message,
        None,
        vec![StreamErrorContext::ProducerSeqConflict {
            expected_seq: expected,
            received_seq: p.producer_seq,
        }],
    )
}
