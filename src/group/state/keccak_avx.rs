//! Keccak-f[1600] on several states at once ([`super::sha3_lanes`] lays them out: word `i` of
//! the states is one vector): four in 256-bit registers, with AVX-512VL (rotations and
//! three-input logic in one instruction each) or with AVX2 alone (rotations as two shifts and an
//! or); eight in 512-bit registers with AVX-512F (about 1.4x the states per second of the four:
//! 55-57 against 78-85 ns a state here).
//!
//! Each is a safe function with the features it needs enabled; [`super::sha3_lanes`] calls each
//! only from the clone of its dispatcher compiled for those features, after `multiversion`
//! checked the CPU has them. The 25 words stay in registers through all 24 rounds (32 vector
//! registers with AVX-512).

use core::arch::x86_64::{
    __m256i, __m512i, _mm256_andnot_si256, _mm256_or_si256, _mm256_rol_epi64, _mm256_set1_epi64x,
    _mm256_slli_epi64, _mm256_srli_epi64, _mm256_ternarylogic_epi64, _mm256_xor_si256,
    _mm512_rol_epi64, _mm512_set1_epi64, _mm512_ternarylogic_epi64, _mm512_xor_si512,
};

use super::sha3_lanes::RC;

/// The 24 rounds on `state`, in vectors of type `$v`, with `xor` and `splat` (a word in every
/// lane) given as functions and `xor3` (three-way xor), `rol` (rotate each lane left by a
/// literal) and `chi` (`a ^ (!b & c)`) as macros for the instruction set.
macro_rules! rounds {
    ($state:ident, $v:ty, $xor:ident, $splat:ident, $xor3:ident, $rol:ident, $chi:ident) => {{
        let mut a: [$v; 25] = bytemuck::cast(*$state);
        for rc in RC {
            let c: [$v; 5] = std::array::from_fn(|x| {
                $xor3!($xor3!(a[x], a[x + 5], a[x + 10]), a[x + 15], a[x + 20])
            });
            let d = [
                $xor(c[4], $rol!(c[1], 1)),
                $xor(c[0], $rol!(c[2], 1)),
                $xor(c[1], $rol!(c[3], 1)),
                $xor(c[2], $rol!(c[4], 1)),
                $xor(c[3], $rol!(c[0], 1)),
            ];
            // Theta's xor, then rho and pi: word `i` of `b` is the word pi moves to `i`.
            let b = [
                $xor(a[0], d[0]),
                $rol!($xor(a[6], d[1]), 44),
                $rol!($xor(a[12], d[2]), 43),
                $rol!($xor(a[18], d[3]), 21),
                $rol!($xor(a[24], d[4]), 14),
                $rol!($xor(a[3], d[3]), 28),
                $rol!($xor(a[9], d[4]), 20),
                $rol!($xor(a[10], d[0]), 3),
                $rol!($xor(a[16], d[1]), 45),
                $rol!($xor(a[22], d[2]), 61),
                $rol!($xor(a[1], d[1]), 1),
                $rol!($xor(a[7], d[2]), 6),
                $rol!($xor(a[13], d[3]), 25),
                $rol!($xor(a[19], d[4]), 8),
                $rol!($xor(a[20], d[0]), 18),
                $rol!($xor(a[4], d[4]), 27),
                $rol!($xor(a[5], d[0]), 36),
                $rol!($xor(a[11], d[1]), 10),
                $rol!($xor(a[17], d[2]), 15),
                $rol!($xor(a[23], d[3]), 56),
                $rol!($xor(a[2], d[2]), 62),
                $rol!($xor(a[8], d[3]), 55),
                $rol!($xor(a[14], d[4]), 39),
                $rol!($xor(a[15], d[0]), 41),
                $rol!($xor(a[21], d[1]), 2),
            ];
            for y in 0..5 {
                for x in 0..5 {
                    let row = 5 * y;
                    a[x + row] = $chi!(b[x + row], b[(x + 1) % 5 + row], b[(x + 2) % 5 + row]);
                }
            }
            a[0] = $xor(a[0], $splat(rc as i64));
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

/// `a ^ b ^ c` in one instruction on eight lanes (truth table 0x96).
macro_rules! xor3_ternary_x8 {
    ($a:expr, $b:expr, $c:expr) => {
        _mm512_ternarylogic_epi64::<0x96>($a, $b, $c)
    };
}

/// Each of eight lanes rotated left by `$n` in one instruction.
macro_rules! rol_native_x8 {
    ($a:expr, $n:literal) => {
        _mm512_rol_epi64::<$n>($a)
    };
}

/// `a ^ (!b & c)` in one instruction on eight lanes (truth table 0xD2).
macro_rules! chi_ternary_x8 {
    ($a:expr, $b:expr, $c:expr) => {
        _mm512_ternarylogic_epi64::<0xD2>($a, $b, $c)
    };
}

/// Keccak-f[1600] on four states with AVX-512VL.
#[target_feature(enable = "avx2,avx512f,avx512vl")]
pub(super) fn permute_avx512(state: &mut [[u64; 4]; 25]) {
    rounds!(
        state,
        __m256i,
        _mm256_xor_si256,
        _mm256_set1_epi64x,
        xor3_ternary,
        rol_native,
        chi_ternary
    )
}

/// Keccak-f[1600] on four states with AVX2.
#[target_feature(enable = "avx2")]
pub(super) fn permute_avx2(state: &mut [[u64; 4]; 25]) {
    rounds!(
        state,
        __m256i,
        _mm256_xor_si256,
        _mm256_set1_epi64x,
        xor3_pairs,
        rol_shifts,
        chi_andnot
    )
}

/// Keccak-f[1600] on eight states with AVX-512F.
#[target_feature(enable = "avx512f")]
pub(super) fn permute_x8_avx512(state: &mut [[u64; 8]; 25]) {
    rounds!(
        state,
        __m512i,
        _mm512_xor_si512,
        _mm512_set1_epi64,
        xor3_ternary_x8,
        rol_native_x8,
        chi_ternary_x8
    )
}
