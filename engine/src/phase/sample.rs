//! Seeded randomness the phases share: a sample of prompts (adaptation),
//! a sweep's prompts and its bootstrap (feasibility) must be the same for
//! the same seed on every run and every machine.

/// A small, fast, seeded generator (SplitMix64): the bootstrap must give the
/// same interval for the same samples and seed.
pub struct SplitMix(pub u64);

impl SplitMix {
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}
