//! The MANIFEST file (format/MANIFEST.md): the store's format version, its id, and its logs with
//! their partition counts, owners and recorded options. CRC-checked; replaced atomically by writing a temporary
//! file, syncing it and renaming it over the old one.

use std::path::Path;

use super::recorded_options;
use crate::error::{IoContext, StoreError, StoreResult};
use crate::fs::{write_file_atomic, FileSystem};
use crate::log::{LogOptions, LogOwner};
use crate::segment::DecodeError;

/// Magic bytes at the start of the MANIFEST.
pub const MANIFEST_MAGIC: [u8; 8] = *b"STRATAMF";
/// Manifest format version written by this build (versions 1 and 2 are still read).
pub const MANIFEST_FORMAT_VERSION: u32 = 3;
/// Flag bit of a log whose records only its owning layer removes.
pub const LOG_FLAG_OWNED: u32 = 1;
/// Prefix of the payload logs of group engines (owned by their engine; a version 1 MANIFEST
/// did not record owners, so these are marked owned when it is read).
pub const GROUP_LOG_PREFIX: &str = "__group_";
/// Name of the store's group payload log (every group created by this version has a range of
/// its partitions).
pub const SHARED_GROUP_LOG: &str = "__groups";
/// Length of the fixed manifest header.
pub const MANIFEST_HEADER_LEN: usize = 20;
/// Largest manifest body accepted.
pub const MAX_MANIFEST_BODY: usize = 16 << 20;
/// Longest log name.
pub const MAX_LOG_NAME: usize = 255;

/// One log the store holds.
#[derive(Debug, Clone, PartialEq)]
pub struct LogEntry {
    /// Log name (also its directory name under `logs/`).
    pub name: String,
    /// Fixed number of partitions.
    pub partitions: u32,
    /// Who may remove its records.
    pub owner: LogOwner,
    /// The options it was last opened with (the recorded ones: format/MANIFEST.md, "Log
    /// options"); `None` for a log not opened since a version that did not record them.
    pub options: Option<LogOptions>,
}

/// The decoded MANIFEST.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Manifest {
    /// The store's id (random, made when the store is created): names its objects in shared
    /// places such as a cold-tier bucket. All zero means "not assigned yet" (a version 1 file).
    pub store_id: [u8; 16],
    /// Logs in creation order.
    pub logs: Vec<LogEntry>,
}

/// A fresh random store id (never all zero).
pub fn new_store_id() -> [u8; 16] {
    use std::hash::{BuildHasher, Hasher};
    let mut id = [0u8; 16];
    for (i, half) in id.chunks_mut(8).enumerate() {
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u128((crate::now_ms() as u128) ^ ((i as u128) << 64));
        hasher.write_u32(std::process::id());
        half.copy_from_slice(&(hasher.finish() | 1).to_le_bytes());
    }
    id
}

/// Checks a log name: 1 to 255 bytes of `[A-Za-z0-9._-]`, not `.` or `..`.
pub fn validate_log_name(name: &str) -> Result<(), String> {
    let ok = !name.is_empty()
        && name.len() <= MAX_LOG_NAME
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-');
    if ok {
        Ok(())
    } else {
        Err(format!(
            "log name {name:?} must be 1-255 bytes of [A-Za-z0-9._-], not . or .."
        ))
    }
}

impl Manifest {
    /// The entry of log `name`, if any.
    pub fn get(&self, name: &str) -> Option<&LogEntry> {
        self.logs.iter().find(|l| l.name == name)
    }

    /// The names of the group engines that have a payload log of their own (`__group_<name>`,
    /// created by earlier versions; later groups share the store's group payload log), in
    /// order.
    pub fn own_log_group_names(&self) -> Vec<String> {
        let mut names: Vec<String> = self
            .logs
            .iter()
            .filter_map(|l| l.name.strip_prefix(GROUP_LOG_PREFIX))
            .map(str::to_string)
            .collect();
        names.sort();
        names
    }

    /// Group payload logs: each group's own log (earlier versions), and the store's shared
    /// one.
    pub fn group_logs(&self) -> usize {
        self.logs
            .iter()
            .filter(|l| l.name.starts_with(GROUP_LOG_PREFIX) || l.name == SHARED_GROUP_LOG)
            .count()
    }

    /// The store id as 32 lowercase hex digits.
    pub fn store_id_hex(&self) -> String {
        self.store_id.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Encodes the manifest file (version 3).
    pub fn encode(&self) -> Vec<u8> {
        let mut body = Vec::new();
        body.extend_from_slice(&self.store_id);
        body.extend_from_slice(&(self.logs.len() as u32).to_le_bytes());
        for log in &self.logs {
            body.extend_from_slice(&(log.name.len() as u16).to_le_bytes());
            body.extend_from_slice(log.name.as_bytes());
            body.extend_from_slice(&log.partitions.to_le_bytes());
            let flags = match log.owner {
                LogOwner::Policies => 0,
                LogOwner::Layer => LOG_FLAG_OWNED,
            };
            body.extend_from_slice(&flags.to_le_bytes());
            let options = log.options.as_ref().map(recorded_options::encode);
            let options = options.unwrap_or_default();
            body.extend_from_slice(&(options.len() as u16).to_le_bytes());
            body.extend_from_slice(&options);
        }
        let mut out = Vec::with_capacity(MANIFEST_HEADER_LEN + body.len());
        out.extend_from_slice(&MANIFEST_MAGIC);
        out.extend_from_slice(&MANIFEST_FORMAT_VERSION.to_le_bytes());
        out.extend_from_slice(&(body.len() as u32).to_le_bytes());
        out.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
        out.extend_from_slice(&body);
        out
    }

    /// Decodes a manifest file; never panics on any input.
    pub fn decode(buf: &[u8]) -> Result<Self, DecodeError> {
        if buf.len() < MANIFEST_HEADER_LEN {
            return Err(DecodeError::Truncated {
                needed: MANIFEST_HEADER_LEN,
                available: buf.len(),
            });
        }
        if buf[0..8] != MANIFEST_MAGIC {
            return Err(DecodeError::BadMagic);
        }
        let u32_at =
            |b: &[u8], at: usize| u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]]);
        let version = u32_at(buf, 8);
        if !(1..=MANIFEST_FORMAT_VERSION).contains(&version) {
            return Err(DecodeError::UnsupportedVersion(version));
        }
        let body_len = u32_at(buf, 12) as usize;
        if body_len > MAX_MANIFEST_BODY || buf.len() != MANIFEST_HEADER_LEN + body_len {
            return Err(DecodeError::invalid(
                "body_len",
                "differs from the file length",
            ));
        }
        let body = &buf[MANIFEST_HEADER_LEN..];
        let stored = u32_at(buf, 16);
        let computed = crc32fast::hash(body);
        if stored != computed {
            return Err(DecodeError::CrcMismatch { stored, computed });
        }
        let truncated = DecodeError::invalid("body", "runs past its length");
        let mut store_id = [0u8; 16];
        let mut pos = 0;
        if version >= 2 {
            if body.len() < 16 {
                return Err(truncated);
            }
            store_id.copy_from_slice(&body[..16]);
            pos = 16;
        }
        if body.len() < pos + 4 {
            return Err(truncated);
        }
        let count = u32_at(body, pos) as usize;
        pos += 4;
        let mut logs = Vec::new();
        for _ in 0..count {
            if body.len() < pos + 2 {
                return Err(truncated);
            }
            let name_len = u16::from_le_bytes([body[pos], body[pos + 1]]) as usize;
            pos += 2;
            if body.len() < pos + name_len + 4 {
                return Err(truncated);
            }
            let name = std::str::from_utf8(&body[pos..pos + name_len])
                .map_err(|_| DecodeError::invalid("log name", "not UTF-8"))?
                .to_string();
            validate_log_name(&name)
                .map_err(|_| DecodeError::invalid("log name", "not a valid name"))?;
            pos += name_len;
            let partitions = u32_at(body, pos);
            pos += 4;
            if partitions == 0 || partitions > i32::MAX as u32 {
                return Err(DecodeError::invalid("partitions", "out of range"));
            }
            let owner = if version >= 2 {
                if body.len() < pos + 4 {
                    return Err(truncated);
                }
                let flags = u32_at(body, pos);
                pos += 4;
                match flags {
                    0 => LogOwner::Policies,
                    LOG_FLAG_OWNED => LogOwner::Layer,
                    _ => return Err(DecodeError::invalid("log flags", "unknown bits set")),
                }
            } else if name.starts_with(GROUP_LOG_PREFIX) {
                LogOwner::Layer
            } else {
                LogOwner::Policies
            };
            let options = if version >= 3 {
                let (options, len) = decode_options(&body[pos..])?;
                pos += len;
                options
            } else {
                None
            };
            if logs.iter().any(|l: &LogEntry| l.name == name) {
                return Err(DecodeError::invalid("log name", "appears twice"));
            }
            logs.push(LogEntry {
                name,
                partitions,
                owner,
                options,
            });
        }
        if pos != body.len() {
            return Err(DecodeError::invalid("body", "trailing bytes"));
        }
        Ok(Manifest { store_id, logs })
    }

    /// Reads the MANIFEST in `root`; `None` when there is none (a new store).
    pub fn load(fs: &dyn FileSystem, root: &Path) -> StoreResult<Option<Self>> {
        let path = root.join("MANIFEST");
        match fs.read_file(&path) {
            Ok(bytes) => Manifest::decode(&bytes)
                .map(Some)
                .map_err(|e| StoreError::corrupt(&path, 0, e)),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).at(&path),
        }
    }

    /// Replaces the MANIFEST in `root` atomically and durably.
    pub fn store(&self, fs: &dyn FileSystem, root: &Path) -> StoreResult<()> {
        write_file_atomic(fs, &root.join("MANIFEST"), &self.encode())
    }
}

/// The recorded options at the start of `rest` (a `u16` length, then the record; length 0: none
/// recorded) and the bytes they take.
fn decode_options(rest: &[u8]) -> Result<(Option<LogOptions>, usize), DecodeError> {
    let truncated = DecodeError::invalid("body", "runs past its length");
    let len = match rest {
        [a, b, ..] => u16::from_le_bytes([*a, *b]) as usize,
        _ => return Err(truncated),
    };
    let record = rest.get(2..2 + len).ok_or(truncated)?;
    let options = match len {
        0 => None,
        _ => Some(recorded_options::decode(record)?),
    };
    Ok((options, 2 + len))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rejects_damage() {
        let m = Manifest {
            store_id: [7; 16],
            logs: vec![
                LogEntry {
                    name: "events".into(),
                    partitions: 8,
                    owner: LogOwner::Policies,
                    options: Some(LogOptions::default().with_segment_bytes(1 << 20)),
                },
                LogEntry {
                    name: "__group_g".into(),
                    partitions: 1,
                    owner: LogOwner::Layer,
                    options: None,
                },
            ],
        };
        let bytes = m.encode();
        assert_eq!(Manifest::decode(&bytes), Ok(m));
        for i in 0..bytes.len() {
            let mut bad = bytes.clone();
            bad[i] ^= 0x40;
            assert!(Manifest::decode(&bad).is_err(), "flip at {i}");
        }
    }

    #[test]
    fn names_are_checked() {
        assert!(validate_log_name("a-b_c.d").is_ok());
        for bad in ["", ".", "..", "a/b", "é"] {
            assert!(validate_log_name(bad).is_err(), "{bad}");
        }
    }
}
