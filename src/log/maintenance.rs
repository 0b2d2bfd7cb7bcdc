//! Maintenance: retention, then compaction of partitions whose dirty ratio is high enough, one
//! partition at a time. A partition that fails does not stop the others; its error is kept in
//! the report, and the last report of the background thread is readable from the log.

use super::compaction::CompactionReport;
use super::retention::RetentionReport;
use super::Log;
use crate::error::{StoreError, StoreResult};

/// What one maintenance pass did, and where it failed.
#[derive(Debug, Clone, Default)]
pub struct MaintenanceReport {
    /// When the pass ran (ms since the Unix epoch, as given).
    pub now_ms: i64,
    /// Segments and bytes retention deleted.
    pub retention: RetentionReport,
    /// What compaction did.
    pub compaction: CompactionReport,
    /// Partitions whose retention or compaction failed, with the error.
    pub failures: Vec<(u32, String)>,
}

impl MaintenanceReport {
    /// True when every partition was maintained.
    pub fn is_clean(&self) -> bool {
        self.failures.is_empty()
    }
}

/// What the background maintenance thread saw so far.
#[derive(Debug, Clone, Default)]
pub struct MaintenanceStatus {
    /// Passes run.
    pub passes: u64,
    /// Partition failures met over all passes.
    pub failures: u64,
    /// The last pass.
    pub last: Option<MaintenanceReport>,
}

impl Log {
    /// One maintenance pass over every partition: retention, then compaction where the dirty
    /// ratio reaches the policy's threshold. Fails only when the log is closed; partition
    /// failures are in the report (and counted in [`Log::maintenance_status`]).
    pub fn run_maintenance(&self, now_ms: i64) -> StoreResult<MaintenanceReport> {
        if self.is_closed() {
            return Err(StoreError::Closed);
        }
        let _span = tracing::info_span!("strata.maintenance", log = %self.inner.name).entered();
        let mut report = MaintenanceReport {
            now_ms,
            ..Default::default()
        };
        for p in 0..self.partition_count() {
            if let Err(e) = self.maintain_partition(p, now_ms, &mut report) {
                tracing::error!(log = %self.inner.name, partition = p, error = %e, "maintenance of a partition failed; the next pass retries");
                report.failures.push((p, e.to_string()));
            }
        }
        tracing::debug!(log = %self.inner.name, retention = ?report.retention, compaction = ?report.compaction, failures = report.failures.len(), "maintenance pass");
        let mut status = self
            .inner
            .maintenance_status
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        status.passes += 1;
        status.failures += report.failures.len() as u64;
        crate::metrics::maintenance(&self.inner.name, &report);
        status.last = Some(report.clone());
        Ok(report)
    }

    fn maintain_partition(
        &self,
        p: u32,
        now_ms: i64,
        report: &mut MaintenanceReport,
    ) -> StoreResult<()> {
        if self.inner.owned {
            return Ok(());
        }
        let partition = self.partition(p)?.clone();
        report
            .retention
            .add(self.retain_partition(&partition, now_ms)?);
        let policy = &self.inner.options.compaction;
        if policy.enabled && self.dirty_ratio(p)? >= policy.min_cleanable_ratio {
            report.compaction.add(self.compact_partition(p, now_ms)?);
        }
        Ok(())
    }

    /// What maintenance (background or called) did so far.
    pub fn maintenance_status(&self) -> MaintenanceStatus {
        self.inner
            .maintenance_status
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Registers the background job that runs [`Log::run_maintenance`] every `period` (on
    /// the process's `strata-maintenance-` worker); a failed pass ends it (the failure is in
    /// the maintenance status).
    pub(crate) fn start_maintenance(&self, period: std::time::Duration) -> StoreResult<()> {
        let kind = (super::workers::Kind::Maintenance, Some(period));
        self.inner.start_job(
            kind,
            |inner| &inner.maintenance,
            |inner| {
                Log::from_inner(inner)
                    .run_maintenance(crate::now_ms())
                    .is_ok()
            },
        )
    }
}
