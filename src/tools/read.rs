//! What `strata read` and `strata tail` print: records of one partition of a log, chosen by
//! offset, by time, or as the last N. They read through [`LivePartition`]: no lock and no write,
//! so they work on a store an application holds open.

use std::ops::ControlFlow;

use super::live::LivePartition;
use crate::segment::Record;
use crate::StoreResult;

/// Where a read starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadFrom {
    /// At this offset (the first record held if it is below it).
    Offset(i64),
    /// At the first record whose timestamp (ms since the Unix epoch) is at or after this.
    Time(i64),
    /// At the last `n` records (offsets keyed compaction removed are not records: the read
    /// starts far enough back to find `n`, or at the first record).
    Last(u64),
}

/// Calls `f` with at most `max` records from `from` on, in offset order. Answers how many it
/// passed and the offset a later read (`tail --follow`) goes on from.
pub fn read_records(
    part: &LivePartition,
    from: ReadFrom,
    max: u64,
    f: &mut dyn FnMut(&Record) -> StoreResult<()>,
) -> StoreResult<(u64, i64)> {
    let start = match from {
        ReadFrom::Offset(offset) => offset,
        ReadFrom::Time(ms) => first_at_or_after(part, ms)?,
        ReadFrom::Last(n) => last_start(part, n)?,
    };
    let mut passed = 0;
    if max == 0 {
        return Ok((0, start));
    }
    let next = part.scan(start, None, &mut |r: Record| {
        f(&r)?;
        passed += 1;
        Ok(if passed >= max {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        })
    })?;
    Ok((passed, next))
}

/// The offset of the first record whose timestamp is at or after `ms` (past the data if none).
fn first_at_or_after(part: &LivePartition, ms: i64) -> StoreResult<i64> {
    let mut found = None;
    let end = part.scan(i64::MIN, None, &mut |r: Record| {
        Ok(match r.timestamp >= ms {
            true => {
                found = Some(r.offset);
                ControlFlow::Break(())
            }
            false => ControlFlow::Continue(()),
        })
    })?;
    Ok(found.unwrap_or(end))
}

/// The offset of the `n`th record from the end (the first record when there are fewer). Counts
/// one segment at a time from the last, so it reads only the segments that hold them.
fn last_start(part: &LivePartition, n: u64) -> StoreResult<i64> {
    if n == 0 {
        return Ok(part.water_marks()?.1);
    }
    let n = usize::try_from(n).unwrap_or(usize::MAX);
    let (mut counted, mut end) = (0usize, None);
    for base in part.segment_bases()?.into_iter().rev() {
        let mut offsets = Vec::new();
        part.scan(base, end, &mut |r: Record| {
            offsets.push(r.offset);
            Ok(ControlFlow::Continue(()))
        })?;
        if counted + offsets.len() >= n {
            return Ok(offsets[offsets.len() - (n - counted)]);
        }
        counted += offsets.len();
        end = Some(base);
    }
    Ok(i64::MIN)
}
