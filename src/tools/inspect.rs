//! `strata inspect` and `strata dump`: human-readable views of a store and of one segment file.

use std::io::Write;
use std::path::Path;

use super::verify::segment_files;
use crate::error::{IoContext, StoreError, StoreResult};
use crate::fs::RealFs;
use crate::log::LogOptions;
use crate::segment::recovery::trusted_index;
use crate::segment::{
    decode_batch, decode_segment_header, index_file_name, scan_segment, SegmentIndex,
    SEGMENT_HEADER_LEN,
};
use crate::store::manifest::Manifest;

/// Summary of one segment file as found on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentSummary {
    /// Base offset from the file name.
    pub base_offset: i64,
    /// Bytes of data (the file of a preallocated segment is longer: a zero tail).
    pub bytes: u64,
    /// Offset of the last valid record (`base - 1` when none).
    pub last_offset: i64,
    /// Whether a valid index file describes it.
    pub indexed: bool,
}

/// Summarizes a segment from its index when it matches, else by scanning it.
pub fn summarize_segment(path: &Path, base: i64) -> StoreResult<SegmentSummary> {
    let image = std::fs::read(path).at(path)?;
    let index = path
        .parent()
        .and_then(|d| trusted_index(&RealFs, &d.join(index_file_name(base)), base, &image));
    let indexed = index.is_some();
    let index = match index {
        Some(i) => i,
        None => {
            scan_segment(
                &image,
                SegmentIndex::empty(base),
                SEGMENT_HEADER_LEN as u64,
                (4096, preallocated(&image)),
            )
            .index
        }
    };
    Ok(SegmentSummary {
        base_offset: base,
        bytes: index.segment_len,
        last_offset: index.last_offset,
        indexed,
    })
}

/// What `strata inspect` reports about a store.
#[derive(Debug, Clone, PartialEq)]
pub struct StoreSummary {
    /// The store's id (hex), from its MANIFEST.
    pub store_id: String,
    /// Every log the MANIFEST records, in its order.
    pub logs: Vec<LogSummary>,
}

/// One log of a [`StoreSummary`].
#[derive(Debug, Clone, PartialEq)]
pub struct LogSummary {
    /// Log name.
    pub name: String,
    /// The options its MANIFEST entry records (`None`: not recorded yet).
    pub options: Option<LogOptions>,
    /// Its partitions (`None` for one not created on disk yet).
    pub partitions: Vec<Option<PartitionSummary>>,
}

/// One partition of a [`LogSummary`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionSummary {
    /// First offset held.
    pub low: i64,
    /// One past the last offset held.
    pub high: i64,
    /// Bytes of its segment files.
    pub bytes: u64,
    /// Its segments, oldest first.
    pub segments: Vec<SegmentSummary>,
}

/// Summarizes the store at `root` (logs, partitions, segments, offsets). Read-only and
/// lock-free, so it may look at a store another process has open.
pub fn summarize_store(root: &Path) -> StoreResult<StoreSummary> {
    let manifest = Manifest::load(&RealFs, root)?.unwrap_or_default();
    let mut logs = Vec::with_capacity(manifest.logs.len());
    for log in &manifest.logs {
        let mut partitions = Vec::with_capacity(log.partitions as usize);
        for partition in 0..log.partitions {
            let dir = root
                .join("logs")
                .join(&log.name)
                .join(partition.to_string());
            partitions.push(if dir.exists() {
                Some(summarize_partition(&dir)?)
            } else {
                None
            });
        }
        logs.push(LogSummary {
            name: log.name.clone(),
            options: log.options.clone(),
            partitions,
        });
    }
    Ok(StoreSummary {
        store_id: manifest.store_id_hex(),
        logs,
    })
}

fn summarize_partition(dir: &Path) -> StoreResult<PartitionSummary> {
    let mut segments = Vec::new();
    for (base, path) in &segment_files(dir)? {
        segments.push(summarize_segment(path, *base)?);
    }
    let low = segments.first().map_or(0, |s| s.base_offset);
    let high = segments
        .last()
        .map_or(0, |s| (s.last_offset + 1).max(s.base_offset));
    Ok(PartitionSummary {
        low,
        high,
        bytes: segments.iter().map(|s| s.bytes).sum(),
        segments,
    })
}

/// Writes a summary of the store at `root` (see [`summarize_store`]) to `out` as text.
pub fn inspect_store(root: &Path, out: &mut dyn Write) -> StoreResult<()> {
    let summary = summarize_store(root)?;
    let w = StoreError::Output;
    writeln!(
        out,
        "store {} (id {}), {} log(s)",
        root.display(),
        summary.store_id,
        summary.logs.len()
    )
    .map_err(w)?;
    for log in &summary.logs {
        writeln!(
            out,
            "log {:?}: {} partition(s)",
            log.name,
            log.partitions.len()
        )
        .map_err(w)?;
        let options = log.options.as_ref().map_or_else(
            || "not recorded (not opened since an earlier version)".into(),
            describe_options,
        );
        writeln!(out, "  options: {options}").map_err(w)?;
        for (partition, p) in log.partitions.iter().enumerate() {
            let Some(p) = p else {
                writeln!(out, "  partition {partition}: not created yet").map_err(w)?;
                continue;
            };
            writeln!(
                out,
                "  partition {partition}: offsets [{}, {}), {} segment(s), {} bytes",
                p.low,
                p.high,
                p.segments.len(),
                p.bytes
            )
            .map_err(w)?;
            for s in &p.segments {
                writeln!(
                    out,
                    "    {:020}.seg  {:>10} bytes  last offset {}{}",
                    s.base_offset,
                    s.bytes,
                    s.last_offset,
                    if s.indexed { "" } else { "  (no valid index)" }
                )
                .map_err(w)?;
            }
        }
    }
    Ok(())
}

/// The recorded options of a log on one line.
pub fn describe_options(o: &LogOptions) -> String {
    let c = &o.compaction;
    let compaction = if c.enabled { "on" } else { "off (calls only)" };
    format!(
        "durability {:?}, compression {:?}, segment_bytes {}, index_interval_bytes {}, \
         retention max_bytes {:?} max_age {:?}, compaction {compaction} delete_retention {:?} \
         min_cleanable_ratio {} max_key_map_bytes {}, maintenance_interval {:?}, \
         journal_bytes {}, max_unsynced_bytes {}",
        o.durability,
        o.compression,
        o.segment_bytes,
        o.index_interval_bytes,
        o.retention.max_bytes,
        o.retention.max_age,
        c.delete_retention,
        c.min_cleanable_ratio,
        c.max_key_map_bytes,
        o.maintenance_interval,
        o.journal_bytes,
        o.max_unsynced_bytes,
    )
}

fn preview(bytes: &[u8]) -> String {
    const MAX: usize = 48;
    let shown = &bytes[..bytes.len().min(MAX)];
    let text = match std::str::from_utf8(shown) {
        Ok(s) if s.chars().all(|c| !c.is_control()) => format!("{s:?}"),
        _ => shown.iter().map(|b| format!("{b:02x}")).collect::<String>(),
    };
    if bytes.len() > MAX {
        format!("{text}... ({} bytes)", bytes.len())
    } else {
        text
    }
}

/// Writes every batch and record of the segment file at `path` to `out`; stops with an error
/// naming the byte offset at the first invalid batch.
pub fn dump_segment(path: &Path, out: &mut dyn Write) -> StoreResult<()> {
    let image = std::fs::read(path).at(path)?;
    let w = StoreError::Output;
    let base = decode_segment_header(&image).map_err(|e| StoreError::corrupt(path, 0, e))?;
    writeln!(
        out,
        "segment {} (format v1), base offset {base}, {} bytes",
        path.display(),
        image.len()
    )
    .map_err(w)?;
    let mut pos = SEGMENT_HEADER_LEN;
    let zero_tail = preallocated(&image);
    while pos < image.len() {
        if zero_tail && image[pos..].iter().all(|&b| b == 0) {
            // A preallocated segment's data ends where its zeros begin: the end, not damage.
            writeln!(
                out,
                "end of data at byte {pos} ({} bytes of preallocated space follow)",
                image.len() - pos
            )
            .map_err(w)?;
            break;
        }
        let (h, records) =
            decode_batch(&image[pos..]).map_err(|e| StoreError::corrupt(path, pos as u64, e))?;
        writeln!(
            out,
            "batch at byte {pos}: offsets {}..={}, {} record(s), {} bytes, {}, crc {:#010x}",
            h.base_offset,
            h.last_offset(),
            h.record_count,
            h.batch_len,
            if h.compression == 1 {
                "zstd"
            } else {
                "uncompressed"
            },
            h.crc
        )
        .map_err(w)?;
        for r in records {
            let key = r.key.as_deref().map_or("-".to_string(), preview);
            let value = r
                .value
                .as_deref()
                .map_or("<tombstone>".to_string(), preview);
            writeln!(
                out,
                "  offset {} ts {} key {key} value {value}",
                r.offset, r.timestamp
            )
            .map_err(w)?;
        }
        pos += h.len();
    }
    Ok(())
}

/// Whether a segment image is a preallocated (version 2) file, whose data ends at its zero tail.
pub(crate) fn preallocated(image: &[u8]) -> bool {
    crate::segment::decode_segment_header_full(image).is_ok_and(|h| h.preallocated)
}
