//! The store's group payload log (`__groups`): every group it creates keeps its payload and
//! commit records in a range of [`PAYLOAD_PARTITIONS`] partitions of this one log, so the
//! commit records of all the groups committing at once share its journal rounds (one write
//! and one fdatasync for all of them), and a group has no log, journal, commit job or file of
//! its own until it writes.
//!
//! Partition 0 is the directory: one record per group, keyed by the group's name, naming the
//! first partition of its range (format/GROUP_STATE.md, "Payload directory"). A new group
//! takes the range after every range the directory names: the log grows first (its MANIFEST
//! count, then the partitions' directories and first segments), then the directory record is
//! appended and synced, and only then does the group write. A power cut between the two leaves
//! unclaimed, empty partitions at the end, which the next new group takes: nothing of a group
//! is ever written before its record is durable, and a record is never removed, so a range
//! belongs to one group for the life of the store.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;

use super::payload::PAYLOAD_PARTITIONS;
use crate::error::{StoreError, StoreResult};
use crate::group::GroupError;
use crate::log::{Log, LogOptions, LogOwner};
use crate::segment::NewRecord;
use crate::store::Store;

/// Name of the store's group payload log.
pub const GROUPS_LOG: &str = crate::store::manifest::SHARED_GROUP_LOG;
/// The partition holding the directory of groups.
pub const DIRECTORY_PARTITION: u32 = 0;
/// Version byte of a directory record's value.
pub const DIRECTORY_VERSION: u8 = 1;
/// Length of a directory record's value.
pub const DIRECTORY_VALUE_LEN: usize = 9;

/// Encodes the value of the directory record of a group whose range starts at `base`.
pub fn encode_directory_value(base: u32) -> [u8; DIRECTORY_VALUE_LEN] {
    let mut out = [0u8; DIRECTORY_VALUE_LEN];
    out[0] = DIRECTORY_VERSION;
    out[1..5].copy_from_slice(&base.to_le_bytes());
    out[5..9].copy_from_slice(&PAYLOAD_PARTITIONS.to_le_bytes());
    out
}

/// Decodes a directory record's value into the first partition of the group's range.
pub fn decode_directory_value(value: &[u8]) -> Result<u32, String> {
    let bytes: &[u8; DIRECTORY_VALUE_LEN] = value
        .try_into()
        .map_err(|_| format!("{} bytes, not {DIRECTORY_VALUE_LEN}", value.len()))?;
    if bytes[0] != DIRECTORY_VERSION {
        return Err(format!("version {}, not {DIRECTORY_VERSION}", bytes[0]));
    }
    let base = u32::from_le_bytes([bytes[1], bytes[2], bytes[3], bytes[4]]);
    let count = u32::from_le_bytes([bytes[5], bytes[6], bytes[7], bytes[8]]);
    if count != PAYLOAD_PARTITIONS || base == DIRECTORY_PARTITION {
        return Err(format!("range {base} + {count}"));
    }
    Ok(base)
}

/// Adds group `name`'s range at `base` to `ranges`, read from the directory: a name given again
/// with the same range is a record written again after a failed sync that had reached the disk
/// (one range); a name given another range, or a range that overlaps another or lies past the
/// log's partitions (`taken`), is an error.
fn add_range(
    ranges: &mut BTreeMap<String, u32>,
    taken: &mut [bool],
    name: &str,
    base: u32,
) -> Result<(), String> {
    match ranges.get(name) {
        Some(&known) if known == base => return Ok(()),
        Some(&known) => return Err(format!("{name:?} was given partition {known} before")),
        None => {}
    }
    let range = base as usize..(base + PAYLOAD_PARTITIONS) as usize;
    match taken.get_mut(range.clone()) {
        Some(slots) if slots.iter().all(|t| !t) => slots.fill(true),
        _ => {
            return Err(format!(
                "range {range:?} of {name:?} is taken or past the log's end"
            ))
        }
    }
    ranges.insert(name.to_string(), base);
    Ok(())
}

/// The store's group payload log and its directory (one per store, [`Store::shared`]).
pub(crate) struct PayloadHost {
    log: Log,
    /// Each group's first partition.
    ranges: Mutex<BTreeMap<String, u32>>,
    /// Ranges whose directory record failed to append (it may reach the disk yet, when the
    /// journal heals): no other group takes them, and the group's next open writes its record
    /// again.
    unconfirmed: Mutex<BTreeMap<String, u32>>,
}

impl PayloadHost {
    /// The store's payload host, opened (created) with `options` by its first user; later
    /// users share it, with the options of the first.
    pub fn of_store(store: &Store, options: &LogOptions) -> Result<Arc<Self>, GroupError> {
        Ok(store.shared(|| Self::open(store, options))?)
    }

    fn open(store: &Store, options: &LogOptions) -> StoreResult<Self> {
        let count = store
            .logs()
            .iter()
            .find(|l| l.name == GROUPS_LOG)
            .map_or(1, |l| l.partitions);
        let log = store.open_log_as(GROUPS_LOG, count, options.clone(), LogOwner::Layer)?;
        let mut ranges = BTreeMap::new();
        // Which of the log's partitions a range holds.
        let mut taken = vec![false; count as usize];
        log.visit::<StoreError>(DIRECTORY_PARTITION, 0, i64::MAX, &mut |record| {
            let bad = |why: String| {
                StoreError::Invalid(format!(
                    "{GROUPS_LOG}: directory record at offset {}: {why}",
                    record.offset
                ))
            };
            let (Some(key), Some(value)) = (record.key, record.value) else {
                return Err(bad("not a keyed value".into()));
            };
            let name = std::str::from_utf8(key).map_err(|e| bad(e.to_string()))?;
            let base = decode_directory_value(value).map_err(&bad)?;
            add_range(&mut ranges, &mut taken, name, base).map_err(bad)
        })?;
        Ok(Self {
            log,
            ranges: Mutex::new(ranges),
            unconfirmed: Mutex::new(BTreeMap::new()),
        })
    }

    /// The log.
    pub fn log(&self) -> &Log {
        &self.log
    }

    /// The names of the groups the directory holds, in order.
    pub fn names(&self) -> Vec<String> {
        self.lock().keys().cloned().collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, u32>> {
        self.ranges.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The first partition of group `name`'s range, given to it now if it has none (blocking:
    /// the log grows and the directory record is synced before this returns). A record whose
    /// append failed may still reach the disk: its range stays the group's (no other group
    /// takes it) and the group's next open writes the record again, so the directory may hold
    /// it twice with one range, which it reads as one.
    pub fn range_of(&self, store: &Store, name: &str) -> Result<u32, GroupError> {
        let mut ranges = self.lock();
        if let Some(&base) = ranges.get(name) {
            return Ok(base);
        }
        let mut unconfirmed = self.unconfirmed.lock().unwrap_or_else(|p| p.into_inner());
        let base = match unconfirmed.get(name) {
            Some(&base) => base,
            None => ranges
                .values()
                .chain(unconfirmed.values())
                .max()
                .map_or(DIRECTORY_PARTITION + 1, |b| b + PAYLOAD_PARTITIONS),
        };
        let end = base
            .checked_add(PAYLOAD_PARTITIONS)
            .ok_or_else(|| GroupError::Invalid("the store holds too many groups".into()))?;
        store.grow_log(&self.log, end)?;
        let value = Bytes::copy_from_slice(&encode_directory_value(base));
        let key = Bytes::copy_from_slice(name.as_bytes());
        let record = NewRecord::keyed(crate::now_ms(), key, Some(value));
        if let Err(e) = self.log.append_blocking(DIRECTORY_PARTITION, vec![record]) {
            unconfirmed.insert(name.to_string(), base);
            return Err(e.into());
        }
        unconfirmed.remove(name);
        ranges.insert(name.to_string(), base);
        Ok(base)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_value_decodes_to_its_range_and_refuses_any_other_shape() {
        let value = encode_directory_value(9);
        assert_eq!(value, [1, 9, 0, 0, 0, 8, 0, 0, 0]);
        assert_eq!(decode_directory_value(&value), Ok(9));
        assert!(decode_directory_value(&value[..8]).is_err());
        let mut version = value;
        version[0] = 2;
        assert!(decode_directory_value(&version).is_err());
        assert!(decode_directory_value(&encode_directory_value(0)).is_err());
        let mut count = value;
        count[5] = 4;
        assert!(decode_directory_value(&count).is_err());
    }

    #[test]
    fn a_name_given_again_with_its_range_is_one_group_and_any_clash_is_an_error() {
        let (mut ranges, mut taken) = (BTreeMap::new(), vec![false; 25]);
        add_range(&mut ranges, &mut taken, "a", 1).unwrap();
        add_range(&mut ranges, &mut taken, "a", 1).unwrap();
        add_range(&mut ranges, &mut taken, "b", 9).unwrap();
        assert_eq!(ranges.len(), 2);
        assert!(
            add_range(&mut ranges, &mut taken, "a", 17).is_err(),
            "another range"
        );
        assert!(
            add_range(&mut ranges, &mut taken, "c", 5).is_err(),
            "overlaps a and b"
        );
        assert!(
            add_range(&mut ranges, &mut taken, "c", 20).is_err(),
            "past the end"
        );
        add_range(&mut ranges, &mut taken, "c", 17).unwrap();
    }
}
