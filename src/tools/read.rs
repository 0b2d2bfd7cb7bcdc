//! `strata read` and `strata tail`: records of one partition of a log as JSON lines, chosen by
//! offset, by time, or as the last N.

use std::io::Write;

use crate::log::Log;
use crate::segment::RecordRef;
use crate::{StoreError, StoreResult};

/// Where a read starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadFrom {
    /// At this offset (the low-water mark if it is below it).
    Offset(i64),
    /// At the first record whose timestamp (ms since the Unix epoch) is at or after this.
    Time(i64),
    /// At the last `n` records before the high-water mark (offsets keyed compaction removed
    /// are not records: the read starts far enough back to find `n`, or at the low-water mark).
    Last(u64),
}

/// Writes at most `max` records of `partition` of `log`, from `from` on, one JSON object per
/// line (see [`record_json`]); returns how many it wrote.
pub fn write_records(
    log: &Log,
    partition: u32,
    from: ReadFrom,
    max: u64,
    out: &mut dyn Write,
) -> StoreResult<u64> {
    let low = log.low_water_mark(partition)?;
    let high = log.high_water_mark(partition)?;
    let start = match from {
        ReadFrom::Offset(offset) => offset.max(low),
        ReadFrom::Time(ms) => log.offset_for_timestamp(partition, ms)?.unwrap_or(high),
        ReadFrom::Last(n) => last_start(log, partition, n, (low, high))?,
    };
    // A window of as many offsets as records are still wanted holds at most that many records
    // (compaction leaves gaps), so the windows go on until `max` are written or the end.
    let mut written = 0;
    let mut at = start;
    while at < high && written < max {
        let wanted = i64::try_from(max - written).unwrap_or(i64::MAX);
        let until = at.saturating_add(wanted).min(high);
        log.visit(partition, at, until, &mut |r: RecordRef<'_>| {
            writeln!(out, "{}", record_json(partition, &r)).map_err(StoreError::Output)?;
            written += 1;
            Ok::<(), StoreError>(())
        })?;
        at = until;
    }
    Ok(written)
}

/// The offset from which `[start, high)` holds the last `n` records of `partition` (or all of
/// them, from `low`). Each step back covers as many offsets as records are missing, so the
/// range never holds more than `n`; each step counts only the offsets it added.
fn last_start(log: &Log, partition: u32, n: u64, (low, high): (i64, i64)) -> StoreResult<i64> {
    let back = |from: i64, by: u64| from.saturating_sub(i64::try_from(by).unwrap_or(i64::MAX));
    let (mut start, mut counted_from, mut count) = (back(high, n).max(low), high, 0u64);
    loop {
        log.visit(partition, start, counted_from, &mut |_: RecordRef<'_>| {
            count += 1;
            Ok::<(), StoreError>(())
        })?;
        if count >= n || start <= low {
            return Ok(start);
        }
        counted_from = start;
        start = back(start, n - count).max(low);
    }
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
