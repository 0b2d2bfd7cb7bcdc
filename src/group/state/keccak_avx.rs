//! Keccak-f[1600] on four states in 256-bit registers ([`super::sha3_x4`] lays them out: word
//! `i` of the four states is one vector), with AVX-512VL (rotations and three-input logic in
//! one instruction each) or with AVX2 alone (rotations as two shifts and an or).
//!
//! Both are safe functions with the features they need enabled; [`super::sha3_x4`] calls each
//! only from the clone of its dispatcher compiled for those features, after `multiversion`
//! checked the CPU has them. The 25 words stay in registers through all 24 rounds (32 vector
//! registers with AVX-512VL).

use core::arch::x86_64::{
    __m256i, _mm256_andnot_si256, _mm256_or_si256, _mm256_rol_epi64, _mm256_set1_epi64x,
    _mm256_slli_epi64, _mm256_srli_epi64, _mm256_ternarylogic_epi64, _mm256_xor_si256,
};

use super::sha3_x4::RC;

/// The 24 rounds on `state`, with `xor3` (three-way xor), `rol` (rotate each lane left by a
/// literal) and `chi` (`a ^ (!b & c)`) given as macros for the instruction set.
macro_rules! rounds {
    ($state:ident, $xor3:ident, $rol:ident, $chi:ident) => {{
        let mut a: [__m256i; 25] = bytemuck::cast(*$state);
        for rc in RC {
            let c: [__m256i; 5] = std::array::from_fn(|x| {
                $xor3!($xor3!(a[x], a[x + 5], a[x + 10]), a[x + 15], a[x + 20])
            });
            let d = [
                _mm256_xor_si256(c[4], $rol!(c[1], 1)),
                _mm256_xor_si256(c[0], $rol!(c[2], 1)),
                _mm256_xor_si256(c[1], $rol!(c[3], 1)),
                _mm256_xor_si256(c[2], $rol!(c[4], 1)),
                _mm256_xor_si256(c[3], $rol!(c[0], 1)),
            ];
            // Theta's xor, then rho and pi: word `i` of `b` is the word pi moves to `i`.
            let b = [
                _mm256_xor_si256(a[0], d[0]),
                $rol!(_mm256_xor_si256(a[6], d[1]), 44),
                $rol!(_mm256_xor_si256(a[12], d[2]), 43),
                $rol!(_mm256_xor_si256(a[18], d[3]), 21),
                $rol!(_mm256_xor_si256(a[24], d[4]), 14),
                $rol!(_mm256_xor_si256(a[3], d[3]), 28),
                $rol!(_mm256_xor_si256(a[9], d[4]), 20),
                $rol!(_mm256_xor_si256(a[10], d[0]), 3),
                $rol!(_mm256_xor_si256(a[16], d[1]), 45),
                $rol!(_mm256_xor_si256(a[22], d[2]), 61),
                $rol!(_mm256_xor_si256(a[1], d[1]), 1),
                $rol!(_mm256_xor_si256(a[7], d[2]), 6),
                $rol!(_mm256_xor_si256(a[13], d[3]), 25),
                $rol!(_mm256_xor_si256(a[19], d[4]), 8),
                $rol!(_mm256_xor_si256(a[20], d[0]), 18),
                $rol!(_mm256_xor_si256(a[4], d[4]), 27),
                $rol!(_mm256_xor_si256(a[5], d[0]), 36),
                $rol!(_mm256_xor_si256(a[11], d[1]), 10),
                $rol!(_mm256_xor_si256(a[17], d[2]), 15),
                $rol!(_mm256_xor_si256(a[23], d[3]), 56),
                $rol!(_mm256_xor_si256(a[2], d[2]), 62),
                $rol!(_mm256_xor_si256(a[8], d[3]), 55),
                $rol!(_mm256_xor_si256(a[14], d[4]), 39),
                $rol!(_mm256_xor_si256(a[15], d[0]), 41),
                $rol!(_mm256_xor_si256(a[21], d[1]), 2),
            ];
            for y in 0..5 {
                for x in 0..5 {
                    let row = 5 * y;
                    a[x + row] = $chi!(b[x + row], b[(x + 1) % 5 + row], b[(x + 2) % 5 + row]);
                }
            }
            a[0] = _mm256_xor_si256(a[0], _mm256_set1_epi64x(rc as i64));
        }
        *$state = bytemuck::cast(a);
    }};
}

/// `a ^ b ^ c` in one instruction (truth table 0x96).
macro_rules! xor3_ternary {
    ($a:expr, $b:expr, $c:expr) => {
        _mm256_ternarylogic_epi64::<0x96>($a, $b, $c)
    };
}

/// Each lane rotated left by `$n` in one instruction.
macro_rules! rol_native {
    ($a:expr, $n:literal) => {
        _mm256_rol_epi64::<$n>($a)
    };
}

/// `a ^ (!b & c)` in one instruction (truth table 0xD2).
macro_rules! chi_ternary {
    ($a:expr, $b:expr, $c:expr) => {
        _mm256_ternarylogic_epi64::<0xD2>($a, $b, $c)
    };
}

/// `a ^ b ^ c` in two instructions.
macro_rules! xor3_pairs {
    ($a:expr, $b:expr, $c:expr) => {
        _mm256_xor_si256(_mm256_xor_si256($a, $b), $c)
    };
}

/// Each lane rotated left by `$n` (1 to 63) with two shifts and an or.
macro_rules! rol_shifts {
    ($a:expr, $n:literal) => {{
        let v = $a;
        _mm256_or_si256(
            _mm256_slli_epi64::<$n>(v),
            _mm256_srli_epi64::<{ 64 - $n }>(v),
        )
    }};
}

/// `a ^ (!b & c)` in two instructions.
macro_rules! chi_andnot {
    ($a:expr, $b:expr, $c:expr) => {
        _mm256_xor_si256($a, _mm256_andnot_si256($b, $c))
    };
}

/// Keccak-f[1600] on four states with AVX-512VL.
#[target_feature(enable = "avx2,avx512f,avx512vl")]
pub(super) fn permute_avx512(state: &mut [[u64; 4]; 25]) {
    rounds!(state, xor3_ternary, rol_native, chi_ternary)
}

/// Keccak-f[1600] on four states with AVX2.
#[target_feature(enable = "avx2")]
pub(super) fn permute_avx2(state: &mut [[u64; 4]; 25]) {
    rounds!(state, xor3_pairs, rol_shifts, chi_andnot)
}
