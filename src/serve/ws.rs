//! WebSocket (RFC 6455), server side, written here rather than taken from a crate: the
//! handshake's accept key (SHA-1 and base64 of the client's key), and frames — text messages
//! (fragmented or not), ping/pong, close — with the client's masking required and every
//! message bounded.

use std::io::{self, Read, Write};

const GUID: &str = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11";

/// `Sec-WebSocket-Accept` for a client's `Sec-WebSocket-Key`.
pub fn accept_key(key: &str) -> String {
    base64(&sha1(format!("{}{GUID}", key.trim()).as_bytes()))
}

/// Whether a `Sec-WebSocket-Key` is what RFC 6455 §4.1 says a client sends: 16 bytes in
/// base64 (22 characters of its alphabet, then `==`).
pub fn key_ok(key: &str) -> bool {
    let b = key.as_bytes();
    b.len() == 24
        && b[22..] == *b"=="
        && b[..22]
            .iter()
            .all(|c| c.is_ascii_alphanumeric() || *c == b'+' || *c == b'/')
}

/// SHA-1 (FIPS 180-4): only for the handshake, which RFC 6455 defines with it.
fn sha1(data: &[u8]) -> [u8; 20] {
    let mut h: [u32; 5] = [0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476, 0xC3D2E1F0];
    let mut message = data.to_vec();
    let bits = (data.len() as u64).wrapping_mul(8);
    message.push(0x80);
    while message.len() % 64 != 56 {
        message.push(0);
    }
    message.extend_from_slice(&bits.to_be_bytes());
    for block in message.chunks(64) {
        let mut w = [0u32; 80];
        for (i, word) in block.chunks(4).enumerate() {
            w[i] = u32::from_be_bytes([word[0], word[1], word[2], word[3]]);
        }
        for i in 16..80 {
            w[i] = (w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16]).rotate_left(1);
        }
        let [mut a, mut b, mut c, mut d, mut e] = h;
        for (i, wi) in w.iter().enumerate() {
            let (f, k) = match i {
                0..=19 => ((b & c) | (!b & d), 0x5A827999),
                20..=39 => (b ^ c ^ d, 0x6ED9EBA1),
                40..=59 => ((b & c) | (b & d) | (c & d), 0x8F1BBCDC),
                _ => (b ^ c ^ d, 0xCA62C1D6),
            };
            let t = a
                .rotate_left(5)
                .wrapping_add(f)
                .wrapping_add(e)
                .wrapping_add(k)
                .wrapping_add(*wi);
            e = d;
            d = c;
            c = b.rotate_left(30);
            b = a;
            a = t;
        }
        for (x, y) in h.iter_mut().zip([a, b, c, d, e]) {
            *x = x.wrapping_add(y);
        }
    }
    let mut out = [0u8; 20];
    for (i, x) in h.iter().enumerate() {
        out[i * 4..i * 4 + 4].copy_from_slice(&x.to_be_bytes());
    }
    out
}

fn base64(data: &[u8]) -> String {
    crate::base64::encode(data)
}

pub const OP_CONTINUATION: u8 = 0x0;
pub const OP_TEXT: u8 = 0x1;
pub const OP_BINARY: u8 = 0x2;
pub const OP_CLOSE: u8 = 0x8;
pub const OP_PING: u8 = 0x9;
pub const OP_PONG: u8 = 0xA;

/// Close codes (RFC 6455 §7.4.1).
pub const CLOSE_NORMAL: u16 = 1000;
pub const CLOSE_PROTOCOL: u16 = 1002;
pub const CLOSE_NOT_UTF8: u16 = 1007;
pub const CLOSE_POLICY: u16 = 1008;
pub const CLOSE_TOO_BIG: u16 = 1009;

/// What the reader got from the client.
#[derive(Debug, PartialEq)]
pub enum Incoming {
    Text(String),
    /// A binary message (skipped: ACP is text).
    Binary,
    Ping(Vec<u8>),
    Pong,
    /// The client closed (its code, if any).
    Close(Option<u16>),
}

/// Why reading stopped: the close code to send and a reason.
#[derive(Debug, PartialEq)]
pub struct Violation(pub u16, pub &'static str);

/// A frame's buffer starts at most this large and grows with what arrives.
const GROW_FROM: usize = 64 * 1024;

/// Where frames are read from, told when a frame begins (its first byte arrived) and when it
/// has been read whole: a socket holds each frame to a deadline from its first byte.
pub trait FrameInput: Read {
    fn frame_begins(&mut self) {}
    fn frame_ends(&mut self) {}
}

impl FrameInput for &[u8] {}

/// Reads one message (reassembling fragments; control frames between them are returned at
/// once), at most `max` bytes. `Ok(None)`: the connection ended.
pub fn read_message<R: FrameInput>(
    input: &mut R,
    max: usize,
    partial: &mut Option<(u8, Vec<u8>)>,
) -> io::Result<Result<Option<Incoming>, Violation>> {
    loop {
        let mut head = [0u8; 2];
        if !read_full(input, &mut head[..1])? {
            return Ok(Ok(None));
        }
        input.frame_begins();
        if !read_full(input, &mut head[1..])? {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        let fin = head[0] & 0x80 != 0;
        if head[0] & 0x70 != 0 {
            return Ok(Err(Violation(CLOSE_PROTOCOL, "reserved bits set")));
        }
        let opcode = head[0] & 0x0F;
        if head[1] & 0x80 == 0 {
            return Ok(Err(Violation(
                CLOSE_PROTOCOL,
                "client frames must be masked",
            )));
        }
        let len = match head[1] & 0x7F {
            126 => {
                let mut b = [0u8; 2];
                if !read_full(input, &mut b)? {
                    return Ok(Ok(None));
                }
                u64::from(u16::from_be_bytes(b))
            }
            127 => {
                let mut b = [0u8; 8];
                if !read_full(input, &mut b)? {
                    return Ok(Ok(None));
                }
                u64::from_be_bytes(b)
            }
            n => u64::from(n),
        };
        let control = opcode >= 0x8;
        if control && (len > 125 || !fin) {
            return Ok(Err(Violation(CLOSE_PROTOCOL, "malformed control frame")));
        }
        let so_far = partial.as_ref().map_or(0, |(_, p)| p.len()) as u64;
        if !control && so_far.saturating_add(len) > max as u64 {
            return Ok(Err(Violation(CLOSE_TOO_BIG, "message over the size limit")));
        }
        let mut mask = [0u8; 4];
        if !read_full(input, &mut mask)? {
            return Ok(Ok(None));
        }
        // Grown as the bytes arrive, not reserved from the declared length.
        let mut payload = Vec::with_capacity((len as usize).min(GROW_FROM));
        if (&mut *input).take(len).read_to_end(&mut payload)? < len as usize {
            return Ok(Ok(None));
        }
        input.frame_ends();
        for (i, b) in payload.iter_mut().enumerate() {
            *b ^= mask[i % 4];
        }
        match opcode {
            OP_PING => return Ok(Ok(Some(Incoming::Ping(payload)))),
            OP_PONG => return Ok(Ok(Some(Incoming::Pong))),
            OP_CLOSE => {
                // RFC 6455 §5.5.1: empty, or a code of two bytes then UTF-8; §7.4: codes a
                // peer may send.
                if payload.len() == 1 {
                    return Ok(Err(Violation(
                        CLOSE_PROTOCOL,
                        "a close payload of one byte",
                    )));
                }
                let code =
                    (payload.len() >= 2).then(|| u16::from_be_bytes([payload[0], payload[1]]));
                if code.is_some_and(|c| !sendable_close_code(c)) {
                    return Ok(Err(Violation(
                        CLOSE_PROTOCOL,
                        "a close code a peer may not send",
                    )));
                }
                if payload.len() > 2 && std::str::from_utf8(&payload[2..]).is_err() {
                    return Ok(Err(Violation(
                        CLOSE_NOT_UTF8,
                        "a close reason that is not UTF-8",
                    )));
                }
                return Ok(Ok(Some(Incoming::Close(code))));
            }
            OP_TEXT | OP_BINARY if partial.is_some() => {
                return Ok(Err(Violation(
                    CLOSE_PROTOCOL,
                    "a new message inside a fragmented one",
                )))
            }
            OP_TEXT | OP_BINARY => *partial = Some((opcode, payload)),
            OP_CONTINUATION => match partial.as_mut() {
                Some((_, p)) => p.extend_from_slice(&payload),
                None => {
                    return Ok(Err(Violation(
                        CLOSE_PROTOCOL,
                        "a continuation without a message",
                    )))
                }
            },
            _ => return Ok(Err(Violation(CLOSE_PROTOCOL, "unknown opcode"))),
        }
        if fin {
            let Some((opcode, bytes)) = partial.take() else {
                continue;
            };
            if opcode == OP_BINARY {
                return Ok(Ok(Some(Incoming::Binary)));
            }
            return Ok(match String::from_utf8(bytes) {
                Ok(text) => Ok(Some(Incoming::Text(text))),
                Err(_) => Err(Violation(
                    CLOSE_NOT_UTF8,
                    "a text message that is not UTF-8",
                )),
            });
        }
    }
}

/// Fills `buf`; false at a clean end before its first byte.
fn read_full<R: Read>(input: &mut R, buf: &mut [u8]) -> io::Result<bool> {
    let mut at = 0;
    while at < buf.len() {
        match input.read(&mut buf[at..]) {
            Ok(0) if at == 0 => return Ok(false),
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => at += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

/// The bytes of an unmasked server frame with `len` bytes of payload.
pub fn frame_len(len: usize) -> usize {
    len + match len {
        n if n < 126 => 2,
        n if n <= 0xFFFF => 4,
        _ => 10,
    }
}

/// Writes one unfragmented, unmasked server frame.
pub fn write_frame<W: Write>(out: &mut W, opcode: u8, payload: &[u8]) -> io::Result<()> {
    let mut head = Vec::with_capacity(10);
    head.push(0x80 | opcode);
    match payload.len() {
        n if n < 126 => head.push(n as u8),
        n if n <= 0xFFFF => {
            head.push(126);
            head.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            head.push(127);
            head.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    out.write_all(&head)?;
    out.write_all(payload)
}

/// Whether a peer may send close code `c` (RFC 6455 §7.4.1-2: not 1004-1006 nor 1015, which
/// are reserved or never sent, nor what is unassigned below 3000).
fn sendable_close_code(c: u16) -> bool {
    matches!(c, 1000..=1003 | 1007..=1014 | 3000..=4999)
}

/// A close frame's payload: the code and a reason cut to fit a control frame.
pub fn close_payload(code: u16, reason: &str) -> Vec<u8> {
    let mut p = code.to_be_bytes().to_vec();
    let mut end = reason.len().min(123);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    p.extend_from_slice(&reason.as_bytes()[..end]);
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rfc_example_key_is_accepted_as_the_rfc_says() {
        assert_eq!(
            accept_key("dGhlIHNhbXBsZSBub25jZQ=="),
            "s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
        );
    }

    #[test]
    fn a_key_is_16_bytes_in_base64() {
        for (key, ok) in [
            ("dGhlIHNhbXBsZSBub25jZQ==", true),
            ("AAAAAAAAAAAAAAAAAAAA+/==", true),
            ("dGhlIHNhbXBsZSBub25jZQ", false),
            ("dGhlIHNhbXBsZSBub25jZQ=", false),
            ("x", false),
            ("", false),
            ("dGhlIHNhbXBsZSBub25jZQ=A", false),
            ("dGhlIHNhbXBsZSBub25jZ!==", false),
            ("dGhlIHNhbXBsZSBub25jZSBsb25nZXI=", false),
        ] {
            assert_eq!(key_ok(key), ok, "{key:?}");
        }
    }

    #[test]
    fn sha1_and_base64_match_known_vectors() {
        let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
        assert_eq!(
            hex(&sha1(b"abc")),
            "a9993e364706816aba3e25717850c26c9cd0d89d"
        );
        assert_eq!(hex(&sha1(b"")), "da39a3ee5e6b4b0d3255bfef95601890afd80709");
        let long = b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
        assert_eq!(hex(&sha1(long)), "84983e441c3bd26ebaae4aa1f95129e5e54670f1");
        for (input, out) in [
            ("", ""),
            ("f", "Zg=="),
            ("fo", "Zm8="),
            ("foo", "Zm9v"),
            ("foob", "Zm9vYg=="),
        ] {
            assert_eq!(base64(input.as_bytes()), out);
        }
    }

    /// A client frame: masked with a fixed key.
    fn frame(fin: bool, opcode: u8, payload: &[u8], masked: bool) -> Vec<u8> {
        let mut f = vec![if fin { 0x80 } else { 0 } | opcode];
        let m = if masked { 0x80 } else { 0 };
        match payload.len() {
            n if n < 126 => f.push(m | n as u8),
            n if n <= 0xFFFF => {
                f.push(m | 126);
                f.extend_from_slice(&(n as u16).to_be_bytes());
            }
            n => {
                f.push(m | 127);
                f.extend_from_slice(&(n as u64).to_be_bytes());
            }
        }
        let key = [1u8, 2, 3, 4];
        if masked {
            f.extend_from_slice(&key);
        }
        f.extend(
            payload
                .iter()
                .enumerate()
                .map(|(i, b)| if masked { b ^ key[i % 4] } else { *b }),
        );
        f
    }

    type Read = Result<Option<Incoming>, Violation>;

    fn read_all(bytes: &[u8], max: usize) -> Vec<Read> {
        let mut input = bytes;
        let mut partial = None;
        let mut out = vec![];
        loop {
            match read_message(&mut input, max, &mut partial) {
                Ok(Ok(None)) => return out,
                Ok(r) => {
                    let stop = r.is_err();
                    out.push(r);
                    if stop {
                        return out;
                    }
                }
                Err(_) => return out,
            }
        }
    }

    #[test]
    fn frames_are_read_as_the_rfc_defines_them() {
        let big = "y".repeat(70_000);
        let rows: Vec<(&str, Vec<u8>, Vec<Read>)> = vec![
            (
                "text",
                frame(true, OP_TEXT, b"{}", true),
                vec![Ok(Some(Incoming::Text("{}".into())))],
            ),
            (
                "fragments with a ping between",
                [
                    frame(false, OP_TEXT, b"{\"a\"", true),
                    frame(true, OP_PING, b"p", true),
                    frame(true, OP_CONTINUATION, b":1}", true),
                ]
                .concat(),
                vec![
                    Ok(Some(Incoming::Ping(b"p".to_vec()))),
                    Ok(Some(Incoming::Text("{\"a\":1}".into()))),
                ],
            ),
            (
                "64-bit length",
                frame(true, OP_TEXT, big.as_bytes(), true),
                vec![Ok(Some(Incoming::Text(big.clone())))],
            ),
            (
                "unmasked",
                frame(true, OP_TEXT, b"{}", false),
                vec![Err(Violation(
                    CLOSE_PROTOCOL,
                    "client frames must be masked",
                ))],
            ),
            (
                "too big",
                frame(true, OP_TEXT, &[b'x'; 200], true),
                vec![Err(Violation(CLOSE_TOO_BIG, "message over the size limit"))],
            ),
            (
                "too big in fragments",
                [
                    frame(false, OP_TEXT, &[b'x'; 60], true),
                    frame(true, OP_CONTINUATION, &[b'x'; 60], true),
                ]
                .concat(),
                vec![Err(Violation(CLOSE_TOO_BIG, "message over the size limit"))],
            ),
            (
                "not UTF-8",
                frame(true, OP_TEXT, &[0xff, 0xfe], true),
                vec![Err(Violation(
                    CLOSE_NOT_UTF8,
                    "a text message that is not UTF-8",
                ))],
            ),
            (
                "lone continuation",
                frame(true, OP_CONTINUATION, b"x", true),
                vec![Err(Violation(
                    CLOSE_PROTOCOL,
                    "a continuation without a message",
                ))],
            ),
            (
                "long ping",
                frame(true, OP_PING, &[0; 126], true),
                vec![Err(Violation(CLOSE_PROTOCOL, "malformed control frame"))],
            ),
            (
                "close",
                frame(true, OP_CLOSE, &1000u16.to_be_bytes(), true),
                vec![Ok(Some(Incoming::Close(Some(1000))))],
            ),
            (
                "a close payload of one byte",
                frame(true, OP_CLOSE, &[3], true),
                vec![Err(Violation(
                    CLOSE_PROTOCOL,
                    "a close payload of one byte",
                ))],
            ),
            (
                "a reserved close code",
                frame(true, OP_CLOSE, &1005u16.to_be_bytes(), true),
                vec![Err(Violation(
                    CLOSE_PROTOCOL,
                    "a close code a peer may not send",
                ))],
            ),
            (
                "an unassigned close code",
                frame(true, OP_CLOSE, &2000u16.to_be_bytes(), true),
                vec![Err(Violation(
                    CLOSE_PROTOCOL,
                    "a close code a peer may not send",
                ))],
            ),
            (
                "an application close code",
                frame(true, OP_CLOSE, &4000u16.to_be_bytes(), true),
                vec![Ok(Some(Incoming::Close(Some(4000))))],
            ),
            (
                "binary",
                frame(true, OP_BINARY, b"\x00", true),
                vec![Ok(Some(Incoming::Binary))],
            ),
            (
                "reserved bits",
                vec![0xF1, 0x80, 0, 0, 0, 0],
                vec![Err(Violation(CLOSE_PROTOCOL, "reserved bits set"))],
            ),
            (
                "truncated",
                frame(true, OP_TEXT, b"{}", true)[..4].to_vec(),
                vec![],
            ),
        ];
        for (name, bytes, expected) in rows {
            let max = if name == "64-bit length" {
                100_000
            } else {
                100
            };
            assert_eq!(read_all(&bytes, max), expected, "{name}");
        }
    }

    #[test]
    fn server_frames_carry_their_length_in_the_shortest_form() {
        for (len, head) in [
            (5usize, vec![0x81, 5]),
            (300, vec![0x81, 126, 1, 44]),
            (70_000, vec![0x81, 127, 0, 0, 0, 0, 0, 1, 17, 112]),
        ] {
            let mut out = vec![];
            write_frame(&mut out, OP_TEXT, &vec![b'a'; len]).unwrap();
            assert_eq!(out[..head.len()], head[..], "{len}");
            assert_eq!(out.len(), head.len() + len);
        }
        assert_eq!(close_payload(1000, "bye"), [3, 232, b'b', b'y', b'e']);
    }
}
