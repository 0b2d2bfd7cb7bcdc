//! Golden vectors of every on-disk structure (format/*.md): the encoders must reproduce the
//! committed bytes exactly, the decoders must read them back, and each field sits where the spec
//! says. Set STRATA_BLESS=1 to (re)write a vector after a deliberate, versioned format change.

use std::path::PathBuf;
use std::time::Duration;

use bytes::Bytes;
use strata::log::{CompactionPolicy, Durability, LogOptions, LogOwner, RetentionPolicy};
use strata::segment::{
    decode_batch, decode_segment_header, encode_batch, encode_segment_header, encode_unsealed,
    seal_batch, Compression, IndexEntry, Record, SegmentIndex,
};
use strata::store::manifest::{LogEntry, Manifest};

/// The committed bytes of a vector that this build only reads (an older format version).
fn read_only_vector(name: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("format/vectors")
        .join(name);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn vector(name: &str, encoded: &[u8]) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("format/vectors")
        .join(name);
    if std::env::var_os("STRATA_BLESS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, encoded).unwrap();
    }
    let golden = std::fs::read(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (run with STRATA_BLESS=1 once)", path.display()));
    assert_eq!(
        encoded,
        &golden[..],
        "{name} no longer encodes to its golden bytes"
    );
    golden
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

fn i64_at(b: &[u8], at: usize) -> i64 {
    i64::from_le_bytes(b[at..at + 8].try_into().unwrap())
}

fn sample_records() -> Vec<Record> {
    vec![
        Record {
            offset: 5,
            timestamp: 1000,
            key: None,
            value: Some(Bytes::from_static(b"hello")),
        },
        Record {
            offset: 6,
            timestamp: 1001,
            key: Some(Bytes::from_static(b"k")),
            value: None,
        },
        Record {
            offset: 9,
            timestamp: 999,
            key: Some(Bytes::from_static(b"key2")),
            value: Some(Bytes::new()),
        },
    ]
}

/// Checks every record field of the three sample records laid out from byte `at`.
fn check_sample_records(b: &[u8], at: usize) {
    // Record 0: delta 0, ts 1000, value only.
    assert_eq!(u32_at(b, at), 0);
    assert_eq!(i64_at(b, at + 4), 1000);
    assert_eq!(b[at + 12], 0b10);
    assert_eq!(u32_at(b, at + 13), 5);
    assert_eq!(&b[at + 17..at + 22], b"hello");
    // Record 1: delta 1, key "k", tombstone.
    assert_eq!(u32_at(b, at + 22), 1);
    assert_eq!(i64_at(b, at + 26), 1001);
    assert_eq!(b[at + 34], 0b01);
    assert_eq!(u32_at(b, at + 35), 1);
    assert_eq!(&b[at + 39..at + 40], b"k");
    // Record 2: delta 4, key "key2", empty value.
    assert_eq!(u32_at(b, at + 40), 4);
    assert_eq!(i64_at(b, at + 44), 999);
    assert_eq!(b[at + 52], 0b11);
    assert_eq!(u32_at(b, at + 53), 4);
    assert_eq!(&b[at + 57..at + 61], b"key2");
    assert_eq!(u32_at(b, at + 61), 0);
    assert_eq!(b.len(), at + 65);
}

/// Checks the header fields both batch versions share.
fn check_common_header(b: &[u8], header_len: usize, version: u8) {
    let records_len = 65;
    assert_eq!(u32_at(b, 0) as usize, header_len + records_len, "batch_len");
    let mut crc = crc32fast::Hasher::new();
    crc.update(&b[0..4]);
    crc.update(&b[8..]);
    assert_eq!(
        u32_at(b, 4),
        crc.finalize(),
        "crc over everything but itself"
    );
    assert_eq!(&b[8..10], b"SB");
    assert_eq!(b[10], version, "version");
    assert_eq!(b[11], 0, "attributes: uncompressed");
    assert_eq!(u32_at(b, 12), 3, "record_count");
    assert_eq!(i64_at(b, 16), 5, "base_offset");
    assert_eq!(u32_at(b, 24), 4, "last_offset_delta");
    assert_eq!(u32_at(b, 28) as usize, records_len, "records_len");
    assert_eq!(i64_at(b, 32), 1000, "first_timestamp");
    assert_eq!(i64_at(b, 40), 1001, "max_timestamp");
}

#[test]
fn batch_v2_matches_its_golden_bytes_and_the_spec() {
    let mut encoded = Vec::new();
    let mut header = encode_unsealed(&sample_records(), Compression::None, &mut encoded).unwrap();
    seal_batch(&mut encoded, &mut header, 5, 4096);
    let b = vector("batch_v2.bin", &encoded);
    check_common_header(&b, 56, 2);
    assert_eq!(i64_at(&b, 48), 4096, "synced_len");
    check_sample_records(&b, 56);
    let (decoded, records) = decode_batch(&b).unwrap();
    assert_eq!(records, sample_records());
    assert_eq!(decoded, header);
    assert_eq!((decoded.last_offset(), decoded.synced_len), (9, 4096));
}

#[test]
fn batch_v1_is_still_read() {
    let b = read_only_vector("batch_v1.bin");
    check_common_header(&b, 48, 1);
    check_sample_records(&b, 48);
    let (header, records) = decode_batch(&b).unwrap();
    assert_eq!(records, sample_records());
    assert_eq!(header.last_offset(), 9);
    assert_eq!(header.synced_len, strata::segment::SYNCED_LEN_UNKNOWN);
    let (_, records) = decode_batch(&read_only_vector("batch_v1_zstd.bin")).unwrap();
    assert_eq!(records, sample_records());
}

#[test]
fn zstd_batch_decodes_to_the_same_records() {
    let mut encoded = Vec::new();
    encode_batch(
        &sample_records(),
        Compression::Zstd { level: 3 },
        &mut encoded,
    )
    .unwrap();
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("format/vectors/batch_v2_zstd.bin");
    if std::env::var_os("STRATA_BLESS").is_some() {
        std::fs::write(&path, &encoded).unwrap();
    }
    let golden = std::fs::read(&path).unwrap();
    assert_eq!(golden[10], 2, "version");
    assert_eq!(golden[11], 1, "attributes: zstd");
    assert_eq!(
        u32_at(&golden, 28),
        65,
        "records_len is the uncompressed length"
    );
    let (_, records) = decode_batch(&golden).unwrap();
    assert_eq!(records, sample_records());
}

#[test]
fn segment_header_v2_matches_its_golden_bytes_and_the_spec() {
    let b = vector("segment_header_v2.bin", &encode_segment_header(5));
    assert_eq!(&b[0..8], b"STRATSEG");
    assert_eq!(u32_at(&b, 8), 2, "version");
    assert_eq!(u32_at(&b, 12), 1, "flags: preallocated");
    assert_eq!(i64_at(&b, 16), 5);
    assert_eq!(u32_at(&b, 24), crc32fast::hash(&b[0..24]));
    assert_eq!(u32_at(&b, 28), 0);
    let header = strata::segment::decode_segment_header_full(&b).unwrap();
    assert_eq!(
        (header.base_offset, header.version, header.preallocated),
        (5, 2, true)
    );
    // Version 1 (not preallocated, data to the file's end) is still read.
    let v1 = read_only_vector("segment_header_v1.bin");
    assert_eq!((u32_at(&v1, 8), u32_at(&v1, 12)), (1, 0));
    let header = strata::segment::decode_segment_header_full(&v1).unwrap();
    assert_eq!(
        (header.base_offset, header.version, header.preallocated),
        (5, 1, false)
    );
    assert_eq!(decode_segment_header(&b), Ok(5));
}

#[test]
fn journal_v1_header_and_frame_match_their_golden_bytes_and_the_spec() {
    use strata::log::{
        decode_frame, decode_journal_header, encode_frame_header, encode_journal_header,
    };
    let b = vector("journal_header_v1.bin", &encode_journal_header(3));
    assert_eq!(&b[0..8], b"STRATJNL");
    assert_eq!(u32_at(&b, 8), 1, "version");
    assert_eq!(u32_at(&b, 12), 0, "flags");
    assert_eq!(i64_at(&b, 16), 3, "seq");
    assert_eq!(u32_at(&b, 24), crc32fast::hash(&b[0..24]));
    assert_eq!(decode_journal_header(&b), Ok(3));
    let batch = vector(
        "batch_v2.bin",
        &std::fs::read(
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("format/vectors/batch_v2.bin"),
        )
        .unwrap(),
    );
    let mut frame = encode_frame_header(3, 2, 4096, &batch).to_vec();
    frame.extend_from_slice(&batch);
    let f = vector("journal_frame_v1.bin", &frame);
    assert_eq!(u32_at(&f, 0) as usize, 32 + batch.len(), "frame_len");
    assert_eq!(
        u32_at(&f, 4),
        crc32fast::hash(&f[8..]),
        "crc over everything after it"
    );
    assert_eq!(i64_at(&f, 8), 3, "file_seq");
    assert_eq!(u32_at(&f, 16), 2, "partition");
    assert_eq!(u32_at(&f, 20), 0, "reserved");
    assert_eq!(i64_at(&f, 24), 4096, "synced_len");
    assert_eq!(&f[32..], &batch[..], "the batch as written to its segment");
    let decoded = decode_frame(&f, 3).unwrap();
    assert_eq!(
        (decoded.len, decoded.partition, decoded.synced_len),
        (f.len(), 2, 4096)
    );
}

#[test]
fn index_v1_matches_its_golden_bytes_and_the_spec() {
    let mut index = SegmentIndex::empty(100);
    index.push(IndexEntry {
        relative_offset: 0,
        position: 32,
    });
    index.push(IndexEntry {
        relative_offset: 7,
        position: 4200,
    });
    index.last_offset = 120;
    index.max_timestamp = 5;
    index.segment_len = 9000;
    let b = vector("index_v1.bin", &index.encode());
    assert_eq!(&b[0..8], b"STRATIDX");
    assert_eq!(u32_at(&b, 8), 1);
    assert_eq!(u32_at(&b, 12), 2, "entry_count");
    assert_eq!(i64_at(&b, 16), 100);
    assert_eq!(i64_at(&b, 24), 120);
    assert_eq!(i64_at(&b, 32), 5);
    assert_eq!(i64_at(&b, 40), 9000);
    let mut crc = crc32fast::Hasher::new();
    crc.update(&b[0..48]);
    crc.update(&b[56..]);
    assert_eq!(u32_at(&b, 48), crc.finalize());
    assert_eq!(u32_at(&b, 52), 0);
    assert_eq!((u32_at(&b, 56), u32_at(&b, 60)), (0, 32));
    assert_eq!((u32_at(&b, 64), u32_at(&b, 68)), (7, 4200));
    assert_eq!(b.len(), 72);
    assert_eq!(SegmentIndex::decode(&b), Ok(index));
}

/// The options the MANIFEST golden vector records for its `events` log.
fn recorded_events_options() -> LogOptions {
    LogOptions::default()
        .with_durability(Durability::Interval(Duration::from_millis(5)))
        .with_compression(Compression::Zstd { level: 3 })
        .with_segment_bytes(1 << 20)
        .with_index_interval_bytes(8192)
        .with_retention(RetentionPolicy::default().with_max_bytes(Some(1 << 30)))
        .with_compaction(
            CompactionPolicy::default()
                .with_enabled(true)
                .with_delete_retention(Duration::from_secs(48 * 3600)),
        )
        .with_maintenance_interval(Some(Duration::from_secs(1)))
}

#[test]
fn manifest_v3_matches_its_golden_bytes_and_the_spec() {
    let manifest = Manifest {
        store_id: *b"0123456789abcdef",
        logs: vec![
            LogEntry {
                name: "events".into(),
                partitions: 8,
                owner: LogOwner::Policies,
                options: Some(recorded_events_options()),
            },
            LogEntry {
                name: "__group_g".into(),
                partitions: 1,
                owner: LogOwner::Layer,
                options: None,
            },
        ],
    };
    let b = vector("manifest_v3.bin", &manifest.encode());
    assert_eq!(&b[0..8], b"STRATAMF");
    assert_eq!(u32_at(&b, 8), 3);
    let body_len = u32_at(&b, 12) as usize;
    assert_eq!(b.len(), 20 + body_len);
    assert_eq!(u32_at(&b, 16), crc32fast::hash(&b[20..]));
    assert_eq!(&b[20..36], b"0123456789abcdef", "store_id");
    assert_eq!(u32_at(&b, 36), 2, "log_count");
    assert_eq!(u16::from_le_bytes([b[40], b[41]]), 6);
    assert_eq!(&b[42..48], b"events");
    assert_eq!(u32_at(&b, 48), 8, "partitions");
    assert_eq!(u32_at(&b, 52), 0, "flags");
    assert_eq!(u16::from_le_bytes([b[56], b[57]]), 98, "options_len");
    let o = &b[58..156];
    let u64_at = |at: usize| u64::from_le_bytes(o[at..at + 8].try_into().unwrap());
    assert_eq!(o[0], 1, "options version");
    assert_eq!(
        (o[1], u64_at(2)),
        (1, 5_000_000),
        "durability: interval 5 ms"
    );
    assert_eq!(o[10], 1, "compression: zstd");
    assert_eq!(
        i32::from_le_bytes(o[11..15].try_into().unwrap()),
        3,
        "level"
    );
    assert_eq!(u64_at(15), 1 << 20, "segment_bytes");
    assert_eq!(u64_at(23), 8192, "index_interval_bytes");
    assert_eq!(o[31], 1, "retention: max_bytes set, max_age not");
    assert_eq!((u64_at(32), u64_at(40)), (1 << 30, 0));
    assert_eq!(o[48], 1, "compaction enabled");
    assert_eq!(u64_at(49), 48 * 3600 * 1_000_000_000, "delete_retention");
    assert_eq!(f64::from_bits(u64_at(57)), 0.5, "min_cleanable_ratio");
    assert_eq!(u64_at(65), 64 << 20, "max_key_map_bytes");
    assert_eq!((o[73], u64_at(74)), (1, 1_000_000_000), "maintenance 1 s");
    assert_eq!(
        (u64_at(82), u64_at(90)),
        (64 << 20, 64 << 20),
        "journal sizes"
    );
    assert_eq!(u16::from_le_bytes([b[156], b[157]]), 9);
    assert_eq!(&b[158..167], b"__group_g");
    assert_eq!(u32_at(&b, 167), 1, "partitions");
    assert_eq!(u32_at(&b, 171), 1, "flags: owned by its layer");
    assert_eq!(
        u16::from_le_bytes([b[175], b[176]]),
        0,
        "no options recorded"
    );
    assert_eq!(b.len(), 177);
    assert_eq!(Manifest::decode(&b), Ok(manifest));
}

#[test]
fn manifest_v2_is_still_read() {
    let b = read_only_vector("manifest_v2.bin");
    assert_eq!(u32_at(&b, 8), 2);
    let manifest = Manifest::decode(&b).unwrap();
    assert_eq!(&manifest.store_id, b"0123456789abcdef");
    let logs: Vec<_> = manifest
        .logs
        .iter()
        .map(|l| (l.name.as_str(), l.partitions, l.owner, l.options.is_none()))
        .collect();
    assert_eq!(
        logs,
        vec![
            ("events", 8, LogOwner::Policies, true),
            ("__group_g", 1, LogOwner::Layer, true)
        ],
        "no options recorded: recorded at the log's next open"
    );
}

#[test]
fn manifest_v1_is_still_read() {
    let b = read_only_vector("manifest_v1.bin");
    assert_eq!(u32_at(&b, 8), 1);
    let manifest = Manifest::decode(&b).unwrap();
    assert_eq!(manifest.store_id, [0; 16], "no id yet: assigned at open");
    let names: Vec<(&str, u32, LogOwner)> = manifest
        .logs
        .iter()
        .map(|l| (l.name.as_str(), l.partitions, l.owner))
        .collect();
    assert_eq!(
        names,
        vec![
            ("events", 8, LogOwner::Policies),
            ("__coordination", 1, LogOwner::Policies)
        ]
    );
}

mod coordination {
    use super::vector;
    use strata::coordination::codec::{
        decode_key, decode_value, encode_epoch_value, encode_key, encode_value,
    };
    use strata::coordination::{
        CoordinationKey, CoordinationRecord, FencingToken, Lease, MemberId, RecordKind,
        Registration, Role,
    };

    fn be_i16(b: &[u8], at: usize) -> i16 {
        i16::from_be_bytes([b[at], b[at + 1]])
    }

    fn be_i64(b: &[u8], at: usize) -> i64 {
        i64::from_be_bytes(b[at..at + 8].try_into().unwrap())
    }

    #[test]
    fn keys_match_their_golden_bytes_and_the_spec() {
        let role = Role::new("controller").unwrap();
        let lease_key = CoordinationKey::lease(role.clone());
        let b = vector("coordination_lease_key_v0.bin", &encode_key(&lease_key));
        assert_eq!((be_i16(&b, 0), be_i16(&b, 2), be_i16(&b, 4)), (0, 1, 10));
        assert_eq!(&b[6..16], b"controller");
        assert_eq!(be_i16(&b, 16), 0, "lease keys carry an empty member");
        assert_eq!(b.len(), 18);
        assert_eq!(decode_key(&b).unwrap(), lease_key);

        let reg_key = CoordinationKey::registration(role, MemberId::new("node-1").unwrap());
        let b = vector(
            "coordination_registration_key_v0.bin",
            &encode_key(&reg_key),
        );
        assert_eq!((be_i16(&b, 0), be_i16(&b, 2)), (0, 0));
        assert_eq!(be_i16(&b, 16), 6);
        assert_eq!(&b[18..24], b"node-1");
        assert_eq!(decode_key(&b).unwrap(), reg_key);
    }

    #[test]
    fn values_match_their_golden_bytes_and_the_spec() {
        let member = MemberId::new("node-1").unwrap();
        let token = FencingToken::new(7, 3).unwrap();
        let reg = CoordinationRecord::Registration(Registration {
            member: member.clone(),
            registered_at: 1_700_000_000_000,
        });
        let b = vector(
            "coordination_registration_value_v0.bin",
            &encode_value(&reg).unwrap(),
        );
        assert_eq!((be_i16(&b, 0), be_i16(&b, 2)), (0, 6));
        assert_eq!(&b[4..10], b"node-1");
        assert_eq!(be_i64(&b, 10), 1_700_000_000_000);
        assert_eq!(b.len(), 18);
        assert_eq!(
            decode_value(RecordKind::Registration, Some(&b)).unwrap(),
            reg
        );

        let lease = CoordinationRecord::Lease(Lease {
            member,
            token,
            granted_at: 1_700_000_000_000,
            deadline: 1_700_000_005_000,
        });
        let b = vector(
            "coordination_lease_value_v0.bin",
            &encode_value(&lease).unwrap(),
        );
        assert_eq!(be_i64(&b, 10), 7, "producer_id");
        assert_eq!(be_i16(&b, 18), 3, "producer_epoch");
        assert_eq!(be_i64(&b, 20), 1_700_000_000_000);
        assert_eq!(be_i64(&b, 28), 1_700_000_005_000);
        assert_eq!(b.len(), 36);
        assert_eq!(decode_value(RecordKind::Lease, Some(&b)).unwrap(), lease);

        let b = vector(
            "coordination_epoch_value_v0.bin",
            &encode_epoch_value(token),
        );
        assert_eq!((be_i16(&b, 0), be_i64(&b, 2), be_i16(&b, 10)), (0, 7, 3));
        assert_eq!(b.len(), 12);
    }
}

#[test]
fn positions_record_v1_matches_its_golden_bytes_and_the_spec() {
    use strata::event_log::positions::{decode_key, decode_value, encode_key};
    let key = encode_key("orders", "billing", 7);
    let mut record = key.clone();
    record.extend_from_slice(&42i64.to_be_bytes());
    let b = vector("positions_record_v1.bin", &record);
    assert_eq!(&b[..7], b"orders\0");
    assert_eq!(&b[7..15], b"billing\0");
    assert_eq!(&b[15..19], &7u32.to_be_bytes());
    assert_eq!(
        decode_key(&b[..19]),
        Some(("orders".to_string(), "billing".to_string(), 7))
    );
    assert_eq!(decode_value(&b[19..]), Some(42));
}

#[cfg(feature = "ursula")]
mod group_state {
    use super::{u32_at, vector};
    use strata::cold::{decode_cold_object, encode_cold_object};
    use strata::group::keys::{decode_stream_key, message_key, stream_key};
    use strata::group::rows::{decode_row, encode_row, MessageRow, StreamRow};
    use strata::group::stream_row::{decode_stream_row, encode_stream_row};
    use ursula_shard::BucketStreamId;
    use ursula_stream::{ColdChunkRef, StreamMetadata, StreamStatus};

    fn u64_le(b: &[u8], at: usize) -> u64 {
        u64::from_le_bytes(b[at..at + 8].try_into().unwrap())
    }

    #[test]
    fn keys_match_their_golden_bytes_and_the_spec() {
        let id = BucketStreamId::with_affinity("bucket-a", "aff", "s1");
        let b = vector("group_stream_key_v1.bin", &stream_key(&id));
        assert_eq!(b[0], 8);
        assert_eq!(&b[1..9], b"bucket-a");
        assert_eq!((b[9], b[10]), (1, 3));
        assert_eq!(&b[11..14], b"aff");
        assert_eq!(b[14], 2);
        assert_eq!(&b[15..], b"s1");
        assert_eq!(decode_stream_key(&b), Some((id, &[][..])));

        let plain = BucketStreamId::new("bucket-a", "s1");
        let b = vector("group_message_key_v1.bin", &message_key(&plain, 4096));
        assert_eq!(&b[..9], b"\x08bucket-a");
        assert_eq!(b[9], 0, "no affinity");
        assert_eq!(&b[10..13], b"\x02s1");
        assert_eq!(u64::from_be_bytes(b[13..21].try_into().unwrap()), 4096);

        // The same key in the store's state database, under group `group-7`'s prefix.
        let mut prefixed = strata::group::state_db::group_prefix("group-7");
        prefixed.extend_from_slice(&message_key(&plain, 4096));
        let b = vector("group_state_message_key_v1.bin", &prefixed);
        assert_eq!(&b[..8], b"\x07group-7");
        assert_eq!(&b[8..], &message_key(&plain, 4096)[..]);
        assert_eq!(
            strata::group::state_db::STORE_FORMAT_KEY[0],
            0,
            "the store's keys start with a byte no group prefix starts with"
        );
    }

    #[test]
    fn rows_match_their_golden_bytes_and_the_spec() {
        let row = MessageRow {
            end_offset: 4196,
            log_offset: 7,
        };
        let b = vector("group_message_row_v1.bin", &row.encode());
        assert_eq!(u64::from_be_bytes(b[..8].try_into().unwrap()), 4196);
        assert_eq!(u64::from_be_bytes(b[8..].try_into().unwrap()), 7);
        assert_eq!(MessageRow::decode(&b).unwrap(), row);

        let id = BucketStreamId::new("bucket-a", "s1");
        let stream = StreamRow {
            metadata: StreamMetadata {
                stream_id: id,
                content_type: "application/octet-stream".into(),
                status: StreamStatus::Open,
                tail_offset: 4196,
                last_stream_seq: Some("0001".into()),
                stream_ttl_seconds: Some(60),
                stream_expires_at_ms: None,
                created_at_ms: 1_000,
                last_ttl_touch_at_ms: 2_000,
            },
            attrs: None,
            hot_start_offset: 4096,
            retained_offset: 0,
            live_setsum: setsum::Setsum::default(),
            total_setsum: setsum::Setsum::default(),
            total_records: 2,
            visible_snapshot: None,
            snapshot_changed: false,
            append_count: 2,
            cold_chunks: vec![ColdChunkRef {
                start_offset: 0,
                end_offset: 4096,
                s3_path: "bucket-a/s1/chunks/x.sco".into(),
                object_size: 4096,
                object_offset: 0,
                shared_object: false,
                payload_digest: String::new(),
            }]
            .into(),
            partition: 3,
            records: None,
            external_hot: 0,
        };
        let b = vector(
            "group_stream_row_v1.json.bin",
            &encode_row(&stream).unwrap(),
        );
        assert_eq!(b[0], 1, "row version");
        let json: serde_json::Value = serde_json::from_slice(&b[1..]).unwrap();
        assert_eq!(json["metadata"]["status"], "Open");
        assert_eq!(json["hot_start_offset"], 4096);
        assert!(
            json.get("cold_chunks").is_none(),
            "chunks live in their own family"
        );
        assert_eq!(json["partition"], 3);
        assert!(
            json["records"].is_null(),
            "a binary stream has no record coordinates"
        );
        let decoded: StreamRow = decode_row("stream", &b).unwrap();
        assert_eq!(
            decoded,
            StreamRow {
                cold_chunks: Default::default(),
                ..stream.clone()
            }
        );
        // Format version 2: a checkpoint's payload is not in the row (it has its own family).
        let with_checkpoint = StreamRow {
            visible_snapshot: Some(ursula_stream::StreamVisibleSnapshot {
                offset: 4096,
                content_type: "text/plain".into(),
                payload: b"checkpoint bytes".to_vec(),
                digest: "ab".repeat(32),
            }),
            cold_chunks: Default::default(),
            ..stream.clone()
        };
        let b = vector(
            "group_stream_row_v2_checkpoint.json.bin",
            &encode_row(&with_checkpoint).unwrap(),
        );
        let json: serde_json::Value = serde_json::from_slice(&b[1..]).unwrap();
        assert_eq!(json["visible_snapshot"]["offset"], 4096);
        assert_eq!(json["visible_snapshot"]["content_type"], "text/plain");
        assert!(
            json["visible_snapshot"].get("payload").is_none(),
            "no payload in the row"
        );
        let decoded: StreamRow = decode_row("stream", &b).unwrap();
        assert!(decoded.visible_snapshot.unwrap().payload.is_empty());
        // A version 1 row kept the payload inline; it still decodes (and is moved at open).
        let mut v1 = json.clone();
        v1["visible_snapshot"]["payload"] = serde_json::json!(b"old".to_vec());
        let mut v1_bytes = vec![1u8];
        v1_bytes.extend(serde_json::to_vec(&v1).unwrap());
        let decoded: StreamRow = decode_row("stream", &v1_bytes).unwrap();
        assert_eq!(decoded.visible_snapshot.unwrap().payload, b"old");

        // Row version 2 (group state format 4): binary, in the field order of the spec.
        let b = vector(
            "group_stream_row_binary.bin",
            &encode_stream_row(&with_checkpoint).unwrap(),
        );
        let be32 = |at: usize| u32::from_be_bytes(b[at..at + 4].try_into().unwrap());
        let be64 = |at: usize| u64::from_be_bytes(b[at..at + 8].try_into().unwrap());
        assert_eq!(b[0], 2, "row version");
        assert_eq!((be32(1), &b[5..13]), (8, &b"bucket-a"[..]));
        assert_eq!(b[13], 0, "no affinity key");
        assert_eq!((be32(14), &b[18..20]), (2, &b"s1"[..]));
        assert_eq!(
            (be32(20), &b[24..48]),
            (24, &b"application/octet-stream"[..])
        );
        assert_eq!((b[48], be64(49)), (0, 4196), "open, tail");
        assert_eq!(
            (b[57], be32(58), &b[62..66]),
            (1, 4, &b"0001"[..]),
            "stream seq"
        );
        assert_eq!((b[66], be64(67), b[75]), (1, 60, 0), "ttl, no expiry");
        assert_eq!(
            (be64(76), be64(84), b[92]),
            (1_000, 2_000, 0),
            "times, no attrs"
        );
        assert_eq!((be64(93), be64(101)), (4096, 0), "hot start, retained");
        assert_eq!(
            &b[109..141],
            &setsum::Setsum::default().digest(),
            "live setsum"
        );
        assert_eq!(be64(173), 2, "records counted");
        assert_eq!((b[181], be64(182)), (1, 4096), "checkpoint offset");
        let end = b.len();
        assert_eq!(be64(end - 8), 0, "external hot bytes last");
        assert_eq!(b[end - 9], 0, "no record coordinates");
        assert_eq!(be32(end - 13), 3, "partition");
        assert_eq!(be64(end - 21), 2, "append count");
        let decoded = decode_stream_row(&b).unwrap();
        let mut expected = with_checkpoint.clone();
        if let Some(s) = expected.visible_snapshot.as_mut() {
            s.payload.clear();
        }
        assert_eq!(decoded, expected);
        assert_eq!(
            decode_stream_row(&v1_bytes).unwrap().total_records,
            2,
            "JSON rows still read"
        );

        let chunk = vector(
            "group_cold_chunk_row_v1.json.bin",
            &encode_row(&stream.cold_chunks[0]).unwrap(),
        );
        let json: serde_json::Value = serde_json::from_slice(&chunk[1..]).unwrap();
        assert_eq!(
            (json["start_offset"].as_u64(), json["end_offset"].as_u64()),
            (Some(0), Some(4096))
        );
        assert_eq!(json["s3_path"], "bucket-a/s1/chunks/x.sco");
        let mut future = b.clone();
        future[0] = 2;
        assert!(
            decode_row::<StreamRow>("stream", &future).is_err(),
            "unknown row versions are refused"
        );
    }

    #[test]
    fn payload_directory_value_matches_its_golden_bytes_and_the_spec() {
        use strata::group::payload_host::{decode_directory_value, encode_directory_value};
        let b = vector("group_directory_value_v1.bin", &encode_directory_value(9));
        assert_eq!(b.len(), 9);
        assert_eq!(b[0], 1, "directory version");
        assert_eq!(u32::from_le_bytes(b[1..5].try_into().unwrap()), 9, "base");
        assert_eq!(u32::from_le_bytes(b[5..9].try_into().unwrap()), 8, "count");
        assert_eq!(decode_directory_value(&b), Ok(9));
    }

    #[test]
    fn cold_object_matches_its_golden_bytes_and_the_spec() {
        let payload = b"strata cold object golden vector, repeated! ".repeat(4);
        let b = vector(
            "cold_object_v1.bin",
            &encode_cold_object(&payload, 3).unwrap(),
        );
        assert_eq!(&b[..8], b"STRATCO\x01");
        assert_eq!(u16::from_le_bytes([b[8], b[9]]), 1, "version");
        assert_eq!(u16::from_le_bytes([b[10], b[11]]), 1, "zstd codec");
        assert_eq!(u64_le(&b, 12), payload.len() as u64);
        assert_eq!(u64_le(&b, 20), (b.len() - 32) as u64);
        let mut crc = crc32fast::Hasher::new();
        crc.update(&b[..28]);
        crc.update(&b[32..]);
        assert_eq!(u32_at(&b, 28), crc.finalize());
        assert_eq!(decode_cold_object("golden", &b).unwrap(), payload);
    }

    #[test]
    fn commit_record_matches_its_golden_bytes_and_the_spec() {
        use strata::group::commit_record::{decode, CommitRecord, Op};
        let ops = [
            Op::Put {
                cf: 2,
                key: b"k1",
                value: b"row",
            },
            Op::Delete { cf: 5, key: b"k2" },
            Op::DeleteRange {
                cf: 3,
                from: b"a",
                to: b"b",
            },
            Op::Requires {
                partition: 3,
                offset: 7,
            },
            Op::Digest {
                partition: 3,
                offset: 7,
                start: 4096,
            },
        ];
        let mut record = CommitRecord::default();
        ops.iter().for_each(|op| record.push(*op));
        let b = vector("group_commit_record_v2.bin", record.as_bytes());
        assert_eq!(b[0], 2, "version");
        assert_eq!(
            (b[1], b[2], u32_at(&b, 3)),
            (1, 2, 2),
            "put: tag, cf, key length"
        );
        assert_eq!(&b[7..9], b"k1");
        assert_eq!((u32_at(&b, 9), &b[13..16]), (3, &b"row"[..]), "put value");
        assert_eq!(
            (b[16], b[17], u32_at(&b, 18), &b[22..24]),
            (2, 5, 2, &b"k2"[..])
        );
        assert_eq!((b[24], b[25]), (3, 3), "delete_range: tag, cf");
        let digest = b.len() - 21;
        let requires = digest - 13;
        assert_eq!(b[requires], 4, "requires tag");
        assert_eq!(u32_at(&b, requires + 1), 3);
        assert_eq!(u64_le(&b, requires + 5), 7);
        assert_eq!(b[digest], 5, "digest tag");
        assert_eq!(u32_at(&b, digest + 1), 3);
        assert_eq!(u64_le(&b, digest + 5), 7);
        assert_eq!(u64_le(&b, digest + 13), 4096, "digest: stream offset");
        fn decoded(bytes: &[u8]) -> Result<Vec<Op<'_>>, strata::group::GroupError> {
            let mut out = Vec::new();
            decode(bytes, |op| {
                out.push(op);
                Ok(())
            })
            .map(|()| out)
        }
        assert_eq!(decoded(&b).unwrap(), ops);
        // Version 1 (no digest op) is still read: the same ops up to the requirement.
        let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("format/vectors/group_commit_record_v1.bin");
        let v1 = std::fs::read(path).unwrap();
        assert_eq!((v1[0], &v1[1..]), (1, &b[1..digest]));
        assert_eq!(decoded(&v1).unwrap(), ops[..4]);
    }
}
