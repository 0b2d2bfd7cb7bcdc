//! Batch decoding never panics, and whatever decodes re-encodes to records that decode the same.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| strata::fuzzing::batch_round_trip(data));
