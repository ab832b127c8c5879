//! A small deterministic random source (SplitMix64 + Box–Muller), so that generated
//! weights depend on the seed alone and not on a crate's version.

/// SplitMix64: fast, well mixed, and stable by construction.
#[derive(Debug, Clone)]
pub(crate) struct SplitMix64 {
    state: u64,
    spare: Option<f64>,
}

impl SplitMix64 {
    /// A generator for `seed`.
    pub(crate) fn new(seed: u64) -> Self {
        SplitMix64 { state: seed, spare: None }
    }

    /// A generator for `seed` and a stream name, independent of other streams.
    pub(crate) fn for_stream(seed: u64, stream: &str) -> Self {
        // FNV-1a of the name, mixed with the seed.
        let h = stream.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
        let mut g = SplitMix64::new(seed ^ h.rotate_left(17));
        g.next_u64();
        g
    }

    /// The next 64 random bits.
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in (0, 1].
    fn next_open01(&mut self) -> f64 {
        ((self.next_u64() >> 11) as f64 + 1.0) / (1u64 << 53) as f64
    }

    /// A standard normal sample.
    pub(crate) fn normal(&mut self) -> f64 {
        if let Some(z) = self.spare.take() {
            return z;
        }
        let r = (-2.0 * self.next_open01().ln()).sqrt();
        let theta = std::f64::consts::TAU * self.next_open01();
        self.spare = Some(r * theta.sin());
        r * theta.cos()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deterministic_and_seed_dependent() {
        let a: Vec<u64> = (0..4)
            .map({
                let mut g = SplitMix64::new(7);
                move |_| g.next_u64()
            })
            .collect();
        let b: Vec<u64> = (0..4)
            .map({
                let mut g = SplitMix64::new(7);
                move |_| g.next_u64()
            })
            .collect();
        assert_eq!(a, b);
        assert_ne!(SplitMix64::for_stream(1, "x").next_u64(), SplitMix64::for_stream(2, "x").next_u64());
        assert_ne!(SplitMix64::for_stream(1, "x").next_u64(), SplitMix64::for_stream(1, "y").next_u64());
    }

    #[test]
    fn normal_has_unit_moments() {
        let mut g = SplitMix64::new(42);
        let n = 200_000;
        let xs: Vec<f64> = (0..n).map(|_| g.normal()).collect();
        let mean = xs.iter().sum::<f64>() / n as f64;
        let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / n as f64;
        assert!(mean.abs() < 0.01, "mean {mean}");
        assert!((var - 1.0).abs() < 0.02, "var {var}");
    }
}
