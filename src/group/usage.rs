//! Per-bucket accounting: usage counters (monotonic committed bytes, records and write units;
//! retained-bytes and stream-count gauges), quota checks, and hot-bytes write admission.

use ursula_runtime::{ColdWriteAdmission, GroupEngineError};
use ursula_shard::BucketStreamId;
use ursula_stream::StreamErrorCode;

use super::state::GroupState;
use super::tx::Tx;
use super::{stream_error, DiskGroupEngine};

/// One write unit of usage accounting.
const WRITE_UNIT_BYTES: u64 = 10 * 1024;

/// Write units an append of `bytes` costs: one per started [`WRITE_UNIT_BYTES`], at least one.
fn write_units(bytes: u64) -> u64 {
    bytes.div_ceil(WRITE_UNIT_BYTES).max(1)
}

/// What accepted appends add to their bucket's usage.
#[derive(Default)]
struct Appended {
    bytes: u64,
    records: u64,
    write_units: u64,
}

impl DiskGroupEngine {
    /// Checks a new stream against the bucket's quota.
    pub(crate) fn check_create_quota(
        &self,
        state: &GroupState,
        bucket: &str,
        initial: u64,
    ) -> Result<(), GroupEngineError> {
        let Some(quota) = state.quotas.get(bucket) else {
            return Ok(());
        };
        let usage = state.usage.get(bucket).copied().unwrap_or_default();
        if let Some(max) = quota.max_streams {
            if usage.stream_count >= max {
                return Err(stream_error(
                    StreamErrorCode::QuotaExceeded,
                    format!(
                        "bucket '{bucket}' stream-count quota exceeded in this group ({max} max)"
                    ),
                ));
            }
        }
        self.check_retained_quota(state, bucket, initial)
    }

    /// Checks `incoming` more retained bytes against the bucket's quota.
    pub(crate) fn check_retained_quota(
        &self,
        state: &GroupState,
        bucket: &str,
        incoming: u64,
    ) -> Result<(), GroupEngineError> {
        let Some(quota) = state.quotas.get(bucket) else {
            return Ok(());
        };
        let Some(max) = quota.max_retained_bytes else {
            return Ok(());
        };
        let usage = state.usage.get(bucket).copied().unwrap_or_default();
        if usage.retained_bytes.saturating_add(incoming) > max {
            return Err(stream_error(
                StreamErrorCode::QuotaExceeded,
                format!(
                    "bucket '{bucket}' retained-bytes quota exceeded in this group ({max} max)"
                ),
            ));
        }
        Ok(())
    }

    /// Counts an accepted append (or a created stream's initial payload) in the usage.
    pub(crate) fn usage_on_append(
        &self,
        tx: &mut Tx,
        bucket: &str,
        bytes: u64,
        records: u64,
        created: bool,
    ) {
        let appended = Appended {
            bytes,
            records,
            write_units: write_units(bytes),
        };
        self.add_usage(tx, bucket, appended, created);
    }

    /// Counts accepted appends of `lens` bytes each (one record each) in the usage, at once.
    pub(crate) fn usage_on_appends(
        &self,
        tx: &mut Tx,
        bucket: &str,
        lens: impl IntoIterator<Item = u64>,
    ) {
        let mut appended = Appended::default();
        for len in lens {
            appended.bytes += len;
            appended.records += 1;
            appended.write_units += write_units(len);
        }
        self.add_usage(tx, bucket, appended, false);
    }

    fn add_usage(&self, tx: &mut Tx, bucket: &str, appended: Appended, created: bool) {
        // One lookup when the bucket has a row (every append after its first stream's).
        let usage = match tx.state.usage.get_mut(bucket) {
            Some(usage) => usage,
            None => tx.state.usage.entry(bucket.to_string()).or_default(),
        };
        if created {
            usage.stream_count = usage.stream_count.saturating_add(1);
        }
        let Appended {
            bytes,
            records,
            write_units,
        } = appended;
        usage.committed_append_bytes = usage.committed_append_bytes.saturating_add(bytes);
        usage.committed_records = usage.committed_records.saturating_add(records);
        usage.committed_write_units = usage.committed_write_units.saturating_add(write_units);
        usage.retained_bytes = usage.retained_bytes.saturating_add(bytes);
        self.save_usage(tx, bucket);
    }

    /// Rejects with `ColdBackpressure` when `incoming` more hot bytes would pass the limit.
    pub(crate) fn check_admission(
        &self,
        state: &GroupState,
        id: &BucketStreamId,
        admission: ColdWriteAdmission,
        incoming: u64,
    ) -> Result<(), GroupEngineError> {
        let Some(limit) = admission.max_hot_bytes_per_group else {
            return Ok(());
        };
        if incoming == 0 {
            return Ok(());
        }
        let before = state.group_hot_bytes();
        let after = before.saturating_add(incoming);
        if after <= limit {
            return Ok(());
        }
        Err(GroupEngineError::cold_backpressure(
            id.clone(),
            before,
            after,
            limit,
        ))
    }
}
