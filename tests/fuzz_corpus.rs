//! Runs the fuzz targets' properties (`fuzz/properties.rs`) over the seed corpus in `fuzz/corpus/` and
//! over deterministic mutations of every seed: flipped bits, truncations, splices and random bytes.
//! The libFuzzer targets in `fuzz/` explore further; this keeps the properties checked in every test run.

#[path = "../fuzz/properties.rs"]
mod properties;

use std::path::PathBuf;

type Property = fn(&[u8]);

fn seeds(target: &str) -> Vec<Vec<u8>> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut out: Vec<Vec<u8>> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| std::fs::read(e.unwrap().path()).unwrap())
        .collect();
    assert!(!out.is_empty(), "no seeds in {}", dir.display());
    out.push(Vec::new());
    out.push(vec![0u8; 256]);
    out
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
}

fn mutate(rng: &mut Rng, seed: &[u8]) -> Vec<u8> {
    let mut data = seed.to_vec();
    for _ in 0..1 + rng.below(4) {
        match rng.below(5) {
            0 if !data.is_empty() => {
                let i = rng.below(data.len());
                data[i] ^= 1 << rng.below(8);
            }
            1 if !data.is_empty() => {
                let i = rng.below(data.len());
                data[i] = rng.next() as u8;
            }
            2 => data.truncate(rng.below(data.len() + 1)),
            3 => {
                let at = rng.below(data.len() + 1);
                let extra: Vec<u8> = (0..rng.below(16)).map(|_| rng.next() as u8).collect();
                data.splice(at..at, extra);
            }
            _ => {
                // Overwrite a little-endian u32 with an extreme value (lengths and counts).
                if data.len() >= 4 {
                    let i = rng.below(data.len() - 3);
                    let v = [0u32, 1, u32::MAX, 0x8000_0000, 48, 65][rng.below(6)];
                    data[i..i + 4].copy_from_slice(&v.to_le_bytes());
                }
            }
        }
    }
    data
}

fn run(target: &str, property: Property) {
    let mut rng = Rng(0x2545_f491_4f6c_dd1d);
    for seed in seeds(target) {
        property(&seed);
        for _ in 0..20_000 {
            property(&mutate(&mut rng, &seed));
        }
    }
}

#[test]
fn batch_decode_corpus() {
    run("batch_decode", properties::batch_round_trip);
}

#[test]
fn index_decode_corpus() {
    run("index_decode", properties::index_round_trip);
}

#[test]
fn manifest_decode_corpus() {
    run("manifest_decode", properties::manifest_round_trip);
}

#[test]
fn segment_scan_corpus() {
    run("segment_scan", properties::segment_scan);
}

#[test]
fn coordination_decode_corpus() {
    run("coordination_decode", properties::coordination_round_trip);
}

#[test]
fn cold_object_decode_corpus() {
    run("cold_object_decode", properties::cold_object_round_trip);
}

#[test]
fn journal_decode_corpus() {
    run("journal_decode", properties::journal_round_trip);
}

#[test]
fn positions_decode_corpus() {
    run("positions_decode", properties::positions_round_trip);
}

/// The group commit record codec (behind `ursula`; its libFuzzer target builds with
/// `--features ursula`).
#[cfg(feature = "ursula")]
#[test]
fn commit_record_decode_corpus() {
    run("commit_record_decode", properties::commit_record_round_trip);
}

/// The group stream row codec, binary and JSON (behind `ursula`, like the commit record).
#[cfg(feature = "ursula")]
#[test]
fn stream_row_decode_corpus() {
    run("stream_row_decode", properties::stream_row_round_trip);
}
