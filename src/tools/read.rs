//! `strata read` and `strata tail`: records of one partition of a log as JSON lines, chosen by
//! offset, by time, or as the last N. They read through [`LivePartition`]: no lock and no write,
//! so they work on a store an application holds open.

use std::io::Write;
use std::ops::ControlFlow;

use super::live::LivePartition;
use crate::segment::{Record, RecordRef};
use crate::{StoreError, StoreResult};

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

/// Writes at most `max` records of `partition` from `from` on, one JSON object per line (see
/// [`record_json`]). Answers how many it wrote and the offset a later read (`tail --follow`)
/// goes on from.
pub fn write_records(
    part: &LivePartition,
    partition: u32,
    from: ReadFrom,
    max: u64,
    out: &mut dyn Write,
) -> StoreResult<(u64, i64)> {
    let start = match from {
        ReadFrom::Offset(offset) => offset,
        ReadFrom::Time(ms) => first_at_or_after(part, ms)?,
        ReadFrom::Last(n) => last_start(part, n)?,
    };
    let mut written = 0;
    if max == 0 {
        return Ok((0, start));
    }
    let next = part.scan(start, None, &mut |r: Record| {
        let line = record_json(partition, &r.as_ref());
        writeln!(out, "{line}").map_err(StoreError::Output)?;
        written += 1;
        Ok(if written >= max {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        })
    })?;
    Ok((written, next))
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

/// One record as a JSON object: `partition`, `offset`, `timestamp`, then `key` and `value` as
/// strings when they are UTF-8 (`key_hex` / `value_hex` otherwise; `null` when absent).
pub fn record_json(partition: u32, r: &RecordRef<'_>) -> String {
    format!(
        "{{\"partition\":{partition},\"offset\":{},\"timestamp\":{},{},{}}}",
        r.offset,
        r.timestamp,
        bytes_field("key", r.key),
        bytes_field("value", r.value)
    )
}

fn bytes_field(name: &str, bytes: Option<&[u8]>) -> String {
    match bytes.map(std::str::from_utf8) {
        None => format!("\"{name}\":null"),
        Some(Ok(text)) => format!("\"{name}\":{}", json_string(text)),
        Some(Err(_)) => {
            let hex: String = bytes
                .unwrap_or_default()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            format!("\"{name}_hex\":\"{hex}\"")
        }
    }
}

/// `text` as a JSON string literal.
pub fn json_string(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_json_with_escaped_text_and_hex_for_binary() {
        let r = RecordRef {
            offset: 7,
            timestamp: -1,
            key: Some(b"k\"1\n"),
            value: Some(&[0xff, 0x00]),
        };
        assert_eq!(
            record_json(2, &r),
            r#"{"partition":2,"offset":7,"timestamp":-1,"key":"k\"1\n","value_hex":"ff00"}"#
        );
        let r = RecordRef {
            key: None,
            value: Some(b"\x01ok"),
            ..r
        };
        assert_eq!(
            record_json(0, &r),
            r#"{"partition":0,"offset":7,"timestamp":-1,"key":null,"value":"\u0001ok"}"#
        );
    }
}
