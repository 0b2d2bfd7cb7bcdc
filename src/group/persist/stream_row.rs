//! The binary stream row (row version 2, format/GROUP_STATE.md "Stream row"): written for every
//! command that changes a stream, so it is encoded without serde or text (the setsums stay
//! binary). Rows of version 1 (JSON) are still read.

use ursula_shard::BucketStreamId;
use ursula_stream::{StreamAttrs, StreamMetadata, StreamStatus, StreamVisibleSnapshot};

use crate::group::rows::{decode_row, RecordCursor, StreamRow, ROW_VERSION};
use crate::group::GroupError;

/// Row version byte of a binary stream row.
pub const STREAM_ROW_VERSION: u8 = 2;

/// Encodes a stream row (version 2). The checkpoint payload and the cold chunks are not part of
/// it (they have their own families).
pub fn encode_stream_row(row: &StreamRow) -> Result<Vec<u8>, GroupError> {
    let m = &row.metadata;
    let mut out = Vec::with_capacity(192 + m.content_type.len());
    out.push(STREAM_ROW_VERSION);
    put_str(&mut out, &m.stream_id.bucket_id)?;
    put_opt(&mut out, m.stream_id.affinity_key.as_deref(), put_str)?;
    put_str(&mut out, &m.stream_id.stream_id)?;
    put_str(&mut out, &m.content_type)?;
    out.push(match m.status {
        StreamStatus::Open => 0,
        StreamStatus::Closed => 1,
    });
    put_u64(&mut out, m.tail_offset);
    put_opt(&mut out, m.last_stream_seq.as_deref(), put_str)?;
    put_opt(&mut out, m.stream_ttl_seconds, put_u64_ok)?;
    put_opt(&mut out, m.stream_expires_at_ms, put_u64_ok)?;
    put_u64(&mut out, m.created_at_ms);
    put_u64(&mut out, m.last_ttl_touch_at_ms);
    let attrs = match &row.attrs {
        Some(a) => Some(serde_json::to_vec(a).map_err(|e| GroupError::Corrupt(e.to_string()))?),
        None => None,
    };
    put_opt(&mut out, attrs.as_deref(), put_bytes)?;
    put_u64(&mut out, row.hot_start_offset);
    put_u64(&mut out, row.retained_offset);
    out.extend_from_slice(&row.live_setsum.digest());
    out.extend_from_slice(&row.total_setsum.digest());
    put_u64(&mut out, row.total_records);
    put_opt(&mut out, row.visible_snapshot.as_ref(), |o, s| {
        put_u64(o, s.offset);
        put_str(o, &s.content_type)?;
        put_str(o, &s.digest)
    })?;
    put_u64(&mut out, row.append_count);
    out.extend_from_slice(&row.partition.to_be_bytes());
    put_opt(&mut out, row.records, |o, r| {
        put_u64(o, r.first);
        put_u64_ok(o, r.next)
    })?;
    put_u64(&mut out, row.external_hot);
    Ok(out)
}

/// Decodes a stream row of version 2 (binary) or 1 (JSON).
pub fn decode_stream_row(bytes: &[u8]) -> Result<StreamRow, GroupError> {
    match bytes.first() {
        Some(&STREAM_ROW_VERSION) => decode_binary(&bytes[1..]),
        Some(&ROW_VERSION) => decode_row("stream", bytes),
        Some(v) => Err(GroupError::Corrupt(format!("stream row version {v}"))),
        None => Err(GroupError::Corrupt("empty stream row".into())),
    }
}

fn decode_binary(bytes: &[u8]) -> Result<StreamRow, GroupError> {
    let mut r = Reader { buf: bytes, at: 1 };
    let stream_id = BucketStreamId {
        bucket_id: r.string()?,
        affinity_key: r.opt(Reader::string)?,
        stream_id: r.string()?,
    };
    let content_type = r.string()?;
    let status = match r.u8()? {
        0 => StreamStatus::Open,
        1 => StreamStatus::Closed,
        s => return Err(r.error(&format!("status {s}"))),
    };
    let metadata = StreamMetadata {
        stream_id,
        content_type,
        status,
        tail_offset: r.u64()?,
        last_stream_seq: r.opt(Reader::string)?,
        stream_ttl_seconds: r.opt(Reader::u64)?,
        stream_expires_at_ms: r.opt(Reader::u64)?,
        created_at_ms: r.u64()?,
        last_ttl_touch_at_ms: r.u64()?,
    };
    let attrs = match r.opt(Reader::bytes)? {
        Some(json) => {
            Some(serde_json::from_slice::<StreamAttrs>(json).map_err(|e| r.error(&e.to_string()))?)
        }
        None => None,
    };
    let row = StreamRow {
        metadata,
        attrs,
        hot_start_offset: r.u64()?,
        retained_offset: r.u64()?,
        live_setsum: setsum::Setsum::from_digest(r.array()?),
        total_setsum: setsum::Setsum::from_digest(r.array()?),
        total_records: r.u64()?,
        visible_snapshot: r.opt(|r| {
            Ok(StreamVisibleSnapshot {
                offset: r.u64()?,
                content_type: r.string()?,
                payload: Vec::new(),
                digest: r.string()?,
            })
        })?,
        snapshot_changed: false,
        append_count: r.u64()?,
        cold_chunks: Default::default(),
        partition: u32::from_be_bytes(r.array()?),
        records: r.opt(|r| {
            Ok(RecordCursor {
                first: r.u64()?,
                next: r.u64()?,
            })
        })?,
        external_hot: r.u64()?,
    };
    if !r.buf.is_empty() {
        return Err(r.error("trailing bytes"));
    }
    Ok(row)
}

fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_be_bytes());
}

fn put_u64_ok(out: &mut Vec<u8>, v: u64) -> Result<(), GroupError> {
    put_u64(out, v);
    Ok(())
}

/// A `u32` length, then the bytes (refused beyond 4 GiB).
fn put_bytes(out: &mut Vec<u8>, b: &[u8]) -> Result<(), GroupError> {
    let len = u32::try_from(b.len())
        .map_err(|_| GroupError::Invalid(format!("a stream field of {} bytes", b.len())))?;
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(b);
    Ok(())
}

fn put_str(out: &mut Vec<u8>, s: &str) -> Result<(), GroupError> {
    put_bytes(out, s.as_bytes())
}

/// A presence byte (0 or 1), then the value when present.
fn put_opt<T>(
    out: &mut Vec<u8>,
    v: Option<T>,
    put: impl FnOnce(&mut Vec<u8>, T) -> Result<(), GroupError>,
) -> Result<(), GroupError> {
    match v {
        Some(v) => {
            out.push(1);
            put(out, v)
        }
        None => {
            out.push(0);
            Ok(())
        }
    }
}

/// Reads a binary stream row front to back; `at` counts bytes from the row's start (errors
/// name it).
struct Reader<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn error(&self, what: &str) -> GroupError {
        GroupError::Corrupt(format!("stream row: {what} at byte {}", self.at))
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], GroupError> {
        if self.buf.len() < n {
            return Err(self.error("truncated"));
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        self.at += n;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], GroupError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    fn u8(&mut self) -> Result<u8, GroupError> {
        Ok(self.take(1)?[0])
    }

    fn u64(&mut self) -> Result<u64, GroupError> {
        Ok(u64::from_be_bytes(self.array()?))
    }

    fn bytes(&mut self) -> Result<&'a [u8], GroupError> {
        let len = u32::from_be_bytes(self.array()?);
        self.take(len as usize)
    }

    fn string(&mut self) -> Result<String, GroupError> {
        let bytes = self.bytes()?;
        String::from_utf8(bytes.to_vec()).map_err(|_| self.error("string is not UTF-8"))
    }

    fn opt<T>(
        &mut self,
        read: impl FnOnce(&mut Self) -> Result<T, GroupError>,
    ) -> Result<Option<T>, GroupError> {
        match self.u8()? {
            0 => Ok(None),
            1 => read(self).map(Some),
            b => Err(self.error(&format!("presence byte {b}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::group::rows::encode_row;

    fn row() -> StreamRow {
        let mut setsum = setsum::Setsum::default();
        setsum.insert(b"record");
        StreamRow {
            metadata: StreamMetadata {
                stream_id: BucketStreamId {
                    bucket_id: "b".into(),
                    affinity_key: Some("aff".into()),
                    stream_id: "s".into(),
                },
                content_type: "application/json".into(),
                status: StreamStatus::Closed,
                tail_offset: 4096,
                last_stream_seq: Some("seq-9".into()),
                stream_ttl_seconds: Some(60),
                stream_expires_at_ms: None,
                created_at_ms: 1_700_000_000_000,
                last_ttl_touch_at_ms: 1_700_000_000_500,
            },
            attrs: Some(StreamAttrs {
                title: Some("orders".into()),
                ..StreamAttrs::default()
            }),
            hot_start_offset: 1024,
            retained_offset: 512,
            live_setsum: setsum,
            total_setsum: setsum,
            total_records: 3,
            visible_snapshot: Some(StreamVisibleSnapshot {
                offset: 1000,
                content_type: "text/plain".into(),
                payload: Vec::new(),
                digest: "d1".into(),
            }),
            snapshot_changed: false,
            append_count: 7,
            cold_chunks: Default::default(),
            partition: 5,
            records: Some(RecordCursor { first: 1, next: 4 }),
            external_hot: 9,
        }
    }

    #[test]
    fn a_row_round_trips_and_json_rows_still_decode() {
        let row = row();
        let bytes = encode_stream_row(&row).unwrap();
        assert_eq!(decode_stream_row(&bytes).unwrap(), row);
        let json = encode_row(&row).unwrap();
        assert_eq!(decode_stream_row(&json).unwrap(), row);
        let mut bare = row;
        bare.attrs = None;
        bare.visible_snapshot = None;
        bare.records = None;
        bare.metadata.stream_id.affinity_key = None;
        let bytes = encode_stream_row(&bare).unwrap();
        assert_eq!(decode_stream_row(&bytes).unwrap(), bare);
    }

    #[test]
    fn every_truncation_and_a_bad_byte_is_a_typed_error() {
        let bytes = encode_stream_row(&row()).unwrap();
        for len in 0..bytes.len() {
            assert!(matches!(
                decode_stream_row(&bytes[..len]),
                Err(GroupError::Corrupt(_))
            ));
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(decode_stream_row(&longer).is_err());
        let mut bad_presence = bytes;
        let at = 1 + 4 + 1; // bucket "b": length, byte; then the affinity presence byte
        bad_presence[at] = 7;
        let err = decode_stream_row(&bad_presence).unwrap_err().to_string();
        assert!(err.contains("presence byte 7"), "{err}");
    }
}
