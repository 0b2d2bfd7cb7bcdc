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
    /// Most append requests folded into one group commit. Kept for compatibility and
    /// validated (at least 1), but unused: a round takes every frame written before it starts,
    /// bounded by `max_unsynced_bytes` instead. Default 4096.
    pub max_group_commit: usize,
    /// Bytes each journal file of a `Durability::Sync` log may hold before the next one starts
    /// (a checkpoint then lets the old one go). Default 64 MiB; 64 KiB ..= 4 GiB.
    pub journal_bytes: u64,
    /// Bytes appended but not yet durable after which appends wait: in the journal of a Sync
    /// log (an appender waits for a round before adding its frames; the whole log's bound, give
    /// or take the requests of the threads that passed the check together), or in each
    /// partition of a buffered log (the appender syncs the partition first: the bound on what a
    /// power cut could take from it). Default 64 MiB; 64 KiB ..= 4 GiB.
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
