//! Fresh buffers written once, never zero-filled first.
//!
//! A gather into a new buffer that a binding then hands out writes every
//! byte of it; zero-filling it first (`vec![0; n]`) is one more pass over
//! memory, as large as the copy's writes (measured on shuffled feature
//! batches, where the prefetch thread's gather is what the training loop
//! waits for). [`filled_words`] hands the uninitialised capacity out only
//! through [`Filler`]s, which can only append copies of initialised bytes,
//! and sets the vector's length only after checking that every filler
//! wrote its whole part, so safe code cannot observe an uninitialised byte.

use std::mem::MaybeUninit;

/// One part of a [`filled_words`] buffer, written front to back.
pub struct Filler<'a> {
    buf: &'a mut [MaybeUninit<u8>],
    at: usize,
}

impl Filler<'_> {
    /// Appends `src` after the bytes put before.
    ///
    /// # Panics
    /// If `src` does not fit in what is left of the part.
    pub fn put(&mut self, src: &[u8]) {
        let end = self.at + src.len();
        let dst = &mut self.buf[self.at..end];
        // SAFETY: `dst` is `src.len()` bytes this Filler borrows exclusively
        // (uninitialised capacity no one else can name, so not `src`'s
        // bytes); copying initialised bytes into `MaybeUninit<u8>` is
        // always valid. (`write_copy_of_slice`, without `unsafe`, needs
        // Rust 1.93; the workspace supports 1.89.)
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst.as_mut_ptr().cast(), src.len()) };
        self.at = end;
    }

    /// Bytes of the part not written yet.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.at
    }
}

/// A vector of `bytes.div_ceil(8)` words (8-byte aligned, for a binding to
/// view as any element type) whose first `bytes` bytes are written by
/// `fill` through one [`Filler`] per `part` bytes, in order (the last part
/// may be shorter; `fill` may run them on several threads). The padding
/// after `bytes` is zero. Nothing is zero-filled first. When `fill` fails
/// (or panics) the buffer is dropped unread.
///
/// # Panics
/// If `fill` returns `Ok` while a part is not completely written: a bug in
/// the caller, which must account for every byte it promised.
pub fn filled_words<E>(
    bytes: usize,
    part: usize,
    fill: impl FnOnce(&mut [Filler<'_>]) -> Result<(), E>,
) -> Result<Vec<u64>, E> {
    let words = bytes.div_ceil(8);
    let mut v: Vec<u64> = Vec::with_capacity(words);
    let (body, pad) = as_bytes(&mut v.spare_capacity_mut()[..words]).split_at_mut(bytes);
    pad.fill(MaybeUninit::new(0));
    let mut fillers: Vec<Filler<'_>> =
        body.chunks_mut(part.max(1)).map(|buf| Filler { buf, at: 0 }).collect();
    fill(&mut fillers)?;
    assert!(fillers.iter().all(|f| f.remaining() == 0), "filled_words: a part was left unwritten");
    drop(fillers);
    // SAFETY: every byte of the first `words` words is initialised: the
    // body by the fillers (each wrote its whole part, checked above; a
    // Filler only copies initialised bytes, and the fillers cover the body
    // exactly, since safe code can neither make one nor move one out of
    // the slice, only reorder them), the padding by the fill above.
    unsafe { v.set_len(words) };
    Ok(v)
}

/// The bytes of uninitialised words.
fn as_bytes(words: &mut [MaybeUninit<u64>]) -> &mut [MaybeUninit<u8>] {
    // SAFETY: `words.len() * 8` contiguous, writable bytes, borrowed for
    // as long as `words` is; `MaybeUninit<u8>` has no validity or
    // alignment requirement.
    unsafe { std::slice::from_raw_parts_mut(words.as_mut_ptr().cast(), words.len() * 8) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_fill_the_bytes_in_order_and_the_padding_is_zero() {
        for bytes in [0, 1, 7, 8, 9, 100] {
            for part in [0, 1, 3, 8, 1000] {
                let want: Vec<u8> = (1..=bytes as u8).collect();
                let v = filled_words(bytes, part, |fs| {
                    let mut at = 0;
                    for f in fs.iter_mut() {
                        let n = f.remaining();
                        f.put(&want[at..at + n]);
                        at += n;
                    }
                    Ok::<(), ()>(())
                })
                .unwrap();
                assert_eq!(v.len(), bytes.div_ceil(8));
                let got: &[u8] = bytemuck::cast_slice(&v);
                assert_eq!(&got[..bytes], &want[..], "bytes {bytes} part {part}");
                assert!(got[bytes..].iter().all(|&b| b == 0));
            }
        }
    }

    #[test]
    fn an_error_is_returned_and_the_buffer_dropped() {
        assert_eq!(filled_words(64, 8, |_| Err("no")), Err("no"));
    }

    #[test]
    #[should_panic(expected = "left unwritten")]
    fn a_part_left_unwritten_panics_instead_of_exposing_it() {
        let _ = filled_words(16, 8, |fs| {
            fs[0].put(&[0; 8]);
            Ok::<(), ()>(())
        });
    }

    #[test]
    #[should_panic]
    fn a_put_past_its_part_panics() {
        let _ = filled_words(16, 8, |fs| {
            fs[0].put(&[0; 9]);
            Ok::<(), ()>(())
        });
    }
}
