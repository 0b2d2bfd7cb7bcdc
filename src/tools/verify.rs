//! `strata verify`: a read-only, full CRC scan of every file of a store.

use std::path::{Path, PathBuf};

use crate::error::{IoContext, StoreResult};
use crate::fs::RealFs;
use crate::segment::recovery::{durable_floor, trusted_index};
use crate::segment::writer::parse_file_name;
use crate::segment::{
    decode_segment_header, index_file_name, scan_segment, ScanEnd, SegmentIndex, SEGMENT_HEADER_LEN,
};
use crate::store::manifest::Manifest;
use crate::store::DirLock;

/// One problem `verify` found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// File at fault.
    pub file: PathBuf,
    /// Byte offset of the bad structure.
    pub offset: u64,
    /// What is wrong.
    pub problem: String,
    /// True when the data itself is bad (false for derived data such as a stale index).
    pub corrupt: bool,
}

/// What `verify` saw.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VerifyReport {
    /// Segment files scanned.
    pub segments: u64,
    /// Valid batches seen.
    pub batches: u64,
    /// Records in those batches.
    pub records: u64,
    /// Problems, in the order found.
    pub findings: Vec<Finding>,
}

impl VerifyReport {
    /// True when no data is corrupt (stale indexes are only noted).
    pub fn is_clean(&self) -> bool {
        self.findings.iter().all(|f| !f.corrupt)
    }
}

/// Lists the segment files of a partition directory in offset order.
pub fn segment_files(dir: &Path) -> StoreResult<Vec<(i64, PathBuf)>> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).at(dir)? {
        let entry = entry.at(dir)?;
        let name = entry.file_name();
        if let Some(base) = name.to_str().and_then(|n| parse_file_name(n, ".seg")) {
            out.push((base, entry.path()));
        }
    }
    out.sort();
    Ok(out)
}

/// Scans one segment file, appending what is wrong to `report`. In a partition's `last`
/// segment, bytes that were never synced (a torn tail, or a header never made durable with
/// nothing valid after it) are noted, not reported as corrupt: they were never acknowledged,
/// and recovery cuts them when the log is opened.
pub fn verify_segment(
    path: &Path,
    base: i64,
    last: bool,
    report: &mut VerifyReport,
) -> StoreResult<()> {
    let image = std::fs::read(path).at(path)?;
    report.segments += 1;
    // Below the length a checkpoint recorded as durable, damage is damage (the rule recovery
    // applies): only a tail past it can be a torn, never-acknowledged write.
    let floor = path.parent().map_or(0, |dir| {
        durable_floor(&RealFs, &dir.join(index_file_name(base)), base)
    });
    let unsynced = "never synced, so never acknowledged (recovery cuts it on open)";
    let mut finding = |offset: u64, problem: String, corrupt: bool| {
        report.findings.push(Finding {
            file: path.to_path_buf(),
            offset,
            problem,
            corrupt,
        })
    };
    match decode_segment_header(&image) {
        Ok(found) if found == base => {}
        Ok(found) => finding(
            16,
            format!("header base offset {found} differs from the file name"),
            true,
        ),
        Err(e)
            if last
                && floor <= SEGMENT_HEADER_LEN as u64
                && nothing_valid_after_header(&image, base) =>
        {
            finding(0, format!("segment header {unsynced}: {e}"), false);
            return Ok(());
        }
        Err(e) => finding(0, format!("segment header: {e}"), true),
    }
    if image.len() < SEGMENT_HEADER_LEN {
        return Ok(());
    }
    let scan = scan_segment(
        &image,
        SegmentIndex::empty(base),
        SEGMENT_HEADER_LEN as u64,
        (4096, super::inspect::preallocated(&image)),
    );
    report.batches += scan.batches;
    report.records += scan.records;
    match scan.end {
        ScanEnd::Clean => {}
        ScanEnd::TornTail { position, error } if last && position >= floor => {
            finding(position, format!("torn tail, {unsynced}: {error}"), false)
        }
        ScanEnd::TornTail { position, error } if last => finding(
            position,
            format!("invalid batch below the durable length {floor}: {error}"),
            true,
        ),
        ScanEnd::TornTail { position, error } => finding(
            position,
            format!("invalid batch inside a sealed segment: {error}"),
            true,
        ),
        ScanEnd::Corrupt { position, error } => {
            finding(position, format!("corrupt batch: {error}"), true)
        }
    }
    if let Some(dir) = path.parent() {
        let index_path = dir.join(index_file_name(base));
        if index_path.exists() && trusted_index(&RealFs, &index_path, base, &image).is_none() {
            report.findings.push(Finding {
                file: index_path,
                offset: 0,
                problem: "index does not match its segment (it is rebuilt on open)".into(),
                corrupt: false,
            });
        }
    }
    Ok(())
}

/// Verifies the whole store at `root`: MANIFEST, then every segment of every log.
///
/// Takes the store's lock so it never races a writer; it writes nothing.
pub fn verify_store(root: &Path) -> StoreResult<VerifyReport> {
    let _lock = DirLock::acquire(&RealFs, root)?;
    let mut report = VerifyReport::default();
    let manifest = match Manifest::load(&RealFs, root) {
        Ok(m) => m.unwrap_or_default(),
        Err(e) => {
            report.findings.push(Finding {
                file: root.join("MANIFEST"),
                offset: 0,
                problem: e.to_string(),
                corrupt: true,
            });
            return Ok(report);
        }
    };
    for log in &manifest.logs {
        for partition in 0..log.partitions {
            let dir = root
                .join("logs")
                .join(&log.name)
                .join(partition.to_string());
            if !dir.exists() {
                continue;
            }
            let files = segment_files(&dir)?;
            let count = files.len();
            for (i, (base, path)) in files.into_iter().enumerate() {
                verify_segment(&path, base, i + 1 == count, &mut report)?;
            }
        }
    }
    Ok(report)
}

/// True when no valid batch follows the (invalid) header of a segment image (the rule recovery
/// applies to a last segment whose header never became durable).
fn nothing_valid_after_header(image: &[u8], base: i64) -> bool {
    let header_len = SEGMENT_HEADER_LEN as u64;
    if image.len() as u64 <= header_len {
        return true;
    }
    let scan = scan_segment(image, SegmentIndex::empty(base), header_len, (4096, true));
    scan.index.segment_len <= header_len && !matches!(scan.end, ScanEnd::Corrupt { .. })
}
