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
        let mut report = GroupVerifyReport::default();
        let mut ids: Vec<&BucketStreamId> = self.state.streams.keys().collect();
        ids.sort_by(|a, b| super::state::compare_ids(a, b));
        for id in ids {
            let row = &self.state.streams[id];
            report.streams += 1;
            self.verify_hot(id, row, &mut report);
            self.verify_cold(id, row, &mut report).await;
        }
        report
    }

    fn verify_hot(&self, id: &BucketStreamId, row: &StreamRow, report: &mut GroupVerifyReport) {
        let from = row
            .hot_start_offset
            .max(row.retained_offset)
            .min(row.metadata.tail_offset);
        let to = row.metadata.tail_offset;
        let mut offset = from;
        while offset < to {
            let end = to.min(offset + (4 << 20));
            match self.read_hot(id, row, offset, end) {
                Ok(bytes) => report.hot_bytes += bytes.len() as u64,
                Err(e) => {
                    report.findings.push(GroupFinding {
                        stream: id.to_string(),
                        at: format!(
                            "hot bytes {offset}..{end} (payload partition {})",
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
        let mut expected = None;
        for chunk in &row.cold_chunks {
            if let Some(end) = expected {
                if chunk.start_offset != end {
                    report.findings.push(GroupFinding {
                        stream: id.to_string(),
                        at: format!("cold chunks {end}..{}", chunk.start_offset),
                        problem: "gap or overlap between cold chunks".into(),
                    });
                }
            }
            expected = Some(chunk.end_offset);
            report.cold_objects += 1;
            let len = chunk.end_offset - chunk.start_offset;
            match self
                .cold
                .read_chunk(&chunk.s3_path, chunk.object_offset, 0, len)
                .await
            {
                Ok(bytes) => {
                    if !chunk.payload_digest.is_empty()
                        && blake3::hash(&bytes).to_hex().as_str() != chunk.payload_digest
                    {
                        report.findings.push(GroupFinding {
                            stream: id.to_string(),
                            at: chunk.s3_path.clone(),
                            problem: "object bytes do not match the chunk's BLAKE3 digest".into(),
                        });
                    }
                }
                Err(e) => report.findings.push(GroupFinding {
                    stream: id.to_string(),
                    at: chunk.s3_path.clone(),
                    problem: e.to_string(),
                }),
            }
        }
        // The flushed, retained bytes [retained, hot start) must be covered exactly.
        if row.hot_start_offset > row.retained_offset {
            let first = row.cold_chunks.first().map(|c| c.start_offset);
            let last = row.cold_chunks.last().map(|c| c.end_offset);
            if first.is_none_or(|f| f > row.retained_offset) || last != Some(row.hot_start_offset) {
                report.findings.push(GroupFinding {
                    stream: id.to_string(),
                    at: format!("bytes {}..{}", row.retained_offset, row.hot_start_offset),
                    problem: "flushed bytes are not covered by the cold chunks".into(),
                });
            }
        }
    }
}
