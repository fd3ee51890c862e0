//! Property tests of packed extents and `StreamData` against a plain list of extents: locates, relocations, drops and every query.
use std::collections::HashMap;

use super::*;
use crate::stream::chunked::prop::{Rng, invariants};

fn located(rng: &mut Rng, near: Located) -> Located {
    match rng.below(8) {
        0 => Located {
            start: rng.next(),
            segment: rng.next() as u32,
            pos: rng.next() as u32,
        },
        1 => Located {
            start: u64::MAX - rng.below(5),
            segment: u32::MAX,
            pos: u32::MAX,
        },
        2 => Located {
            start: near.start,
            segment: 0,
            pos: 0,
        },
        3 => Located {
            start: near.start.wrapping_add(rng.below(64)),
            segment: near.segment,
            pos: near.pos.wrapping_add(rng.below(4096) as u32),
        },
        4 => Located {
            start: near.start.wrapping_sub(rng.below(64)),
            segment: u32::MAX - rng.below(2) as u32,
            pos: near.pos,
        },
        _ => Located {
            start: near.start.wrapping_add(1 + rng.below(300)),
            segment: near.segment.wrapping_add((rng.below(50) == 0) as u32),
            pos: near.pos.wrapping_add(rng.below(20_000) as u32),
        },
    }
}

#[test]
fn chunked_located_matches_a_vec() {
    for seed in 1..=20u64 {
        let mut rng = Rng(seed.wrapping_mul(0x2545_F491_4F6C_DD1D));
        let mut c: Chunked<Located> = Chunked::default();
        let mut model: Vec<Located> = Vec::new();
        let mut last = Located {
            start: 0,
            segment: 1,
            pos: 0,
        };
        for _ in 0..500 {
            match rng.below(10) {
                0..=3 => {
                    let k = match rng.below(3) {
                        0 => 1,
                        1 => rng.below(40),
                        _ => rng.below(1500),
                    };
                    for _ in 0..k {
                        last = located(&mut rng, last);
                        c.push(last);
                        model.push(last);
                    }
                }
                4..=6 if !model.is_empty() => {
                    let i = rng.below(model.len() as u64) as usize;
                    let v = located(&mut rng, model[i]);
                    assert!(c.set(i, v));
                    model[i] = v;
                }
                7 => {
                    let to = rng.below(model.len() as u64 + 2) as usize;
                    c.truncate(to);
                    model.truncate(to);
                }
                8 => {
                    let k = rng.below(model.len() as u64 / 2 + 2) as usize;
                    c.drop_front(k);
                    model.drain(..k.min(model.len()));
                }
                _ => {}
            }
            invariants(&c, &model);
            for _ in 0..4 {
                let a = rng.below(model.len() as u64 + 2) as usize;
                let b = rng.below(model.len() as u64 + 2) as usize;
                let end = b.min(model.len());
                let start = a.min(end);
                assert_eq!(c.range(a, b).collect::<Vec<_>>(), model[start..end]);
            }
        }
    }
}

/// A plain list of whole extents, as the index answered before packing.
#[derive(Default)]
struct Model {
    extents: Vec<Extent>,
}

impl Model {
    fn extents_in(&self, start: u64, end: u64) -> Vec<Extent> {
        let first = self.extents.partition_point(|e| e.end() <= start);
        let last = self.extents.partition_point(|e| e.start < end);
        self.extents[first..last.max(first)].to_vec()
    }
}

#[test]
fn stream_data_matches_a_list_of_extents() {
    for seed in 1..=30u64 {
        let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
        let mut d = StreamData::default();
        let mut m = Model::default();
        let (mut segment, mut pos) = (1u64, 0u64);
        for _ in 0..400 {
            match rng.below(10) {
                0..=4 => {
                    for _ in 0..rng.below(700) {
                        // No empty extents: `publish` locates only appends with data.
                        let len = match rng.below(4) {
                            0 => 1,
                            1 => 256,
                            _ => 1 + rng.below(5000),
                        };
                        let start = d.tail();
                        d.push(vec![b'x'; len as usize].into());
                        pos += 100 + rng.below(2000);
                        if pos > 1 << 26 || rng.below(300) == 0 {
                            segment += 1;
                            pos = 0;
                        }
                        d.locate(start, len, segment, pos);
                        while d.evict_front().is_some() {}
                        m.extents.push(Extent {
                            start,
                            len,
                            segment,
                            pos,
                        });
                    }
                }
                5 | 6 if !m.extents.is_empty() => {
                    // The cleaner relocating a run of one segment.
                    let victim = m.extents[rng.below(m.extents.len() as u64) as usize].segment;
                    let to = segment + 1 + rng.below(3);
                    let mut at = rng.below(1 << 20);
                    for e in m.extents.iter_mut().filter(|e| e.segment == victim) {
                        e.segment = to;
                        e.pos = at;
                        at += e.len + 64;
                        assert!(d.relocate(e.start, to, e.pos));
                    }
                }
                7 if !m.extents.is_empty() => {
                    let cut = rng.below(d.tail() + 2);
                    d.drop_before(cut);
                    m.extents.retain(|e| e.end() > cut);
                }
                _ => {}
            }
            // extents_in at random ranges.
            let tail = d.tail();
            for _ in 0..6 {
                let a = rng.below(tail + 3);
                let b = a + rng.below(tail.saturating_sub(a) + 3);
                assert_eq!(
                    d.extents_in(a, b),
                    m.extents_in(a, b),
                    "extents_in {a}..{b}"
                );
            }
            if let Some(e) = m
                .extents
                .get(rng.below(m.extents.len() as u64 + 1) as usize)
            {
                let want: Vec<Extent> = m
                    .extents
                    .iter()
                    .filter(|x| x.segment == e.segment)
                    .copied()
                    .collect();
                assert_eq!(d.extents_in_segment(e.segment).collect::<Vec<_>>(), want);
            }
            let n = d.extent_count();
            assert_eq!(n, m.extents.len(), "extent count");
            let a = rng.below(n as u64 + 3) as usize;
            let b = rng.below(n as u64 + 3) as usize;
            let mut live = HashMap::new();
            d.count_live_range(a..b, &mut live);
            let mut want: HashMap<u64, u64> = HashMap::new();
            let end = b.min(n);
            for e in &m.extents[a.min(end)..end] {
                *want.entry(e.segment).or_default() += e.len;
            }
            assert_eq!(live, want, "count_live_range {a}..{b} of {n}");
        }
    }
}
