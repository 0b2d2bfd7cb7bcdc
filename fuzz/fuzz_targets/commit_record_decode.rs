//! Group commit records never panic the decoder, and what decodes encodes back to the same
//! bytes (past the version byte).
//! Built with `--features ursula` (the group engine links RocksDB).
#![no_main]
use libfuzzer_sys::fuzz_target;

#[path = "../properties.rs"]
#[allow(dead_code)]
mod properties;

fuzz_target!(|data: &[u8]| properties::commit_record_round_trip(data));
