//! The metrics Strata reports through the `metrics` facade (install any recorder, such as a
//! Prometheus exporter, to collect them; without one each call costs a few nanoseconds). Every
//! name and label is here, in one place; docs/guide.md, "Observability", lists them.

use std::time::Duration;

use crate::log::MaintenanceReport;

/// One log's append and sync metrics, registered once at open (so a recorder must be
/// installed before the store opens its logs): records and bytes appended, the latency of
/// durable appends, and per group-commit round its records, bytes and latency.
#[derive(Debug, Clone)]
pub(crate) struct LogMetrics {
    records: metrics::Counter,
    bytes: metrics::Counter,
    append_seconds: metrics::Histogram,
    round_records: metrics::Histogram,
    sync_rounds: metrics::Counter,
    synced_bytes: metrics::Counter,
    sync_failures: metrics::Counter,
    round_seconds: metrics::Histogram,
    round_bytes: metrics::Histogram,
}

impl LogMetrics {
    /// The handles of `log`'s metrics.
    pub fn new(log: &str) -> Self {
        let log = log.to_string();
        Self {
            records: metrics::counter!("strata_appended_records_total", "log" => log.clone()),
            bytes: metrics::counter!("strata_appended_bytes_total", "log" => log.clone()),
            append_seconds: metrics::histogram!("strata_append_seconds", "log" => log.clone()),
            round_records: metrics::histogram!("strata_sync_round_records", "log" => log.clone()),
            sync_rounds: metrics::counter!("strata_sync_rounds_total", "log" => log.clone()),
            synced_bytes: metrics::counter!("strata_synced_bytes_total", "log" => log.clone()),
            sync_failures: metrics::counter!("strata_sync_failures_total", "log" => log.clone()),
            round_seconds: metrics::histogram!("strata_sync_round_seconds", "log" => log.clone()),
            round_bytes: metrics::histogram!("strata_sync_round_bytes", "log" => log),
        }
    }

    /// One group-commit round of the log's journal: bytes made durable, and how long it took
    /// (a failed round counts as a failure only).
    pub fn sync_round(&self, bytes: u64, took: Duration, ok: bool) {
        if !ok {
            self.sync_failures.increment(1);
            return;
        }
        self.sync_rounds.increment(1);
        self.synced_bytes.increment(bytes);
        self.round_seconds.record(took);
        self.round_bytes.record(bytes as f64);
    }

    /// One write of `records` records in `bytes` bytes of batches.
    pub fn appended(&self, records: u64, bytes: u64) {
        self.records.increment(records);
        self.bytes.increment(bytes);
    }

    /// A durable append (written, then synced) that took `took`.
    pub fn durable_append(&self, took: Duration) {
        self.append_seconds.record(took);
    }

    /// A group-commit round that made `records` records durable.
    pub fn round(&self, records: u64) {
        self.round_records.record(records as f64);
    }
}

/// What one maintenance pass of `log` did.
pub(crate) fn maintenance(log: &str, report: &MaintenanceReport) {
    let log = log.to_string();
    metrics::counter!("strata_retention_bytes_deleted_total", "log" => log.clone())
        .increment(report.retention.bytes_deleted);
    metrics::counter!("strata_compaction_records_removed_total", "log" => log.clone())
        .increment(report.compaction.records_removed);
    metrics::counter!("strata_maintenance_failures_total", "log" => log)
        .increment(report.failures.len() as u64);
}

/// Records of `partition` of `log` at or past live subscription `subscription`'s read cursor,
/// as of its last look at the partition.
pub(crate) fn subscriber_lag(log: &str, partition: i32, subscription: u64, lag: i64) {
    metrics::gauge!("strata_subscriber_lag_records", "log" => log.to_string(),
        "partition" => partition.to_string(), "subscription" => subscription.to_string())
    .set(lag.max(0) as f64);
}

/// Records of `partition` of `log` past `consumer`'s committed position, as last read with
/// `ConsumerPositions::lag`.
pub(crate) fn consumer_lag(log: &str, consumer: &str, partition: u32, lag: i64) {
    metrics::gauge!("strata_consumer_lag_records", "log" => log.to_string(),
        "consumer" => consumer.to_string(), "partition" => partition.to_string())
    .set(lag as f64);
}

/// One group's commit metrics, registered once at open (like [`LogMetrics`]): durable
/// commits, how long each record took to persist (counted by the command's thread once the
/// record is durable), and how long RocksDB took to apply it (on the apply thread).
#[cfg(feature = "ursula")]
#[derive(Debug, Clone)]
pub(crate) struct GroupCommitMetrics {
    commits: metrics::Counter,
    persist_seconds: metrics::Histogram,
    apply_seconds: metrics::Histogram,
}

#[cfg(feature = "ursula")]
impl GroupCommitMetrics {
    /// The handles of `group`'s commit metrics.
    pub fn new(group: &str) -> Self {
        let group = group.to_string();
        Self {
            commits: metrics::counter!("strata_group_commits_total", "group" => group.clone()),
            persist_seconds: metrics::histogram!("strata_group_persist_seconds", "group" => group.clone()),
            apply_seconds: metrics::histogram!("strata_group_apply_seconds", "group" => group),
        }
    }

    /// One durable commit whose record took `persist` to persist.
    pub fn committed(&self, persist: Duration) {
        self.commits.increment(1);
        self.persist_seconds.record(persist);
    }

    /// One commit record RocksDB took `apply` to apply.
    pub fn applied(&self, apply: Duration) {
        self.apply_seconds.record(apply);
    }
}

/// The outcome of a cold-tier task (`flush`, `compaction`, `gc`, `sweep`, `cold index`) of `group`.
#[cfg(feature = "ursula")]
pub(crate) fn cold_task(group: &str, task: &'static str, ok: bool) {
    let outcome = if ok { "ok" } else { "error" };
    metrics::counter!("strata_cold_tasks_total", "group" => group.to_string(), "task" => task, "outcome" => outcome)
        .increment(1);
}

/// A read of a cold object: served from the object cache or fetched.
#[cfg(feature = "ursula")]
pub(crate) fn cold_cache(hit: bool) {
    let result = if hit { "hit" } else { "miss" };
    metrics::counter!("strata_cold_cache_reads_total", "result" => result).increment(1);
}

/// Cold-GC entries of `group` whose delete failed and were set aside for a later pass (`set`),
/// and how many are set aside now.
#[cfg(feature = "ursula")]
pub(crate) fn cold_gc_set_aside(group: &str, set: u64, now: usize) {
    metrics::counter!("strata_cold_gc_set_aside_total", "group" => group.to_string())
        .increment(set);
    metrics::gauge!("strata_cold_gc_set_aside", "group" => group.to_string()).set(now as f64);
}
