//! The one random number generator of the tests: seeded from
//! `TODOD_TEST_SEED` when it is set (a value that is not a number fails the
//! test), else from the clock, and the seed is printed, so that any random
//! test can be replayed exactly.
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

pub struct TestRng {
    pub seed: u64,
    rng: StdRng,
}

impl TestRng {
    /// A generator for the test named `test`; prints how to replay it.
    pub fn new(test: &str) -> TestRng {
        let seed = match std::env::var("TODOD_TEST_SEED") {
            // A seed that does not parse is an error: falling back to the
            // clock would run some other test than the one asked for.
            Ok(text) => text.trim().parse::<u64>().unwrap_or_else(|e| {
                panic!("TODOD_TEST_SEED={text:?} is not a seed (a number 0 to 2^64-1): {e}")
            }),
            Err(std::env::VarError::NotPresent) => std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos() as u64)
                .unwrap_or(1),
            Err(e) => panic!("TODOD_TEST_SEED: {e}"),
        };
        println!("{test}: seed {seed} (replay with TODOD_TEST_SEED={seed})");
        TestRng {
            seed,
            rng: StdRng::seed_from_u64(seed),
        }
    }

    /// A number in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.rng.random_range(0..n.max(1))
    }

    pub fn chance(&mut self, p: f64) -> bool {
        self.rng.random_bool(p.clamp(0.0, 1.0))
    }

    /// What to add to an assertion message so a failure says how to replay it.
    pub fn replay(&self) -> String {
        format!("replay with TODOD_TEST_SEED={}", self.seed)
    }
}
