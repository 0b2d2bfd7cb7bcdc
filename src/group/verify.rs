//! Deep verification of one group: every hot byte of every stream is backed by a payload record
//! of the right length, cold chunks cover the flushed prefix without gaps, and every cold object
//! exists, decodes (CRC) and matches its chunk's BLAKE3 digest. Read-only.

use ursula_shard::BucketStreamId;

use super::rows::StreamRow;
use super::DiskGroupEngine;

/// One problem found in a group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupFinding {
    /// The stream at fault.
    pub stream: String,
    /// The object path or byte range concerned.
    pub at: String,
    /// What is wrong.
    pub problem: String,
}

/// What verifying a group saw.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GroupVerifyReport {
    /// Streams checked.
    pub streams: u64,
    /// Hot bytes read back from payload records.
    pub hot_bytes: u64,
    /// Cold objects fetched and checked.
    pub cold_objects: u64,
    /// Problems, in the order found.
    pub findings: Vec<GroupFinding>,
    /// Cold-GC entries set aside after failed deletes (objects not reclaimed yet: a leak to
    /// look at, not damage; [`DiskGroupEngine::cold_gc_failures`]).
    pub gc_set_aside: Vec<super::ColdGcFailure>,
}

impl GroupVerifyReport {
    /// True when nothing is wrong.
    pub fn is_clean(&self) -> bool {
        self.findings.is_empty()
    }
}

impl DiskGroupEngine {
    /// Verifies every stream of the group (reads all hot bytes and every cold object).
    pub async fn verify(&self) -> GroupVerifyReport {
        let mut report = GroupVerifyReport {
            gc_set_aside: self.cold_gc_failures(),
            ..GroupVerifyReport::default()
        };
        let mut ids: Vec<&BucketStreamId> = self.state.streams.keys().collect();
        ids.sort_by(|a, b| super::state::compare_ids(a, b));
        for id in ids {
            let row = &self.state.streams[id];
            report.streams += 1;
            self.verify_hot(id, row, &mut report).await;
            self.verify_cold(id, row, &mut report).await;
        }
        let mirrors = self
            .db()
            .map_err(|e| e.to_string())
            .and_then(|db| db.check_mirrors());
        if let Err(problem) = mirrors {
            report.findings.push(GroupFinding {
                stream: String::new(),
                at: "rows in memory".into(),
                problem,
            });
        }
        report
    }

    async fn verify_hot(
        &self,
        id: &BucketStreamId,
        row: &StreamRow,
        report: &mut GroupVerifyReport,
    ) {
        // Everything above the hot start: hot records and any external segments among them.
        let from = row
            .hot_start_offset
            .max(row.retained_offset)
            .min(row.metadata.tail_offset);
        let to = row.metadata.tail_offset;
        let mut offset = from;
        while offset < to {
            let end = to.min(offset + (4 << 20));
            match self.read_range(id, row, offset, end).await {
                Ok(bytes) => report.hot_bytes += bytes.len() as u64,
                Err(e) => {
                    report.findings.push(GroupFinding {
                        stream: id.to_string(),
                        at: format!(
                            "bytes {offset}..{end} (payload partition {})",
                            row.partition
                        ),
                        problem: e.message().to_string(),
                    });
                    return;
                }
            }
            offset = end;
        }
    }

    async fn verify_cold(
        &self,
        id: &BucketStreamId,
        row: &StreamRow,
        report: &mut GroupVerifyReport,
    ) {
        for pair in row.cold_chunks.windows(2) {
            if pair[1].start_offset < pair[0].end_offset {
                report.findings.push(GroupFinding {
                    stream: id.to_string(),
                    at: format!(
                        "cold chunks {}..{}",
                        pair[1].start_offset, pair[0].end_offset
                    ),
                    problem: "overlapping cold chunks".into(),
                });
            }
        }
        for chunk in row.cold_chunks.iter() {
            report.cold_objects += 1;
            if let Err(e) = self.cold.fetch_chunk(chunk).await {
                report.findings.push(GroupFinding {
                    stream: id.to_string(),
                    at: chunk.s3_path.clone(),
                    problem: e.to_string(),
                });
            }
        }
        // External objects must hold their bytes.
        let externals = match self
            .db()
            .and_then(|db| db.externals(id, row.retained_offset, row.metadata.tail_offset))
        {
            Ok(segments) => segments,
            Err(e) => {
                report.findings.push(GroupFinding {
                    stream: id.to_string(),
                    at: "external segments".into(),
                    problem: e.to_string(),
                });
                return;
            }
        };
        for segment in &externals {
            report.cold_objects += 1;
            let end = segment.object_offset + (segment.end_offset - segment.start_offset);
            if let Err(e) = self
                .cold
                .get_range(&segment.s3_path, segment.object_offset..end)
                .await
            {
                report.findings.push(GroupFinding {
                    stream: id.to_string(),
                    at: segment.s3_path.clone(),
                    problem: e.to_string(),
                });
            }
        }
        // The retained bytes below the hot start must come from cold chunks or external
        // segments, without a gap.
        let mut sources: Vec<(u64, u64)> = row
            .cold_chunks
            .iter()
            .map(|c| (c.start_offset, c.end_offset))
            .chain(externals.iter().map(|e| (e.start_offset, e.end_offset)))
            .collect();
        sources.sort_unstable();
        let mut covered = row.retained_offset;
        for (start, end) in sources {
            if start > covered {
                break;
            }
            covered = covered.max(end);
        }
        if covered < row.hot_start_offset {
            report.findings.push(GroupFinding {
                stream: id.to_string(),
                at: format!("bytes {covered}..{}", row.hot_start_offset),
                problem: "bytes below the hot start have no cold chunk or external segment".into(),
            });
        }
    }
}
