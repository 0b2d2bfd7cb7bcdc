//! Cold object decoding never panics, and what decodes round-trips.
#![no_main]
use libfuzzer_sys::fuzz_target;

#[path = "../properties.rs"]
#[allow(dead_code)]
mod properties;

fuzz_target!(|data: &[u8]| properties::cold_object_round_trip(data));
