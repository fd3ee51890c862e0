//! Property tests of `Column` (bitpack) against a plain Vec model: random packs, gets, decodes and sets of every value shape, edges included.
use super::*;

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next() % n }
    }
}

/// A value of one of several shapes, around `near`.
fn value(rng: &mut Rng, near: u64) -> u64 {
    match rng.below(10) {
        0 => rng.next(),
        1 => u64::MAX - rng.below(1000),
        2 => rng.below(1000),
        3 => near.wrapping_add(rng.below(64)),
        4 => near.wrapping_sub(rng.below(64)),
        5 => near,
        6 => (1u64 << 63).wrapping_add(rng.below(3)).wrapping_sub(1),
        7 => rng.next() >> rng.below(64),
        8 => u64::from(u32::MAX) - rng.below(3),
        _ => near.wrapping_add(rng.below(1 << 20)),
    }
}

fn values(rng: &mut Rng, len: usize) -> Vec<u64> {
    let shape = rng.below(8);
    let mut v = Vec::with_capacity(len);
    let base = value(rng, rng.0);
    let step = rng.next() >> rng.below(64);
    let mut x = base;
    for i in 0..len {
        let next = match shape {
            0 => x.wrapping_add(step),                 // a line (may wrap)
            1 => x.wrapping_sub(step >> 1),            // descending
            2 => x.wrapping_add(rng.below(300)),       // rising noise
            3 => value(rng, x),                        // wild
            4 => base,                                 // constant
            5 => u64::MAX - (i as u64) * rng.below(4), // near the top
            6 => rng.below(u64::from(u32::MAX) + 1),   // u32 range
            _ => {
                if i % 2 == 0 {
                    0
                } else {
                    rng.next()
                }
            }
        };
        v.push(next);
        x = next;
    }
    v
}

fn check(col: &Column, model: &[u64], rng: &mut Rng) {
    assert_eq!(col.len(), model.len());
    for (i, &m) in model.iter().enumerate() {
        assert_eq!(col.get(i), m, "get {i}");
    }
    for _ in 0..4 {
        let a = rng.below(model.len() as u64 + 1) as usize;
        let b = a + rng.below((model.len() - a) as u64 + 1) as usize;
        let mut out = vec![1, 2];
        col.decode_into(a, b, &mut out);
        assert_eq!(&out[2..], &model[a..b], "decode {a}..{b}");
    }
    // bytes agree with a fresh pack only in size class; check heads consistency
    assert_eq!(col.heads.len(), model.len().div_ceil(BLOCK));
}

#[test]
fn column_matches_a_vec_under_random_sets() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    let mut packed_runs = 0;
    for round in 0..400 {
        let len = match round % 4 {
            0 => 1 + rng.below(8) as usize,
            1 => 1 + rng.below(300) as usize,
            2 => 1024,
            _ => 1 + rng.below(1100) as usize,
        };
        let mut model = values(&mut rng, len);
        let Some(mut col) = Column::pack(&model) else {
            continue;
        };
        packed_runs += 1;
        check(&col, &model, &mut rng);
        for _ in 0..200 {
            let i = rng.below(len as u64) as usize;
            let near = if rng.below(2) == 0 {
                model[i]
            } else {
                model[(i + 1) % len]
            };
            let v = value(&mut rng, near);
            let before = col.clone();
            if col.set(i, v) {
                model[i] = v;
                assert_eq!(col.get(i), v);
            } else {
                assert_eq!(col, before, "a refused set changes nothing");
                let mut with = model.clone();
                with[i] = v;
                assert!(Column::pack(&with).is_none(), "refused though it packs");
            }
        }
        check(&col, &model, &mut rng);
    }
    assert!(packed_runs > 300, "{packed_runs}");
}

/// Arithmetic edges: step extremes, width 64, wrapping lines.
#[test]
fn column_edges() {
    let cases: Vec<Vec<u64>> = vec![
        vec![0, u64::MAX],
        vec![u64::MAX, 0],
        vec![0, u64::MAX, 0],
        vec![u64::MAX, 0, u64::MAX - 1],
        vec![1 << 63, 0, 1 << 63],
        vec![(1 << 63) + 10, 0, (1 << 63) + 10],
        vec![0, 1 << 63, u64::MAX],
        (0..256).map(|i| i * (u64::MAX / 255)).collect(),
        (0..256).rev().map(|i| i * (u64::MAX / 255)).collect(),
        (0..257)
            .map(|i: u64| i.wrapping_mul(0x8000_0000_0000_0001))
            .collect(),
        (0..1024)
            .map(|i| if i % 2 == 0 { 0 } else { u64::MAX >> 1 })
            .collect(),
    ];
    for c in cases {
        match Column::pack(&c) {
            Some(col) => {
                let back: Vec<u64> = (0..c.len()).map(|i| col.get(i)).collect();
                assert_eq!(back, c);
                let mut out = Vec::new();
                col.decode_into(0, c.len(), &mut out);
                assert_eq!(out, c);
            }
            None => eprintln!("does not pack: {:?}", &c[..c.len().min(4)]),
        }
    }
}
