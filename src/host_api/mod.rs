//! The Runtime Host protocol: wire types shared by the reference host and the adapter, and the
//! adapter's client.

pub mod client;

#[cfg(test)]
pub mod fake;
pub mod ops;
pub mod wire;

/// Keeps only the last `max` bytes of `s` (cut on a character boundary). Returns whether
/// anything was dropped. Command output everywhere keeps its tail this way.
pub fn keep_tail(s: &mut String, max: usize) -> bool {
    if s.len() <= max {
        return false;
    }
    let mut start = s.len() - max;
    while !s.is_char_boundary(start) {
        start += 1;
    }
    s.drain(..start);
    true
}

/// The longest prefix of `s` of at most `max` bytes that ends on a char boundary.
pub fn head(s: &str, max: usize) -> &str {
    let mut i = max.min(s.len());
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    &s[..i]
}

/// `text` in pieces of at most `max` bytes (never less than one character), cut at character
/// boundaries: one piece, possibly empty, when it is short. Frames and updates that carry
/// text stay bounded this way on both sides.
pub fn pieces(text: &str, max: usize) -> impl Iterator<Item = &str> {
    let mut rest = Some(text);
    std::iter::from_fn(move || {
        let r = rest?;
        let piece = match head(r, max) {
            "" => r.chars().next().map_or("", |c| &r[..c.len_utf8()]),
            piece => piece,
        };
        rest = (piece.len() < r.len()).then(|| &r[piece.len()..]);
        Some(piece)
    })
}

/// The strings of a JSON array (other items skipped); empty when `v` is not an array.
pub fn string_list(v: Option<&serde_json::Value>) -> Vec<String> {
    v.and_then(serde_json::Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(serde_json::Value::as_str)
        .map(String::from)
        .collect()
}

/// Hex of `n` random bytes from the operating system's generator. If the OS has none to give
/// (never on the platforms this builds for), the process stops: ids and tokens must not be
/// guessable.
pub fn random_hex(n: usize) -> String {
    let mut bytes = vec![0u8; n];
    if let Err(e) = getrandom::getrandom(&mut bytes) {
        log::error!("the operating system has no random numbers to give ({e}); stopping");
        std::process::exit(1);
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn keep_tail_cuts_on_char_boundaries() {
        let mut s = String::from("ééé");
        assert!(super::keep_tail(&mut s, 3));
        assert_eq!(s, "é");
        assert!(!super::keep_tail(&mut s, 10));
    }
}
