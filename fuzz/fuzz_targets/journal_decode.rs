//! Journal file headers and frames never panic the decoder, and what decodes encodes back to
//! the same bytes.
#![no_main]
use libfuzzer_sys::fuzz_target;

#[path = "../properties.rs"]
#[allow(dead_code)]
mod properties;

fuzz_target!(|data: &[u8]| properties::journal_round_trip(data));
