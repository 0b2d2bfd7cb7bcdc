//! `strata verify`: a read-only, full CRC scan of every file of a store.

use std::path::{Path, PathBuf};

use crate::error::{IoContext, StoreResult};
use crate::fs::RealFs;
use crate::segment::recovery::trusted_index;
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

/// Scans one segment file, appending what is wrong to `report`.
pub fn verify_segment(path: &Path, base: i64, report: &mut VerifyReport) -> StoreResult<()> {
    let image = std::fs::read(path).at(path)?;
    report.segments += 1;
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
        Err(e) => finding(0, format!("segment header: {e}"), true),
    }
    if image.len() < SEGMENT_HEADER_LEN {
        return Ok(());
    }
    let scan = scan_segment(
        &image,
        SegmentIndex::empty(base),
        SEGMENT_HEADER_LEN as u64,
        4096,
    );
    report.batches += scan.batches;
    report.records += scan.records;
    match scan.end {
        ScanEnd::Clean => {}
        ScanEnd::TornTail { position, error } => finding(
            position,
            format!("invalid batch, nothing valid after it (a torn tail if this is the partition's last segment): {error}"),
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
            for (base, path) in segment_files(&dir)? {
                verify_segment(&path, base, &mut report)?;
            }
        }
    }
    Ok(report)
}
