//! A log's options as its MANIFEST entry records them (format/MANIFEST.md, "Log options",
//! version 1): the options that decide what the log's files hold and what removes records
//! (durability, compression, segment and index sizes, retention, compaction, maintenance, journal
//! sizes). The options an opener chooses for itself (recovery mode, commit yield, group commit
//! size) are not recorded; decoding gives their defaults.

use std::time::Duration;

use crate::log::{CompactionPolicy, Durability, LogOptions, RetentionPolicy};
use crate::segment::{Compression, DecodeError};

/// Version of the recorded options written by this build.
pub const LOG_OPTIONS_VERSION: u8 = 1;
/// Length of a version 1 record.
pub const LOG_OPTIONS_LEN: usize = 98;

/// A duration as whole nanoseconds (saturating: anything past 584 years records as `u64::MAX`).
fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Encodes the recorded options of `options` (always [`LOG_OPTIONS_LEN`] bytes).
pub fn encode(options: &LogOptions) -> Vec<u8> {
    let mut out = Vec::with_capacity(LOG_OPTIONS_LEN);
    out.push(LOG_OPTIONS_VERSION);
    let (kind, interval) = match options.durability {
        Durability::Sync => (0u8, 0),
        Durability::Interval(d) => (1, nanos(d)),
    };
    out.push(kind);
    out.extend_from_slice(&interval.to_le_bytes());
    let (kind, level) = match options.compression {
        Compression::None => (0u8, 0i32),
        Compression::Zstd { level } => (1, level),
    };
    out.push(kind);
    out.extend_from_slice(&level.to_le_bytes());
    out.extend_from_slice(&options.segment_bytes.to_le_bytes());
    out.extend_from_slice(&options.index_interval_bytes.to_le_bytes());
    let r = &options.retention;
    out.push(u8::from(r.max_bytes.is_some()) | (u8::from(r.max_age.is_some()) << 1));
    out.extend_from_slice(&r.max_bytes.unwrap_or(0).to_le_bytes());
    out.extend_from_slice(&r.max_age.map_or(0, nanos).to_le_bytes());
    let c = &options.compaction;
    out.push(u8::from(c.enabled));
    out.extend_from_slice(&nanos(c.delete_retention).to_le_bytes());
    out.extend_from_slice(&c.min_cleanable_ratio.to_bits().to_le_bytes());
    out.extend_from_slice(&(c.max_key_map_bytes as u64).to_le_bytes());
    out.push(u8::from(options.maintenance_interval.is_some()));
    let maintenance = options.maintenance_interval.map_or(0, nanos);
    out.extend_from_slice(&maintenance.to_le_bytes());
    out.extend_from_slice(&options.journal_bytes.to_le_bytes());
    out.extend_from_slice(&options.max_unsynced_bytes.to_le_bytes());
    debug_assert_eq!(out.len(), LOG_OPTIONS_LEN);
    out
}

/// Reads fixed-size fields off the front of a record.
struct Fields<'a>(&'a [u8]);

impl Fields<'_> {
    fn take<const N: usize>(&mut self) -> [u8; N] {
        let (head, rest) = self.0.split_at(N);
        self.0 = rest;
        head.try_into().unwrap_or([0; N])
    }
    fn u8(&mut self) -> u8 {
        self.take::<1>()[0]
    }
    fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.take())
    }
    fn nanos(&mut self) -> Duration {
        Duration::from_nanos(self.u64())
    }
}

/// Decodes a recorded options record; never panics. Options the record does not hold take
/// their defaults, and the result passes [`LogOptions::validate`].
pub fn decode(bytes: &[u8]) -> Result<LogOptions, DecodeError> {
    match bytes.first() {
        None => return Err(DecodeError::invalid("log options", "empty")),
        Some(&LOG_OPTIONS_VERSION) => {}
        Some(&v) => return Err(DecodeError::UnsupportedVersion(u32::from(v))),
    }
    if bytes.len() != LOG_OPTIONS_LEN {
        return Err(DecodeError::invalid("log options", "wrong length"));
    }
    let bad = |field| DecodeError::invalid(field, "unknown kind");
    let mut f = Fields(&bytes[1..]);
    // A field that does not apply is zero, so every record has one encoding.
    let durability = match (f.u8(), f.nanos()) {
        (0, Duration::ZERO) => Durability::Sync,
        (1, d) => Durability::Interval(d),
        _ => return Err(bad("durability")),
    };
    let compression = match (f.u8(), i32::from_le_bytes(f.take())) {
        (0, 0) => Compression::None,
        (1, level) => Compression::Zstd { level },
        _ => return Err(bad("compression")),
    };
    let (segment_bytes, index_interval_bytes) = (f.u64(), f.u64());
    let set = f.u8();
    let (max_bytes, max_age) = (f.u64(), f.nanos());
    if set > 3 || (set & 1 == 0 && max_bytes != 0) || (set & 2 == 0 && !max_age.is_zero()) {
        return Err(bad("retention"));
    }
    let retention = RetentionPolicy::default()
        .with_max_bytes((set & 1 != 0).then_some(max_bytes))
        .with_max_age((set & 2 != 0).then_some(max_age));
    let enabled = match f.u8() {
        0 => false,
        1 => true,
        _ => return Err(bad("compaction")),
    };
    let compaction = CompactionPolicy::default()
        .with_enabled(enabled)
        .with_delete_retention(f.nanos())
        .with_min_cleanable_ratio(f64::from_bits(f.u64()))
        .with_max_key_map_bytes(usize::try_from(f.u64()).unwrap_or(usize::MAX));
    let maintenance = match (f.u8(), f.nanos()) {
        (0, Duration::ZERO) => None,
        (1, d) => Some(d),
        _ => return Err(bad("maintenance")),
    };
    let options = LogOptions::default()
        .with_durability(durability)
        .with_compression(compression)
        .with_segment_bytes(segment_bytes)
        .with_index_interval_bytes(index_interval_bytes)
        .with_retention(retention)
        .with_compaction(compaction)
        .with_maintenance_interval(maintenance)
        .with_journal_bytes(f.u64())
        .with_max_unsynced_bytes(f.u64());
    debug_assert!(f.0.is_empty());
    options
        .validate()
        .map_err(|_| DecodeError::invalid("log options", "out of range"))?;
    Ok(options)
}

/// The recorded options that differ between `old` and `new`, by name.
pub fn changed(old: &LogOptions, new: &LogOptions) -> Vec<&'static str> {
    let (a, b) = (encode(old), encode(new));
    // Byte ranges of each recorded option in a version 1 record.
    const FIELDS: [(&str, std::ops::Range<usize>); 9] = [
        ("durability", 1..10),
        ("compression", 10..15),
        ("segment_bytes", 15..23),
        ("index_interval_bytes", 23..31),
        ("retention", 31..48),
        ("compaction", 48..73),
        ("maintenance_interval", 73..82),
        ("journal_bytes", 82..90),
        ("max_unsynced_bytes", 90..98),
    ];
    FIELDS
        .iter()
        .filter(|(_, range)| a[range.clone()] != b[range.clone()])
        .map(|(name, _)| *name)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn configured() -> LogOptions {
        LogOptions::default()
            .with_durability(Durability::Interval(Duration::from_millis(3)))
            .with_compression(Compression::Zstd { level: 7 })
            .with_segment_bytes(1 << 16)
            .with_retention(RetentionPolicy::default().with_max_age(Some(Duration::MAX)))
            .with_compaction(CompactionPolicy::default().with_min_cleanable_ratio(0.25))
    }

    #[test]
    fn recorded_options_round_trip_and_unrecorded_ones_take_defaults() {
        for options in [LogOptions::default(), configured()] {
            let bytes = encode(&options);
            assert_eq!(bytes.len(), LOG_OPTIONS_LEN);
            let decoded = decode(&bytes).unwrap();
            assert_eq!(encode(&decoded), bytes, "stable through a round trip");
            assert!(changed(&options, &decoded).is_empty());
        }
        let tuned = configured()
            .with_commit_yield(Duration::ZERO)
            .with_recovery(crate::RecoveryMode::Salvage);
        let decoded = decode(&encode(&tuned)).unwrap();
        assert_eq!(decoded.commit_yield, LogOptions::default().commit_yield);
        assert_eq!(decoded.recovery, crate::RecoveryMode::TolerateTornTail);
        assert_eq!(
            decoded.retention.max_age,
            Some(Duration::from_nanos(u64::MAX))
        );
    }

    #[test]
    fn damaged_records_are_refused_never_misread() {
        let good = encode(&configured());
        assert!(decode(&[]).is_err());
        assert!(decode(&good[..good.len() - 1]).is_err());
        let mut longer = good.clone();
        longer.push(0);
        assert!(decode(&longer).is_err());
        let at = |i: usize, v: u8| {
            let mut b = good.clone();
            b[i] = v;
            decode(&b)
        };
        assert_eq!(at(0, 2), Err(DecodeError::UnsupportedVersion(2)));
        for (kind_at, name) in [(1, "durability"), (10, "compression"), (31, "retention")] {
            assert!(at(kind_at, 9).is_err(), "{name}");
        }
        assert!(at(48, 2).is_err(), "compaction");
        assert!(at(73, 2).is_err(), "maintenance");
        // A field that does not apply must be zero (one encoding per record).
        let default = encode(&LogOptions::default());
        for unused in [2, 11, 32, 40, 74] {
            let mut b = default.clone();
            b[unused] = 1;
            assert!(decode(&b).is_err(), "byte {unused}");
        }
        assert!(at(15 + 7, 0xff).is_err(), "segment_bytes out of range");
        // Any single byte flipped either is refused or decodes to options that pass
        // validation: never a panic.
        for i in 0..good.len() {
            for bit in 0..8 {
                let mut b = good.clone();
                b[i] ^= 1 << bit;
                if let Ok(options) = decode(&b) {
                    assert!(options.validate().is_ok());
                    assert_eq!(encode(&options), b, "canonical");
                }
            }
        }
    }

    #[test]
    fn changes_are_named_by_option() {
        let old = LogOptions::default();
        assert!(changed(&old, &old.clone().with_commit_yield(Duration::ZERO)).is_empty());
        let new = old
            .clone()
            .with_compression(Compression::Zstd { level: 1 })
            .with_compaction(CompactionPolicy::default().with_enabled(true));
        assert_eq!(changed(&old, &new), vec!["compression", "compaction"]);
        let new = old.clone().with_max_unsynced_bytes(1 << 20);
        assert_eq!(changed(&old, &new), vec!["max_unsynced_bytes"]);
    }
}
