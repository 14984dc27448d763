//! The fuzz targets' inputs on stable Rust: every file under
//! `fuzz/regressions/<target>/` (seeds, and the inputs `cargo fuzz` found
//! that once failed) runs through the target's body (`blox_harness::fuzzing`), and
//! so do a few hundred seeded mutations of each. None may panic.

use std::path::Path;

type Body = fn(&[u8]);

const TARGETS: [(&str, Body); 4] = [
    ("config", blox_harness::fuzzing::config),
    ("workload", blox_harness::fuzzing::workload),
    ("jobs_file", blox_harness::fuzzing::jobs_file),
    ("rpc", blox_harness::fuzzing::rpc),
];

/// xorshift64: the same mutations on every run.
fn next(s: &mut u64) -> u64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    *s
}

fn mutate(seed: &[u8], s: &mut u64) -> Vec<u8> {
    let mut v = seed.to_vec();
    for _ in 0..1 + next(s) % 4 {
        let at = |s: &mut u64, len: usize| (next(s) % (len as u64 + 1)) as usize;
        match next(s) % 5 {
            0 if !v.is_empty() => {
                let i = at(s, v.len() - 1);
                v[i] = next(s) as u8;
            }
            1 => {
                let i = at(s, v.len());
                v.insert(i, next(s) as u8);
            }
            2 if !v.is_empty() => {
                let i = at(s, v.len() - 1);
                v.remove(i);
            }
            3 => {
                let i = at(s, v.len());
                v.truncate(i);
            }
            _ => {
                // A run of one interesting byte (digits, separators, 0xff).
                const BYTES: &[u8] = b"9,.\n=-\xff\x00e";
                let b = BYTES[(next(s) % BYTES.len() as u64) as usize];
                let i = at(s, v.len());
                for _ in 0..next(s) % 8 {
                    v.insert(i, b);
                }
            }
        }
    }
    v
}

#[test]
fn every_found_input_and_its_mutations_are_handled_without_a_panic() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/regressions");
    for (name, body) in TARGETS {
        let dir = root.join(name);
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .map(|e| e.unwrap().path())
            .collect();
        files.sort();
        assert!(!files.is_empty(), "{} has no inputs", dir.display());
        let mut s = 0x9e37_79b9_7f4a_7c15u64;
        for f in &files {
            let seed = std::fs::read(f).unwrap();
            body(&seed);
            for _ in 0..200 {
                body(&mutate(&seed, &mut s));
            }
        }
        body(&[]);
    }
    blox_harness::fuzzing::remove_scratch();
}
