//! Block-aligned heap buffers for O_DIRECT segment I/O.
//!
//! This file owns [`AlignedBuf`]: a zero-initialized heap buffer whose pointer
//! is aligned to [`BLOCK`] and whose capacity is a multiple of [`BLOCK`], plus
//! its monoio `IoBuf`/`IoBufMut` integration so it can be handed to io_uring.
//!
//! Invariants (checked by `debug_invariants`):
//! - `ptr` is `BLOCK`-aligned and owns `cap` bytes allocated with
//!   `Layout { size: cap, align: BLOCK }`;
//! - `cap` is a non-zero multiple of `BLOCK`;
//! - all `cap` bytes are initialized (zeroed at allocation and growth), so
//!   handing any prefix out as `&[u8]` is sound;
//! - `len <= cap`.

use std::alloc::{self, Layout};
use std::fmt;
use std::ptr::NonNull;

/// O_DIRECT alignment unit for buffer addresses, file offsets and lengths.
pub const BLOCK: usize = 4096;

/// Rounds `n` up to the next multiple of [`BLOCK`].
pub const fn round_up(n: usize) -> usize {
    n.div_ceil(BLOCK) * BLOCK
}

/// A zero-initialized, BLOCK-aligned heap buffer whose capacity is a multiple
/// of BLOCK.
///
/// As an io_uring write source it exposes `[..len]`; as a read target it
/// exposes the whole capacity and a completed read of `n` bytes sets
/// `len = n`.
pub struct AlignedBuf {
    ptr: NonNull<u8>,
    len: usize,
    cap: usize,
}

impl AlignedBuf {
    /// An empty buffer with at least `bytes` of zeroed capacity, rounded up to
    /// a multiple of [`BLOCK`] (minimum one block).
    pub fn with_capacity(bytes: usize) -> Self {
        let cap = round_up(bytes.max(1));
        let layout = layout(cap);
        // SAFETY: `layout` has non-zero size (cap >= BLOCK) and a valid
        // power-of-two alignment.
        let raw = unsafe { alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(raw).unwrap_or_else(|| alloc::handle_alloc_error(layout));
        let buf = Self { ptr, len: 0, cap };
        buf.debug_invariants();
        buf
    }

    /// Number of valid bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether `len() == 0`.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Allocated bytes; always a non-zero multiple of [`BLOCK`].
    pub fn capacity(&self) -> usize {
        self.cap
    }

    /// The valid bytes `[..len]`.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: `ptr` owns `cap >= len` initialized bytes and `&self`
        // prevents concurrent mutation.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    /// The valid bytes `[..len]`, mutably.
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: `ptr` owns `cap >= len` initialized bytes and `&mut self`
        // guarantees exclusive access.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    /// Appends `data`, growing (alignment preserved) if needed.
    pub fn extend_from_slice(&mut self, data: &[u8]) {
        let new_len = self
            .len
            .checked_add(data.len())
            .expect("AlignedBuf length overflow");
        self.reserve_total(new_len);
        // SAFETY: capacity is at least `new_len`, so `[len..new_len]` is inside
        // our allocation; `data` cannot alias it because we hold `&mut self`.
        unsafe {
            let dst = self.ptr.as_ptr().add(self.len);
            std::ptr::copy_nonoverlapping(data.as_ptr(), dst, data.len());
        }
        self.len = new_len;
        self.debug_invariants();
    }

    /// Sets the length to `len`; bytes past the old length read as zero.
    pub fn resize_zeroed(&mut self, len: usize) {
        if len > self.len {
            self.reserve_total(len);
            self.zero_range(self.len, len);
        }
        self.len = len;
        self.debug_invariants();
    }

    /// Rounds the length up to a multiple of [`BLOCK`], padding with zeros.
    pub fn pad_to_block(&mut self) {
        self.resize_zeroed(round_up(self.len));
        debug_assert!(self.len.is_multiple_of(BLOCK));
    }

    /// Sets the length to zero, keeping the capacity.
    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// Drops the first `n` valid bytes, moving the rest to the front.
    pub fn drain_front(&mut self, n: usize) {
        assert!(n <= self.len, "drain of {n} bytes past len {}", self.len);
        self.as_mut_slice().copy_within(n.., 0);
        self.len -= n;
    }

    /// Ensures room for `additional` bytes past `len()`, doubling to
    /// amortize growth.
    pub fn reserve(&mut self, additional: usize) {
        let total = self
            .len
            .checked_add(additional)
            .expect("AlignedBuf length overflow");
        self.reserve_total(total);
    }

    /// Ensures capacity for `total` bytes, doubling to amortize growth.
    fn reserve_total(&mut self, total: usize) {
        if total <= self.cap {
            return;
        }
        let new_cap = round_up(total.max(self.cap.saturating_mul(2)));
        self.grow_to(new_cap);
    }

    /// Reallocates to exactly `new_cap` bytes and zeroes the new tail.
    fn grow_to(&mut self, new_cap: usize) {
        assert!(new_cap > self.cap && new_cap.is_multiple_of(BLOCK));
        let new_layout = layout(new_cap);
        // SAFETY: `ptr` was allocated by the global allocator with
        // `layout(self.cap)`; `new_cap` is non-zero and, rounded to BLOCK,
        // does not overflow isize (checked by `layout`). `realloc` keeps the
        // alignment of the original layout (BLOCK).
        let raw = unsafe { alloc::realloc(self.ptr.as_ptr(), layout(self.cap), new_cap) };
        self.ptr = NonNull::new(raw).unwrap_or_else(|| alloc::handle_alloc_error(new_layout));
        let old_cap = self.cap;
        self.cap = new_cap;
        self.zero_range(old_cap, new_cap);
        self.debug_invariants();
    }

    /// Writes zeros over `[from..to]` of the allocation.
    fn zero_range(&mut self, from: usize, to: usize) {
        assert!(from <= to && to <= self.cap);
        // SAFETY: `[from..to]` lies within the `cap` bytes we own exclusively.
        unsafe { std::ptr::write_bytes(self.ptr.as_ptr().add(from), 0, to - from) };
    }

    fn debug_invariants(&self) {
        debug_assert!(self.len <= self.cap);
        debug_assert!(self.cap >= BLOCK && self.cap.is_multiple_of(BLOCK));
        debug_assert!((self.ptr.as_ptr() as usize).is_multiple_of(BLOCK));
    }
}

/// The allocation layout for a buffer of `cap` bytes.
fn layout(cap: usize) -> Layout {
    Layout::from_size_align(cap, BLOCK).expect("AlignedBuf capacity too large")
}

impl Drop for AlignedBuf {
    fn drop(&mut self) {
        // SAFETY: `ptr` was allocated by the global allocator with
        // `layout(self.cap)` and is not used after this point.
        unsafe { alloc::dealloc(self.ptr.as_ptr(), layout(self.cap)) };
    }
}

impl fmt::Debug for AlignedBuf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AlignedBuf")
            .field("len", &self.len)
            .field("cap", &self.cap)
            .finish()
    }
}

// SAFETY: `AlignedBuf` uniquely owns its allocation (like `Vec<u8>`); moving
// it to another thread moves that ownership.
unsafe impl Send for AlignedBuf {}

// SAFETY: shared access only reads through `&self`; there is no interior
// mutability.
unsafe impl Sync for AlignedBuf {}

// SAFETY: `read_ptr` points at the heap allocation, which does not move when
// the `AlignedBuf` value is moved or pinned and stays valid until drop; the
// first `bytes_init() == len` bytes are initialized.
unsafe impl monoio::buf::IoBuf for AlignedBuf {
    fn read_ptr(&self) -> *const u8 {
        self.ptr.as_ptr()
    }

    fn bytes_init(&self) -> usize {
        self.len
    }
}

// SAFETY: `write_ptr` points at the stable heap allocation of `bytes_total()
// == cap` bytes, all of which we own and which are always initialized, so
// `set_init(pos)` for any `pos <= cap` is sound.
unsafe impl monoio::buf::IoBufMut for AlignedBuf {
    fn write_ptr(&mut self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    fn bytes_total(&mut self) -> usize {
        self.cap
    }

    unsafe fn set_init(&mut self, pos: usize) {
        assert!(pos <= self.cap, "set_init past capacity");
        self.len = pos;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_aligned(buf: &AlignedBuf) -> bool {
        (buf.as_slice().as_ptr() as usize).is_multiple_of(BLOCK)
    }

    #[test]
    fn pointer_is_block_aligned_and_capacity_rounded() {
        for want in [0, 1, BLOCK - 1, BLOCK, BLOCK + 1, 3 * BLOCK] {
            let buf = AlignedBuf::with_capacity(want);
            assert!(is_aligned(&buf));
            assert_eq!(buf.capacity() % BLOCK, 0);
            assert!(buf.capacity() >= want.max(BLOCK));
            assert!(buf.is_empty());
        }
    }

    #[test]
    fn shrink_then_grow_reads_zeros() {
        let mut buf = AlignedBuf::with_capacity(BLOCK);
        buf.extend_from_slice(&[0xAB; 100]);
        buf.resize_zeroed(10);
        buf.resize_zeroed(100);
        assert_eq!(&buf.as_slice()[..10], &[0xAB; 10]);
        assert!(buf.as_slice()[10..].iter().all(|&b| b == 0));
    }

    #[test]
    fn extend_across_growth_keeps_contents_and_alignment() {
        let mut buf = AlignedBuf::with_capacity(BLOCK);
        let data: Vec<u8> = (0..3 * BLOCK + 7).map(|i| (i % 251) as u8).collect();
        for chunk in data.chunks(1000) {
            buf.extend_from_slice(chunk);
            assert!(is_aligned(&buf));
        }
        assert_eq!(buf.as_slice(), &data[..]);
        assert!(buf.capacity() >= data.len());
        assert_eq!(buf.capacity() % BLOCK, 0);
    }

    #[test]
    fn growth_zeroes_new_capacity() {
        let mut buf = AlignedBuf::with_capacity(BLOCK);
        buf.extend_from_slice(&[1; BLOCK]);
        buf.resize_zeroed(5 * BLOCK);
        assert!(buf.as_slice()[BLOCK..].iter().all(|&b| b == 0));
    }

    #[test]
    fn pad_to_block_rounds_up_with_zeros() {
        let mut buf = AlignedBuf::with_capacity(0);
        buf.pad_to_block();
        assert_eq!(buf.len(), 0);
        buf.extend_from_slice(b"hello");
        buf.pad_to_block();
        assert_eq!(buf.len(), BLOCK);
        assert_eq!(&buf.as_slice()[..5], b"hello");
        assert!(buf.as_slice()[5..].iter().all(|&b| b == 0));
        buf.pad_to_block();
        assert_eq!(buf.len(), BLOCK);
        buf.extend_from_slice(&[7]);
        buf.pad_to_block();
        assert_eq!(buf.len(), 2 * BLOCK);
    }

    #[test]
    fn clear_keeps_capacity() {
        let mut buf = AlignedBuf::with_capacity(2 * BLOCK);
        buf.extend_from_slice(&[9; 10]);
        buf.clear();
        assert!(buf.is_empty());
        assert_eq!(buf.capacity(), 2 * BLOCK);
    }
}
