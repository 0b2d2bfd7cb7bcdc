//! Scanning an arbitrary segment image (header, batches, torn/corrupt classification) never panics.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| strata::fuzzing::segment_scan(data));
