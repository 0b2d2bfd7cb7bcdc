//! Recovery of RocksDB from the commit records (format/GROUP_STATE.md, "Commit protocol and
//! crash argument"): the records past RocksDB's replay position are applied in order, each with
//! the integrity digests it deferred added back to its stream rows from the payload records.

use std::borrow::Cow;

use crate::group::commit_record::{self, CommitRecord, Op};
use crate::group::db::{GroupDb, STREAMS_CF_INDEX};
use crate::group::keys::decode_stream_key;
use crate::group::payload::PayloadLog;
use crate::group::state::integrity::{add_digest, inline_digest};
use crate::group::stream_row::{decode_stream_row, encode_stream_row};
use crate::group::GroupError;

/// Applies the commit records past RocksDB's replay position: those RocksDB lost (applied without
/// its WAL and not yet flushed when the power failed) or never got (a write that failed after
/// the record was appended). Blocking; returns how many it applied.
///
/// A power cut can keep a commit record whose payloads, in other partitions, were lost: its
/// sync never completed, so neither it nor any later record was acknowledged (an acknowledged
/// record's sync covers every earlier payload). Replay stops at the first such record and
/// durably moves the replay position past the end, so those records are never applied (their
/// payload offsets will be reused).
pub(crate) fn replay(db: &GroupDb, payloads: &PayloadLog) -> Result<u64, GroupError> {
    let mut applied = 0;
    let mut torn = false;
    payloads.commit_records(db.replay_from()?, |offset, record| {
        torn = torn || !payloads.holds_requirements(record)?;
        if !torn {
            db.apply(&[&with_digests(record, payloads)?], offset + 1)?;
            applied += 1;
        }
        Ok(())
    })?;
    if torn {
        db.apply(
            &[CommitRecord::default().as_bytes()],
            payloads.commit_end()?,
        )?;
        db.flush()?;
    }
    Ok(applied)
}

/// `record` as RocksDB must apply it: unchanged when it defers no digest; else followed by a
/// put of each stream row it deferred digests of, with the digests of those appends (hashed
/// from their payload records) added, which wins over the record's own put of that row.
fn with_digests<'a>(record: &'a [u8], payloads: &PayloadLog) -> Result<Cow<'a, [u8]>, GroupError> {
    let mut sums: Vec<(Vec<u8>, setsum::Setsum)> = Vec::new();
    commit_record::decode(record, |op| {
        if let Op::Digest {
            partition,
            offset,
            start,
        } = op
        {
            let (key, value) = payloads.payload_record(partition, offset)?;
            let id = match decode_stream_key(&key) {
                Some((id, [])) => id,
                _ => return Err(corrupt(partition, offset, "is not a stream's payload")),
            };
            let digest = inline_digest(&id, start, &value);
            match sums.iter_mut().find(|(k, _)| *k == key) {
                Some((_, sum)) => *sum += digest,
                None => sums.push((key, digest)),
            }
        }
        Ok(())
    })?;
    if sums.is_empty() {
        return Ok(Cow::Borrowed(record));
    }
    let mut patched = CommitRecord::copy_of(record);
    for (key, sum) in sums {
        let mut row = decode_stream_row(last_row_put(record, &key)?)?;
        add_digest(&mut row, sum);
        patched.push(Op::Put {
            cf: STREAMS_CF_INDEX,
            key: &key,
            value: &encode_stream_row(&row)?,
        });
    }
    Ok(Cow::Owned(patched.into_bytes()))
}

/// The value of the last put of stream row `key` in `record`.
fn last_row_put<'a>(record: &'a [u8], key: &[u8]) -> Result<&'a [u8], GroupError> {
    let mut found = None;
    commit_record::decode(record, |op| {
        if let Op::Put { cf, key: k, value } = op {
            if cf == STREAMS_CF_INDEX && k == key {
                found = Some(value);
            }
        }
        Ok(())
    })?;
    found.ok_or_else(|| {
        GroupError::Corrupt("commit record: a digest op without its stream row".into())
    })
}

/// `Corrupt` naming the payload record a digest op points at.
fn corrupt(partition: u32, offset: u64, what: &str) -> GroupError {
    GroupError::Corrupt(format!(
        "commit record: the digest's payload record at offset {offset} of partition {partition} {what}"
    ))
}
