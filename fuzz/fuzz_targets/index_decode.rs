//! Index decoding never panics, and a decoded index encodes back to the same bytes.
#![no_main]
use libfuzzer_sys::fuzz_target;

#[path = "../properties.rs"]
#[allow(dead_code)]
mod properties;

fuzz_target!(|data: &[u8]| properties::index_round_trip(data));
