//! Coordination key and value decoding never panics, and what decodes re-encodes to the same bytes.
#![no_main]
use libfuzzer_sys::fuzz_target;

#[path = "../properties.rs"]
#[allow(dead_code)]
mod properties;

fuzz_target!(|data: &[u8]| properties::coordination_round_trip(data));
