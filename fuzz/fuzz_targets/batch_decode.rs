//! Batch decoding never panics, and whatever decodes re-encodes to records that decode the same.
#![no_main]
use libfuzzer_sys::fuzz_target;

#[path = "../properties.rs"]
#[allow(dead_code)]
mod properties;

fuzz_target!(|data: &[u8]| properties::batch_round_trip(data));
