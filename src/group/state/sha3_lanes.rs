//! SHA3-256 (FIPS 202) of four or eight messages at once, for the integrity digests of an
//! append batch (one SHA3 digest per append, [`super::integrity`]).
//!
//! The Keccak-f[1600] states sit side by side, word `i` of lane `k` at `state[i][k]`, so each
//! word of the states is one vector. The permutation is chosen at run time (`multiversion`):
//! eight states on a CPU with AVX-512F run in 512-bit registers ([`super::keccak_avx`], about
//! 1.4x the states a second of four); four states on a CPU with AVX-512VL or AVX2 run in 256-bit
//! registers; otherwise the portable rounds below run four on `wide::u64x4`, whose
//! representation `wide` fixes when the crate is compiled (two SSE2 halves on a baseline x86-64
//! build, whatever the CPU has). [`eight_lanes`] says whether eight at once pays: without
//! AVX-512F the eight are hashed as two fours. Messages of different lengths share a run: a lane
//! whose message has ended absorbs nothing more and its digest was taken when its last block was
//! permuted. Measured here (2 vCPUs, AVX-512) on 32 messages of 1.1 KiB, four at a time: 32-36
//! us against 55-82 us for the portable rounds and 120-250 us for the `sha3` crate one at a
//! time. The tests check every path against the `sha3` crate.

use wide::u64x4;

/// A message in two consecutive parts (a record digest's fixed fields, then the appended bytes).
pub(crate) type Message<'a> = [&'a [u8]; 2];

/// Bytes absorbed per permutation (SHA3-256's rate: 1600 - 2 x 256 bits).
const RATE: usize = 136;

/// Round constants of iota.
pub(super) const RC: [u64; 24] = [
    0x0000_0000_0000_0001,
    0x0000_0000_0000_8082,
    0x8000_0000_0000_808a,
    0x8000_0000_8000_8000,
    0x0000_0000_0000_808b,
    0x0000_0000_8000_0001,
    0x8000_0000_8000_8081,
    0x8000_0000_0000_8009,
    0x0000_0000_0000_008a,
    0x0000_0000_0000_0088,
    0x0000_0000_8000_8009,
    0x0000_0000_8000_000a,
    0x0000_0000_8000_808b,
    0x8000_0000_0000_008b,
    0x8000_0000_0000_8089,
    0x8000_0000_0000_8003,
    0x8000_0000_0000_8002,
    0x8000_0000_0000_0080,
    0x0000_0000_0000_800a,
    0x8000_0000_8000_000a,
    0x8000_0000_8000_8081,
    0x8000_0000_0000_8080,
    0x0000_0000_8000_0001,
    0x8000_0000_8000_8008,
];

/// Keccak-f[1600] on `N` states.
type Permutation<const N: usize> = fn(&mut [[u64; N]; 25]);

/// The SHA3-256 digests of four messages.
pub(crate) fn sha3_256_x4(messages: [Message<'_>; 4]) -> [[u8; 32]; 4] {
    sha3_256_lanes(messages, permute)
}

/// The SHA3-256 digests of eight messages.
pub(crate) fn sha3_256_x8(messages: [Message<'_>; 8]) -> [[u8; 32]; 8] {
    sha3_256_lanes(messages, permute_x8)
}

/// Whether this CPU hashes eight messages at once faster than four (it has AVX-512F).
pub(crate) fn eight_lanes() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("avx512f")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// The SHA3-256 digests of `N` messages, with the permutation `permute`.
fn sha3_256_lanes<const N: usize>(
    messages: [Message<'_>; N],
    permute: Permutation<N>,
) -> [[u8; 32]; N] {
    let blocks = messages.map(|m| (m[0].len() + m[1].len()) / RATE + 1);
    let most = blocks.iter().copied().max().unwrap_or(1);
    let mut state = [[0u64; N]; 25];
    let mut out = [[0u8; 32]; N];
    for block in 0..most {
        for (lane, message) in messages.iter().enumerate() {
            if block < blocks[lane] {
                absorb(&mut state, lane, message, block, block + 1 == blocks[lane]);
            }
        }
        permute(&mut state);
        for (lane, digest) in out.iter_mut().enumerate() {
            if block + 1 == blocks[lane] {
                for (i, chunk) in digest.chunks_exact_mut(8).enumerate() {
                    chunk.copy_from_slice(&state[i][lane].to_le_bytes());
                }
            }
        }
    }
    out
}

/// XORs block `block` of `message` into lane `lane` of the states: straight from the message
/// when one part holds the whole block, else through a padded copy.
fn absorb<const N: usize>(
    state: &mut [[u64; N]; 25],
    lane: usize,
    message: &Message<'_>,
    block: usize,
    last: bool,
) {
    let whole = if last {
        None
    } else {
        contiguous(message, block * RATE)
    };
    match whole {
        Some(bytes) => {
            for (word, chunk) in state.iter_mut().zip(bytes.chunks_exact(8)) {
                let mut le = [0u8; 8];
                le.copy_from_slice(chunk);
                word[lane] ^= u64::from_le_bytes(le);
            }
        }
        None => {
            let words = padded_block(message, block, last);
            for (word, w) in state.iter_mut().zip(words) {
                word[lane] ^= w;
            }
        }
    }
}

/// The `RATE` bytes of `message` from byte `from` on, when one of its parts holds them all.
fn contiguous<'a>(message: &Message<'a>, from: usize) -> Option<&'a [u8]> {
    let [head, body] = *message;
    if from + RATE <= head.len() {
        return Some(&head[from..from + RATE]);
    }
    let at = from.checked_sub(head.len())?;
    body.get(at..at + RATE)
}

/// Block `block` of `message` as little-endian words; the last one padded (SHA3's domain bits
/// `01`, then `10*1` padding).
fn padded_block(message: &Message<'_>, block: usize, last: bool) -> [u64; RATE / 8] {
    let mut bytes = [0u8; RATE];
    let filled = copy_from(message, block * RATE, &mut bytes);
    if last {
        debug_assert!(
            filled < RATE,
            "the last block always has room for the padding"
        );
        bytes[filled] ^= 0x06;
        bytes[RATE - 1] ^= 0x80;
    }
    let mut words = [0u64; RATE / 8];
    for (word, chunk) in words.iter_mut().zip(bytes.chunks_exact(8)) {
        let mut le = [0u8; 8];
        le.copy_from_slice(chunk);
        *word = u64::from_le_bytes(le);
    }
    words
}

/// Copies the message's bytes from `from` on into `out` (as many as fit); returns how many.
fn copy_from(message: &Message<'_>, mut from: usize, out: &mut [u8]) -> usize {
    let mut filled = 0;
    for part in message {
        if from >= part.len() {
            from -= part.len();
            continue;
        }
        let take = (part.len() - from).min(out.len() - filled);
        out[filled..filled + take].copy_from_slice(&part[from..from + take]);
        filled += take;
        from = 0;
    }
    filled
}

/// Keccak-f[1600] on four states, with the fastest rounds the CPU runs (the clone for each
/// target imports its own `rounds`; calling an AVX function from the clone compiled for that
/// feature is safe).
#[multiversion::multiversion(targets("x86_64+avx512f+avx512vl+avx2", "x86_64+avx2"))]
fn permute(state: &mut [[u64; 4]; 25]) {
    #[multiversion::target::target_cfg(all(
        target_arch = "x86_64",
        target_feature = "avx2",
        not(target_feature = "avx512vl")
    ))]
    use super::keccak_avx::permute_avx2 as rounds;
    #[multiversion::target::target_cfg(all(
        target_arch = "x86_64",
        target_feature = "avx512vl"
    ))]
    use super::keccak_avx::permute_avx512 as rounds;
    #[multiversion::target::target_cfg(not(all(
        target_arch = "x86_64",
        target_feature = "avx2"
    )))]
    use permute_portable as rounds;
    rounds(state)
}

/// Keccak-f[1600] on eight states: in 512-bit registers where the CPU has AVX-512F, else as two
/// runs of four ([`permute`]).
#[multiversion::multiversion(targets("x86_64+avx512f"))]
fn permute_x8(state: &mut [[u64; 8]; 25]) {
    #[multiversion::target::target_cfg(all(
        target_arch = "x86_64",
        target_feature = "avx512f"
    ))]
    use super::keccak_avx::permute_x8_avx512 as rounds;
    #[multiversion::target::target_cfg(not(all(
        target_arch = "x86_64",
        target_feature = "avx512f"
    )))]
    use permute_halves as rounds;
    rounds(state)
}

/// Keccak-f[1600] on eight states as two runs of four ([`permute`]).
fn permute_halves(state: &mut [[u64; 8]; 25]) {
    for half in 0..2 {
        let mut four: [[u64; 4]; 25] =
            std::array::from_fn(|i| std::array::from_fn(|k| state[i][4 * half + k]));
        permute(&mut four);
        for (word, lanes) in state.iter_mut().zip(four) {
            word[4 * half..4 * half + 4].copy_from_slice(&lanes);
        }
    }
}

/// Keccak-f[1600] on four states with `wide`'s vectors (any CPU).
fn permute_portable(state: &mut [[u64; 4]; 25]) {
    let mut lanes: [u64x4; 25] = state.map(u64x4::new);
    for rc in RC {
        round(&mut lanes, rc);
    }
    *state = lanes.map(|lane| lane.to_array());
}

/// Each lane rotated left by `by` bits.
#[inline(always)]
fn rotl(a: u64x4, by: u32) -> u64x4 {
    if by == 0 {
        a
    } else {
        (a << by) | (a >> (64 - by))
    }
}

/// One round of Keccak-f[1600] on four states: theta, then rho and pi (lane `i` of `b` is the
/// lane that pi moves to `i`, rotated by its rho offset), chi and iota.
#[inline(always)]
fn round(a: &mut [u64x4; 25], rc: u64) {
    let c: [u64x4; 5] =
        std::array::from_fn(|x| a[x] ^ a[x + 5] ^ a[x + 10] ^ a[x + 15] ^ a[x + 20]);
    let d: [u64x4; 5] = std::array::from_fn(|x| c[(x + 4) % 5] ^ rotl(c[(x + 1) % 5], 1));
    let b: [u64x4; 25] = [
        rotl(a[0] ^ d[0], 0),
        rotl(a[6] ^ d[1], 44),
        rotl(a[12] ^ d[2], 43),
        rotl(a[18] ^ d[3], 21),
        rotl(a[24] ^ d[4], 14),
        rotl(a[3] ^ d[3], 28),
        rotl(a[9] ^ d[4], 20),
        rotl(a[10] ^ d[0], 3),
        rotl(a[16] ^ d[1], 45),
        rotl(a[22] ^ d[2], 61),
        rotl(a[1] ^ d[1], 1),
        rotl(a[7] ^ d[2], 6),
        rotl(a[13] ^ d[3], 25),
        rotl(a[19] ^ d[4], 8),
        rotl(a[20] ^ d[0], 18),
        rotl(a[4] ^ d[4], 27),
        rotl(a[5] ^ d[0], 36),
        rotl(a[11] ^ d[1], 10),
        rotl(a[17] ^ d[2], 15),
        rotl(a[23] ^ d[3], 56),
        rotl(a[2] ^ d[2], 62),
        rotl(a[8] ^ d[3], 55),
        rotl(a[14] ^ d[4], 39),
        rotl(a[15] ^ d[0], 41),
        rotl(a[21] ^ d[1], 2),
    ];
    for y in 0..5 {
        for x in 0..5 {
            a[x + 5 * y] = b[x + 5 * y] ^ (!b[(x + 1) % 5 + 5 * y] & b[(x + 2) % 5 + 5 * y]);
        }
    }
    a[0] ^= u64x4::splat(rc);
}

#[cfg(test)]
mod tests {
    use super::*;
    use sha3::{Digest, Sha3_256};

    fn message(len: usize, seed: u8) -> Vec<u8> {
        (0..len)
            .map(|i| (i as u8).wrapping_mul(31) ^ seed)
            .collect()
    }

    /// `N` states of xorshift words from `seed`.
    fn arbitrary_states<const N: usize>(mut seed: u64) -> [[u64; N]; 25] {
        let mut state = [[0u64; N]; 25];
        for word in state.iter_mut().flatten() {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            *word = seed;
        }
        state
    }

    /// The AVX2 rounds where the CPU has AVX2 (even with AVX-512VL), else the portable ones.
    #[multiversion::multiversion(targets("x86_64+avx2"))]
    fn permute_avx2_or_portable(state: &mut [[u64; 4]; 25]) {
        #[multiversion::target::target_cfg(all(
            target_arch = "x86_64",
            target_feature = "avx2"
        ))]
        use super::super::keccak_avx::permute_avx2 as rounds;
        #[multiversion::target::target_cfg(not(all(
            target_arch = "x86_64",
            target_feature = "avx2"
        )))]
        use super::permute_portable as rounds;
        rounds(state)
    }

    #[test]
    fn every_permutation_gives_the_sha3_crate_digests() {
        for permutation in [permute, permute_portable, permute_avx2_or_portable] {
            check_every_block_boundary(permutation);
        }
    }

    #[test]
    fn every_permutation_agrees_on_arbitrary_states() {
        let state: [[u64; 4]; 25] = arbitrary_states(0x9e37_79b9_7f4a_7c15);
        let (mut a, mut b, mut c) = (state, state, state);
        permute(&mut a);
        permute_portable(&mut b);
        permute_avx2_or_portable(&mut c);
        assert_eq!(a, b);
        assert_eq!(a, c);
        assert_ne!(a, state);
    }

    #[test]
    fn every_eight_lane_permutation_gives_the_sha3_crate_digests() {
        for permutation in [permute_x8, permute_halves] {
            check_every_block_boundary(permutation);
        }
    }

    #[test]
    fn eight_lanes_agree_with_two_runs_of_four_on_arbitrary_states() {
        let state: [[u64; 8]; 25] = arbitrary_states(0x2545_f491_4f6c_dd1d);
        let (mut a, mut b) = (state, state);
        permute_x8(&mut a);
        permute_halves(&mut b);
        assert_eq!(a, b);
        assert_ne!(a, state);
    }

    /// Lane 0 hashes each length (split between the message's two parts), the other lanes the
    /// lengths after it, split three ways (all in the first part, all in the second, at byte 1).
    fn check_every_block_boundary<const N: usize>(permutation: Permutation<N>) {
        let lengths = [0, 1, 7, 135, 136, 137, 271, 272, 273, 1100, 1177, 4096];
        for (n, &len) in lengths.iter().enumerate() {
            let messages: Vec<Vec<u8>> = (0..N)
                .map(|k| message(lengths[(n + k) % lengths.len()], (n + k) as u8))
                .collect();
            let parts: [Message<'_>; N] = std::array::from_fn(|k| {
                let m = &messages[k][..];
                let at = match k {
                    0 => m.len().min(40),
                    k if k % 3 == 1 => m.len(),
                    k if k % 3 == 2 => 0,
                    _ => m.len().min(1),
                };
                [&m[..at], &m[at..]]
            });
            let got = sha3_256_lanes(parts, permutation);
            for (k, m) in messages.iter().enumerate() {
                assert_eq!(
                    got[k][..],
                    Sha3_256::digest(m)[..],
                    "lane {k}, length {} (lane 0: {len})",
                    m.len()
                );
            }
        }
    }
}
