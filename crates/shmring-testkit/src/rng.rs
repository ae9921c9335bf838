//! The test RNG (splitmix64) and the payload checksum.

/// splitmix64: a tiny, good-enough generator for test data.
#[derive(Clone, Debug)]
pub struct Rng(pub u64);

impl Rng {
    /// Seeded from the clock and the pid (different in every run and process).
    pub fn seeded() -> Rng {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        Rng(t ^ ((std::process::id() as u64) << 32))
    }

    /// The next 64 random bits.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix(self.0)
    }

    /// `n` random bytes.
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }

    /// Uniform in `0..n` (0 if `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi.saturating_sub(lo) + 1)
    }

    /// Shuffles `v` in place (Fisher-Yates).
    pub fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            v.swap(i, j);
        }
    }
}

/// splitmix64's finaliser: a 64-bit mix of `z`.
pub fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A 64-bit multiply-rotate hash of `b` (the same for any alignment of `b`).
pub fn checksum(b: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ b.len() as u64;
    let mut words = b.chunks_exact(8);
    for w in &mut words {
        let w = u64::from_le_bytes(w.try_into().expect("8 bytes"));
        h = (h ^ w).wrapping_mul(0x0100_0000_01b3).rotate_left(23);
    }
    for &x in words.remainder() {
        h = (h ^ x as u64).wrapping_mul(0x0100_0000_01b3);
    }
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksum_sees_every_byte_and_ignores_alignment() {
        let data: Vec<u8> = (0..100u8).collect();
        let base = checksum(&data[1..41]);
        let copy = data[1..41].to_vec();
        assert_eq!(checksum(&copy), base);
        let mut flipped = copy.clone();
        for i in 0..flipped.len() {
            flipped[i] ^= 1;
            assert_ne!(checksum(&flipped), base, "byte {i}");
            flipped[i] ^= 1;
        }
        assert_ne!(checksum(&copy[..39]), base);
    }

    #[test]
    fn rng_stays_in_range_and_shuffles_a_permutation() {
        let mut r = Rng(7);
        for n in [1, 2, 3, 1000] {
            assert!((0..100).all(|_| r.below(n) < n));
        }
        assert_eq!(r.below(0), 0);
        assert!((0..100).all(|_| (5..=9).contains(&r.range(5, 9))));
        let mut v: Vec<u32> = (0..50).collect();
        r.shuffle(&mut v);
        let mut s = v.clone();
        s.sort();
        assert_eq!(s, (0..50).collect::<Vec<_>>());
        assert_eq!(Rng(1).next(), Rng(1).next());
    }
}
