//! Bounded newline-delimited reading.
//!
//! A line longer than the limit is never buffered whole: once it passes the limit the rest of it
//! is consumed and dropped, and the caller learns that it was too long and its first
//! [`HEAD_KEPT`] bytes (where a request's id usually is: `jsonrpc/oversized.rs`).

use std::io::{self, BufRead};

/// The longest line the agent accepts: 64 MiB leaves room for prompts with embedded images
/// while keeping one bad client from exhausting memory.
pub const MAX_LINE_BYTES: usize = 64 * 1024 * 1024;

/// Bytes of line buffer kept between lines: one huge line (a prompt with images) does not pin
/// its buffer for the rest of the connection.
const KEEP_BUFFER: usize = 1024 * 1024;

/// Bytes kept of a line over the limit: its start, enough for the members that come before a
/// request's params (`jsonrpc`, `id`, `method`) with room to spare.
pub const HEAD_KEPT: usize = 4 * 1024;

#[derive(Debug, PartialEq)]
pub enum Line<'a> {
    /// One line without its `\n` (and without a trailing `\r`), valid until the next read.
    Complete(&'a [u8]),
    /// A line that exceeded the limit; `len` counts the bytes seen (at least the limit + 1),
    /// `head` is its first [`HEAD_KEPT`] bytes at most.
    TooLong { len: usize, head: &'a [u8] },
}

/// What [`LineReader::fill_one`] put in the buffer.
enum Filled {
    End,
    Line,
    /// Over the limit: the bytes seen (not kept).
    TooLong(usize),
}

/// Reads lines into one buffer that it reuses (no allocation per line).
pub struct LineReader<R> {
    inner: R,
    max: usize,
    buf: Vec<u8>,
}

impl<R: BufRead> LineReader<R> {
    pub fn new(inner: R, max: usize) -> LineReader<R> {
        LineReader {
            inner,
            max,
            buf: Vec::new(),
        }
    }

    /// The next non-blank line, or `None` at end of input. A final line without a newline
    /// is still returned.
    pub fn next_line(&mut self) -> io::Result<Option<Line<'_>>> {
        loop {
            match self.fill_one()? {
                Filled::End => return Ok(None),
                Filled::Line if self.buf.iter().all(u8::is_ascii_whitespace) => continue,
                Filled::Line => return Ok(Some(Line::Complete(&self.buf))),
                Filled::TooLong(len) => {
                    return Ok(Some(Line::TooLong {
                        len,
                        head: &self.buf,
                    }))
                }
            }
        }
    }

    /// The next line, blank ones included (event streams end an event with a blank line), or
    /// `None` at end of input.
    pub fn read_one(&mut self) -> io::Result<Option<Line<'_>>> {
        Ok(match self.fill_one()? {
            Filled::End => None,
            Filled::Line => Some(Line::Complete(&self.buf)),
            Filled::TooLong(len) => Some(Line::TooLong {
                len,
                head: &self.buf,
            }),
        })
    }

    /// Frees the line buffer if one huge line grew it: a reader that blocks for the next line
    /// calls this first, so a 10 MiB prompt's bytes are not held while it is being answered.
    pub fn release_large(&mut self) {
        if self.buf.capacity() > KEEP_BUFFER {
            self.buf = Vec::new();
        }
    }

    /// Reads the next line into `self.buf` (of one over the limit, only its head is kept).
    fn fill_one(&mut self) -> io::Result<Filled> {
        self.release_large();
        self.buf.clear();
        let mut seen = 0usize;
        let mut too_long = false;
        loop {
            let available = match self.inner.fill_buf() {
                Ok(b) => b,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if available.is_empty() {
                // End of input: a partial last line still counts.
                if seen == 0 {
                    return Ok(Filled::End);
                }
                break;
            }
            let (chunk, found_newline) = match newline_in(available) {
                Some(i) => (&available[..i], true),
                None => (available, false),
            };
            seen += chunk.len();
            if !too_long {
                if seen > self.max {
                    too_long = true;
                    keep_head(&mut self.buf, chunk);
                } else {
                    self.buf.extend_from_slice(chunk);
                }
            }
            let consumed = chunk.len() + usize::from(found_newline);
            self.inner.consume(consumed);
            if found_newline {
                break;
            }
        }
        if too_long {
            return Ok(Filled::TooLong(seen));
        }
        if self.buf.last() == Some(&b'\r') {
            self.buf.pop();
        }
        Ok(Filled::Line)
    }
}

/// Cuts `buf` (the start of a line, before `chunk`) to the line's first [`HEAD_KEPT`] bytes and
/// frees the rest of its memory.
fn keep_head(buf: &mut Vec<u8>, chunk: &[u8]) {
    let room = HEAD_KEPT.saturating_sub(buf.len()).min(chunk.len());
    buf.extend_from_slice(&chunk[..room]);
    buf.truncate(HEAD_KEPT);
    buf.shrink_to(HEAD_KEPT);
}

/// The first `\n` in `bytes`, looked for eight bytes at a time: this crate is built for size,
/// where a byte-at-a-time scan cost a 10 MiB prompt ~8 ms (and every frame line its share).
fn newline_in(bytes: &[u8]) -> Option<usize> {
    let mut at = 0;
    for word in bytes.chunks_exact(8) {
        let mut w = [0u8; 8];
        w.copy_from_slice(word);
        if has_newline(u64::from_le_bytes(w)) {
            break;
        }
        at += 8;
    }
    let rest = bytes.get(at..)?;
    rest.iter().position(|&b| b == b'\n').map(|i| at + i)
}

/// Whether one of the word's eight bytes is `\n`: exactly (a byte of `x` is zero where the
/// word has a newline, and `(x - 0x01..) & !x & 0x80..` is non-zero iff a byte of `x` is zero).
fn has_newline(word: u64) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let x = word ^ (ONES * u64::from(b'\n'));
    x.wrapping_sub(ONES) & !x & HIGHS != 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{BufReader, Cursor};

    /// Every position of the first newline, in and across eight-byte words, with bytes that
    /// differ from a newline by one bit around it.
    #[test]
    fn the_first_newline_is_found_wherever_it_is() {
        for len in 0..40 {
            for nl in 0..=len {
                let mut b: Vec<u8> = (0..len)
                    .map(|i| [b'\x0b', b'\x08', b'\x8a', b'x'][i % 4])
                    .collect();
                if nl < len {
                    b[nl] = b'\n';
                    if nl + 3 < len {
                        b[nl + 3] = b'\n';
                    }
                }
                let want = b.iter().position(|&c| c == b'\n');
                assert_eq!(newline_in(&b), want, "len {len}, newline at {nl}");
            }
        }
    }

    /// The word test is exact, not only free of misses: a false "has one" would quietly turn
    /// the search back into a byte-at-a-time scan. Every byte value at every position, among
    /// fillers that differ from a newline by one bit or are zero, 0x80 or 0xff.
    #[test]
    fn the_word_test_says_newline_exactly_when_there_is_one() {
        for filler in [0x00u8, 0x0b, 0x08, 0x8a, 0x0e, 0x80, 0xff, b'x'] {
            for position in 0..8 {
                for byte in 0..=255u8 {
                    let mut w = [filler; 8];
                    w[position] = byte;
                    let want = w.contains(&b'\n');
                    assert_eq!(has_newline(u64::from_le_bytes(w)), want, "{w:02x?}");
                }
            }
        }
    }

    /// A line as read, owned: `Ok(bytes)` or `Err(len)` for one over the limit.
    fn lines(input: &[u8], max: usize, cap: usize) -> Vec<Result<Vec<u8>, usize>> {
        let mut r = LineReader::new(
            BufReader::with_capacity(cap, Cursor::new(input.to_vec())),
            max,
        );
        let mut out = Vec::new();
        while let Some(l) = r.next_line().unwrap() {
            out.push(match l {
                Line::Complete(b) => Ok(b.to_vec()),
                Line::TooLong { len, .. } => Err(len),
            });
        }
        out
    }

    #[test]
    fn splits_skips_blanks_and_keeps_last_partial_line() {
        let got = lines(b"a\n\n  \r\nbc\r\nd", 10, 2);
        assert_eq!(
            got,
            vec![Ok(b"a".to_vec()), Ok(b"bc".to_vec()), Ok(b"d".to_vec())]
        );
    }

    #[test]
    fn oversized_line_is_skipped_and_reading_continues() {
        let mut input = vec![b'x'; 25];
        input.extend_from_slice(b"\nok\n");
        let got = lines(&input, 10, 4);
        assert_eq!(got, vec![Err(25), Ok(b"ok".to_vec())]);
    }

    /// The start of a line over the limit is kept (bounded): what was read when it passed the
    /// limit, in its first read or after many; the next line is whole.
    #[test]
    fn the_head_of_an_oversized_line_is_kept_and_bounded() {
        for (line_len, max, cap) in [
            (25, 10, 64),
            (25, 10, 4),
            (3 * HEAD_KEPT, HEAD_KEPT / 2, 100),
            (3 * HEAD_KEPT, 2 * HEAD_KEPT, 100),
            (3 * HEAD_KEPT, 2 * HEAD_KEPT, 64 * 1024),
        ] {
            let line: Vec<u8> = (0..line_len).map(|i| b'a' + (i % 26) as u8).collect();
            let mut input = line.clone();
            input.extend_from_slice(b"\nnext\n");
            let mut r = LineReader::new(BufReader::with_capacity(cap, Cursor::new(input)), max);
            match r.next_line().unwrap() {
                Some(Line::TooLong { len, head }) => {
                    assert_eq!(len, line_len);
                    // All it had read when the limit was passed, up to HEAD_KEPT.
                    let least = HEAD_KEPT.min(max + 1);
                    assert!((least..=HEAD_KEPT).contains(&head.len()), "{}", head.len());
                    assert_eq!(head, &line[..head.len()], "{line_len} {max} {cap}");
                }
                other => panic!("expected an oversized line, got {other:?}"),
            }
            assert!(r.buf.capacity() <= HEAD_KEPT.max(KEEP_BUFFER));
            assert_eq!(r.next_line().unwrap(), Some(Line::Complete(&b"next"[..])));
        }
    }

    #[test]
    fn exactly_the_limit_is_accepted() {
        let got = lines(b"0123456789\n", 10, 3);
        assert_eq!(got, vec![Ok(b"0123456789".to_vec())]);
    }

    #[test]
    fn a_huge_line_does_not_pin_its_buffer_for_the_next_ones() {
        let mut input = vec![b'x'; 3 * KEEP_BUFFER];
        input.extend_from_slice(b"\nsmall\n");
        let mut r = LineReader::new(BufReader::new(Cursor::new(input)), MAX_LINE_BYTES);
        match r.next_line().unwrap() {
            Some(Line::Complete(l)) => assert_eq!(l.len(), 3 * KEEP_BUFFER),
            other => panic!("expected the huge line, got {other:?}"),
        }
        r.release_large();
        assert_eq!(
            r.buf.capacity(),
            0,
            "freed before waiting for the next line"
        );
        assert_eq!(r.next_line().unwrap(), Some(Line::Complete(&b"small"[..])));
        assert!(r.buf.capacity() <= KEEP_BUFFER, "{}", r.buf.capacity());
    }
}
