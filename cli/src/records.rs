//! Records as `strata read` and `strata tail` print them: one JSON object per line, strings
//! escaped by serde_json.

use std::io::Write;

use strata::tools::live::LivePartition;
use strata::tools::read::{read_records, ReadFrom};
use strata::{Record, StoreError, StoreResult};

/// Writes at most `max` records of `partition` from `from` on, one JSON object per line (see
/// [`record_json`]). Answers how many it wrote and the offset a later read goes on from.
pub fn write_records(
    part: &LivePartition,
    partition: u32,
    from: ReadFrom,
    max: u64,
    out: &mut dyn Write,
) -> StoreResult<(u64, i64)> {
    read_records(part, from, max, &mut |r| {
        writeln!(out, "{}", record_json(partition, r)).map_err(StoreError::Output)
    })
}

/// One record as a JSON object: `partition`, `offset`, `timestamp`, then `key` and `value` as
/// strings when they are UTF-8 (`key_hex` / `value_hex` otherwise; `null` when absent).
pub fn record_json(partition: u32, r: &Record) -> String {
    format!(
        "{{\"partition\":{partition},\"offset\":{},\"timestamp\":{},{},{}}}",
        r.offset,
        r.timestamp,
        bytes_field("key", r.key.as_deref()),
        bytes_field("value", r.value.as_deref())
    )
}

fn bytes_field(name: &str, bytes: Option<&[u8]>) -> String {
    let Some(bytes) = bytes else {
        return format!("\"{name}\":null");
    };
    match std::str::from_utf8(bytes) {
        Ok(text) => format!("\"{name}\":{}", serde_json::Value::from(text)),
        Err(_) => {
            let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
            format!("\"{name}_hex\":\"{hex}\"")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    #[test]
    fn records_are_json_with_escaped_text_and_hex_for_binary() {
        let r = Record {
            offset: 7,
            timestamp: -1,
            key: Some(Bytes::from_static(b"k\"1\n")),
            value: Some(Bytes::from_static(&[0xff, 0x00])),
        };
        assert_eq!(
            record_json(2, &r),
            r#"{"partition":2,"offset":7,"timestamp":-1,"key":"k\"1\n","value_hex":"ff00"}"#
        );
        let r = Record {
            key: None,
            value: Some(Bytes::from_static(b"\x01ok")),
            ..r
        };
        assert_eq!(
            record_json(0, &r),
            r#"{"partition":0,"offset":7,"timestamp":-1,"key":null,"value":"\u0001ok"}"#
        );
        let line: serde_json::Value = serde_json::from_str(&record_json(0, &r)).unwrap();
        assert_eq!(line["value"], "\u{1}ok");
    }
}
