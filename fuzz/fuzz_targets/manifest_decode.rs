//! Manifest decoding never panics, and a decoded manifest encodes back to the same bytes.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| strata::fuzzing::manifest_round_trip(data));
