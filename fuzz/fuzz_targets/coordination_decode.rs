//! Coordination key and value decoding never panics, and what decodes re-encodes to the same bytes.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| strata::fuzzing::coordination_round_trip(data));
