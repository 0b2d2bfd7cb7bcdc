//! The properties the fuzz targets check, shared (by `#[path]`) by the libFuzzer targets in
//! `fuzz/fuzz_targets/` and the corpus test `tests/fuzz_corpus.rs`, so they are not part of
//! Strata's API: every decoder accepts any bytes without panicking, and what decodes
//! round-trips. Each function panics only when a property is broken.

use strata::segment::{
    decode_batch, decode_segment_header, encode_unsealed, scan_segment, seal_batch, Compression,
    SegmentIndex, SEGMENT_HEADER_LEN,
};
use strata::store::manifest::Manifest;

/// A decoded batch re-encodes (same compression kind, base, synced length and continuation) to
/// records that decode identically; an uncompressed version 2 batch re-encodes byte for byte.
pub fn batch_round_trip(data: &[u8]) {
    let Ok((header, records)) = decode_batch(data) else {
        return;
    };
    let compression = if header.compression == 1 {
        Compression::Zstd { level: 1 }
    } else {
        Compression::None
    };
    let mut again = Vec::new();
    let Ok(mut written) = encode_unsealed(&records, compression, &mut again) else {
        panic!("a decoded batch must re-encode")
    };
    written.continued = header.continued;
    seal_batch(
        &mut again,
        &mut written,
        header.base_offset,
        header.synced_len,
    );
    let decoded = decode_batch(&again).map(|(_, r)| r);
    assert_eq!(
        decoded.as_ref(),
        Ok(&records),
        "re-encoded batch decodes differently"
    );
    if header.compression == 0 && header.version == strata::segment::codec::BATCH_FORMAT_VERSION {
        assert_eq!(
            &again[..],
            &data[..header.len()],
            "uncompressed encoding is canonical"
        );
    }
}

/// A decoded index encodes back to exactly the bytes it came from.
pub fn index_round_trip(data: &[u8]) {
    if let Ok(index) = SegmentIndex::decode(data) {
        assert_eq!(index.encode(), data, "index encoding is canonical");
    }
}

/// A decoded manifest of the current version encodes back to exactly the bytes it came from;
/// an older one re-encodes to a manifest that decodes the same.
pub fn manifest_round_trip(data: &[u8]) {
    if let Ok(manifest) = Manifest::decode(data) {
        let again = manifest.encode();
        if data[8..12] == strata::store::manifest::MANIFEST_FORMAT_VERSION.to_le_bytes() {
            assert_eq!(again, data, "manifest encoding is canonical");
        }
        assert_eq!(
            Manifest::decode(&again),
            Ok(manifest),
            "re-encoded manifest differs"
        );
    }
}

/// Scanning any segment image terminates and keeps its index consistent with the image.
pub fn segment_scan(data: &[u8]) {
    let base = decode_segment_header(data).unwrap_or(0);
    let start = SEGMENT_HEADER_LEN.min(data.len()) as u64;
    let preallocated =
        strata::segment::decode_segment_header_full(data).is_ok_and(|h| h.preallocated);
    let scan = scan_segment(data, SegmentIndex::empty(base), start, (64, preallocated));
    assert!(scan.index.segment_len <= data.len() as u64);
    if data.len() >= SEGMENT_HEADER_LEN {
        let valid = &data[..scan.index.segment_len as usize];
        assert!(scan
            .index
            .entries
            .iter()
            .all(|e| (e.position as usize) < valid.len()));
    }
}

/// Coordination keys and values decode without panicking and re-encode to the same bytes.
pub fn coordination_round_trip(data: &[u8]) {
    use strata::coordination::codec::{
        decode_epoch, decode_key, decode_value, encode_key, encode_value,
    };
    use strata::coordination::RecordKind;
    if let Ok(key) = decode_key(data) {
        assert_eq!(encode_key(&key), data, "key encoding is canonical");
    }
    for kind in [RecordKind::Registration, RecordKind::Lease] {
        if let Ok(value) = decode_value(kind, Some(data)) {
            assert_eq!(
                encode_value(&value).as_deref(),
                Some(data),
                "value encoding is canonical"
            );
        }
    }
    let _ = decode_epoch(data, Some(data));
}

/// A cold object decodes without panicking; what decodes re-encodes to an object that decodes to
/// the same bytes.
pub fn cold_object_round_trip(data: &[u8]) {
    let Ok(raw) = strata::cold::decode_cold_object("fuzz", data) else {
        return;
    };
    let Ok(again) = strata::cold::encode_cold_object(&raw, 1) else {
        panic!("a decoded cold object must re-encode")
    };
    let back = strata::cold::decode_cold_object("fuzz", &again).ok();
    assert_eq!(
        back.as_deref(),
        Some(&raw[..]),
        "re-encoded cold object decodes differently"
    );
}

/// A group commit record decodes without panicking; what decodes re-encodes byte for byte
/// (past the version byte: a version-1 record re-encodes as the current version).
#[cfg(feature = "ursula")]
pub fn commit_record_round_trip(data: &[u8]) {
    use strata::group::commit_record::{decode, CommitRecord};
    let mut again = CommitRecord::default();
    if decode(data, |op| {
        again.push(op);
        Ok(())
    })
    .is_ok()
    {
        assert_eq!(
            again.as_bytes()[1..],
            data[1..],
            "re-encoded commit record differs"
        );
    }
}

/// A group stream row (binary or JSON) decodes without panicking; a binary row that decodes
/// re-encodes byte for byte.
#[cfg(feature = "ursula")]
pub fn stream_row_round_trip(data: &[u8]) {
    use strata::group::stream_row::{decode_stream_row, encode_stream_row, STREAM_ROW_VERSION};
    if let Ok(row) = decode_stream_row(data) {
        let again = encode_stream_row(&row).expect("a decoded row encodes");
        if data.first() == Some(&STREAM_ROW_VERSION) {
            assert_eq!(again, data, "re-encoded stream row differs");
        }
        // A JSON row of format 1 may carry a checkpoint payload inline; binary rows never do.
        let mut expected = row;
        if let Some(snapshot) = expected.visible_snapshot.as_mut() {
            snapshot.payload.clear();
        }
        let decoded = decode_stream_row(&again).ok();
        assert_eq!(decoded, Some(expected), "re-decoded stream row differs");
    }
}

/// A journal file header that decodes encodes back to its 32 bytes; a frame that decodes (as a
/// frame of the file its own bytes name) re-encodes to the same header over the same batch, and
/// lies inside the input.
pub fn journal_round_trip(data: &[u8]) {
    use strata::log::{
        decode_frame, decode_journal_header, encode_frame_header, encode_journal_header,
        FRAME_HEADER_LEN, JOURNAL_HEADER_LEN,
    };
    if let Ok(seq) = decode_journal_header(data) {
        assert_eq!(
            &encode_journal_header(seq)[..],
            &data[..JOURNAL_HEADER_LEN],
            "journal header encoding is canonical"
        );
    }
    let Some(seq) = data.get(8..16).map(|b| {
        let mut s = [0u8; 8];
        s.copy_from_slice(b);
        u64::from_le_bytes(s)
    }) else {
        return;
    };
    if let Ok(frame) = decode_frame(data, seq) {
        assert!(frame.len > FRAME_HEADER_LEN && frame.len <= data.len());
        let batch = &data[FRAME_HEADER_LEN..frame.len];
        let header = encode_frame_header(seq, frame.partition, frame.synced_len, batch);
        assert_eq!(
            &header[..],
            &data[..FRAME_HEADER_LEN],
            "frame encoding is canonical"
        );
    }
}

/// A consumer position record (key, then an 8-byte value): whatever decodes encodes back to the
/// same bytes.
pub fn positions_round_trip(data: &[u8]) {
    use strata::event_log::positions::{decode_key, decode_value, encode_key};
    let (key, value) = data.split_at(data.len().saturating_sub(8));
    if let Some((log, consumer, partition)) = decode_key(key) {
        assert_eq!(
            encode_key(&log, &consumer, partition),
            key,
            "position keys are canonical"
        );
    }
    if let Some(offset) = decode_value(value) {
        assert_eq!(
            &offset.to_be_bytes()[..],
            value,
            "position values are canonical"
        );
    }
    let _ = decode_key(data);
    let _ = decode_value(data);
}
