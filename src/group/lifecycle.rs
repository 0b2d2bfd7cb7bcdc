//! Bucket and stream lifecycle: create, delete, attrs, TTL access and expiry, purge, quotas.

use bytes::Bytes;
use ursula_runtime::{
    ColdWriteAdmission, CreateStreamExternalRequest, CreateStreamRequest, CreateStreamResponse,
    DeleteStreamResponse, GroupEngineError, PurgeBucketResponse, SetBucketQuotaRequest,
    SetBucketQuotaResponse, TouchStreamAccessResponse, UpdateStreamAttrsRequest,
    UpdateStreamAttrsResponse,
};
use ursula_shard::{BucketStreamId, ShardPlacement};
use ursula_stream::{
    is_json_record_content_type, validate_bucket_id, validate_stream_id, BucketQuota, ColdGcEntry,
    ColdGcTarget, ExternalPayloadRef, ObjectPayloadRef, StreamAttrs, StreamErrorCode,
    StreamMetadata, StreamRecordRange, StreamStatus,
};

use super::integrity::{integrity_append, integrity_external};
use super::payload::PayloadLog;
use super::producers::{producer_item, seq_conflict};
use super::records;
use super::rows::{MessageRow, RecordCursor, StreamRow};
use super::state::{compare_ids, expiry_at_ms, is_expired, renew_ttl, GroupState};
use super::tx::Tx;
use super::{not_found, stream_error, DiskGroupEngine};

/// Streams removed by one TTL sweep at most (ursula's bound).
const SWEEP_MAX_STREAMS: usize = 256;
/// Largest JSON encoding of stream attributes.
const MAX_ATTRS_BYTES: usize = 16 * 1024;
/// Largest producer epoch or sequence (JavaScript's safe integer).
const MAX_SAFE_INTEGER: u64 = 9_007_199_254_740_991;

/// Empty attributes are no attributes.
pub(crate) fn normalize_attrs(attrs: Option<StreamAttrs>) -> Option<StreamAttrs> {
    attrs.filter(|a| !a.is_empty())
}

fn validate_attrs(attrs: Option<&StreamAttrs>) -> Result<(), GroupEngineError> {
    let Some(attrs) = attrs else { return Ok(()) };
    let len = serde_json::to_vec(attrs)
        .map_err(|e| {
            stream_error(
                StreamErrorCode::InvalidStreamAttrs,
                format!("encode stream attrs JSON: {e}"),
            )
        })?
        .len();
    if len > MAX_ATTRS_BYTES {
        return Err(stream_error(
            StreamErrorCode::InvalidStreamAttrs,
            format!("stream attrs JSON is {len} bytes; limit is {MAX_ATTRS_BYTES} bytes"),
        ));
    }
    Ok(())
}

fn validate_retention(ttl: Option<u64>, expires_at: Option<u64>) -> Result<(), GroupEngineError> {
    if ttl.is_some() && expires_at.is_some() {
        return Err(stream_error(
            StreamErrorCode::InvalidRetention,
            "stream ttl and expires-at cannot both be set",
        ));
    }
    if ttl.is_some_and(|t| t.checked_mul(1000).is_none()) {
        return Err(stream_error(
            StreamErrorCode::InvalidRetention,
            "stream ttl overflows millisecond range",
        ));
    }
    Ok(())
}

/// Checks a producer header: non-empty id, epoch and seq within 2^53 - 1.
pub(crate) fn validate_producer(
    producer: Option<&ursula_stream::ProducerRequest>,
) -> Result<(), GroupEngineError> {
    let Some(p) = producer else { return Ok(()) };
    if p.producer_id.trim().is_empty() {
        return Err(stream_error(
            StreamErrorCode::InvalidProducer,
            "producer id must not be empty",
        ));
    }
    if p.producer_id.len() > u16::MAX as usize {
        return Err(stream_error(
            StreamErrorCode::InvalidProducer,
            "producer id is too long",
        ));
    }
    if p.producer_epoch > MAX_SAFE_INTEGER {
        return Err(stream_error(
            StreamErrorCode::InvalidProducer,
            format!(
                "producer epoch {} exceeds maximum {MAX_SAFE_INTEGER}",
                p.producer_epoch
            ),
        ));
    }
    if p.producer_seq > MAX_SAFE_INTEGER {
        return Err(stream_error(
            StreamErrorCode::InvalidProducer,
            format!(
                "producer sequence {} exceeds maximum {MAX_SAFE_INTEGER}",
                p.producer_seq
            ),
        ));
    }
    Ok(())
}

/// A create, inline or with its initial bytes in an external object.
pub(crate) struct CreateInput {
    /// The request (`initial_payload` empty for an external create).
    pub request: CreateStreamRequest,
    /// The external object holding the initial bytes, if any.
    pub external: Option<ExternalPayloadRef>,
    /// Record ends the caller declared for the external bytes (JSON streams).
    pub external_ends: Vec<u64>,
}

impl CreateInput {
    fn initial_len(&self) -> u64 {
        self.external
            .as_ref()
            .map_or(self.request.initial_payload.len() as u64, |e| e.payload_len)
    }
}

impl From<CreateStreamExternalRequest> for CreateInput {
    fn from(r: CreateStreamExternalRequest) -> Self {
        Self {
            request: CreateStreamRequest {
                stream_id: r.stream_id,
                content_type: r.content_type,
                content_type_explicit: true,
                initial_payload: Bytes::new(),
                close_after: r.close_after,
                stream_seq: r.stream_seq,
                producer: r.producer,
                stream_ttl_seconds: r.stream_ttl_seconds,
                stream_expires_at_ms: r.stream_expires_at_ms,
                attrs: r.attrs,
                now_ms: r.now_ms,
            },
            external: Some(r.initial_payload),
            external_ends: r.record_ends,
        }
    }
}

/// An external payload reference must name an object that holds at least its bytes.
pub(crate) fn validate_external(payload: &ExternalPayloadRef) -> Result<(), GroupEngineError> {
    if payload.s3_path.trim().is_empty() {
        return Err(stream_error(
            StreamErrorCode::InvalidColdFlush,
            "external payload S3 path must not be empty",
        ));
    }
    if payload.payload_len == 0 {
        return Err(stream_error(
            StreamErrorCode::EmptyAppend,
            "external payload length must be greater than zero",
        ));
    }
    if payload.object_size < payload.payload_len {
        return Err(stream_error(
            StreamErrorCode::InvalidColdFlush,
            "external payload object size must cover payload length",
        ));
    }
    Ok(())
}

/// Whether an external create's declared record ends give the stream record coordinates.
fn external_record_index(
    content_type: &str,
    len: u64,
    ends: &[u64],
) -> Result<bool, GroupEngineError> {
    if !is_json_record_content_type(content_type) {
        if ends.is_empty() {
            return Ok(false);
        }
        return Err(stream_error(
            StreamErrorCode::InvalidRecordBoundaries,
            "record boundaries are only valid for application/json streams",
        ));
    }
    if len > 0 && ends.is_empty() {
        return Ok(false);
    }
    records::check_relative_ends(len, ends)?;
    Ok(true)
}

impl DiskGroupEngine {
    /// Bucket and stream ids valid, bucket present.
    pub(crate) fn validate_scope(
        &self,
        state: &GroupState,
        id: &BucketStreamId,
    ) -> Result<(), GroupEngineError> {
        validate_bucket_id(&id.bucket_id)
            .map_err(|m| stream_error(StreamErrorCode::InvalidBucketId, m))?;
        validate_stream_id(id).map_err(|m| stream_error(StreamErrorCode::InvalidStreamId, m))?;
        if !state.buckets.contains(&id.bucket_id) {
            return Err(stream_error(
                StreamErrorCode::BucketNotFound,
                format!("bucket '{}' does not exist", id.bucket_id),
            ));
        }
        Ok(())
    }

    /// Removes a stream with everything it owns; queues its cold objects for GC.
    pub(crate) fn remove_stream(&self, tx: &mut Tx, id: &BucketStreamId) -> bool {
        let Some(row) = tx.state.streams.remove(id) else {
            return false;
        };
        tx.state.producers.remove(id);
        tx.state.retired_counts.insert(id.clone(), row.append_count);
        tx.put_retired_count(id, Some(row.append_count));
        let usage = tx.state.usage.entry(id.bucket_id.clone()).or_default();
        usage.stream_count = usage.stream_count.saturating_sub(1);
        usage.retained_bytes = usage
            .retained_bytes
            .saturating_sub(row.metadata.tail_offset.saturating_sub(row.retained_offset));
        self.save_usage(tx, &id.bucket_id);
        // Exact paths, never the stream's prefix: a stream recreated under the same id (or any
        // other stream) keeps its objects, whoever runs the GC (ursula's runtime deletes whole
        // prefixes for a `Stream` target).
        let mut paths: Vec<String> = row
            .cold_chunks
            .iter()
            .filter(|c| !c.shared_object)
            .map(|c| c.s3_path.clone())
            .collect();
        paths.extend(
            self.db()
                .and_then(|db| db.externals(id, 0, row.metadata.tail_offset))
                .unwrap_or_default()
                .into_iter()
                .map(|e| e.s3_path),
        );
        paths.dedup();
        let paths = self.gc_paths_with_pages(id, &row.cold_chunks, paths);
        tx.touch_cold_pages(id, row.cold_chunks.iter());
        if !paths.is_empty() {
            self.enqueue_gc(tx, ColdGcTarget::Paths(paths), 0);
        }
        let shared = row
            .cold_chunks
            .iter()
            .filter(|c| c.shared_object)
            .map(|c| c.s3_path.clone())
            .collect();
        self.release_shared(tx, shared, 0);
        tx.delete_stream(id);
        true
    }

    /// Drops one reference to each shared object in `paths`; objects nothing references any
    /// more are queued for GC (as one entry), not before `not_before_ms`.
    pub(crate) fn release_shared(&self, tx: &mut Tx, paths: Vec<String>, not_before_ms: u64) {
        let mut reclaim = Vec::new();
        for path in paths {
            let Some(refs) = tx.state.shared_refs.get_mut(&path) else {
                continue;
            };
            *refs = refs.saturating_sub(1);
            if *refs == 0 {
                tx.state.shared_refs.remove(&path);
                reclaim.push(path);
            }
        }
        if !reclaim.is_empty() {
            self.enqueue_gc(tx, ColdGcTarget::Paths(reclaim), not_before_ms);
        }
    }

    /// Appends a cold-GC entry.
    pub(crate) fn enqueue_gc(&self, tx: &mut Tx, target: ColdGcTarget, not_before_ms: u64) {
        let entry = ColdGcEntry {
            seq: tx.state.next_gc_seq,
            not_before_ms,
            target,
        };
        tx.state.next_gc_seq += 1;
        tx.put_gc(&entry);
        tx.state.gc.push_back(entry);
    }

    /// Removes `id` when it has expired at `now_ms`.
    pub(crate) fn expire_if_due(&self, tx: &mut Tx, id: &BucketStreamId, now_ms: u64) -> bool {
        if tx
            .state
            .streams
            .get(id)
            .is_some_and(|r| is_expired(&r.metadata, now_ms))
        {
            return self.remove_stream(tx, id);
        }
        false
    }

    /// Removes up to 256 expired streams, earliest expiry first (ursula sweeps after every timed
    /// command except appends).
    pub(crate) fn sweep_expired(&self, tx: &mut Tx, now_ms: u64) {
        if now_ms < tx.state.expiry_floor {
            return;
        }
        let mut expired: Vec<(u64, BucketStreamId)> = tx
            .state
            .streams
            .iter()
            .filter(|(_, r)| is_expired(&r.metadata, now_ms))
            .filter_map(|(id, r)| expiry_at_ms(&r.metadata).map(|at| (at, id.clone())))
            .collect();
        expired.sort_by(|a, b| a.0.cmp(&b.0).then_with(|| compare_ids(&a.1, &b.1)));
        for (_, id) in expired.into_iter().take(SWEEP_MAX_STREAMS) {
            self.remove_stream(tx, &id);
        }
        tx.state.recompute_expiry_floor();
    }

    /// Creates the bucket of `id` when absent (an invalid bucket id is an error).
    fn ensure_bucket(&self, tx: &mut Tx, id: &BucketStreamId) -> Result<(), GroupEngineError> {
        validate_bucket_id(&id.bucket_id)
            .map_err(|m| stream_error(StreamErrorCode::InvalidBucketId, m))?;
        if tx.state.buckets.insert(id.bucket_id.clone()).is_none() {
            tx.put_bucket(&id.bucket_id);
        }
        Ok(())
    }

    /// Commits what `tx` holds and returns `result` (ursula keeps side effects, such as a bucket
    /// created or an expired stream removed, even when the command itself then fails).
    pub(crate) async fn finish<T>(
        &mut self,
        tx: Tx,
        result: Result<T, GroupEngineError>,
    ) -> Result<T, GroupEngineError> {
        self.commit(tx).await?;
        result
    }

    /// `create_stream`.
    pub(crate) async fn create_stream_inner(
        &mut self,
        request: CreateStreamRequest,
        placement: ShardPlacement,
        admission: ColdWriteAdmission,
    ) -> Result<CreateStreamResponse, GroupEngineError> {
        let input = CreateInput {
            request,
            external: None,
            external_ends: Vec::new(),
        };
        self.create_inner(input, placement, admission).await
    }

    /// `create_stream_external`: the initial bytes stay in the caller's object.
    pub(crate) async fn create_external_inner(
        &mut self,
        request: CreateStreamExternalRequest,
        placement: ShardPlacement,
    ) -> Result<CreateStreamResponse, GroupEngineError> {
        self.create_inner(request.into(), placement, ColdWriteAdmission::default())
            .await
    }

    async fn create_inner(
        &mut self,
        input: CreateInput,
        placement: ShardPlacement,
        admission: ColdWriteAdmission,
    ) -> Result<CreateStreamResponse, GroupEngineError> {
        let request = &input.request;
        let id = request.stream_id.clone();
        let now_ms = request.now_ms;
        let previewing = admission.max_hot_bytes_per_group.is_some();
        let mut tx = Tx::new(&self.state);
        if let Err(e) = self.ensure_bucket(&mut tx, &id) {
            return if previewing {
                Err(e)
            } else {
                self.finish(tx, Err(e)).await
            };
        }
        let decided = self.decide_create(&mut tx, &input);
        let outcome = match decided {
            Ok(Some(existing)) => Ok(existing),
            Ok(None) => {
                if previewing {
                    self.check_admission(&tx.state, &id, admission, input.initial_len())?;
                }
                self.apply_create(&mut tx, input).await
            }
            Err(e) if previewing => return Err(e),
            Err(e) => Err(e),
        };
        self.sweep_expired(&mut tx, now_ms);
        let response = outcome.map(|(next_offset, closed, already_exists)| {
            if !already_exists {
                tx.state.commit_index += 1;
            }
            CreateStreamResponse {
                placement,
                next_offset,
                closed,
                already_exists,
                group_commit_index: tx.state.commit_index,
                record_range: if already_exists {
                    None
                } else {
                    tx.state.streams.get(&id).and_then(|r| records::range(r))
                },
            }
        });
        self.finish(tx, response).await
    }

    /// Validates a create; `Some` when the stream already exists with the same metadata.
    fn decide_create(
        &self,
        tx: &mut Tx,
        input: &CreateInput,
    ) -> Result<Option<(u64, bool, bool)>, GroupEngineError> {
        let request = &input.request;
        match &input.external {
            None => {
                records::record_ends(&request.content_type, &request.initial_payload)?;
            }
            Some(external) => validate_external(external)?,
        }
        let id = &request.stream_id;
        let attrs = normalize_attrs(request.attrs.clone());
        self.validate_scope(&tx.state, id)?;
        validate_attrs(attrs.as_ref())?;
        validate_retention(request.stream_ttl_seconds, request.stream_expires_at_ms)?;
        validate_producer(request.producer.as_ref())?;
        if let Some(external) = &input.external {
            external_record_index(
                &request.content_type,
                external.payload_len,
                &input.external_ends,
            )?;
        }
        if let Some(p) = request.producer.as_ref().filter(|p| p.producer_seq != 0) {
            return Err(seq_conflict(
                p,
                0,
                format!(
                    "producer '{}' expected sequence 0, received {}",
                    p.producer_id, p.producer_seq
                ),
            ));
        }
        self.expire_if_due(tx, id, request.now_ms);
        if let Some(existing) = tx.state.streams.get(id) {
            let m = &existing.metadata;
            let status = if request.close_after {
                StreamStatus::Closed
            } else {
                StreamStatus::Open
            };
            if m.content_type == request.content_type
                && m.status == status
                && m.stream_ttl_seconds == request.stream_ttl_seconds
                && m.stream_expires_at_ms == request.stream_expires_at_ms
                && existing.attrs.as_ref() == attrs.as_ref()
            {
                return Ok(Some((
                    m.tail_offset,
                    m.status == StreamStatus::Closed,
                    true,
                )));
            }
            return Err(stream_error(
                StreamErrorCode::StreamAlreadyExistsConflict,
                format!("stream '{id}' already exists with different metadata"),
            ));
        }
        self.check_create_quota(&tx.state, &id.bucket_id, input.initial_len())?;
        Ok(None)
    }

    /// Writes the initial payload (if any) and the new stream's rows.
    async fn apply_create(
        &self,
        tx: &mut Tx,
        input: CreateInput,
    ) -> Result<(u64, bool, bool), GroupEngineError> {
        let CreateInput {
            request,
            external,
            external_ends,
        } = input;
        let id = request.stream_id.clone();
        let partition = PayloadLog::partition_for(&id);
        let initial: Bytes = request.initial_payload.clone();
        let initial_len = external
            .as_ref()
            .map_or(initial.len() as u64, |e| e.payload_len);
        let (ends, json) = match &external {
            None => (
                records::record_ends(&request.content_type, &initial)?,
                is_json_record_content_type(&request.content_type),
            ),
            Some(e) => {
                let indexed =
                    external_record_index(&request.content_type, e.payload_len, &external_ends)?;
                (if indexed { external_ends } else { Vec::new() }, indexed)
            }
        };
        let record_range = json.then_some(StreamRecordRange {
            first_record: 0,
            next_record: ends.len() as u64,
        });
        let log_offsets = if initial.is_empty() {
            Vec::new()
        } else {
            self.payloads
                .append(
                    &id,
                    partition,
                    std::iter::once(initial.clone()),
                    request.now_ms,
                )
                .await?
        };
        let mut row = StreamRow {
            metadata: StreamMetadata {
                stream_id: id.clone(),
                content_type: request.content_type.clone(),
                status: if request.close_after {
                    StreamStatus::Closed
                } else {
                    StreamStatus::Open
                },
                tail_offset: initial_len,
                last_stream_seq: request.stream_seq.clone(),
                stream_ttl_seconds: request.stream_ttl_seconds,
                stream_expires_at_ms: request.stream_expires_at_ms,
                created_at_ms: request.now_ms,
                last_ttl_touch_at_ms: request.now_ms,
            },
            attrs: normalize_attrs(request.attrs.clone()),
            // External bytes are not hot: the first hot byte is the tail.
            hot_start_offset: if external.is_some() { initial_len } else { 0 },
            retained_offset: 0,
            live_setsum: setsum::Setsum::default(),
            total_setsum: setsum::Setsum::default(),
            total_records: 0,
            visible_snapshot: None,
            snapshot_changed: false,
            append_count: tx.state.retired_counts.remove(&id).unwrap_or(0),
            cold_chunks: Default::default(),
            partition,
            records: json.then_some(RecordCursor { first: 0, next: 0 }),
            external_hot: 0,
        };
        if let Some(e) = &external {
            let segment = ObjectPayloadRef {
                start_offset: 0,
                end_offset: initial_len,
                s3_path: e.s3_path.clone(),
                object_size: e.object_size,
                object_offset: 0,
            };
            integrity_external(&mut row, &id, 0, initial_len, &e.s3_path, e.object_size);
            tx.put_external(&id, &segment);
        }
        if let Some(&log_offset) = log_offsets.first() {
            integrity_append(&mut row, &id, 0, initial_len, &initial);
            tx.put_message(
                &id,
                partition,
                0,
                MessageRow {
                    end_offset: initial_len,
                    log_offset,
                },
            );
        }
        if let Some(p) = &request.producer {
            let item = producer_item(0, initial_len, request.close_after, record_range);
            self.record_producer(tx, &id, p, vec![item]);
        }
        tx.put_retired_count(&id, None);
        tx.mark_stream(&id);
        if let Some(at) = expiry_at_ms(&row.metadata) {
            tx.state.expiry_floor = tx.state.expiry_floor.min(at);
        }
        tx.state.streams.insert(id.clone(), row);
        self.commit_records(tx, &id, 0, &ends);
        let count = records::record_count(&ends, initial_len);
        self.usage_on_append(tx, &id.bucket_id, initial_len, count, true);
        Ok((initial_len, request.close_after, false))
    }

    /// `delete_stream`.
    pub(crate) async fn delete_stream_inner(
        &mut self,
        id: &BucketStreamId,
        placement: ShardPlacement,
    ) -> Result<DeleteStreamResponse, GroupEngineError> {
        self.validate_scope(&self.state, id)?;
        if !self.state.streams.contains_key(id) {
            return Err(not_found(id));
        }
        let mut tx = Tx::new(&self.state);
        self.remove_stream(&mut tx, id);
        tx.state.retired_counts.remove(id);
        tx.put_retired_count(id, None);
        tx.state.commit_index += 1;
        let response = DeleteStreamResponse {
            placement,
            group_commit_index: tx.state.commit_index,
        };
        self.finish(tx, Ok(response)).await
    }

    /// `update_stream_attrs`.
    pub(crate) async fn update_attrs_inner(
        &mut self,
        request: UpdateStreamAttrsRequest,
        placement: ShardPlacement,
    ) -> Result<UpdateStreamAttrsResponse, GroupEngineError> {
        let id = &request.stream_id;
        let mut tx = Tx::new(&self.state);
        let outcome = (|| {
            self.validate_scope(&tx.state, id)?;
            if self.expire_if_due(&mut tx, id, request.now_ms) {
                return Err(not_found(id));
            }
            let attrs = normalize_attrs(request.attrs.clone());
            let current = tx.state.streams.get(id).ok_or_else(|| not_found(id))?;
            validate_attrs(attrs.as_ref())?;
            if current.attrs == attrs {
                return Ok(false);
            }
            if let Some(mut row) = tx.state.streams.get_mut(id) {
                row.attrs = attrs;
            }
            self.save_stream(&mut tx, id);
            Ok(true)
        })();
        self.sweep_expired(&mut tx, request.now_ms);
        let response = outcome.map(|changed| {
            if changed {
                tx.state.commit_index += 1;
            }
            UpdateStreamAttrsResponse {
                placement,
                changed,
                group_commit_index: tx.state.commit_index,
            }
        });
        self.finish(tx, response).await
    }

    /// `touch_stream_access`: renews a sliding TTL, or removes an expired stream.
    pub(crate) async fn touch_inner(
        &mut self,
        id: &BucketStreamId,
        now_ms: u64,
        renew: bool,
        placement: ShardPlacement,
    ) -> Result<TouchStreamAccessResponse, GroupEngineError> {
        let mut tx = Tx::new(&self.state);
        let outcome = (|| {
            self.validate_scope(&tx.state, id)?;
            let row = tx.state.streams.get(id).ok_or_else(|| not_found(id))?;
            if is_expired(&row.metadata, now_ms) {
                self.remove_stream(&mut tx, id);
                return Ok((true, true));
            }
            let mut changed = false;
            if renew && row.metadata.stream_ttl_seconds.is_some() {
                if let Some(mut row) = tx.state.streams.get_mut(id) {
                    let before = row.metadata.last_ttl_touch_at_ms;
                    renew_ttl(&mut row.metadata, now_ms);
                    changed = row.metadata.last_ttl_touch_at_ms != before;
                }
                if changed {
                    self.save_stream(&mut tx, id);
                }
            }
            Ok((changed, false))
        })();
        self.sweep_expired(&mut tx, now_ms);
        let response = outcome.map(|(changed, expired)| {
            if changed || expired {
                tx.state.commit_index += 1;
            }
            TouchStreamAccessResponse {
                placement,
                changed,
                expired,
                group_commit_index: tx.state.commit_index,
            }
        });
        self.finish(tx, response).await
    }

    /// Applies the access check reads and some writes make first: expiry (committed) and, for
    /// reads, TTL renewal when due. An expired stream answers `StreamNotFound`.
    pub(crate) async fn ensure_access(
        &mut self,
        id: &BucketStreamId,
        now_ms: u64,
        renew: bool,
        placement: ShardPlacement,
    ) -> Result<(), GroupEngineError> {
        self.validate_scope(&self.state, id)?;
        let row = self
            .state
            .streams
            .get(id)
            .map(|r| &**r)
            .ok_or_else(|| not_found(id))?;
        let needed = is_expired(&row.metadata, now_ms)
            || (renew && super::state::renewal_due(&row.metadata, now_ms));
        if !needed {
            return Ok(());
        }
        let response = self.touch_inner(id, now_ms, renew, placement).await?;
        if response.expired {
            return Err(not_found(id));
        }
        Ok(())
    }

    /// The stream's row once the access rule has run (see [`Self::ensure_access`]).
    pub(crate) async fn accessed_row(
        &mut self,
        id: &BucketStreamId,
        now_ms: u64,
        renew: bool,
        placement: ShardPlacement,
    ) -> Result<&StreamRow, GroupEngineError> {
        self.ensure_access(id, now_ms, renew, placement).await?;
        self.state
            .streams
            .get(id)
            .map(|r| &**r)
            .ok_or_else(|| not_found(id))
    }

    /// `purge_bucket`: removes every stream of the bucket, the bucket and its quota.
    pub(crate) async fn purge_bucket_inner(
        &mut self,
        bucket: &str,
        placement: ShardPlacement,
    ) -> Result<PurgeBucketResponse, GroupEngineError> {
        validate_bucket_id(bucket)
            .map_err(|m| stream_error(StreamErrorCode::InvalidBucketId, m))?;
        let mut tx = Tx::new(&self.state);
        let ids: Vec<BucketStreamId> = tx
            .state
            .streams
            .keys()
            .filter(|id| id.bucket_id == bucket)
            .cloned()
            .collect();
        let mut ids = ids;
        ids.sort_by(compare_ids);
        let mut removed_streams = 0;
        for id in ids {
            if self.remove_stream(&mut tx, &id) {
                removed_streams += 1;
            }
        }
        if tx.state.buckets.remove(bucket).is_some() {
            tx.delete_bucket(bucket);
        }
        if tx.state.quotas.remove(bucket).is_some() {
            tx.put_quota(bucket, None);
        }
        tx.state.commit_index += 1;
        let response = PurgeBucketResponse {
            placement,
            removed_streams,
            group_commit_index: tx.state.commit_index,
        };
        self.finish(tx, Ok(response)).await
    }

    /// `set_bucket_quota`: both limits `None` clears the quota.
    pub(crate) async fn set_quota_inner(
        &mut self,
        request: SetBucketQuotaRequest,
        placement: ShardPlacement,
    ) -> Result<SetBucketQuotaResponse, GroupEngineError> {
        validate_bucket_id(&request.bucket_id)
            .map_err(|m| stream_error(StreamErrorCode::InvalidBucketId, m))?;
        let quota = BucketQuota {
            max_streams: request.max_streams,
            max_retained_bytes: request.max_retained_bytes,
        };
        let mut tx = Tx::new(&self.state);
        if quota.is_unlimited() {
            tx.state.quotas.remove(&request.bucket_id);
            tx.put_quota(&request.bucket_id, None);
        } else {
            tx.state.quotas.insert(request.bucket_id.clone(), quota);
            tx.put_quota(&request.bucket_id, Some(&quota));
        }
        tx.state.commit_index += 1;
        let response = SetBucketQuotaResponse {
            placement,
            group_commit_index: tx.state.commit_index,
        };
        self.finish(tx, Ok(response)).await
    }
}
