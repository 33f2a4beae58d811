//! docs/audit.md tells an auditor what to read, in what order, and how long it is (issue 48,
//! item 6; the network, issue 55 item 5). This test keeps it true: every row's line count is
//! within 5 % of the files it names, every source file of the adapter's path and of what faces
//! the network (`src/serve/`, `src/http/`) is named in some row, and every proof a row cites
//! (`path::function`) is a function in that file.
//!
//! A file's count is its non-test lines: the lines before its `#[cfg(test)]` + `mod … {`
//! block (unit tests at the end of a file, as every file here puts them); a folder's is the sum
//! over its `.rs` files; files named `tests.rs` count nothing.

use std::path::{Path, PathBuf};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// Lines before the file's unit-test module.
fn non_test_lines(text: &str) -> usize {
    let lines: Vec<&str> = text.lines().collect();
    lines
        .windows(2)
        .position(|w| {
            w[0].trim() == "#[cfg(test)]"
                && w[1].trim_start().starts_with("mod ")
                && w[1].trim_end().ends_with('{')
        })
        .unwrap_or(lines.len())
}

fn rust_files(rel: &str) -> Vec<PathBuf> {
    let path = root().join(rel);
    if path.is_file() {
        return vec![path];
    }
    let mut files = Vec::new();
    let mut dirs = vec![path];
    while let Some(dir) = dirs.pop() {
        let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for entry in entries.flatten() {
            let p = entry.path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|e| e == "rs") {
                files.push(p);
            }
        }
    }
    files.sort();
    files
}

fn count(rel: &str) -> usize {
    rust_files(rel)
        .iter()
        .filter(|p| p.file_name().is_some_and(|n| n != "tests.rs"))
        .map(|p| non_test_lines(&std::fs::read_to_string(p).unwrap_or_default()))
        .sum()
}

/// The code spans of a table cell.
fn spans(cell: &str) -> Vec<&str> {
    cell.split('`').skip(1).step_by(2).collect()
}

#[derive(Debug)]
struct Row {
    paths: Vec<String>,
    stated: usize,
    proofs: Vec<String>,
}

/// Rows of the guide's reading tables: `| `files` | lines | what to check | proof |`.
fn rows() -> Vec<Row> {
    let guide = read("docs/audit.md");
    guide
        .lines()
        .filter(|l| l.starts_with("| `"))
        .filter_map(|l| {
            let cells: Vec<&str> = l.trim_matches('|').split('|').map(str::trim).collect();
            let stated = cells.get(1)?.replace(',', "").parse().ok()?;
            Some(Row {
                paths: spans(cells[0]).into_iter().map(String::from).collect(),
                stated,
                proofs: cells
                    .get(3)
                    .map(|c| spans(c).into_iter().map(String::from).collect())
                    .unwrap_or_default(),
            })
        })
        .collect()
}

#[test]
fn every_count_in_the_guide_is_within_five_percent_of_the_files() {
    let rows = rows();
    assert!(rows.len() >= 10, "docs/audit.md has too few rows: {rows:?}");
    let mut wrong = Vec::new();
    for row in &rows {
        let actual: usize = row.paths.iter().map(|p| count(p)).sum();
        let allowed = row.stated.div_ceil(20);
        if actual.abs_diff(row.stated) > allowed {
            wrong.push(format!("{:?}: says {}, is {actual}", row.paths, row.stated));
        }
    }
    assert!(
        wrong.is_empty(),
        "update docs/audit.md:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn every_file_on_the_adapters_path_is_in_the_guide() {
    let named: Vec<PathBuf> = rows()
        .iter()
        .flat_map(|r| r.paths.iter().flat_map(|p| rust_files(p)))
        .collect();
    let mut missing = Vec::new();
    // The adapter's path, and what faces the network: `maka-acp serve` and the one HTTP server
    // (the host's too).
    for dir in [
        "src/jsonrpc",
        "src/acp",
        "src/host_api",
        "src/serve",
        "src/http",
    ] {
        for file in rust_files(dir) {
            let name = file.file_name().and_then(|n| n.to_str()).unwrap_or("");
            // Unit tests, and the fake host only tests build.
            if name == "tests.rs" || name == "fake.rs" {
                continue;
            }
            if !named.contains(&file) {
                missing.push(file.display().to_string());
            }
        }
    }
    assert!(
        missing.is_empty(),
        "docs/audit.md names no row for:\n{}",
        missing.join("\n")
    );
}

#[test]
fn every_proof_the_guide_cites_exists() {
    let mut wrong = Vec::new();
    for proof in rows().iter().flat_map(|r| r.proofs.clone()) {
        let Some((file, function)) = proof.rsplit_once("::") else {
            continue;
        };
        if !file.ends_with(".rs") {
            continue;
        }
        let text = std::fs::read_to_string(root().join(file)).unwrap_or_default();
        if !text.contains(&format!("fn {function}(")) {
            wrong.push(proof);
        }
    }
    assert!(wrong.is_empty(), "no such test: {wrong:?}");
}

/// The lines of the files the rows of steps `first..=last` name (`## N.` headings).
fn lines_of_steps(first: usize, last: usize) -> usize {
    let guide = read("docs/audit.md");
    let mut step = 0;
    let mut total = 0;
    for line in guide.lines() {
        if let Some(n) = line
            .strip_prefix("## ")
            .and_then(|h| h.split('.').next())
            .and_then(|n| n.parse().ok())
        {
            step = n;
        }
        if (first..=last).contains(&step) && line.starts_with("| `") {
            let cell = line.trim_matches('|').split('|').next().unwrap_or("");
            total += spans(cell).iter().map(|p| count(p)).sum::<usize>();
        }
    }
    total
}

/// The numbers a text gives as sizes: each `N lines` (`~N`, `about N`, `N,NNN`).
fn line_figures(text: &str) -> Vec<usize> {
    let words: Vec<&str> = text.split_whitespace().collect();
    words
        .windows(2)
        .filter(|w| w[1].trim_end_matches([',', ';', ':', ')', '.']) == "lines")
        .filter_map(|w| {
            w[0].trim_start_matches(['~', '('])
                .replace(',', "")
                .parse()
                .ok()
        })
        .collect()
}

/// Issue 55, item 5: the first sitting of "What an afternoon covers" (its `1. **` item) fits an
/// afternoon — every size it names adds up to at most four hours at the guide's own rate of a
/// thousand lines an hour — and its "steps 1–3 (about N lines" is true of the files.
#[test]
fn the_first_sitting_fits_an_afternoon_and_says_its_size() {
    let guide = read("docs/audit.md");
    let (_, from) = guide
        .split_once("**What an afternoon covers.**")
        .expect("docs/audit.md has its \"What an afternoon covers\" paragraph");
    let first = from.split_once("\n1. **").map_or(from, |(_, f)| f);
    let first = first
        .split('\n')
        .take_while(|l| !l.trim().is_empty() && !l.starts_with("2. "))
        .collect::<Vec<_>>()
        .join(" ");
    let said: usize = line_figures(&first).iter().sum();
    assert!(
        said <= 4_000,
        "the first sitting names {said} lines: more than an afternoon at 1,000 lines an hour:\n{first}"
    );
    let stated: usize = first
        .split_once("steps 1–3 (about ")
        .and_then(|(_, rest)| rest.split_once(" lines"))
        .and_then(|(n, _)| n.replace(',', "").parse().ok())
        .expect("the first sitting says \"steps 1–3 (about N lines\"");
    let actual = lines_of_steps(1, 3);
    assert!(
        actual.abs_diff(stated) <= stated.div_ceil(20),
        "the first sitting says {stated} lines, is {actual}"
    );
    assert!(
        actual <= 4_000,
        "steps 1–3 are {actual} lines: more than an afternoon"
    );
}

#[test]
fn the_count_skips_only_the_unit_test_module() {
    let text = "a\n#[cfg(test)]\nmod fake;\nb\n#[cfg(test)]\nmod tests {\n fn t() {}\n}\n";
    assert_eq!(non_test_lines(text), 4);
    assert_eq!(non_test_lines("a\nb\n"), 2);
}

/// The modules `src/lib.rs` builds only with a cargo feature (`host`, `serve`): not part of the
/// adapter-only build.
fn feature_modules() -> Vec<String> {
    let lib = read("src/lib.rs");
    let lines: Vec<&str> = lib.lines().collect();
    lines
        .windows(2)
        .filter(|w| w[0].trim_start().starts_with("#[cfg(feature"))
        .filter_map(|w| {
            let name = w[1].trim().trim_end_matches(';').rsplit(' ').next()?;
            Some(name.to_string())
        })
        .collect()
}

/// Each function of a file's non-test lines, as (name, first line, lines): from its `fn` line
/// to the `}` at the same indent (a declaration without a body is skipped).
fn functions(text: &str) -> Vec<(String, usize, usize)> {
    let lines: Vec<&str> = text.lines().take(non_test_lines(text)).collect();
    let mut out = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let code = line.trim_start();
        let indent = &line[..line.len() - code.len()];
        let Some(at) = code.find("fn ") else { continue };
        let before = &code[..at];
        let is_item = before.split_whitespace().all(|w| {
            ["pub", "const", "unsafe", "async", "extern"].contains(&w) || w.starts_with("pub(")
        });
        if !is_item || code.starts_with("//") {
            continue;
        }
        let name: String = code[at + 3..]
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        let Some(opens) = lines[i..].iter().position(|l| {
            let l = l.trim_end();
            l.ends_with('{') || l.ends_with(';')
        }) else {
            continue;
        };
        if lines[i + opens].trim_end().ends_with(';') {
            continue;
        }
        let close = format!("{indent}}}");
        if let Some(end) = lines[i..].iter().position(|l| l.trim_end() == close) {
            out.push((name, i + 1, end + 1));
        }
    }
    out
}

/// Issue 55, item 4: a reader can hold any function of the adapter (the adapter-only build) in
/// view — at most 100 lines; `Projector::apply`, one exhaustive match over every kind of host
/// frame, at most 120.
#[test]
fn no_function_of_the_adapter_is_over_100_lines() {
    let gated = feature_modules();
    assert!(gated.contains(&"host".to_string()), "{gated:?}");
    let mut long = Vec::new();
    for path in rust_files("src") {
        let rel = path
            .strip_prefix(root())
            .unwrap()
            .to_string_lossy()
            .to_string();
        let module = rel
            .trim_start_matches("src/")
            .split(['/', '.'])
            .next()
            .unwrap_or_default()
            .to_string();
        if gated.contains(&module) || rel.ends_with("/tests.rs") || rel == "src/main.rs" {
            continue;
        }
        for (name, line, len) in functions(&std::fs::read_to_string(&path).unwrap()) {
            let limit = if rel == "src/acp/projection/mod.rs" && name == "apply" {
                120
            } else {
                100
            };
            if len > limit {
                long.push(format!("{rel}:{line} {name}: {len} lines (limit {limit})"));
            }
        }
    }
    assert!(
        long.is_empty(),
        "functions too long to hold in view:\n{}",
        long.join("\n")
    );
}

#[test]
fn functions_are_measured_from_fn_to_their_closing_brace() {
    let text = "fn a() {\n    x;\n}\n\npub(crate) fn b(\n    y: u8,\n) -> u8 {\n    y\n}\ntrait T {\n    fn c(&self);\n}\n";
    let got: Vec<(String, usize, usize)> = functions(text);
    assert_eq!(got, [("a".to_string(), 1, 3), ("b".to_string(), 5, 5)]);
}
