//! A small seeded mutator for generated-input tests (no crates): an xorshift64* PRNG, byte-level
//! mutations of real inputs (flips, inserts, deletes, splices, interesting tokens), a structural
//! JSON mutator, and a case runner that prints its seed and reports the failing case.
//!
//! `BATON_FUZZ_SEED=<n>` reproduces a run; `BATON_FUZZ_CASES=<n>` overrides the case count.
//! Include with `#[path = "support/fuzz.rs"] mod fuzz;`.
#![allow(dead_code)]

use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Map, Number, Value};

/// xorshift64* (Vigna): tiny, fast, good enough to drive mutations.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator for `seed` (0 is remapped: xorshift has no zero state).
    pub fn new(seed: u64) -> Self {
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15 | 1)
    }
    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// Uniform in `0..n` (`0` when `n == 0`).
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next_u64() % n as u64) as usize
        }
    }
    /// True with probability `1/n`.
    pub fn one_in(&mut self, n: usize) -> bool {
        self.below(n) == 0
    }
    /// A random element.
    pub fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
    /// `n` random bytes.
    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next_u64() as u8).collect()
    }
}

/// Fragments that tend to break parsers: JSON and YAML syntax, template delimiters, huge and
/// negative numbers, control and multi-byte characters.
pub const TOKENS: &[&str] = &[
    "null",
    "{}",
    "[]",
    "\"",
    "\\",
    "\\u0000",
    "\\ud800",
    "\0",
    "\n",
    "\r\n",
    "\t",
    ",",
    ":",
    "{",
    "}",
    "[",
    "]",
    "0",
    "-1",
    "1e999",
    "-0",
    "NaN",
    "9999999999999999999999999",
    "300000000000",
    "18446744073709551616",
    "true",
    "false",
    "{{",
    "}}",
    "{%",
    "%}",
    "{#",
    "---",
    "- ",
    ": ",
    "&a",
    "*a",
    "!!",
    "'",
    "#",
    "|",
    ">",
    "~",
    "\u{202e}",
    "\u{1b}[31m",
    "🦀",
    "é",
    "\u{feff}",
    "%",
    "type",
    "result",
    "assistant",
    "session_id",
    "usage",
    "message",
    "content",
    "errors",
];

/// Apply 1–4 random mutations to `input`; `corpus` supplies splice material.
pub fn mutate(rng: &mut Rng, input: &[u8], corpus: &[Vec<u8>]) -> Vec<u8> {
    let mut v = input.to_vec();
    for _ in 0..1 + rng.below(4) {
        let len = v.len();
        match rng.below(9) {
            0 if len > 0 => {
                let i = rng.below(len);
                v[i] ^= 1 << rng.below(8);
            }
            1 => {
                let i = rng.below(len + 1);
                v.insert(i, rng.next_u64() as u8);
            }
            2 if len > 0 => {
                let i = rng.below(len);
                let n = 1 + rng.below((len - i).min(64));
                v.drain(i..i + n);
            }
            3 if len > 0 => {
                let i = rng.below(len);
                let n = 1 + rng.below((len - i).min(256));
                let chunk = v[i..i + n].to_vec();
                let at = rng.below(len + 1);
                v.splice(at..at, chunk);
            }
            4 | 5 => {
                let t = rng.pick(TOKENS).as_bytes().to_vec();
                let at = rng.below(len + 1);
                v.splice(at..at, t);
            }
            6 if len > 0 => v.truncate(rng.below(len)),
            7 if !corpus.is_empty() => {
                let other = rng.pick(corpus);
                if !other.is_empty() {
                    let i = rng.below(other.len());
                    let n = 1 + rng.below((other.len() - i).min(512));
                    let at = rng.below(len + 1);
                    v.splice(at..at, other[i..i + n].iter().copied());
                }
            }
            _ => {
                let n = rng.below(8);
                let at = rng.below(len + 1);
                let b = rng.bytes(n);
                v.splice(at..at, b);
            }
        }
    }
    v
}

/// [`mutate`] on text, read back lossily (parsers take `&str`).
pub fn mutate_str(rng: &mut Rng, input: &str, corpus: &[Vec<u8>]) -> String {
    String::from_utf8_lossy(&mutate(rng, input.as_bytes(), corpus)).into_owned()
}

/// A random JSON scalar, biased toward edge cases.
pub fn scalar(rng: &mut Rng) -> Value {
    match rng.below(10) {
        0 => Value::Null,
        1 => Value::Bool(rng.one_in(2)),
        2 => Value::Number(Number::from(rng.next_u64())),
        3 => Value::Number(Number::from(-(rng.below(1 << 20) as i64))),
        4 => Number::from_f64(f64::from_bits(rng.next_u64()))
            .map(Value::Number)
            .unwrap_or(Value::Null),
        5 => Value::String(String::new()),
        6 => Value::String(rng.pick(TOKENS).to_string()),
        7 => Value::Array(vec![]),
        8 => Value::Object(Map::new()),
        _ => Value::String("x".repeat(rng.below(300))),
    }
}

/// Replace, drop or retype random members of a JSON document (structure-aware mutation).
pub fn mutate_json(rng: &mut Rng, v: &mut Value, depth: usize) {
    match v {
        Value::Object(map) if !map.is_empty() => {
            let keys: Vec<String> = map.keys().cloned().collect();
            for _ in 0..1 + rng.below(2) {
                let k = rng.pick(&keys).clone();
                match rng.below(5) {
                    0 => {
                        map.remove(&k);
                    }
                    1 => {
                        map.insert(k, scalar(rng));
                    }
                    _ if depth < 12 => {
                        if let Some(child) = map.get_mut(&k) {
                            mutate_json(rng, child, depth + 1);
                        }
                    }
                    _ => {}
                }
            }
        }
        Value::Array(items) if !items.is_empty() => {
            let i = rng.below(items.len());
            match rng.below(4) {
                0 => {
                    items.remove(i);
                }
                1 => {
                    let c = items[i].clone();
                    items.push(c);
                }
                _ if depth < 12 => mutate_json(rng, &mut items[i], depth + 1),
                _ => {}
            }
        }
        _ => *v = scalar(rng),
    }
}

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok()?.trim().parse().ok()
}

/// Run `cases` generated cases of `name` (overridden by `BATON_FUZZ_CASES`) from one seed
/// (`BATON_FUZZ_SEED`, else the clock). The seed is printed first; a panicking case is reported
/// with its index and the seed, then re-raised.
pub fn run(name: &str, cases: usize, mut case: impl FnMut(&mut Rng, usize)) {
    let seed = env_u64("BATON_FUZZ_SEED").unwrap_or_else(|| {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1)
    });
    let cases = env_u64("BATON_FUZZ_CASES").map_or(cases, |n| n as usize);
    println!("fuzz {name}: seed={seed} cases={cases} (reproduce with BATON_FUZZ_SEED={seed})");
    let mut rng = Rng::new(seed);
    let started = Instant::now();
    for i in 0..cases {
        if let Err(p) = catch_unwind(AssertUnwindSafe(|| case(&mut rng, i))) {
            eprintln!("fuzz {name}: case {i} failed; reproduce with BATON_FUZZ_SEED={seed}");
            resume_unwind(p);
        }
    }
    println!("fuzz {name}: {cases} cases in {:?}", started.elapsed());
}

/// Read every file under `dir` (non-recursive) whose name passes `keep`.
pub fn corpus_files(dir: &str, keep: impl Fn(&str) -> bool) -> Vec<(String, Vec<u8>)> {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(&root) else {
        return out;
    };
    let mut paths: Vec<_> = entries.flatten().map(|e| e.path()).collect();
    paths.sort();
    for p in paths {
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        if p.is_file() && keep(&name) {
            if let Ok(b) = std::fs::read(&p) {
                out.push((name, b));
            }
        }
    }
    out
}
