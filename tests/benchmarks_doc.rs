//! docs/benchmarks.md says which versions its figures are from, and they are the ones the
//! scripts measure: a comparison against a peer's archived release says nothing about what
//! users install today (issue 54 item 9: bench-peers still installed `@zed-industries/…`
//! releases frozen since the projects moved to `@agentclientprotocol/…`).

use std::path::Path;

fn read(rel: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)).unwrap()
}

/// The `"name": ("package@version", …)` rows of scripts/bench-peers' `PEERS`.
fn peers_installed() -> Vec<(String, String)> {
    let script = read("scripts/bench-peers");
    let start = script
        .find("PEERS = {")
        .expect("scripts/bench-peers has PEERS");
    let end = start + script[start..].find("\n}").unwrap();
    script[start..end]
        .lines()
        .filter_map(|l| {
            let (name, rest) = l.trim().strip_prefix('"')?.split_once("\": (\"")?;
            let package = rest.split('"').next()?;
            Some((name.to_string(), package.to_string()))
        })
        .collect()
}

#[test]
fn the_peer_figures_name_the_packages_bench_peers_installs() {
    let peers = peers_installed();
    assert!(peers.len() >= 4, "{peers:?}");
    let doc = read("docs/benchmarks.md");
    let section = &doc[doc
        .find("## Against peer ACP agents (`scripts/bench-peers`)")
        .unwrap()..];
    let section = &section[..section[3..].find("\n## ").map_or(section.len(), |i| i + 3)];
    for (name, package) in &peers {
        // The table row the script prints: `| name (`package@version`) | …`.
        let row = format!("| {name} (`{package}`) |");
        assert!(
            section.contains(&row),
            "docs/benchmarks.md has no figures for {package}, which scripts/bench-peers installs \
             (expected a row starting {row:?}): run scripts/bench-peers and record them"
        );
    }
    for archived in [
        "@zed-industries/codex-acp",
        "@zed-industries/claude-agent-acp",
    ] {
        assert!(
            !peers.iter().any(|(_, p)| p.starts_with(archived)),
            "{archived} is archived: measure what users install today"
        );
    }
}
