//! Frame-of-reference bit packing for the per-stream indexes' full chunks
//! (`chunked::Pack`; issue 4 bounds the index in memory, and the index is
//! what bounds how many appends a shard retains). The index's columns
//! (message ends, extent starts, segment numbers, file positions) rise
//! nearly along a line over a few hundred entries: appends of like sizes,
//! written one segment after another. A block stores its values as
//! residuals from the line through its first and last value, each in the
//! fewest bits that hold the block's spread of residuals: none for appends
//! of one size, a few for varied ones, at most as many as the values'
//! spread. An entry stays random-access: a multiply, a shift and a mask.

/// Values per block: the line is refitted this often.
pub const BLOCK: usize = 256;

/// One block's line and residual width.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Head {
    /// The block's first value.
    first: u64,
    /// The line's rise per entry.
    step: i64,
    /// The lowest residual; residuals are stored as `residual - low`.
    low: i64,
    /// Where the block's residuals begin in `Column::bits`, in words.
    word: u32,
    /// Bits per stored residual, 0..=64.
    width: u8,
}

/// Up to `u32::MAX` values, packed in blocks of `BLOCK`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Column {
    len: u32,
    heads: Box<[Head]>,
    bits: Box<[u64]>,
}

impl Column {
    /// `values` packed; None when a block's residuals spread past 64 bits
    /// (values that wander over more than half the u64 range).
    pub fn pack(values: &[u64]) -> Option<Column> {
        let len = u32::try_from(values.len()).ok()?;
        let mut bits = Vec::new();
        let heads = values
            .chunks(BLOCK)
            .map(|block| fit(block, &mut bits))
            .collect::<Option<Box<[Head]>>>()?;
        Some(Column {
            len,
            heads,
            bits: bits.into(),
        })
    }

    pub fn len(&self) -> usize {
        self.len as usize
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn get(&self, index: usize) -> u64 {
        assert!(index < self.len(), "index {index} within the column");
        let head = &self.heads[index / BLOCK];
        let at = index % BLOCK;
        let stored = read(&self.bits[head.word as usize..], at, head.width);
        let offset = head.step.wrapping_mul(at as i64).wrapping_add(head.low);
        // True value = first + step·at + low + stored; it fits u64, so the
        // same sum taken modulo 2^64 is exact.
        head.first.wrapping_add(offset as u64).wrapping_add(stored)
    }

    /// Entries `from..to` appended to `out`, decoded a block at a time
    /// (what sequential scans use: a few adds an entry, no multiply).
    pub fn decode_into(&self, from: usize, to: usize, out: &mut Vec<u64>) {
        assert!(
            from <= to && to <= self.len(),
            "{from}..{to} within the column"
        );
        let mut index = from;
        while index < to {
            let head = &self.heads[index / BLOCK];
            let at = index % BLOCK;
            let until = (to - index).min(BLOCK - at);
            let bits = &self.bits[head.word as usize..];
            let line = head.step.wrapping_mul(at as i64).wrapping_add(head.low);
            let mut value = head.first.wrapping_add(line as u64);
            for at in at..at + until {
                out.push(value.wrapping_add(read(bits, at, head.width)));
                value = value.wrapping_add(head.step as u64);
            }
            index += until;
        }
    }

    /// Replaces entry `index`: in place when its residual fits the block's
    /// width, else by refitting its block. A block refitted for a value
    /// off its line is made *wide* (every value in 64 bits), so the rest of
    /// a run of sets (the cleaner relocating a stream's appends: new
    /// positions far from the old line) lands in place; setting a wide
    /// block's last entry tightens it again. False (nothing changed) when
    /// the new value cannot be packed either way.
    pub fn set(&mut self, index: usize, value: u64) -> bool {
        assert!(index < self.len(), "index {index} within the column");
        let (block, at) = (index / BLOCK, index % BLOCK);
        let head = self.heads[block];
        let last_of_block = at + 1 == self.block_len(block);
        let stored = residual(&head, at, value) - i128::from(head.low);
        if stored >= 0 && stored <= i128::from(mask(head.width)) {
            let bits = &mut self.bits[head.word as usize..];
            write(bits, at, head.width, stored as u64);
            if last_of_block && head == wide(head.word) {
                let values = self.block_values(block);
                // A block that cannot be tightened stays wide.
                let _ = self.refit_block(block, &values, fit);
            }
            return true;
        }
        let mut values = self.block_values(block);
        values[at] = value;
        let (first, second) = match last_of_block {
            true => (fit as Fitter, fit_wide as Fitter),
            false => (fit_wide as Fitter, fit as Fitter),
        };
        self.refit_block(block, &values, first) || self.refit_block(block, &values, second)
    }

    fn block_len(&self, block: usize) -> usize {
        BLOCK.min(self.len() - block * BLOCK)
    }

    fn block_values(&self, block: usize) -> Vec<u64> {
        let from = block * BLOCK;
        let mut values = Vec::with_capacity(BLOCK);
        self.decode_into(from, from + self.block_len(block), &mut values);
        values
    }

    /// Stores `values` as block `block` with `fitter`, moving the blocks
    /// after it when its size changes; false (nothing changed) when they
    /// do not fit that way.
    fn refit_block(&mut self, block: usize, values: &[u64], fitter: Fitter) -> bool {
        let mut bits = Vec::new();
        let Some(mut head) = fitter(values, &mut bits) else {
            return false;
        };
        #[cfg(test)]
        tests::REFITS.with(|n| n.set(n.get() + 1));
        let old = self.heads[block];
        let (from, to) = (
            old.word as usize,
            old.word as usize + words(values.len(), old.width),
        );
        let mut all = Vec::with_capacity(self.bits.len() - (to - from) + bits.len());
        all.extend_from_slice(&self.bits[..from]);
        all.extend_from_slice(&bits);
        all.extend_from_slice(&self.bits[to..]);
        head.word = old.word;
        let moved = |word: u32| (word as usize + bits.len() - (to - from)) as u32;
        self.heads[block + 1..]
            .iter_mut()
            .for_each(|h| h.word = moved(h.word));
        self.heads[block] = head;
        self.bits = all.into();
        true
    }

    /// Memory the column takes.
    pub fn bytes(&self) -> u64 {
        (std::mem::size_of::<Column>()
            + self.heads.len() * std::mem::size_of::<Head>()
            + self.bits.len() * 8) as u64
    }

    #[cfg(test)]
    fn values(&self) -> Vec<u64> {
        let mut values = Vec::with_capacity(self.len());
        self.decode_into(0, self.len(), &mut values);
        values
    }
}

/// How a block's values are stored: `fit` or `fit_wide`.
type Fitter = fn(&[u64], &mut Vec<u64>) -> Option<Head>;

/// The head of a wide block whose residuals start at `word`: values below
/// 2^63 stored as themselves plus 2^63, in 64 bits each.
fn wide(word: u32) -> Head {
    Head {
        first: 0,
        step: 0,
        low: i64::MIN,
        word,
        width: 64,
    }
}

/// A block stored wide (`wide`), so any later value below 2^63 fits in
/// place; None when one of them is 2^63 or more.
fn fit_wide(block: &[u64], bits: &mut Vec<u64>) -> Option<Head> {
    let head = wide(u32::try_from(bits.len()).ok()?);
    if block.iter().any(|&v| v >> 63 != 0) {
        return None;
    }
    bits.extend(block.iter().map(|&v| v | 1 << 63));
    Some(head)
}

/// `value`'s distance from `head`'s line at entry `at`.
fn residual(head: &Head, at: usize, value: u64) -> i128 {
    i128::from(value) - i128::from(head.first) - i128::from(head.step) * at as i128
}

/// Fits one block's line, appends its residuals to `bits`, and returns its
/// head; None when its residuals spread past 64 bits.
fn fit(block: &[u64], bits: &mut Vec<u64>) -> Option<Head> {
    let (first, last) = (*block.first()?, *block.last()?);
    let step = match block.len() {
        1 => 0,
        n => (i128::from(last) - i128::from(first)) / (n as i128 - 1),
    };
    let mut head = Head {
        first,
        step: i64::try_from(step).unwrap_or(0),
        low: 0,
        word: u32::try_from(bits.len()).ok()?,
        width: 0,
    };
    // Each residual computed once (packing runs once per 1,024 appends
    // and for every chunk recovery rebuilds).
    let mut residuals = [0i128; BLOCK];
    let (mut low, mut high) = (i128::MAX, i128::MIN);
    for (at, &value) in block.iter().enumerate() {
        let r = residual(&head, at, value);
        (low, high) = (low.min(r), high.max(r));
        residuals[at] = r;
    }
    let spread = u64::try_from(high - low).ok()?;
    head.low = i64::try_from(low).ok()?;
    head.width = (u64::BITS - spread.leading_zeros()) as u8;
    let from = bits.len();
    bits.resize(from + words(block.len(), head.width), 0);
    for (at, &r) in residuals[..block.len()].iter().enumerate() {
        write(&mut bits[from..], at, head.width, (r - low) as u64);
    }
    Some(head)
}

/// Words that `count` residuals of `width` bits take.
fn words(count: usize, width: u8) -> usize {
    (count * usize::from(width)).div_ceil(64)
}

fn mask(width: u8) -> u64 {
    match width {
        64 => u64::MAX,
        w => (1 << w) - 1,
    }
}

/// Residual `at` of a block whose residuals are `width` bits from `bits[0]`.
fn read(bits: &[u64], at: usize, width: u8) -> u64 {
    if width == 0 {
        return 0;
    }
    let bit = at * usize::from(width);
    let (word, shift) = (bit / 64, (bit % 64) as u32);
    let mut value = bits[word] >> shift;
    if shift + u32::from(width) > 64 {
        value |= bits[word + 1] << (64 - shift);
    }
    value & mask(width)
}

fn write(bits: &mut [u64], at: usize, width: u8, value: u64) {
    debug_assert!(value <= mask(width), "a residual fits its width");
    if width == 0 {
        return;
    }
    let bit = at * usize::from(width);
    let (word, shift) = (bit / 64, (bit % 64) as u32);
    bits[word] = (bits[word] & !(mask(width) << shift)) | (value << shift);
    if shift + u32::from(width) > 64 {
        let placed = 64 - shift;
        bits[word + 1] = (bits[word + 1] & !(mask(width) >> placed)) | (value >> placed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    thread_local! {
        /// Blocks refitted on this thread (`Column::refit_block`).
        pub static REFITS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
    }

    #[test]
    fn a_run_of_sets_refits_a_block_twice_not_every_entry() {
        // The cleaner relocating a whole packed chunk: every new position
        // is far from the old line. Each block goes wide once and is
        // tightened once; the rest are written in place.
        let mut column = round_trip(&(0..1024).map(|i| 5_000 + 6_400 * i).collect::<Vec<_>>());
        REFITS.with(|n| n.set(0));
        for i in 0..1024 {
            assert!(column.set(i, 90_000_000 + 320 * i as u64));
        }
        assert_eq!(REFITS.with(|n| n.get()), 2 * 1024 / BLOCK);
        let moved: Vec<u64> = (0..1024).map(|i| 90_000_000 + 320 * i).collect();
        assert_eq!(column.values(), moved);
        assert_eq!(column, Column::pack(&moved).expect("packs"), "tight again");
    }

    /// A deterministic pseudo-random sequence (xorshift).
    fn noise(seed: u64) -> impl Iterator<Item = u64> {
        std::iter::successors(Some(seed | 1), |&x| {
            let x = x ^ (x << 13);
            let x = x ^ (x >> 7);
            Some(x ^ (x << 17))
        })
    }

    fn round_trip(values: &[u64]) -> Column {
        let column = Column::pack(values).expect("packs");
        assert_eq!(column.len(), values.len());
        let one_by_one: Vec<u64> = (0..values.len()).map(|i| column.get(i)).collect();
        assert_eq!(one_by_one, values);
        assert_eq!(column.values(), values);
        // Ranges that start and end inside blocks decode alike.
        let (from, to) = (values.len() / 3, values.len() - values.len() / 4);
        let mut part = vec![7];
        column.decode_into(from, to, &mut part);
        assert_eq!(part[1..], values[from..to]);
        column
    }

    #[test]
    fn like_sized_appends_take_no_bits() {
        let ends: Vec<u64> = (1..=1024).map(|i| 1_000_000 + 256 * i).collect();
        let column = round_trip(&ends);
        assert!(column.bits.is_empty(), "a straight line needs no residuals");
        // Four heads and the column itself: well under a byte an entry.
        assert!(column.bytes() < 200, "{}", column.bytes());
    }

    #[test]
    fn varied_values_take_the_bits_of_their_spread() {
        // Message ends of appends of 1..=64 bytes: residuals within a few
        // hundred of the line, so at most 16 bits an entry.
        let mut end = 0;
        let ends: Vec<u64> = noise(7)
            .take(1024)
            .map(|x| {
                end += 1 + x % 64;
                end
            })
            .collect();
        let column = round_trip(&ends);
        assert!(column.bytes() <= 1024 * 2 + 200, "{}", column.bytes());
        // Values anywhere below 2^62 (no line at all) still round-trip.
        let wild: Vec<u64> = noise(11).take(700).map(|x| x >> 2).collect();
        round_trip(&wild);
        // Extremes, descending runs, a short last block, and single values.
        round_trip(&[u64::MAX, u64::MAX - 5, u64::MAX - 1]);
        round_trip(&(0..300).rev().map(|i| i * 3).collect::<Vec<_>>());
        round_trip(&[42]);
        round_trip(&[0, u64::MAX]);
    }

    #[test]
    fn residuals_past_64_bits_do_not_pack() {
        // The flat line at u64::MAX leaves a residual of -(2^64 - 1).
        assert_eq!(Column::pack(&[u64::MAX, 0, u64::MAX]), None);
        // So a set that would need it is refused and changes nothing.
        let mut column = round_trip(&[u64::MAX; 3]);
        assert!(column.set(1, u64::MAX - 7));
        assert!(!column.set(1, 0));
        assert_eq!(column.values(), [u64::MAX, u64::MAX - 7, u64::MAX]);
    }

    #[test]
    fn set_matches_a_vec_in_place_and_by_repacking() {
        let mut model: Vec<u64> = (0..700).map(|i| 5_000 + 100 * i).collect();
        let mut column = round_trip(&model);
        // Relocating a run: new positions far from the old line widen the
        // blocks, then the last entry of each block tightens it again.
        for (i, x) in (100..700usize).zip(noise(3)) {
            let value = 90_000_000 + 120 * i as u64 + x % 8;
            model[i] = value;
            assert!(column.set(i, value));
            assert_eq!(column.get(i), value);
        }
        assert_eq!(column.values(), model);
        let tight = Column::pack(&model).expect("packs");
        assert_eq!(column.bytes(), tight.bytes(), "tightened after the run");
        // Sets that fit in place leave the packing as it was.
        let before = column.bytes();
        assert!(column.set(0, model[0]));
        assert_eq!(column.bytes(), before);
        for at in [0, 255, 256, 511, 699] {
            assert!(column.set(at, 1));
            model[at] = 1;
        }
        assert_eq!(column.values(), model);
    }

    #[test]
    fn widths_cross_word_boundaries() {
        for width in [1u8, 7, 31, 33, 63, 64] {
            let mut bits = vec![0u64; words(BLOCK, width)];
            let values: Vec<u64> = noise(u64::from(width))
                .take(BLOCK)
                .map(|x| x & mask(width))
                .collect();
            for (at, &v) in values.iter().enumerate() {
                write(&mut bits, at, width, v);
            }
            let read_back: Vec<u64> = (0..BLOCK).map(|at| read(&bits, at, width)).collect();
            assert_eq!(read_back, values, "width {width}");
        }
    }
}

#[cfg(test)]
#[path = "bitpack_prop.rs"]
mod prop;
