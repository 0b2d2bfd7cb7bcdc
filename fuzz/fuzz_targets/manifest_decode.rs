//! Manifest decoding never panics, and a decoded manifest encodes back to the same bytes.
#![no_main]
use libfuzzer_sys::fuzz_target;

#[path = "../properties.rs"]
#[allow(dead_code)]
mod properties;

fuzz_target!(|data: &[u8]| properties::manifest_round_trip(data));
