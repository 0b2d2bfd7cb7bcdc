//! Options of a log: durability, compression, segment sizes, retention, compaction, recovery.

use std::time::Duration;

use crate::segment::{Compression, RecoveryMode};

/// When an append is acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// After the record is on stable storage (fdatasync). Concurrent appends share one sync.
    /// An acknowledged record survives a process crash and a power cut.
    #[default]
    Sync,
    /// After the record is written to the operating system; the writer syncs at this interval.
    /// A process crash loses nothing, a power cut may lose up to one interval of acknowledged records.
    Interval(Duration),
}

/// Deletion of whole sealed segments by size and age; advances the low-water mark.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RetentionPolicy {
    /// Keep the partition under this many bytes (oldest sealed segments go first).
    pub max_bytes: Option<u64>,
    /// Delete sealed segments whose newest record is older than this.
    pub max_age: Option<Duration>,
}

/// Keyed compaction: keep the latest record per key.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CompactionPolicy {
    /// Whether background maintenance compacts this log.
    pub enabled: bool,
    /// How long a tombstone is kept after its timestamp before compaction may drop it.
    pub delete_retention: Duration,
    /// Background compaction starts when dirty bytes reach this share of sealed bytes.
    pub min_cleanable_ratio: f64,
    /// Memory budget of the key map of one pass; a pass that fills it cleans a prefix only.
    pub max_key_map_bytes: usize,
}

impl Default for CompactionPolicy {
    fn default() -> Self {
        Self {
            enabled: false,
            delete_retention: Duration::from_secs(24 * 3600),
            min_cleanable_ratio: 0.5,
            max_key_map_bytes: 64 << 20,
        }
    }
}

/// Every option of a log.
#[derive(Debug, Clone, PartialEq)]
pub struct LogOptions {
    /// When appends are acknowledged.
    pub durability: Durability,
    /// Compression of each batch written.
    pub compression: Compression,
    /// A segment is sealed and a new one started once it would grow past this size.
    pub segment_bytes: u64,
    /// One index entry per this many bytes of log.
    pub index_interval_bytes: u64,
    /// Size and time retention.
    pub retention: RetentionPolicy,
    /// Keyed compaction.
    pub compaction: CompactionPolicy,
    /// What startup recovery may cut.
    pub recovery: RecoveryMode,
    /// Period of the background maintenance thread (retention, then compaction); `None` = manual.
    pub maintenance_interval: Option<Duration>,
    /// Most append requests folded into one group commit (kept for compatibility; a round now
    /// takes every request written before it starts). Default 4096; at least 1.
    pub max_group_commit: usize,
    /// Bytes of journal each file is preallocated to (`Durability::Sync` logs). Default 64 MiB;
    /// 64 KiB ..= 4 GiB.
    pub journal_bytes: u64,
    /// Bytes written but not yet synced after which a writer waits for (journal) or runs
    /// (buffered segment) a sync before writing more: the bound on what a power cut could take
    /// from a buffered log and on a round's work. Default 64 MiB; 64 KiB ..= 4 GiB.
    pub max_unsynced_bytes: u64,
}

impl Default for LogOptions {
    fn default() -> Self {
        Self {
            durability: Durability::Sync,
            compression: Compression::None,
            segment_bytes: 64 << 20,
            index_interval_bytes: 4096,
            retention: RetentionPolicy::default(),
            compaction: CompactionPolicy::default(),
            recovery: RecoveryMode::TolerateTornTail,
            maintenance_interval: None,
            max_group_commit: 4096,
            journal_bytes: 64 << 20,
            max_unsynced_bytes: 64 << 20,
        }
    }
}

impl LogOptions {
    /// True when these options remove records on their own (retention, compaction, or a
    /// maintenance thread).
    pub fn trims(&self) -> bool {
        self.retention.max_bytes.is_some()
            || self.retention.max_age.is_some()
            || self.compaction.enabled
            || self.maintenance_interval.is_some()
    }

    /// Checks that the options can be honoured.
    pub fn validate(&self) -> Result<(), String> {
        if self.segment_bytes < 4096 || self.segment_bytes > u64::from(u32::MAX) {
            return Err("segment_bytes must lie in [4096, 2^32 - 1]".into());
        }
        if self.index_interval_bytes == 0 {
            return Err("index_interval_bytes must be positive".into());
        }
        if let Compression::Zstd { level } = self.compression {
            if !(1..=22).contains(&level) {
                return Err("zstd level must lie in [1, 22]".into());
            }
        }
        if !(0.0..=1.0).contains(&self.compaction.min_cleanable_ratio) {
            return Err("min_cleanable_ratio must lie in [0, 1]".into());
        }
        if self.max_group_commit == 0 {
            return Err("max_group_commit must be positive".into());
        }
        let sizes = 64 << 10..=4 << 30;
        if !sizes.contains(&self.journal_bytes) {
            return Err("journal_bytes must lie in [64 KiB, 4 GiB]".into());
        }
        if !sizes.contains(&self.max_unsynced_bytes) {
            return Err("max_unsynced_bytes must lie in [64 KiB, 4 GiB]".into());
        }
        if let Durability::Interval(d) = self.durability {
            if d.is_zero() {
                return Err("a sync interval must be positive".into());
            }
        }
        Ok(())
    }
}
