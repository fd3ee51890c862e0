//! Property tests of `Chunked` against a plain Vec model: random pushes, extends, sets, truncates, front drops, searches and ranges, with the byte count checked after each.
use super::*;

pub(crate) struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next() % n }
    }
}

/// The structural invariants and the byte count.
pub(crate) fn invariants<T: Pack + PartialEq + std::fmt::Debug>(c: &Chunked<T>, model: &[T]) {
    let recount: u64 = c.chunks.iter().map(Chunk::bytes).sum();
    assert_eq!(c.bytes(), recount, "bytes are the chunks' bytes summed");
    assert_eq!(c.len(), model.len());
    assert_eq!(c.chunks.iter().map(Chunk::len).sum::<usize>(), c.len());
    let n = c.chunks.len();
    for (i, chunk) in c.chunks.iter().enumerate() {
        assert!(chunk.len() > 0, "chunk {i} of {n} is empty");
        assert!(chunk.len() <= CHUNK);
        if i > 0 && i + 1 < n {
            assert_eq!(chunk.len(), CHUNK, "middle chunk {i} of {n} is full");
        }
    }
    if n == 1 && c.chunks[0].len() > 0 {
        // the only chunk: ok either way
    }
    assert_eq!(c.iter().collect::<Vec<_>>(), model);
    assert_eq!(c.last(), model.last().copied());
}

fn check_reads(c: &Chunked<u64>, model: &[u64], sorted: bool, rng: &mut Rng) {
    if sorted {
        assert!(model.windows(2).all(|w| w[0] < w[1]), "the model ascends");
    }
    for _ in 0..8 {
        let len = model.len() as u64;
        let a = rng.below(len + 3) as usize;
        let b = rng.below(len + 3) as usize;
        let expect: Vec<u64> = {
            let end = b.min(model.len());
            let start = a.min(end);
            model[start..end].to_vec()
        };
        assert_eq!(
            c.range(a, b).collect::<Vec<_>>(),
            expect,
            "range {a}..{b} of {len}"
        );
        // A partly consumed range, then dropped.
        let _ = c.range(a, b).take(3).count();
        let i = rng.below(len + 2) as usize;
        assert_eq!(c.get(i), model.get(i).copied(), "get {i}");
        if sorted && !model.is_empty() {
            let t = match rng.below(3) {
                0 => model[rng.below(len) as usize],
                1 => model[rng.below(len) as usize].wrapping_add(1),
                _ => rng.next(),
            };
            assert_eq!(
                c.partition_point(|&x| x < t),
                model.partition_point(|&x| x < t),
                "partition_point < {t}"
            );
            assert_eq!(
                c.partition_point(|&x| x <= t),
                model.partition_point(|&x| x <= t)
            );
        }
    }
}

fn run(seed: u64, sorted: bool, steps: usize) {
    let mut rng = Rng(seed);
    let mut c: Chunked<u64> = Chunked::default();
    let mut model: Vec<u64> = Vec::new();
    let mut next = rng.below(1 << 40);
    let produce = |rng: &mut Rng, next: &mut u64| -> u64 {
        if sorted {
            *next += 1 + match rng.below(4) {
                0 => 0,
                1 => rng.below(64),
                2 => rng.below(1 << 16),
                _ => 256,
            };
            *next
        } else {
            match rng.below(6) {
                0 => rng.next(),
                1 => u64::MAX - rng.below(10),
                _ => {
                    *next = next.wrapping_add(rng.below(1000));
                    *next
                }
            }
        }
    };
    for _ in 0..steps {
        match rng.below(20) {
            0..=6 => {
                let v = produce(&mut rng, &mut next);
                c.push(v);
                model.push(v);
            }
            7..=9 => {
                let k = match rng.below(3) {
                    0 => rng.below(10),
                    1 => rng.below(2 * CHUNK as u64 + 10),
                    _ => CHUNK as u64,
                };
                let vs: Vec<u64> = (0..k).map(|_| produce(&mut rng, &mut next)).collect();
                c.extend(vs.clone());
                model.extend(vs);
            }
            10..=12 if !model.is_empty() => {
                let i = rng.below(model.len() as u64) as usize;
                let v = if sorted {
                    // keep it sorted: a value between the neighbours
                    let lo = if i == 0 { 0 } else { model[i - 1] + 1 };
                    let hi = model.get(i + 1).map_or(model[i] + 1000, |&h| h - 1);
                    if lo > hi {
                        continue;
                    }
                    lo + rng.below(hi - lo + 1)
                } else {
                    match rng.below(3) {
                        0 => rng.next(),
                        1 => model[i].wrapping_add(rng.below(16)),
                        _ => u64::MAX,
                    }
                };
                assert!(c.set(i, v));
                model[i] = v;
                if sorted && i + 1 == model.len() {
                    next = v;
                }
            }
            13 => {
                assert!(!c.set(model.len() + rng.below(3) as usize, 5));
            }
            14 | 15 => {
                let to = match rng.below(3) {
                    0 => model.len().saturating_sub(rng.below(5) as usize),
                    1 => model
                        .len()
                        .saturating_sub(rng.below(3 * CHUNK as u64) as usize),
                    _ => rng.below(model.len() as u64 + 5) as usize,
                };
                c.truncate(to);
                model.truncate(to.min(model.len()));
                if sorted {
                    next = model.last().copied().unwrap_or(next);
                }
            }
            16 | 17 => {
                let k = match rng.below(3) {
                    0 => rng.below(5) as usize,
                    1 => rng.below(2 * CHUNK as u64) as usize,
                    _ => rng.below(model.len() as u64 + 5) as usize,
                };
                c.drop_front(k);
                model.drain(..k.min(model.len()));
            }
            _ => {}
        }
        invariants(&c, &model);
        check_reads(&c, &model, sorted, &mut rng);
    }
}

#[test]
fn chunked_u64_matches_a_vec_sorted() {
    for seed in 1..=seeds() {
        run(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15), true, 600);
    }
}

#[test]
fn chunked_u64_matches_a_vec_wild() {
    for seed in 1..=seeds() {
        run(seed.wrapping_mul(0xD1B5_4A32_D192_ED03), false, 600);
    }
}

fn seeds() -> u64 {
    std::env::var("PROP_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(12)
}
