//! Scanning an arbitrary segment image (header, batches, torn/corrupt classification) never panics.
#![no_main]
use libfuzzer_sys::fuzz_target;

#[path = "../properties.rs"]
#[allow(dead_code)]
mod properties;

fuzz_target!(|data: &[u8]| properties::segment_scan(data));
