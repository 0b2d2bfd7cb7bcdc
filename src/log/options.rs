//! Options of a log: durability, compression, segment sizes, retention, compaction, recovery.

use std::time::Duration;

use crate::segment::{Compression, RecoveryMode};

/// When an append is acknowledged.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
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
#[non_exhaustive]
pub struct RetentionPolicy {
    /// Keep the partition under this many bytes (oldest sealed segments go first). Default
    /// `None` (no size bound); any value.
    pub max_bytes: Option<u64>,
    /// Delete sealed segments whose newest record is older than this. Default `None` (no age
    /// bound); any duration.
    pub max_age: Option<Duration>,
}

with_setters!(RetentionPolicy {
    with_max_bytes => max_bytes: Option<u64>,
    with_max_age => max_age: Option<Duration>,
});

/// Keyed compaction: keep the latest record per key.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct CompactionPolicy {
    /// Whether background maintenance compacts this log. Default `false`.
    pub enabled: bool,
    /// How long a tombstone is kept after its timestamp before compaction may drop it.
    /// Default 24 hours; any duration.
    pub delete_retention: Duration,
    /// Background compaction starts when dirty bytes reach this share of sealed bytes.
    /// Default 0.5; 0.0 ..= 1.0.
    pub min_cleanable_ratio: f64,
    /// Memory budget of the key map of one pass; a pass that fills it cleans a prefix only.
    /// Default 64 MiB; at least 1 (a pass always takes at least one segment's keys).
    pub max_key_map_bytes: usize,
}

with_setters!(CompactionPolicy {
    with_enabled => enabled: bool,
    with_delete_retention => delete_retention: Duration,
    with_min_cleanable_ratio => min_cleanable_ratio: f64,
    with_max_key_map_bytes => max_key_map_bytes: usize,
});

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

/// Every option of a log. Refused at open (`StoreError::Invalid` naming the option) when out of
/// range.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct LogOptions {
    /// When appends are acknowledged. Default [`Durability::Sync`]; an interval must be positive.
    pub durability: Durability,
    /// Compression of each batch written. Default none; zstd levels 1 ..= 22.
    pub compression: Compression,
    /// A segment is sealed and a new one started once it would grow past this size (new
    /// segments are preallocated to it). Default 64 MiB; 4096 ..= 2^32 - 1.
    pub segment_bytes: u64,
    /// One index entry per this many bytes of log. Default 4096; at least 1.
    pub index_interval_bytes: u64,
    /// Size and time retention. Default none.
    pub retention: RetentionPolicy,
    /// Keyed compaction. Default off.
    pub compaction: CompactionPolicy,
    /// What startup recovery may cut. Default [`RecoveryMode::TolerateTornTail`].
    pub recovery: RecoveryMode,
    /// Period of the background maintenance thread (retention, then compaction). Default
    /// `None` (manual); a period must be positive.
    pub maintenance_interval: Option<Duration>,
    /// Most append requests folded into one group commit. Kept for compatibility and
    /// validated (at least 1), but unused: a round takes every frame written before it starts,
    /// bounded by `max_unsynced_bytes` instead. Default 4096.
    pub max_group_commit: usize,
    /// Bytes each journal file of a `Durability::Sync` log may hold before the next one starts
    /// (a checkpoint then lets the old one go, keeping the newest file it covers to be recycled
    /// as the next one: a busy log's journal holds up to three files, the current one, one
    /// awaiting its checkpoint and the spare). Default 64 MiB; 64 KiB ..= 4 GiB.
    pub journal_bytes: u64,
    /// Bytes appended but not yet durable after which appends wait: in the journal of a Sync
    /// log (an appender waits for a round before adding its frames; the whole log's bound, give
    /// or take the requests of the threads that passed the check together), or in each
    /// partition of a buffered log (the appender syncs the partition first: the bound on what a
    /// power cut could take from it). Default 64 MiB; 64 KiB ..= 4 GiB.
    pub max_unsynced_bytes: u64,
    /// How long a thread waiting for a running group-commit round of a Sync log yields its CPU
    /// (`sched_yield`) and checks again before it parks: a thread that never parked needs no
    /// wake, which costs more than the yields when many threads wait (64 writers on 2 vCPUs:
    /// 1.1-1.5x the appends per second). Only while at least 8 threads per CPU wait on the log
    /// at once (fewer park at once: their yields would mostly spin, for 2-4x the CPU per
    /// append). Zero always parks at once; async appenders never yield. Default 500 us;
    /// 0 ..= 10 ms.
    pub commit_yield: Duration,
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
            commit_yield: Duration::from_micros(500),
        }
    }
}

with_setters!(LogOptions {
    with_durability => durability: Durability,
    with_compression => compression: Compression,
    with_segment_bytes => segment_bytes: u64,
    with_index_interval_bytes => index_interval_bytes: u64,
    with_retention => retention: RetentionPolicy,
    with_compaction => compaction: CompactionPolicy,
    with_recovery => recovery: RecoveryMode,
    with_maintenance_interval => maintenance_interval: Option<Duration>,
    with_max_group_commit => max_group_commit: usize,
    with_journal_bytes => journal_bytes: u64,
    with_max_unsynced_bytes => max_unsynced_bytes: u64,
    with_commit_yield => commit_yield: Duration,
});

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
                return Err("compression: zstd level must lie in [1, 22]".into());
            }
        }
        if !(0.0..=1.0).contains(&self.compaction.min_cleanable_ratio) {
            return Err("compaction.min_cleanable_ratio must lie in [0, 1]".into());
        }
        if self.compaction.max_key_map_bytes == 0 {
            return Err("compaction.max_key_map_bytes must be positive".into());
        }
        if self.maintenance_interval.is_some_and(|d| d.is_zero()) {
            return Err("maintenance_interval must be positive".into());
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
        if self.commit_yield > Duration::from_millis(10) {
            return Err("commit_yield must lie in [0, 10 ms]".into());
        }
        if let Durability::Interval(d) = self.durability {
            if d.is_zero() {
                return Err("durability: a sync interval must be positive".into());
            }
        }
        Ok(())
    }
}
