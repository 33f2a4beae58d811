//! Glob patterns for `find_files`: `*` and `?` within a path segment, `[abc]` / `[a-z]`
//! classes, `**` for any number of segments. A pattern without `/` matches the file name at
//! any depth (`*.rs` finds every Rust file), which is what models usually mean.

pub fn matches(pattern: &str, rel_path: &str) -> bool {
    if !pattern.contains('/') {
        let name = rel_path.rsplit('/').next().unwrap_or(rel_path);
        return segment_matches(pattern.as_bytes(), name.as_bytes());
    }
    let pat: Vec<&str> = pattern
        .trim_start_matches("./")
        .split('/')
        .filter(|s| !s.is_empty())
        .collect();
    let path: Vec<&str> = rel_path.split('/').filter(|s| !s.is_empty()).collect();
    segments_match(&pat, &path)
}

fn segments_match(pat: &[&str], path: &[&str]) -> bool {
    match pat.first() {
        None => path.is_empty(),
        Some(&"**") => (0..=path.len()).any(|skip| segments_match(&pat[1..], &path[skip..])),
        Some(p) => match path.first() {
            Some(s) => {
                segment_matches(p.as_bytes(), s.as_bytes()) && segments_match(&pat[1..], &path[1..])
            }
            None => false,
        },
    }
}

/// Iterative wildcard matching with backtracking on the last `*` (linear in practice).
fn segment_matches(p: &[u8], s: &[u8]) -> bool {
    let (mut pi, mut si) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while si < s.len() {
        if pi < p.len() {
            match p[pi] {
                b'*' => {
                    star = Some((pi, si));
                    pi += 1;
                    continue;
                }
                b'?' => {
                    pi += 1;
                    si += 1;
                    continue;
                }
                b'[' => {
                    if let Some((ok, len)) = class(&p[pi..], s[si]) {
                        if ok {
                            pi += len;
                            si += 1;
                            continue;
                        }
                    } else if s[si] == b'[' {
                        pi += 1;
                        si += 1;
                        continue;
                    }
                }
                c if c == s[si] => {
                    pi += 1;
                    si += 1;
                    continue;
                }
                _ => {}
            }
        }
        match star {
            Some((sp, ss)) => {
                pi = sp + 1;
                si = ss + 1;
                star = Some((sp, ss + 1));
            }
            None => return false,
        }
    }
    p[pi..].iter().all(|&c| c == b'*')
}

/// `[...]` at the start of `p`: whether `c` is in it, and the class length.
fn class(p: &[u8], c: u8) -> Option<(bool, usize)> {
    let end = p.iter().skip(1).position(|&b| b == b']')? + 1;
    let body = &p[1..end];
    let (negate, body) = match body.first() {
        Some(b'!') | Some(b'^') => (true, &body[1..]),
        _ => (false, body),
    };
    let mut found = false;
    let mut i = 0;
    while i < body.len() {
        if i + 2 < body.len() && body[i + 1] == b'-' {
            found |= body[i] <= c && c <= body[i + 2];
            i += 3;
        } else {
            found |= body[i] == c;
            i += 1;
        }
    }
    Some((found != negate, end + 1))
}

#[cfg(test)]
mod tests {
    use super::matches;

    #[test]
    fn globs() {
        assert!(matches("*.rs", "src/host/mod.rs"));
        assert!(!matches("*.rs", "src/host/mod.rsx"));
        assert!(matches("src/**/*.rs", "src/a/b/c.rs"));
        assert!(matches("src/**/*.rs", "src/c.rs"));
        assert!(!matches("src/*.rs", "src/a/c.rs"));
        assert!(matches("**/test_?.py", "a/test_1.py"));
        assert!(matches("[a-c]*.md", "docs/beta.md"));
        assert!(!matches("[!a-c]*.md", "beta.md"));
        assert!(matches("*a*b*c", "xxaxxbxxc"));
    }
}
