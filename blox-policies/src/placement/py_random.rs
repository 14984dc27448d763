//! CPython's `random` (Mersenne Twister MT19937, seeded as `random.seed(n)`
//! seeds it, with `choice`'s and `sample`'s draws), for artifacts whose
//! decisions come from it: the PAL artifact's random placements draw from
//! the interpreter's global generator. The algorithms are Matsumoto and
//! Nishimura's (1998) and CPython's `Lib/random.py` (3.11): `getrandbits`,
//! `_randbelow_with_getrandbits`, `sample`.

const N: usize = 624;
const M: usize = 397;

/// CPython's generator.
#[derive(Clone, Debug)]
pub struct PyRandom {
    mt: Box<[u32; N]>,
    i: usize,
}

impl PyRandom {
    /// `random.seed(seed)` for a non-negative integer: `init_by_array` of
    /// its 32-bit words, least significant first.
    pub fn new(seed: u64) -> Self {
        let mut key = vec![seed as u32];
        if seed >> 32 != 0 {
            key.push((seed >> 32) as u32);
        }
        let mut r = PyRandom {
            mt: Box::new([0; N]),
            i: N,
        };
        r.init_genrand(19_650_218);
        let (mut i, mut j) = (1usize, 0usize);
        for _ in 0..N.max(key.len()) {
            let prev = r.mt[i - 1] ^ (r.mt[i - 1] >> 30);
            r.mt[i] = (r.mt[i] ^ prev.wrapping_mul(1_664_525))
                .wrapping_add(key[j])
                .wrapping_add(j as u32);
            i += 1;
            j += 1;
            if i >= N {
                r.mt[0] = r.mt[N - 1];
                i = 1;
            }
            if j >= key.len() {
                j = 0;
            }
        }
        for _ in 0..N - 1 {
            let prev = r.mt[i - 1] ^ (r.mt[i - 1] >> 30);
            r.mt[i] = (r.mt[i] ^ prev.wrapping_mul(1_566_083_941)).wrapping_sub(i as u32);
            i += 1;
            if i >= N {
                r.mt[0] = r.mt[N - 1];
                i = 1;
            }
        }
        r.mt[0] = 0x8000_0000;
        r
    }

    fn init_genrand(&mut self, s: u32) {
        self.mt[0] = s;
        for i in 1..N {
            let prev = self.mt[i - 1] ^ (self.mt[i - 1] >> 30);
            self.mt[i] = 1_812_433_253u32.wrapping_mul(prev).wrapping_add(i as u32);
        }
        self.i = N;
    }

    fn next_u32(&mut self) -> u32 {
        if self.i >= N {
            for k in 0..N {
                let y = (self.mt[k] & 0x8000_0000) | (self.mt[(k + 1) % N] & 0x7fff_ffff);
                let mut v = self.mt[(k + M) % N] ^ (y >> 1);
                if y & 1 != 0 {
                    v ^= 0x9908_b0df;
                }
                self.mt[k] = v;
            }
            self.i = 0;
        }
        let mut y = self.mt[self.i];
        self.i += 1;
        y ^= y >> 11;
        y ^= (y << 7) & 0x9d2c_5680;
        y ^= (y << 15) & 0xefc6_0000;
        y ^ (y >> 18)
    }

    /// `getrandbits(k)` for `k` ≤ 32.
    pub fn getrandbits(&mut self, k: u32) -> u32 {
        match k {
            0 => 0,
            k => self.next_u32() >> (32 - k.min(32)),
        }
    }

    /// `_randbelow(n)`: uniform in 0..n by rejection (n ≥ 1, below 2³²).
    pub fn below(&mut self, n: u32) -> u32 {
        let k = 32 - n.leading_zeros();
        loop {
            let r = self.getrandbits(k);
            if r < n {
                return r;
            }
        }
    }

    /// `sample(population, k)`.
    pub fn sample<T: Copy>(&mut self, population: &[T], k: usize) -> Vec<T> {
        let n = population.len();
        assert!(k <= n, "sample larger than population");
        let mut setsize = 21usize;
        if k > 5 {
            let e = ((k * 3) as f64).ln() / 4f64.ln();
            setsize += 4usize.pow(e.ceil() as u32);
        }
        let mut out = Vec::with_capacity(k);
        if n <= setsize {
            let mut pool = population.to_vec();
            for i in 0..k {
                let j = self.below((n - i) as u32) as usize;
                out.push(pool[j]);
                pool[j] = pool[n - i - 1];
            }
        } else {
            let mut selected = std::collections::HashSet::new();
            for _ in 0..k {
                let mut j = self.below(n as u32) as usize;
                while selected.contains(&j) {
                    j = self.below(n as u32) as usize;
                }
                selected.insert(j);
                out.push(population[j]);
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Vectors from CPython 3.11 (`random.Random(42)`).
    #[test]
    fn it_draws_what_cpython_draws() {
        let mut r = PyRandom::new(42);
        let v: Vec<u32> = (0..3).map(|_| r.getrandbits(32)).collect();
        assert_eq!(v, [2746317213, 478163327, 107420369]);
        let mut r = PyRandom::new(42);
        let v: Vec<u32> = (0..5).map(|_| r.below(1403)).collect();
        assert_eq!(v, [1309, 228, 51, 563, 501]);
        let mut r = PyRandom::new(42);
        let pop: Vec<u32> = (0..300).collect();
        assert_eq!(r.sample(&pop[..64], 5), [14, 3, 35, 31, 28]);
        assert_eq!(r.sample(&pop[..10], 3), [2, 1, 8]);
        assert_eq!(r.sample(&pop, 7), [216, 16, 15, 47, 111, 119, 258]);
        // The PAL artifact's cluster state: 64 GPUs × 4 profile draws, then
        // a placement's sample.
        let mut r = PyRandom::new(42);
        for _ in 0..64 {
            for n in [1403, 1095, 1095, 880] {
                r.below(n);
            }
        }
        assert_eq!(r.sample(&pop[..64], 4), [61, 27, 51, 7]);
    }
}
