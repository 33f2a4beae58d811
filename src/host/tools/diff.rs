//! Line-based unified diffs for edit results and permission previews.

/// A unified diff of `old` → `new` with 3 lines of context, headed `--- a/path` / `+++ b/path`.
pub fn unified(path: &str, old: &str, new: &str) -> String {
    let a: Vec<&str> = old.split_inclusive('\n').collect();
    let b: Vec<&str> = new.split_inclusive('\n').collect();
    let ops = line_ops(&a, &b);
    let mut out = format!("--- a/{path}\n+++ b/{path}\n");
    // Group changes into hunks with up to 3 context lines around them.
    const CTX: usize = 3;
    let mut i = 0;
    while i < ops.len() {
        if matches!(ops[i], Op::Same(..)) {
            i += 1;
            continue;
        }
        let start = i.saturating_sub(CTX);
        let mut end = i;
        let mut last_change = i;
        while end < ops.len() {
            if !matches!(ops[end], Op::Same(..)) {
                last_change = end;
            } else if end - last_change > 2 * CTX {
                break;
            }
            end += 1;
        }
        let end = (last_change + CTX + 1).min(ops.len());
        let (mut a_start, mut b_start) = (0, 0);
        for op in &ops[..start] {
            match op {
                Op::Same(..) => {
                    a_start += 1;
                    b_start += 1;
                }
                Op::Del(_) => a_start += 1,
                Op::Add(_) => b_start += 1,
            }
        }
        let a_len = ops[start..end]
            .iter()
            .filter(|o| !matches!(o, Op::Add(_)))
            .count();
        let b_len = ops[start..end]
            .iter()
            .filter(|o| !matches!(o, Op::Del(_)))
            .count();
        out.push_str(&format!(
            "@@ -{},{} +{},{} @@\n",
            if a_len == 0 { a_start } else { a_start + 1 },
            a_len,
            if b_len == 0 { b_start } else { b_start + 1 },
            b_len
        ));
        for op in &ops[start..end] {
            let (prefix, line) = match op {
                Op::Same(l) => (' ', *l),
                Op::Del(l) => ('-', *l),
                Op::Add(l) => ('+', *l),
            };
            out.push(prefix);
            out.push_str(line);
            if !line.ends_with('\n') {
                out.push_str("\n\\ No newline at end of file\n");
            }
        }
        i = end;
    }
    out
}

enum Op<'a> {
    Same(&'a str),
    Del(&'a str),
    Add(&'a str),
}

fn line_ops<'a>(a: &[&'a str], b: &[&'a str]) -> Vec<Op<'a>> {
    let prefix = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let suffix = a[prefix..]
        .iter()
        .rev()
        .zip(b[prefix..].iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    let (am, bm) = (&a[prefix..a.len() - suffix], &b[prefix..b.len() - suffix]);
    let mut ops: Vec<Op> = a[..prefix]
        .iter()
        .zip(b)
        .map(|(x, _)| Op::Same(x))
        .collect();
    if am.len() * bm.len() <= 4_000_000 {
        // LCS table over the changed middle only.
        let (n, m) = (am.len(), bm.len());
        let mut t = vec![0u32; (n + 1) * (m + 1)];
        for i in (0..n).rev() {
            for j in (0..m).rev() {
                t[i * (m + 1) + j] = if am[i] == bm[j] {
                    t[(i + 1) * (m + 1) + j + 1] + 1
                } else {
                    t[(i + 1) * (m + 1) + j].max(t[i * (m + 1) + j + 1])
                };
            }
        }
        let (mut i, mut j) = (0, 0);
        while i < n || j < m {
            if i < n && j < m && am[i] == bm[j] {
                ops.push(Op::Same(am[i]));
                i += 1;
                j += 1;
            } else if i < n && (j == m || t[(i + 1) * (m + 1) + j] >= t[i * (m + 1) + j + 1]) {
                ops.push(Op::Del(am[i]));
                i += 1;
            } else {
                ops.push(Op::Add(bm[j]));
                j += 1;
            }
        }
    } else {
        ops.extend(am.iter().map(|l| Op::Del(l)));
        ops.extend(bm.iter().map(|l| Op::Add(l)));
    }
    ops.extend(
        a[a.len() - suffix..]
            .iter()
            .zip(&b[b.len() - suffix..])
            .map(|(x, _)| Op::Same(x)),
    );
    ops
}

#[cfg(test)]
mod tests {
    use super::unified;

    #[test]
    fn small_edit() {
        let old = "a\nb\nc\nd\ne\nf\ng\nh\n";
        let new = "a\nb\nc\nD\ne\nf\ng\nh\n";
        assert_eq!(
            unified("x.txt", old, new),
            "--- a/x.txt\n+++ b/x.txt\n@@ -1,7 +1,7 @@\n a\n b\n c\n-d\n+D\n e\n f\n g\n"
        );
    }

    #[test]
    fn new_file_and_missing_newline() {
        let d = unified("n", "", "one\ntwo");
        assert!(
            d.contains("@@ -0,0 +1,2 @@\n+one\n+two\n\\ No newline at end of file\n"),
            "{d}"
        );
        assert_eq!(unified("n", "same\n", "same\n"), "--- a/n\n+++ b/n\n");
    }
}
