//! Go's `math/rand` generator, draw for draw.
//!
//! The FGD authors' simulator seeds Go's global generator (`rand.Seed(seed)`)
//! and draws from it to inflate the workload, shuffle the tasks and, for the
//! random policy, pick nodes and GPUs. Matching its placements task for task
//! needs the same numbers, so this is Go's algorithm: an additive lagged
//! Fibonacci generator (length 607, tap 273) whose seeded state is the output
//! of a Lehmer generator (multiplier 48,271 modulo 2³¹−1) XORed with fixed
//! constants (`cooked.rs`). The derived draws (`Int31n`, `Intn`,
//! `Int63n`, `Float64`, `Perm`, `Shuffle`) follow Go 1.19's definitions,
//! rejection loops included, so that each consumes the same number of steps.

use crate::cooked::COOKED;

const LEN: usize = 607;
const TAP: usize = 273;
const INT32_MAX: i64 = (1 << 31) - 1;

/// Go's `rand.Rand` over its default source.
#[derive(Clone)]
pub struct GoRand {
    tap: usize,
    feed: usize,
    vec: Box<[i64; LEN]>,
}

impl std::fmt::Debug for GoRand {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GoRand")
            .field("tap", &self.tap)
            .field("feed", &self.feed)
            .finish()
    }
}

/// One step of the seeding generator: x ← 48271·x mod (2³¹−1), computed as
/// Go does (Schrage's method in 32-bit arithmetic).
fn seed_step(x: i32) -> i32 {
    const A: i32 = 48_271;
    const Q: i32 = 44_488;
    const R: i32 = 3_399;
    let hi = x / Q;
    let lo = x % Q;
    let mut x = A.wrapping_mul(lo).wrapping_sub(R.wrapping_mul(hi));
    if x < 0 {
        x = x.wrapping_add(INT32_MAX as i32);
    }
    x
}

impl GoRand {
    /// The generator as `rand.Seed(seed)` leaves it.
    pub fn new(seed: i64) -> Self {
        let mut seed = seed % INT32_MAX;
        if seed < 0 {
            seed += INT32_MAX;
        }
        if seed == 0 {
            seed = 89_482_311;
        }
        let mut vec = Box::new([0i64; LEN]);
        let mut x = seed as i32;
        for i in -20i32..LEN as i32 {
            x = seed_step(x);
            if i >= 0 {
                let mut u = (x as i64) << 40;
                x = seed_step(x);
                u ^= (x as i64) << 20;
                x = seed_step(x);
                u ^= x as i64;
                u ^= COOKED[i as usize];
                vec[i as usize] = u;
            }
        }
        GoRand {
            tap: 0,
            feed: LEN - TAP,
            vec,
        }
    }

    /// Go's `Uint64` of the source: one step of the generator.
    fn step(&mut self) -> u64 {
        self.tap = if self.tap == 0 { LEN - 1 } else { self.tap - 1 };
        self.feed = if self.feed == 0 {
            LEN - 1
        } else {
            self.feed - 1
        };
        let x = self.vec[self.feed].wrapping_add(self.vec[self.tap]);
        self.vec[self.feed] = x;
        x as u64
    }

    /// `rand.Int63()`.
    pub fn int63(&mut self) -> i64 {
        (self.step() & ((1u64 << 63) - 1)) as i64
    }

    /// `rand.Int31()`.
    pub fn int31(&mut self) -> i32 {
        (self.int63() >> 32) as i32
    }

    /// `rand.Uint32()`.
    pub fn uint32(&mut self) -> u32 {
        (self.int63() >> 31) as u32
    }

    /// `rand.Int63n(n)`; `n` must be positive (Go panics otherwise).
    pub fn int63n(&mut self, n: i64) -> i64 {
        assert!(n > 0, "Int63n needs a positive bound");
        if n & (n - 1) == 0 {
            return self.int63() & (n - 1);
        }
        let max = ((1u64 << 63) - 1 - (1u64 << 63) % n as u64) as i64;
        let mut v = self.int63();
        while v > max {
            v = self.int63();
        }
        v % n
    }

    /// `rand.Int31n(n)`; `n` must be positive.
    pub fn int31n(&mut self, n: i32) -> i32 {
        assert!(n > 0, "Int31n needs a positive bound");
        if n & (n - 1) == 0 {
            return self.int31() & (n - 1);
        }
        let max = ((1u32 << 31) - 1 - (1u32 << 31) % n as u32) as i32;
        let mut v = self.int31();
        while v > max {
            v = self.int31();
        }
        v % n
    }

    /// Go's unexported `int31n` (Lemire's method), which `Shuffle` uses.
    fn int31n_lemire(&mut self, n: i32) -> i32 {
        let mut v = self.uint32();
        let mut prod = v as u64 * n as u64;
        let mut low = prod as u32;
        if low < n as u32 {
            let thresh = (n as u32).wrapping_neg() % n as u32;
            while low < thresh {
                v = self.uint32();
                prod = v as u64 * n as u64;
                low = prod as u32;
            }
        }
        (prod >> 32) as i32
    }

    /// `rand.Intn(n)`; `n` must be positive.
    pub fn intn(&mut self, n: usize) -> usize {
        assert!(n > 0, "Intn needs a positive bound");
        if n <= i32::MAX as usize {
            self.int31n(n as i32) as usize
        } else {
            self.int63n(n as i64) as usize
        }
    }

    /// `rand.Float64()`.
    pub fn float64(&mut self) -> f64 {
        loop {
            let f = self.int63() as f64 / (1u64 << 63) as f64;
            if f != 1.0 {
                return f;
            }
        }
    }

    /// `rand.Perm(n)`.
    pub fn perm(&mut self, n: usize) -> Vec<usize> {
        let mut m = vec![0usize; n];
        for i in 0..n {
            let j = self.intn(i + 1);
            m[i] = m[j];
            m[j] = i;
        }
        m
    }

    /// `rand.Shuffle(len, swap)` over a slice.
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        let n = items.len();
        let mut i = n.saturating_sub(1);
        while i > (i32::MAX as usize) - 1 {
            let j = self.int63n(i as i64 + 1) as usize;
            items.swap(i, j);
            i -= 1;
        }
        while i > 0 {
            let j = self.int31n_lemire(i as i32 + 1) as usize;
            items.swap(i, j);
            i -= 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Expected values printed by Go 1.19's math/rand for the same calls
    // (`rand.Seed(s)`, then the global functions named, in this order).
    #[test]
    fn matches_go_draw_for_draw() {
        let mut r = GoRand::new(1);
        assert_eq!(r.int63(), 5_577_006_791_947_779_410);
        assert_eq!(r.int63(), 8_674_665_223_082_153_551);
        assert_eq!(GoRand::new(42).int63(), 3_440_579_354_231_278_675);

        let mut r = GoRand::new(43);
        assert_eq!(r.intn(10), 1);
        assert_eq!(r.intn(1000), 913);
        assert_eq!(r.intn(8152), 7800);
        assert_eq!(r.intn(1 << 20), 283_491);
        assert_eq!(r.float64(), 0.362133901163269);

        let mut r = GoRand::new(44);
        assert_eq!(r.perm(12), [9, 3, 6, 10, 1, 2, 5, 4, 11, 7, 0, 8]);
        let mut s: Vec<u32> = (0..20).collect();
        r.shuffle(&mut s);
        assert_eq!(
            s,
            [8, 3, 13, 14, 10, 5, 15, 17, 2, 4, 11, 0, 16, 9, 6, 12, 18, 7, 19, 1]
        );

        let mut r = GoRand::new(-5);
        assert_eq!(r.int31n(7), 2);
        assert_eq!(r.int63n(1_000_000_007), 621_809_738);
        assert_eq!(r.uint32(), 87_621_835);
        // Seed 0 stands for Go's fixed replacement seed.
        assert_eq!(GoRand::new(0).int63(), 8_717_895_732_742_165_505);
    }
}
