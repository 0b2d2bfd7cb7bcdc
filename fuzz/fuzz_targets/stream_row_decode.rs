//! Group stream rows (binary and JSON) never panic the decoder; a binary row that decodes
//! encodes back to the same bytes.
//! Built with `--features ursula` (the group engine links RocksDB).
#![no_main]
use libfuzzer_sys::fuzz_target;

#[path = "../properties.rs"]
#[allow(dead_code)]
mod properties;

fuzz_target!(|data: &[u8]| properties::stream_row_round_trip(data));
