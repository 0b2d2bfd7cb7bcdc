//! RocksDB key encodings of the group state (format/GROUP_STATE.md, "Keys").
//!
//! A stream key is length-prefixed, so the key of one stream is never a prefix of another's and
//! every per-stream column family can be range-scanned by the stream key as a prefix.

use ursula_shard::BucketStreamId;

/// Encodes a stream id: `u8 len, bucket, u8 has_affinity, [u8 len, affinity], u8 len, stream`.
/// Callers validate ids first (bucket <= 64 bytes, stream and affinity <= 122 bytes).
pub fn stream_key(id: &BucketStreamId) -> Vec<u8> {
    // Room for an offset after it too (message, record and chunk keys): one allocation each.
    let mut out = Vec::with_capacity(stream_key_len(id) + 8);
    push_stream_key(&mut out, id);
    out
}

/// The length of the [`stream_key`] of `id`.
pub fn stream_key_len(id: &BucketStreamId) -> usize {
    let affinity = id.affinity_key.as_ref().map_or(0, |a| 1 + a.len());
    3 + id.bucket_id.len() + affinity + id.stream_id.len()
}

/// Appends the [`stream_key`] of `id` to `out`.
pub fn push_stream_key(out: &mut Vec<u8>, id: &BucketStreamId) {
    push_short(out, id.bucket_id.as_bytes());
    match &id.affinity_key {
        Some(affinity) => {
            out.push(1);
            push_short(out, affinity.as_bytes());
        }
        None => out.push(0),
    }
    push_short(out, id.stream_id.as_bytes());
}

/// Decodes a stream key written by [`stream_key`], returning the id and the bytes after it.
pub fn decode_stream_key(bytes: &[u8]) -> Option<(BucketStreamId, &[u8])> {
    let (bucket, rest) = take_short(bytes)?;
    let (&flag, rest) = rest.split_first()?;
    let (affinity, rest) = match flag {
        0 => (None, rest),
        1 => {
            let (affinity, rest) = take_short(rest)?;
            (Some(affinity), rest)
        }
        _ => return None,
    };
    let (stream, rest) = take_short(rest)?;
    let id = BucketStreamId {
        bucket_id: String::from_utf8(bucket.to_vec()).ok()?,
        stream_id: String::from_utf8(stream.to_vec()).ok()?,
        affinity_key: match affinity {
            Some(a) => Some(String::from_utf8(a.to_vec()).ok()?),
            None => None,
        },
    };
    Some((id, rest))
}

/// `stream_key ++ offset (u64 big-endian)`: big-endian keeps byte order equal to offset order.
pub fn message_key(id: &BucketStreamId, start_offset: u64) -> Vec<u8> {
    let mut key = Vec::with_capacity(stream_key_len(id) + 8);
    push_message_key(&mut key, id, start_offset);
    key
}

/// Appends the [`message_key`] of `id` at `start_offset` to `out`.
pub fn push_message_key(out: &mut Vec<u8>, id: &BucketStreamId, start_offset: u64) {
    push_stream_key(out, id);
    out.extend_from_slice(&start_offset.to_be_bytes());
}

/// `stream_key ++ u16 len (big-endian) ++ producer id`.
pub fn producer_key(id: &BucketStreamId, producer_id: &str) -> Vec<u8> {
    let mut key = stream_key(id);
    push_long(&mut key, producer_id.as_bytes());
    key
}

/// `producer_key ++ producer seq (u64 big-endian)`.
pub fn receipt_key(id: &BucketStreamId, producer_id: &str, seq: u64) -> Vec<u8> {
    let mut key = producer_key(id, producer_id);
    key.extend_from_slice(&seq.to_be_bytes());
    key
}

/// Decodes the producer id that follows a stream key in a producer key.
pub fn decode_producer_suffix(rest: &[u8]) -> Option<String> {
    let (len, rest) = rest.split_first_chunk::<2>()?;
    let len = u16::from_be_bytes(*len) as usize;
    (rest.len() == len).then(|| String::from_utf8(rest.to_vec()).ok())?
}

/// The smallest key strictly greater than every key that starts with `prefix`.
pub fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < u8::MAX {
            end.push(last + 1);
            return end;
        }
    }
    vec![u8::MAX; prefix.len() + 1]
}

fn push_short(out: &mut Vec<u8>, bytes: &[u8]) {
    out.push(bytes.len().min(u8::MAX as usize) as u8);
    out.extend_from_slice(&bytes[..bytes.len().min(u8::MAX as usize)]);
}

fn push_long(out: &mut Vec<u8>, bytes: &[u8]) {
    let len = bytes.len().min(u16::MAX as usize);
    out.extend_from_slice(&(len as u16).to_be_bytes());
    out.extend_from_slice(&bytes[..len]);
}

fn take_short(bytes: &[u8]) -> Option<(&[u8], &[u8])> {
    let (&len, rest) = bytes.split_first()?;
    (rest.len() >= len as usize).then(|| rest.split_at(len as usize))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_keys_round_trip_and_never_prefix_each_other() {
        let a = BucketStreamId::new("bucket", "ab");
        let b = BucketStreamId::new("bucket", "abc");
        let c = BucketStreamId::with_affinity("bucket", "aff", "ab");
        for id in [&a, &b, &c] {
            let key = stream_key(id);
            let (back, rest) = decode_stream_key(&key).unwrap();
            assert_eq!(&back, id);
            assert!(rest.is_empty());
        }
        assert!(!stream_key(&b).starts_with(&stream_key(&a)));
        assert!(message_key(&a, 1) < message_key(&a, 256));
        let mut pushed = vec![9];
        push_stream_key(&mut pushed, &c);
        assert_eq!(pushed[1..], stream_key(&c)[..]);
        for id in [&a, &b, &c] {
            assert_eq!(stream_key_len(id), stream_key(id).len());
        }
        assert_eq!(prefix_end(&[1, 255]), vec![2]);
    }
}
