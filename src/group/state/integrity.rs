//! The per-stream integrity digest ursula reports: a setsum over one record digest per accepted
//! append (stream id, offsets, and the bytes or the external object they live in), kept binary in
//! memory and as hex in the stream row.

use ursula_shard::BucketStreamId;

use super::sha3_lanes::{eight_lanes, sha3_256_x4, sha3_256_x8, Message};
use crate::group::rows::StreamRow;

/// Records one accepted inline append in the integrity setsums.
pub(crate) fn integrity_append(
    row: &mut StreamRow,
    id: &BucketStreamId,
    start: u64,
    end: u64,
    payload: &[u8],
) {
    count_append(row, start, end);
    add_digest(row, inline_digest(id, start, payload));
}

/// Counts one inline append whose digest is added later ([`add_digest`]): an append of
/// [`crate::group::deferred_digests`].
pub(crate) fn count_append(row: &mut StreamRow, start: u64, end: u64) {
    if start != end {
        row.total_records = row.total_records.saturating_add(1);
    }
}

/// Adds record digests (a sum of [`inline_digest`]s) to the row's setsums.
pub(crate) fn add_digest(row: &mut StreamRow, digest: setsum::Setsum) {
    row.live_setsum += digest;
    row.total_setsum += digest;
}

/// The record digest of the inline append of `payload` at stream offset `start` (the empty
/// setsum for an empty payload, which is not a record).
pub(crate) fn inline_digest(id: &BucketStreamId, start: u64, payload: &[u8]) -> setsum::Setsum {
    let end = start + payload.len() as u64;
    record_digest(id, start, end, b"inline", &[payload])
}

/// Records one accepted external append (its object path and size) in the integrity setsums.
pub(crate) fn integrity_external(
    row: &mut StreamRow,
    id: &BucketStreamId,
    start: u64,
    end: u64,
    s3_path: &str,
    object_size: u64,
) {
    let size = object_size.to_le_bytes();
    count_append(row, start, end);
    add_digest(
        row,
        record_digest(id, start, end, b"external", &[s3_path.as_bytes(), &size]),
    );
}

/// ursula's record digest: a tag, the stream id parts, the offsets, the kind, then the pieces
/// (the empty setsum for an empty range, which is not a record).
fn record_digest(
    id: &BucketStreamId,
    start: u64,
    end: u64,
    kind: &[u8],
    pieces: &[&[u8]],
) -> setsum::Setsum {
    let mut record = setsum::Setsum::default();
    if start == end {
        return record;
    }
    let head = record_head(id, start, end, kind);
    let mut item: Vec<&[u8]> = vec![&head];
    item.extend_from_slice(pieces);
    record.insert_vectored(&item);
    record
}

/// The bytes of a record digest's item before its pieces: a tag, the stream id parts, the
/// offsets (little-endian) and the kind.
fn record_head(id: &BucketStreamId, start: u64, end: u64, kind: &[u8]) -> Vec<u8> {
    let mut head = Vec::with_capacity(64);
    push_record_head(&mut head, id, start, end, kind);
    head
}

/// Appends [`record_head`]'s bytes to `out`.
fn push_record_head(out: &mut Vec<u8>, id: &BucketStreamId, start: u64, end: u64, kind: &[u8]) {
    match &id.affinity_key {
        Some(affinity) => {
            out.extend_from_slice(b"ursula-stream-record-v2");
            for part in [&id.bucket_id, affinity, &id.stream_id] {
                out.extend_from_slice(part.as_bytes());
                out.push(0);
            }
        }
        None => {
            out.extend_from_slice(b"ursula-stream-record-v1");
            for part in [&id.bucket_id, &id.stream_id] {
                out.extend_from_slice(part.as_bytes());
                out.push(0);
            }
        }
    }
    out.extend_from_slice(&start.to_le_bytes());
    out.extend_from_slice(&end.to_le_bytes());
    out.extend_from_slice(kind);
}

/// One inline append to digest: its stream, the stream offset of its first byte, its bytes.
pub(crate) type InlineAppend<'a> = (&'a BucketStreamId, u64, &'a [u8]);

/// The record digest of each of `items`' inline appends (`append` says what each is), as
/// [`inline_digest`] gives, eight or four at a time ([`super::sha3_lanes`]: four at once about
/// 3x faster than one by one here, eight about 1.4x four where the CPU has AVX-512F); a lone
/// append is hashed alone. Two allocations in all: the answer and one buffer for the heads.
pub(crate) fn inline_digests<'a, T>(
    items: &'a [T],
    append: impl Fn(&'a T) -> InlineAppend<'a>,
) -> Vec<setsum::Setsum> {
    let eight = eight_lanes();
    let mut out = Vec::with_capacity(items.len());
    let mut heads = Vec::new();
    let mut rest = items;
    while !rest.is_empty() {
        let take = match rest.len() {
            n if eight && n > 4 => n.min(8),
            n => n.min(4),
        };
        let (chunk, tail) = rest.split_at(take);
        rest = tail;
        match chunk {
            [one] => {
                let (id, start, payload) = append(one);
                out.push(inline_digest(id, start, payload));
            }
            _ if take > 4 => lane_digests(chunk, &append, &mut heads, sha3_256_x8, &mut out),
            _ => lane_digests(chunk, &append, &mut heads, sha3_256_x4, &mut out),
        }
    }
    out
}

/// Pushes the record digests of `chunk` (at most `N` appends) hashed side by side by `hash`
/// onto `out`; `heads` is scratch space for their heads.
fn lane_digests<'a, T, const N: usize>(
    chunk: &'a [T],
    append: &impl Fn(&'a T) -> InlineAppend<'a>,
    heads: &mut Vec<u8>,
    hash: fn([Message<'_>; N]) -> [[u8; 32]; N],
    out: &mut Vec<setsum::Setsum>,
) {
    debug_assert!(chunk.len() <= N);
    let appends: [Option<InlineAppend<'a>>; N] = std::array::from_fn(|i| chunk.get(i).map(append));
    heads.clear();
    // Where each append's head lies in `heads`.
    let mut spans = [(0usize, 0usize); N];
    for (span, (id, start, payload)) in spans.iter_mut().zip(appends.iter().flatten()) {
        let from = heads.len();
        push_record_head(heads, id, *start, *start + payload.len() as u64, b"inline");
        *span = (from, heads.len());
    }
    let messages: [Message<'_>; N] = std::array::from_fn(|i| match &appends[i] {
        Some((_, _, payload)) => [&heads[spans[i].0..spans[i].1], *payload],
        None => [&[][..], &[][..]],
    });
    let hashes = hash(messages);
    for ((_, _, payload), hash) in appends.iter().flatten().zip(hashes) {
        out.push(if payload.is_empty() {
            setsum::Setsum::default()
        } else {
            setsum_of_hash(hash)
        });
    }
}

/// The columns' primes of setsum 0.8 (each column of a digest is reduced below its prime).
const SETSUM_PRIMES: [u32; 8] = [
    4294967291, 4294967279, 4294967231, 4294967197, 4294967189, 4294967161, 4294967143, 4294967111,
];

/// The setsum of one item whose SHA3-256 hash is `hash` (what `Setsum::insert` adds): each
/// little-endian 32-bit column reduced below its prime.
fn setsum_of_hash(hash: [u8; 32]) -> setsum::Setsum {
    let mut state = [0u8; 32];
    for ((column, prime), out) in hash
        .chunks_exact(4)
        .zip(SETSUM_PRIMES)
        .zip(state.chunks_exact_mut(4))
    {
        let mut le = [0u8; 4];
        le.copy_from_slice(column);
        let n = u32::from_le_bytes(le);
        out.copy_from_slice(&(if n >= prime { n - prime } else { n }).to_le_bytes());
    }
    setsum::Setsum::from_digest(state)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batched_digests_equal_one_by_one_for_every_id_form_and_length() {
        let plain = BucketStreamId::new("bucket", "stream");
        let mut affine = BucketStreamId::new("b", "a-much-longer-stream-name");
        affine.affinity_key = Some("tenant-7".into());
        let payloads: Vec<Vec<u8>> = [0usize, 1, 60, 135, 136, 1024, 1100, 3000, 9]
            .iter()
            .map(|&n| (0..n).map(|i| (i * 13) as u8).collect())
            .collect();
        let appends: Vec<InlineAppend<'_>> = payloads
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let id = if i % 3 == 0 { &affine } else { &plain };
                (id, (i as u64) * 4099, p.as_slice())
            })
            .collect();
        for n in 0..=appends.len() {
            let batched = inline_digests(&appends[..n], |a| *a);
            let single: Vec<setsum::Setsum> = appends[..n]
                .iter()
                .map(|(id, start, payload)| inline_digest(id, *start, payload))
                .collect();
            assert_eq!(batched, single, "{n} appends");
        }
        assert_eq!(
            inline_digests(&appends[..1], |a| *a)[0],
            setsum::Setsum::default()
        );
    }
}
