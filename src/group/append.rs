//! Appends: single, batch (with one producer sequence for the whole batch), close, and atomic
//! multi-stream transactions. Payload bytes are written to the payload log (fsynced) before the
//! state that references them is committed.

use std::sync::Arc;

use bytes::Bytes;
use ursula_runtime::{
    AppendBatchRequest, AppendExternalRequest, AppendRequest, AppendResponse, CloseStreamRequest,
    CloseStreamResponse, ColdWriteAdmission, GroupAppendBatchResponse, GroupEngineError,
};
use ursula_shard::{BucketStreamId, ShardPlacement};
use ursula_stream::{
    ObjectPayloadRef, ProducerAppendRecord, ProducerRequest, StreamErrorCode, StreamErrorContext,
    StreamMetadata, StreamRecordRange, StreamStatus,
};

use super::deferred_digests::DeferredDigest;
use super::integrity::{count_append, integrity_external};
use super::lifecycle::validate_producer;
use super::payload::PayloadLog;
use super::producers::{producer_item, ProducerDecision};
use super::records;
use super::rows::MessageRow;
use super::state::{is_closed, is_expired, renew_ttl, GroupState};
use super::tx::Tx;
use super::{not_found, stream_error, DiskGroupEngine};

/// One append, as the state machine sees it.
#[derive(Debug, Clone)]
pub(crate) struct AppendInput {
    /// Shared by a batch's appends (one allocation per command, not per append).
    pub stream_id: Arc<BucketStreamId>,
    /// Shared like `stream_id`.
    pub content_type: Option<Arc<str>>,
    pub payload: Bytes,
    pub close_after: bool,
    pub stream_seq: Option<String>,
    pub producer: Option<ProducerRequest>,
    pub now_ms: u64,
    pub record_match: Option<u64>,
}

impl From<AppendRequest> for AppendInput {
    fn from(r: AppendRequest) -> Self {
        Self {
            stream_id: Arc::new(r.stream_id),
            content_type: Some(Arc::from(r.content_type)),
            payload: r.payload,
            close_after: r.close_after,
            stream_seq: r.stream_seq,
            producer: r.producer,
            now_ms: r.now_ms,
            record_match: r.record_match,
        }
    }
}

/// What an accepted (or answered-from-receipt) append did.
#[derive(Debug, Clone)]
pub(crate) enum AppendOutcome {
    /// Bytes were appended (or a receipt for them was found).
    Appended {
        offset: u64,
        next_offset: u64,
        closed: bool,
        deduplicated: bool,
        producer: Option<ProducerRequest>,
        record_range: Option<StreamRecordRange>,
    },
    /// An empty close was applied (or found).
    Closed {
        next_offset: u64,
        deduplicated: bool,
        record_range: Option<StreamRecordRange>,
    },
}

/// A validated append, ready to be written.
pub(crate) struct PlannedAppend {
    pub(crate) input: AppendInput,
    /// Record ends of the payload (JSON streams).
    ends: Vec<u64>,
}

impl DiskGroupEngine {
    /// Checks one append against the stream (ursula's order of checks). `Ok(Err(outcome))` is an
    /// answer without a write (a duplicate); `Ok(Ok(plan))` must then be applied.
    pub(crate) fn plan_append(
        &self,
        tx: &mut Tx,
        input: AppendInput,
    ) -> Result<Result<PlannedAppend, AppendOutcome>, GroupEngineError> {
        self.validate_scope(&tx.state, &input.stream_id)?;
        validate_producer(input.producer.as_ref())?;
        self.plan_scoped(tx, input)
    }

    /// [`Self::plan_append`] past its checks of the stream id, bucket and producer (a batch
    /// makes those once for all its appends).
    fn plan_scoped(
        &self,
        tx: &mut Tx,
        input: AppendInput,
    ) -> Result<Result<PlannedAppend, AppendOutcome>, GroupEngineError> {
        let id: &BucketStreamId = &input.stream_id;
        // One lookup for presence, expiry (`expire_if_due`'s check) and the checks below (each
        // only reads the state).
        let Some(row) = tx.state.streams.get(id) else {
            return Err(not_found(id));
        };
        if is_expired(&row.metadata, input.now_ms) {
            self.remove_stream(tx, id);
            return Err(not_found(id));
        }
        if let ProducerDecision::Duplicate { receipt, producer } =
            self.evaluate_producer(&tx.state, id, input.producer.as_ref())?
        {
            if input.payload.is_empty() {
                let record_range = self.record_range_for(
                    &tx.state,
                    id,
                    receipt.next_offset,
                    receipt.next_offset,
                    input.producer.as_ref(),
                )?;
                return Ok(Err(AppendOutcome::Closed {
                    next_offset: receipt.next_offset,
                    deduplicated: true,
                    record_range,
                }));
            }
            let record_range = self.record_range_for(
                &tx.state,
                id,
                receipt.start_offset,
                receipt.next_offset,
                Some(&producer),
            )?;
            return Ok(Err(AppendOutcome::Appended {
                offset: receipt.start_offset,
                next_offset: receipt.next_offset,
                closed: receipt.closed,
                deduplicated: true,
                producer: Some(producer),
                record_range,
            }));
        }
        if let Some(expected) = input.record_match {
            records::check_record_match(row, expected)?;
        }
        let ends = match &input.content_type {
            Some(content_type) => records::record_ends(content_type, &input.payload)?,
            None => Vec::new(),
        };
        records::prepare(row, input.payload.len() as u64, &ends)?;
        if !input.payload.is_empty() {
            self.check_retained_quota(&tx.state, &id.bucket_id, input.payload.len() as u64)?;
        }
        let m = &row.metadata;
        if is_closed(m) {
            if input.close_after && input.payload.is_empty() {
                let tail = m.tail_offset;
                let record_range =
                    self.record_range_for(&tx.state, id, tail, tail, input.producer.as_ref())?;
                return Ok(Err(AppendOutcome::Closed {
                    next_offset: tail,
                    deduplicated: false,
                    record_range,
                }));
            }
            return Err(closed_error(id, m));
        }
        if input.payload.is_empty() && !input.close_after {
            return Err(stream_error(
                StreamErrorCode::EmptyAppend,
                "append payload must be non-empty unless closing the stream",
            ));
        }
        if !input.payload.is_empty() {
            let Some(content_type) = &input.content_type else {
                return Err(stream_error(
                    StreamErrorCode::MissingContentType,
                    "append with a body must include content type",
                ));
            };
            check_content_type(m, content_type)?;
        }
        check_stream_seq(m, input.stream_seq.as_deref())?;
        Ok(Ok(PlannedAppend { input, ends }))
    }

    /// Applies a planned append whose payload (if any) already sits at `log_offset`.
    pub(crate) fn apply_append(
        &self,
        tx: &mut Tx,
        plan: PlannedAppend,
        log_offset: Option<u64>,
    ) -> Result<AppendOutcome, GroupEngineError> {
        let input = plan.input;
        let shared_id = input.stream_id;
        let id: &BucketStreamId = &shared_id;
        let len = input.payload.len() as u64;
        // The planned state's copy of the row (made by its first change in this command).
        let mut row = tx.state.streams.get_mut(id).ok_or_else(|| not_found(id))?;
        let offset = row.metadata.tail_offset;
        row.metadata.tail_offset = offset.saturating_add(len);
        if let Some(seq) = input.stream_seq {
            row.metadata.last_stream_seq = Some(seq);
        }
        renew_ttl(&mut row.metadata, input.now_ms);
        if input.close_after {
            row.metadata.status = StreamStatus::Closed;
        }
        let closed = is_closed(&row.metadata);
        let next_offset = row.metadata.tail_offset;
        let record_range = row.records.map(|c| StreamRecordRange {
            first_record: c.next,
            next_record: c.next + plan.ends.len() as u64,
        });
        if log_offset.is_some() {
            row.append_count += 1;
            count_append(&mut row, offset, next_offset);
        }
        let partition = row.partition;
        drop(row);
        if record_range.is_some() {
            // Only a stream that counts records has any to write.
            self.commit_records(tx, id, offset, &plan.ends);
        }
        if let Some(log_offset) = log_offset {
            let row = MessageRow {
                end_offset: next_offset,
                log_offset,
            };
            tx.put_message(id, partition, offset, row);
            tx.defer_digest(DeferredDigest {
                id: Arc::clone(&shared_id),
                start: offset,
                payload: input.payload,
                partition,
                log_offset,
            });
        }
        if let Some(p) = &input.producer {
            let item = producer_item(offset, next_offset, closed, record_range);
            self.record_producer(tx, id, p, vec![item]);
        }
        self.save_stream(tx, id);
        tx.state.commit_index += 1;
        if len == 0 {
            return Ok(AppendOutcome::Closed {
                next_offset,
                deduplicated: false,
                record_range,
            });
        }
        let count = records::record_count(&plan.ends, len);
        self.usage_on_append(tx, &id.bucket_id, len, count, false);
        Ok(AppendOutcome::Appended {
            offset,
            next_offset,
            closed: input.close_after,
            deduplicated: false,
            producer: input.producer,
            record_range,
        })
    }

    /// Plans, writes the payload, and applies one append into `tx` (not committed).
    pub(crate) async fn append_core(
        &self,
        tx: &mut Tx,
        input: AppendInput,
        admission: ColdWriteAdmission,
    ) -> Result<AppendOutcome, GroupEngineError> {
        let plan = match self.plan_append(tx, input)? {
            Err(answer) => {
                // A close of an already closed stream is a (no-op) committed outcome.
                if matches!(
                    answer,
                    AppendOutcome::Closed {
                        deduplicated: false,
                        ..
                    }
                ) {
                    tx.state.commit_index += 1;
                }
                return Ok(answer);
            }
            Ok(plan) => plan,
        };
        let id = BucketStreamId::clone(&plan.input.stream_id);
        self.check_admission(&tx.state, &id, admission, plan.input.payload.len() as u64)?;
        let log_offset = if plan.input.payload.is_empty() {
            None
        } else {
            let partition = tx.state.streams.get(&id).map_or(0, |r| r.partition);
            let offsets = self
                .payloads
                .append(
                    &id,
                    partition,
                    std::iter::once(plan.input.payload.clone()),
                    plan.input.now_ms,
                )
                .await?;
            offsets.first().copied()
        };
        self.apply_append(tx, plan, log_offset)
    }

    /// The response for an append outcome.
    pub(crate) fn append_response(
        &self,
        state: &GroupState,
        id: &BucketStreamId,
        outcome: AppendOutcome,
        placement: ShardPlacement,
    ) -> Result<AppendResponse, GroupEngineError> {
        match outcome {
            AppendOutcome::Appended {
                offset,
                next_offset,
                closed,
                deduplicated,
                producer,
                record_range,
            } => {
                let row = state.streams.get(id);
                Ok(AppendResponse {
                    placement,
                    start_offset: offset,
                    next_offset,
                    stream_append_count: row.map_or(0, |r| r.append_count),
                    group_commit_index: state.commit_index,
                    closed,
                    deduplicated,
                    producer,
                    record_range,
                    stream_hot_bytes: row.map_or(0, |r| GroupState::stream_hot_bytes(r)),
                    group_hot_bytes: state.group_hot_bytes(),
                })
            }
            other => Err(GroupEngineError::new(format!(
                "unexpected append response: {other:?}"
            ))),
        }
    }

    /// `append`.
    pub(crate) async fn append_inner(
        &mut self,
        request: AppendRequest,
        placement: ShardPlacement,
        admission: ColdWriteAdmission,
    ) -> Result<AppendResponse, GroupEngineError> {
        let id = request.stream_id.clone();
        if admission.max_hot_bytes_per_group.is_none() {
            self.ensure_access(&id, request.now_ms, false, placement)
                .await?;
        }
        let mut tx = Tx::new(&self.state);
        let outcome = match self.append_core(&mut tx, request.into(), admission).await {
            // Under admission ursula previews on a copy: a refused append changes nothing.
            Err(e) if admission.max_hot_bytes_per_group.is_some() => return Err(e),
            outcome => outcome,
        };
        let response = outcome.and_then(|o| self.append_response(&tx.state, &id, o, placement));
        self.finish(tx, response).await
    }

    /// `close_stream`: an empty append with `close_after`.
    pub(crate) async fn close_inner(
        &mut self,
        request: CloseStreamRequest,
        placement: ShardPlacement,
    ) -> Result<CloseStreamResponse, GroupEngineError> {
        let id = request.stream_id.clone();
        self.ensure_access(&id, request.now_ms, false, placement)
            .await?;
        let mut tx = Tx::new(&self.state);
        let input = AppendInput {
            stream_id: Arc::new(id.clone()),
            content_type: None,
            payload: Bytes::new(),
            close_after: true,
            stream_seq: request.stream_seq,
            producer: request.producer,
            now_ms: request.now_ms,
            record_match: None,
        };
        let outcome = self
            .append_core(&mut tx, input, ColdWriteAdmission::default())
            .await;
        self.sweep_expired(&mut tx, request.now_ms);
        let response = outcome.and_then(|o| match o {
            AppendOutcome::Closed {
                next_offset,
                deduplicated,
                record_range,
            } => Ok(CloseStreamResponse {
                placement,
                next_offset,
                group_commit_index: tx.state.commit_index,
                deduplicated,
                record_range,
            }),
            other => Err(GroupEngineError::new(format!(
                "unexpected close stream write response: {other:?}"
            ))),
        });
        self.finish(tx, response).await
    }

    /// `append_batch`: with a producer, one sequence for the whole batch (all or nothing);
    /// without, each payload independently.
    pub(crate) async fn append_batch_inner(
        &mut self,
        request: AppendBatchRequest,
        placement: ShardPlacement,
        admission: ColdWriteAdmission,
    ) -> Result<GroupAppendBatchResponse, GroupEngineError> {
        let id = request.stream_id.clone();
        if admission.max_hot_bytes_per_group.is_none() {
            self.ensure_access(&id, request.now_ms, false, placement)
                .await?;
        }
        let mut tx = Tx::new(&self.state);
        let result = match request.producer.clone() {
            Some(producer) => {
                self.producer_batch(
                    &mut tx,
                    &id,
                    Some(request.content_type.clone()),
                    request.payloads,
                    producer,
                    request.now_ms,
                    placement,
                    admission,
                )
                .await
            }
            None if self.accepts_run(
                &tx.state,
                &id,
                &request.content_type,
                &request.payloads,
                request.now_ms,
            ) =>
            {
                if admission.max_hot_bytes_per_group.is_some() {
                    let incoming = request.payloads.iter().map(|p| p.len() as u64).sum();
                    self.check_admission(&tx.state, &id, admission, incoming)?;
                }
                let shared_id = Arc::new(id.clone());
                let items = self
                    .append_run(
                        &mut tx,
                        &shared_id,
                        request.payloads,
                        request.now_ms,
                        placement,
                    )
                    .await?;
                Ok(GroupAppendBatchResponse { placement, items })
            }
            None => {
                let incoming: u64 = request.payloads.iter().map(|p| p.len() as u64).sum();
                let mutates = request.payloads.iter().any(|p| !p.is_empty());
                if admission.max_hot_bytes_per_group.is_some()
                    && mutates
                    && self.preview_batch_mutates(&id, &request.payloads)?
                {
                    self.check_admission(&tx.state, &id, admission, incoming)?;
                }
                let shared_id = Arc::new(id.clone());
                let content_type: Option<Arc<str>> = Some(Arc::from(request.content_type));
                let inputs: Vec<Option<AppendInput>> = request
                    .payloads
                    .into_iter()
                    .map(|payload| {
                        (!payload.is_empty()).then(|| AppendInput {
                            stream_id: Arc::clone(&shared_id),
                            content_type: content_type.clone(),
                            payload,
                            close_after: false,
                            stream_seq: None,
                            producer: None,
                            now_ms: request.now_ms,
                            record_match: None,
                        })
                    })
                    .collect();
                // A failed payload write drops the planned items with `tx`.
                let items = self
                    .independent_items(&mut tx, &id, inputs, placement)
                    .await?;
                Ok(GroupAppendBatchResponse { placement, items })
            }
        };
        match result {
            Err(e) if admission.max_hot_bytes_per_group.is_some() => Err(e),
            result => self.finish(tx, result).await,
        }
    }

    /// Applies producer-less batch items one after the other (each sees the ones before it;
    /// an item's error does not stop the rest). The items that write are given the payload
    /// offsets they will get (the engine is the payload log's only writer), and their payloads
    /// are then written together, as one batch.
    async fn independent_items(
        &self,
        tx: &mut Tx,
        id: &BucketStreamId,
        inputs: Vec<Option<AppendInput>>,
        placement: ShardPlacement,
    ) -> Result<Vec<Result<AppendResponse, GroupEngineError>>, GroupEngineError> {
        let partition = tx.state.streams.get(id).map_or(0, |r| r.partition);
        let first = self.payloads.next_offset(partition)?;
        let now_ms = inputs.iter().flatten().next().map_or(0, |i| i.now_ms);
        let mut payloads = Vec::with_capacity(inputs.len());
        let mut items = Vec::with_capacity(inputs.len());
        tx.reserve_appends(id, inputs.len());
        // The same stream, bucket and (no) producer for every item: checked once.
        let scope = self.validate_scope(&tx.state, id);
        for input in inputs {
            let Some(input) = input else {
                items.push(Err(stream_error(
                    StreamErrorCode::EmptyAppend,
                    "append payload must be non-empty",
                )));
                continue;
            };
            let item = match scope.clone().and_then(|()| self.plan_scoped(tx, input)) {
                Err(e) => Err(e),
                Ok(Err(answer)) => self.append_response(&tx.state, id, answer, placement),
                Ok(Ok(plan)) => {
                    let payload = plan.input.payload.clone();
                    let log_offset = first + payloads.len() as u64;
                    let applied = self.apply_append(tx, plan, Some(log_offset));
                    if applied.is_ok() {
                        payloads.push(payload);
                    }
                    applied.and_then(|o| self.append_response(&tx.state, id, o, placement))
                }
            };
            items.push(item);
        }
        if !payloads.is_empty() {
            self.write_batch_payloads(tx, id, partition, first, payloads, now_ms)
                .await?;
        }
        Ok(items)
    }

    /// Writes the payloads of appends planned into `tx` at offsets from `first` on (the engine
    /// is the payload log's only writer), starting their deferred digests first.
    pub(crate) async fn write_batch_payloads(
        &self,
        tx: &mut Tx,
        id: &BucketStreamId,
        partition: u32,
        first: u64,
        payloads: Vec<Bytes>,
        now_ms: u64,
    ) -> Result<(), GroupEngineError> {
        tx.start_digests_early();
        let offsets = self
            .payloads
            .append(id, partition, payloads, now_ms)
            .await?;
        PayloadLog::check_planned(first, offsets.first().copied())?;
        Ok(())
    }

    /// True when a producer-less batch would append at least one item (the stream accepts data).
    fn preview_batch_mutates(
        &self,
        id: &BucketStreamId,
        payloads: &[Bytes],
    ) -> Result<bool, GroupEngineError> {
        Ok(self
            .state
            .streams
            .get(id)
            .is_some_and(|r| !is_closed(&r.metadata))
            && payloads.iter().any(|p| !p.is_empty()))
    }

    #[allow(clippy::too_many_arguments)]
    async fn producer_batch(
        &self,
        tx: &mut Tx,
        id: &BucketStreamId,
        content_type: Option<String>,
        payloads: Vec<Bytes>,
        producer: ProducerRequest,
        now_ms: u64,
        placement: ShardPlacement,
        admission: ColdWriteAdmission,
    ) -> Result<GroupAppendBatchResponse, GroupEngineError> {
        if payloads.is_empty() {
            return Err(stream_error(
                StreamErrorCode::EmptyAppend,
                "append batch must contain at least one payload",
            ));
        }
        self.validate_scope(&tx.state, id)?;
        validate_producer(Some(&producer))?;
        if self.expire_if_due(tx, id, now_ms) {
            return Err(not_found(id));
        }
        let old_commit = tx.state.commit_index;
        let old_count = tx.state.streams.get(id).map_or(0, |r| r.append_count);
        if let ProducerDecision::Duplicate { receipt, .. } =
            self.evaluate_producer(&tx.state, id, Some(&producer))?
        {
            let row = tx.state.streams.get(id);
            let stream_hot = row.map_or(0, |r| GroupState::stream_hot_bytes(r));
            let group_hot = tx.state.group_hot_bytes();
            let items = receipt
                .items
                .into_iter()
                .map(|item| {
                    Ok(AppendResponse {
                        placement,
                        start_offset: item.start_offset,
                        next_offset: item.next_offset,
                        stream_append_count: old_count,
                        group_commit_index: old_commit,
                        closed: item.closed,
                        deduplicated: true,
                        producer: None,
                        record_range: self.record_range_for(
                            &tx.state,
                            id,
                            item.start_offset,
                            item.next_offset,
                            Some(&producer),
                        )?,
                        stream_hot_bytes: stream_hot,
                        group_hot_bytes: group_hot,
                    })
                })
                .collect();
            return Ok(GroupAppendBatchResponse { placement, items });
        }
        let row = tx.state.streams.get(id).ok_or_else(|| not_found(id))?;
        let m = &row.metadata;
        if is_closed(m) {
            return Err(closed_error(id, m));
        }
        let Some(content_type) = content_type else {
            return Err(stream_error(
                StreamErrorCode::MissingContentType,
                "append batch must include content type",
            ));
        };
        check_content_type(m, &content_type)?;
        if payloads.iter().any(|p| p.is_empty()) {
            return Err(stream_error(
                StreamErrorCode::EmptyAppend,
                "append batch payloads must be non-empty",
            ));
        }
        let mut all_ends = Vec::with_capacity(payloads.len());
        let mut combined = Vec::new();
        let mut total: u64 = 0;
        for payload in &payloads {
            let ends = records::record_ends(&content_type, payload)?;
            combined.extend(ends.iter().map(|end| total + end));
            total += payload.len() as u64;
            all_ends.push(ends);
        }
        records::prepare(row, total, &combined)?;
        self.check_retained_quota(&tx.state, &id.bucket_id, total)?;
        self.check_admission(&tx.state, id, admission, total)?;
        let partition = row.partition;
        let log_offsets = self
            .payloads
            .append(id, partition, payloads.iter().cloned(), now_ms)
            .await?;
        let mut row = tx.state.streams.get_mut(id).ok_or_else(|| not_found(id))?;
        let mut messages = Vec::with_capacity(payloads.len());
        let mut items = Vec::with_capacity(payloads.len());
        let mut next_record = row.records.map(|c| c.next);
        let mut record_count = 0;
        for ((payload, log_offset), ends) in payloads.iter().zip(&log_offsets).zip(&all_ends) {
            let start = row.metadata.tail_offset;
            let end = start + payload.len() as u64;
            row.metadata.tail_offset = end;
            row.append_count += 1;
            count_append(&mut row, start, end);
            messages.push((start, end, *log_offset));
            let record_start = next_record;
            next_record = next_record.map(|n| n + ends.len() as u64);
            record_count += records::record_count(ends, payload.len() as u64);
            items.push(ProducerAppendRecord {
                start_offset: start,
                next_offset: end,
                closed: false,
                record_start,
                record_next: next_record,
            });
        }
        renew_ttl(&mut row.metadata, now_ms);
        let partition = row.partition;
        drop(row);
        let shared_id = Arc::new(id.clone());
        for ((start, _, log_offset), payload) in messages.iter().zip(&payloads) {
            tx.defer_digest(DeferredDigest {
                id: Arc::clone(&shared_id),
                start: *start,
                payload: payload.clone(),
                partition,
                log_offset: *log_offset,
            });
        }
        for (item, ends) in items.iter().zip(&all_ends) {
            self.commit_records(tx, id, item.start_offset, ends);
        }
        for (start, end, log_offset) in messages {
            tx.put_message(
                id,
                partition,
                start,
                MessageRow {
                    end_offset: end,
                    log_offset,
                },
            );
        }
        self.record_producer(tx, id, &producer, items.clone());
        self.save_stream(tx, id);
        self.usage_on_append(tx, &id.bucket_id, total, record_count, false);
        tx.state.commit_index += items.len() as u64;
        let row = tx.state.streams.get(id);
        let stream_hot = row.map_or(0, |r| GroupState::stream_hot_bytes(r));
        let group_hot = tx.state.group_hot_bytes();
        let responses = items
            .into_iter()
            .enumerate()
            .map(|(i, item)| {
                Ok(AppendResponse {
                    placement,
                    start_offset: item.start_offset,
                    next_offset: item.next_offset,
                    stream_append_count: old_count + i as u64 + 1,
                    group_commit_index: old_commit + i as u64 + 1,
                    closed: false,
                    deduplicated: false,
                    producer: None,
                    record_range: match (item.record_start, item.record_next) {
                        (Some(first_record), Some(next_record)) => Some(StreamRecordRange {
                            first_record,
                            next_record,
                        }),
                        _ => None,
                    },
                    stream_hot_bytes: stream_hot,
                    group_hot_bytes: group_hot,
                })
            })
            .collect();
        Ok(GroupAppendBatchResponse {
            placement,
            items: responses,
        })
    }
}

impl DiskGroupEngine {
    /// `append_external`: the bytes stay in the caller's object; the stream records a segment
    /// pointing at it (ursula's order of checks).
    pub(crate) async fn append_external_inner(
        &mut self,
        request: AppendExternalRequest,
        placement: ShardPlacement,
    ) -> Result<AppendResponse, GroupEngineError> {
        let id = request.stream_id.clone();
        self.ensure_access(&id, request.now_ms, false, placement)
            .await?;
        let now_ms = request.now_ms;
        let mut tx = Tx::new(&self.state);
        let outcome = self.apply_external(&mut tx, request);
        self.sweep_expired(&mut tx, now_ms);
        let response = outcome.and_then(|o| self.append_response(&tx.state, &id, o, placement));
        self.finish(tx, response).await
    }

    fn apply_external(
        &self,
        tx: &mut Tx,
        request: AppendExternalRequest,
    ) -> Result<AppendOutcome, GroupEngineError> {
        let id = request.stream_id.clone();
        let now_ms = request.now_ms;
        let payload = request.payload;
        super::lifecycle::validate_external(&payload)?;
        self.validate_scope(&tx.state, &id)?;
        validate_producer(request.producer.as_ref())?;
        if !tx.state.streams.contains_key(&id) {
            return Err(not_found(&id));
        }
        if self.expire_if_due(tx, &id, now_ms) {
            return Err(not_found(&id));
        }
        if let ProducerDecision::Duplicate { receipt, producer } =
            self.evaluate_producer(&tx.state, &id, request.producer.as_ref())?
        {
            let record_range = self.record_range_for(
                &tx.state,
                &id,
                receipt.start_offset,
                receipt.next_offset,
                Some(&producer),
            )?;
            return Ok(AppendOutcome::Appended {
                offset: receipt.start_offset,
                next_offset: receipt.next_offset,
                closed: receipt.closed,
                deduplicated: true,
                producer: Some(producer),
                record_range,
            });
        }
        let row = tx.state.streams.get(&id).ok_or_else(|| not_found(&id))?;
        if let Some(expected) = request.record_match {
            records::check_record_match(row, expected)?;
        }
        let len = payload.payload_len;
        let record_range = records::prepare(row, len, &request.record_ends)?;
        let m = &row.metadata;
        if is_closed(m) {
            return Err(closed_error(&id, m));
        }
        check_content_type(m, &request.content_type)?;
        check_stream_seq(m, request.stream_seq.as_deref())?;
        self.check_retained_quota(&tx.state, &id.bucket_id, len)?;
        let mut updated = (**row).clone();
        let offset = updated.metadata.tail_offset;
        let next_offset = offset + len;
        updated.metadata.tail_offset = next_offset;
        if let Some(seq) = request.stream_seq.clone() {
            updated.metadata.last_stream_seq = Some(seq);
        }
        renew_ttl(&mut updated.metadata, now_ms);
        if request.close_after {
            updated.metadata.status = StreamStatus::Closed;
        }
        let closed = is_closed(&updated.metadata);
        integrity_external(
            &mut updated,
            &id,
            offset,
            next_offset,
            &payload.s3_path,
            payload.object_size,
        );
        updated.append_count += 1;
        // External bytes are not hot: with nothing hot above them the hot start moves past them.
        if updated.hot_start_offset >= offset {
            updated.hot_start_offset = next_offset;
        } else {
            updated.external_hot += len;
        }
        let segment = ObjectPayloadRef {
            start_offset: offset,
            end_offset: next_offset,
            s3_path: payload.s3_path.clone(),
            object_size: payload.object_size,
            object_offset: 0,
        };
        tx.put_external(&id, &segment);
        tx.state.streams.insert(id.clone(), updated);
        self.commit_records(tx, &id, offset, &request.record_ends);
        if let Some(p) = &request.producer {
            let item = producer_item(offset, next_offset, closed, record_range);
            self.record_producer(tx, &id, p, vec![item]);
        }
        self.save_stream(tx, &id);
        tx.state.commit_index += 1;
        let count = records::record_count(&request.record_ends, len);
        self.usage_on_append(tx, &id.bucket_id, len, count, false);
        Ok(AppendOutcome::Appended {
            offset,
            next_offset,
            closed: request.close_after,
            deduplicated: false,
            producer: request.producer,
            record_range,
        })
    }
}

/// `StreamClosed` at the stream's tail.
fn closed_error(id: &BucketStreamId, m: &StreamMetadata) -> GroupEngineError {
    GroupEngineError::stream_with_context(
        StreamErrorCode::StreamClosed,
        format!("stream '{id}' is closed"),
        Some(m.tail_offset),
        vec![StreamErrorContext::StreamClosed],
    )
}

/// An append's content type must be the stream's.
fn check_content_type(m: &StreamMetadata, content_type: &str) -> Result<(), GroupEngineError> {
    if content_type == m.content_type {
        return Ok(());
    }
    Err(GroupEngineError::stream_with_next_offset(
        StreamErrorCode::ContentTypeMismatch,
        format!(
            "append content type '{content_type}' does not match stream content type '{}'",
            m.content_type
        ),
        Some(m.tail_offset),
    ))
}

/// A stream seq must be strictly greater (as a string) than the last one accepted.
fn check_stream_seq(m: &StreamMetadata, incoming: Option<&str>) -> Result<(), GroupEngineError> {
    match (incoming, m.last_stream_seq.as_deref()) {
        (Some(incoming), Some(last)) if incoming <= last => {
            Err(GroupEngineError::stream_with_next_offset(
                StreamErrorCode::StreamSeqConflict,
                format!("stream sequence '{incoming}' is not greater than last sequence '{last}'"),
                Some(m.tail_offset),
            ))
        }
        _ => Ok(()),
    }
}
