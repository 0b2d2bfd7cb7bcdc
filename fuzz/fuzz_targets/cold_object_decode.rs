//! Cold object decoding never panics, and what decodes round-trips.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| strata::fuzzing::cold_object_round_trip(data));
