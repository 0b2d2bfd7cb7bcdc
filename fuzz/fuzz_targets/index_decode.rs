//! Index decoding never panics, and a decoded index encodes back to the same bytes.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| strata::fuzzing::index_round_trip(data));
