//! A small seeded generator (SplitMix64): the same seed gives the same stream on every
//! platform and every release, which a `rand` version bump would not promise.

/// FNV-1a over bytes: a stable hash for names that go into seeds.
pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3))
}

/// SplitMix64's finaliser: spreads every input bit over the output.
pub(crate) fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A SplitMix64 stream.
#[derive(Debug, Clone)]
pub(crate) struct Rng(u64);

impl Rng {
    /// A stream from a seed.
    pub(crate) fn new(seed: u64) -> Rng {
        Rng(mix(seed))
    }

    /// The next 64 random bits.
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix(self.0)
    }

    /// A number in `0..n` (0 when `n` is 0), without modulo bias worth speaking of.
    pub(crate) fn below(&mut self, n: usize) -> usize {
        ((u128::from(self.next_u64()) * n as u128) >> 64) as usize
    }

    /// A number in `lo..=hi` (`lo` when the range is empty).
    pub(crate) fn range(&mut self, lo: i64, hi: i64) -> i64 {
        if hi <= lo {
            return lo;
        }
        let span = (hi - lo) as u64 + 1;
        lo + ((u128::from(self.next_u64()) * u128::from(span)) >> 64) as i64
    }

    /// True with probability `num/den`.
    pub(crate) fn chance(&mut self, num: usize, den: usize) -> bool {
        self.below(den) < num
    }

    /// One element; `xs` must not be empty (every pool here is a non-empty constant).
    pub(crate) fn pick<'a, T>(&mut self, xs: &'a [T]) -> &'a T {
        &xs[self.below(xs.len())]
    }

    /// Fisher–Yates in place.
    pub(crate) fn shuffle<T>(&mut self, xs: &mut [T]) {
        for i in (1..xs.len()).rev() {
            let j = self.below(i + 1);
            xs.swap(i, j);
        }
    }

    /// `n` distinct elements in random order (all of them when `n` exceeds the length).
    pub(crate) fn sample<T: Clone>(&mut self, xs: &[T], n: usize) -> Vec<T> {
        let mut v = xs.to_vec();
        self.shuffle(&mut v);
        v.truncate(n);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stream_is_fixed_forever() {
        // Changing these numbers changes every generated task: bump the manifest version.
        let mut r = Rng::new(0);
        let first: Vec<u64> = (0..3).map(|_| r.next_u64()).collect();
        let mut again = Rng::new(0);
        assert_eq!(first, (0..3).map(|_| again.next_u64()).collect::<Vec<_>>());
        assert_ne!(first[0], first[1]);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    }

    #[test]
    fn ranges_stay_in_bounds() {
        let mut r = Rng::new(7);
        for _ in 0..1000 {
            let x = r.range(-3, 5);
            assert!((-3..=5).contains(&x));
            assert!(r.below(4) < 4);
        }
        assert_eq!(r.range(9, 9), 9);
        assert_eq!(r.below(0), 0);
        let s = r.sample(&[1, 2, 3, 4], 3);
        assert_eq!(s.len(), 3);
        assert!(s.iter().all(|x| (1..=4).contains(x)));
    }
}
