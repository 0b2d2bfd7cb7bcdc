//! Which partition holds a role: Kafka's murmur2 of the role name, made positive, modulo the
//! partition count (the defining implementation's frozen rule, so records land where its ports
//! look for them).

/// Kafka's 32-bit murmur2 hash (seed 0x9747b28c).
pub fn murmur2(data: &[u8]) -> i32 {
    const M: u32 = 0x5bd1_e995;
    const R: u32 = 24;
    let mut h: u32 = 0x9747_b28c ^ data.len() as u32;
    let mut chunks = data.chunks_exact(4);
    for chunk in &mut chunks {
        let mut k = u32::from_le_bytes([chunk[0], chunk[1], chunk[2], chunk[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let tail = chunks.remainder();
    if tail.len() >= 3 {
        h ^= u32::from(tail[2]) << 16;
    }
    if tail.len() >= 2 {
        h ^= u32::from(tail[1]) << 8;
    }
    if !tail.is_empty() {
        h ^= u32::from(tail[0]);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// The partition of `role` among `partitions` (which must be positive).
pub fn role_partition(role: &str, partitions: u32) -> u32 {
    let positive = (murmur2(role.as_bytes()) & 0x7fff_ffff) as u32;
    positive % partitions.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frozen_role_placements() {
        assert_eq!(role_partition("controller", 16), 12);
        assert_eq!(role_partition("dispatcher", 16), 10);
        assert_eq!(role_partition("role-a", 16), 10);
        assert_eq!(role_partition("role-b", 16), 12);
    }

    #[test]
    fn kafka_murmur2_vectors() {
        // Values of org.apache.kafka.common.utils.Utils.murmur2.
        assert_eq!(murmur2(b"21"), -973932308);
        assert_eq!(murmur2(b"foobar"), -790332482);
        assert_eq!(murmur2(b"a-little-bit-long-string"), -985981536);
        assert_eq!(murmur2(b"a-little-bit-longer-string"), -1486304829);
        assert_eq!(
            murmur2(b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8"),
            -58897971
        );
        assert_eq!(murmur2(b"abc"), 479470107);
    }
}
