//! Unguessable random bits from the kernel (`getrandom(2)`), for values a
//! client must not predict: a bootstrap's multipart boundary (extensions
//! §3.2). A client that could predict it could plant the next boundaries
//! in a message or snapshot and cut every later bootstrap short (session
//! 20's probe did, from one response of a seeded xorshift).

use std::io;

/// 128 bits from the kernel's CSPRNG, as two words.
pub fn random_pair() -> io::Result<(u64, u64)> {
    let mut bytes = [0u8; 16];
    let mut filled = 0;
    while filled < bytes.len() {
        let rest = &mut bytes[filled..];
        // SAFETY: getrandom writes at most `rest.len()` bytes into `rest`,
        // a live buffer this frame owns; flags 0 reads the urandom pool.
        let n = unsafe { libc::getrandom(rest.as_mut_ptr().cast(), rest.len(), 0) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        filled += n as usize;
    }
    let (high, low) = bytes.split_at(8);
    let word = |b: &[u8]| u64::from_le_bytes(b.try_into().expect("8 bytes"));
    Ok((word(high), word(low)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn draws_differ_and_use_all_bits() {
        let draws: Vec<(u64, u64)> = (0..64).map(|_| random_pair().unwrap()).collect();
        let mut distinct = draws.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), draws.len(), "128-bit draws repeat");
        let ored = draws
            .iter()
            .fold((0, 0), |acc, d| (acc.0 | d.0, acc.1 | d.1));
        assert_eq!(ored, (u64::MAX, u64::MAX), "some bit never set in 64 draws");
    }
}
