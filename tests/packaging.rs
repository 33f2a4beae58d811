//! Packaging (issue 18, item 4): the man page and shell completions under `dist/` are what the
//! binary generates from its one command-line definition, and they say what `--help` says; the
//! ACP registry manifest and icon follow the registry's published rules (as far as they can be
//! checked offline). `scripts/dist` builds and checks the archive the manifest points to.
//!
//! Needs groff, bash, zsh and fish (`scripts/test` installs them from Debian when missing).

use serde_json::Value;
use std::path::Path;
use std::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_maka-acp");

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    std::fs::read_to_string(root().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"))
}

/// A throwaway HOME and XDG dirs for every program these tests start: fish, zsh and man
/// create their state and config folders there, never in the user's home.
fn scratch_home(cmd: &mut Command) -> &mut Command {
    static HOME: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    let home = HOME.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("maka-packaging-home-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    });
    cmd.env("HOME", home)
        .env("XDG_CONFIG_HOME", home.join(".config"))
        .env("XDG_DATA_HOME", home.join(".local/share"))
        .env("XDG_STATE_HOME", home.join(".local/state"))
        .env("XDG_CACHE_HOME", home.join(".cache"))
}

fn run(program: &str, args: &[&str]) -> (String, String) {
    let out = scratch_home(&mut Command::new(program))
        .args(args)
        .current_dir(root())
        .output()
        .unwrap_or_else(|e| {
            panic!("{program} is needed for this test (apt-get install {program}): {e}")
        });
    assert!(out.status.success(), "{program} {args:?}: {:?}", out);
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The long options `--help` lists, per section ("" for the agent, "host" for `host`).
fn help_options() -> Vec<(String, String)> {
    let (help, _) = run(BIN, &["--help"]);
    let mut section = String::new();
    let mut found = vec![];
    for line in help.lines() {
        if line == "OPTIONS:" {
            section.clear();
        } else if let Some(rest) = line.strip_suffix("):") {
            section = rest.rsplit(' ').next().unwrap_or_default().to_string();
        } else if let Some(opt) = line
            .trim_start()
            .split([' ', ','])
            .find(|w| w.starts_with("--"))
        {
            if line.starts_with("    -") {
                found.push((section.clone(), opt.to_string()));
            }
        }
    }
    assert!(found.len() >= 8, "{help}");
    found
}

#[test]
fn the_man_page_and_completions_are_generated_and_current() {
    for (target, path) in [
        ("man", "dist/maka-acp.1"),
        ("bash", "dist/completions/maka-acp.bash"),
        ("zsh", "dist/completions/_maka-acp"),
        ("fish", "dist/completions/maka-acp.fish"),
    ] {
        let (made, _) = run(BIN, &["generate", target]);
        assert!(
            made == read(path),
            "{path} drifted from `maka-acp generate {target}`: run `cargo run -- generate {target} > {path}`"
        );
    }
    let out = Command::new(BIN)
        .args(["generate", "pdf"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("expected one of man, bash, zsh, fish"));
}

#[test]
fn the_man_page_renders_cleanly_and_documents_every_option() {
    let (_, warnings) = run("groff", &["-man", "-Tutf8", "-ww", "-z", "dist/maka-acp.1"]);
    assert_eq!(warnings, "", "groff warnings");
    let out = scratch_home(&mut Command::new("man"))
        .args(["-l", "dist/maka-acp.1"])
        .env("MANWIDTH", "100")
        .env_remove("MAN_KEEP_FORMATTING")
        .current_dir(root())
        .output()
        .expect("man");
    let page = String::from_utf8_lossy(&out.stdout).replace('\u{2010}', "-");
    for section in [
        "NAME",
        "SYNOPSIS",
        "OPTIONS",
        "ENVIRONMENT",
        "FILES",
        "EXIT STATUS",
    ] {
        assert!(page.contains(section), "{section}");
    }
    for (_, opt) in help_options() {
        assert!(page.contains(&opt), "the man page lacks {opt}");
    }
    for var in [
        "MAKA_HOST_TOKEN",
        "MAKA_HOST_CA",
        "MAKA_OPENAI_BASE_URL",
        "RUST_LOG",
    ] {
        assert!(page.contains(var), "{var}");
    }
}

#[test]
fn bash_fish_and_zsh_complete_what_help_lists() {
    let bash = |words: &str| -> Vec<String> {
        let script = format!(
            "source dist/completions/maka-acp.bash; COMP_WORDS=({words}); COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1)); _maka_acp; printf '%s\\n' \"${{COMPREPLY[@]}}\""
        );
        run("bash", &["-c", &script])
            .0
            .lines()
            .map(String::from)
            .collect()
    };
    let fish = |line: &str| -> Vec<String> {
        let script = format!("source dist/completions/maka-acp.fish; complete -C'{line}'");
        run("fish", &["-c", &script])
            .0
            .lines()
            .map(|l| l.split('\t').next().unwrap_or_default().to_string())
            .collect()
    };
    for (section, opt) in help_options() {
        let prefix = if section.is_empty() {
            "maka-acp".to_string()
        } else {
            format!("maka-acp {section}")
        };
        let partial = &opt[..4];
        assert!(
            bash(&format!("{prefix} {partial}")).contains(&opt),
            "bash: {prefix} {partial} → {opt}"
        );
        assert!(
            fish(&format!("{prefix} {partial}")).contains(&opt),
            "fish: {prefix} {partial} → {opt}"
        );
    }
    let subcommands = ["host", "serve", "demo", "login", "generate"];
    let top = bash("maka-acp ''");
    let fish_top = fish("maka-acp ");
    for s in subcommands {
        assert!(top.iter().any(|w| w == s), "bash: {s} in {top:?}");
        assert!(fish_top.iter().any(|w| w == s), "fish: {s} in {fish_top:?}");
    }
    assert_eq!(bash("maka-acp --log-level d"), ["debug"]);
    assert_eq!(bash("maka-acp generate ''"), ["man", "bash", "zsh", "fish"]);
    assert!(fish("maka-acp --log-level ").contains(&"trace".to_string()));
    run("zsh", &["-n", "dist/completions/_maka-acp"]);
    for (line, want) in [
        ("maka-acp host --l", &["--listen", "--log-level"][..]),
        ("maka-acp serve --t", &["--token-file", "--tls-proxied"][..]),
        ("maka-acp --log-level ", &["debug", "trace"][..]),
        ("maka-acp gen", &["generate"][..]),
        ("maka-acp generate ", &["man", "fish"][..]),
    ] {
        let shown = zsh_complete(line);
        for w in want {
            assert!(shown.contains(w), "zsh: {line:?} → {w}: {shown}");
        }
    }
}

/// What an interactive zsh shows after typing `line` and Tab, with our completion in `fpath`
/// (zsh needs a terminal for completion: zpty gives it one).
fn zsh_complete(line: &str) -> String {
    let dir = root().join("dist/completions");
    let script = format!(
        r#"zmodload zsh/zpty
zpty -b z zsh -f -i
zpty -w z "PS1='%% '; fpath=({} \$fpath); autoload -U compinit; compinit -u -D"
sleep 1
zpty -w -n z '{line}'$'\t'
sleep 2
out=""
while zpty -r -t z chunk; do out+=$chunk; done
zpty -d z
print -r -- "$out""#,
        dir.display()
    );
    let (out, _) = run("zsh", &["-f", "-c", &script]);
    // Without the terminal's escapes, after the line typed.
    let mut plain = String::new();
    let mut chars = out.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            plain.push(c);
        }
    }
    let after = plain.rfind("compinit -u -D").map_or(0, |i| i + 14);
    plain[after..].to_string()
}

/// `scripts/registry-entry` with `args` (paths relative to the repository), as a release runs it.
fn registry_entry(args: &[&str]) -> std::process::Output {
    Command::new(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/registry-entry"))
        .args(args)
        .output()
        .unwrap()
}

/// The registry's validator checks that every archive and package an entry names exists, so
/// the entry is made from what a release published, never kept by hand: the repository holds
/// no entry naming routes, and the script names exactly the routes it is told were published,
/// with the archive's own sha256.
#[test]
fn the_registry_entry_names_only_published_routes_with_the_archives_sha256() {
    assert!(
        !Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("dist/agent.json")
            .exists(),
        "a hand-kept entry would name routes no release published"
    );
    let dir = tempfile_dir("registry-entry");
    let version = env!("CARGO_PKG_VERSION");
    let archive = dir.join(format!("maka-acp-{version}-linux-x86_64.tar.gz"));
    std::fs::write(&archive, b"not really an archive").unwrap();
    let archive = archive.to_str().unwrap();
    let sha = run("sha256sum", &[archive]).0;
    let sha = sha.split_whitespace().next().unwrap();

    let out = registry_entry(&["--archive", archive]);
    assert!(out.status.success(), "{out:?}");
    let m: Value = serde_json::from_slice(&out.stdout).unwrap();
    let routes: Vec<&String> = m["distribution"].as_object().unwrap().keys().collect();
    assert_eq!(routes, ["binary"], "only what was published");
    assert_eq!(m["distribution"]["binary"]["linux-x86_64"]["sha256"], sha);

    let out = registry_entry(&["--uvx"]);
    let m: Value = serde_json::from_slice(&out.stdout).unwrap();
    let routes: Vec<&String> = m["distribution"].as_object().unwrap().keys().collect();
    assert_eq!(routes, ["uvx"]);

    let out = registry_entry(&[]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("at least one published route"), "{err}");
    let misnamed = dir.join("maka-acp.tar.gz");
    std::fs::write(&misnamed, b"x").unwrap();
    let out = registry_entry(&["--archive", misnamed.to_str().unwrap()]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("scripts/dist"));
    std::fs::remove_dir_all(dir).unwrap();
}

fn tempfile_dir(tag: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("maka-acp-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The ACP registry's rules for `<id>/agent.json` and `<id>/icon.svg`, as its FORMAT.md,
/// agent.schema.json and build script state them, checked on the entry a release with every
/// route published would submit.
#[test]
fn the_registry_manifest_and_icon_follow_the_registrys_rules() {
    let dir = tempfile_dir("registry-rules");
    let archive = dir.join(format!(
        "maka-acp-{}-linux-x86_64.tar.gz",
        env!("CARGO_PKG_VERSION")
    ));
    std::fs::write(&archive, b"x").unwrap();
    let out = registry_entry(&["--archive", archive.to_str().unwrap(), "--npx", "--uvx"]);
    assert!(out.status.success(), "{out:?}");
    std::fs::remove_dir_all(dir).unwrap();
    let m: Value = serde_json::from_slice(&out.stdout).unwrap();
    let obj = m.as_object().unwrap();
    let allowed = [
        "id",
        "name",
        "version",
        "description",
        "repository",
        "website",
        "authors",
        "license",
        "icon",
        "distribution",
    ];
    for k in obj.keys() {
        assert!(allowed.contains(&k.as_str()), "unknown field {k}");
    }
    for k in ["id", "name", "version", "description", "distribution"] {
        assert!(obj.contains_key(k), "required: {k}");
    }
    let id = m["id"].as_str().unwrap();
    assert!(
        id.starts_with(|c: char| c.is_ascii_lowercase())
            && id
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-'),
        "id {id}"
    );
    assert_eq!(id, env!("CARGO_PKG_NAME"));
    assert_eq!(
        m["version"],
        env!("CARGO_PKG_VERSION"),
        "the manifest's version is the crate's"
    );
    assert_eq!(m["name"], "maka-acp");
    assert!(!m["description"].as_str().unwrap().is_empty());
    assert_eq!(m["license"], env!("CARGO_PKG_LICENSE"));
    assert_eq!(m["repository"], env!("CARGO_PKG_REPOSITORY"));
    assert!(m["authors"]
        .as_array()
        .unwrap()
        .iter()
        .all(Value::is_string));

    let dist = m["distribution"].as_object().unwrap();
    assert!(!dist.is_empty());
    for k in dist.keys() {
        assert!(["binary", "npx", "uvx"].contains(&k.as_str()), "{k}");
    }
    let platforms = [
        "darwin-aarch64",
        "darwin-x86_64",
        "linux-aarch64",
        "linux-x86_64",
        "windows-aarch64",
        "windows-x86_64",
    ];
    let binary = dist["binary"].as_object().unwrap();
    let version = env!("CARGO_PKG_VERSION");
    for (platform, target) in binary {
        assert!(platforms.contains(&platform.as_str()), "{platform}");
        let t = target.as_object().unwrap();
        for k in t.keys() {
            assert!(
                ["archive", "cmd", "args", "env", "sha256"].contains(&k.as_str()),
                "{k}"
            );
        }
        let archive = t["archive"].as_str().unwrap();
        assert!(archive.starts_with("https://"), "{archive}");
        assert!(
            !archive.contains("/latest/"),
            "an explicit version, not latest"
        );
        assert!(
            archive.contains(&format!("/download/v{version}/")),
            "the archive's version is the manifest's: {archive}"
        );
        assert!(
            [".zip", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2"]
                .iter()
                .any(|e| archive.ends_with(e)),
            "{archive}"
        );
        // What scripts/dist builds.
        assert!(
            archive.ends_with(&format!("/maka-acp-{version}-{platform}.tar.gz")),
            "{archive}"
        );
        assert!(archive.starts_with(env!("CARGO_PKG_REPOSITORY")));
        assert!(t["cmd"].as_str().unwrap().starts_with("./"));
    }
    // The registry asks binary entries to cover darwin, linux and windows. This machine builds
    // linux-x86_64 only (no other Rust target can be fetched here, and the host is Unix-only:
    // process groups, signals); docs/packaging.md says so. Anything else listed must exist.
    let families: Vec<&str> = binary
        .keys()
        .map(|p| p.split('-').next().unwrap())
        .collect();
    assert_eq!(
        families,
        ["linux"],
        "only what scripts/dist builds is listed"
    );

    // npx and uvx: the package names scripts/package-npm and scripts/package-wheel build,
    // pinned to this version exactly (the registry's build rejects `@latest` and a version
    // other than the entry's).
    let launcher: Value = serde_json::from_str(&read("dist/npm/maka-acp/package.json")).unwrap();
    assert_eq!(launcher["version"], version, "the npm launcher's version");
    for (kind, want) in [
        (
            "npx",
            format!("{}@{version}", launcher["name"].as_str().unwrap()),
        ),
        ("uvx", format!("{}=={version}", env!("CARGO_PKG_NAME"))),
    ] {
        let entry = dist[kind].as_object().unwrap();
        for k in entry.keys() {
            assert!(
                ["package", "args", "env"].contains(&k.as_str()),
                "{kind}: {k}"
            );
        }
        assert_eq!(entry["package"], want.as_str(), "{kind}");
    }

    // The Paseo catalog entry in docs/packaging.md pins the same version, in `version` and in
    // its npx command (Paseo's version-drift rule), and so does the by-hand config there.
    let docs = read("docs/packaging.md");
    let paseo = &docs[docs.find("## Paseo").unwrap()..docs.find("## At release time").unwrap()];
    assert!(
        paseo.contains(&format!("version: \"{version}\",")),
        "the Paseo entry's version"
    );
    let pins: Vec<&str> = paseo.split("\"maka-acp@").skip(1).collect();
    assert_eq!(pins.len(), 2, "the catalog entry and the by-hand config");
    for pin in pins {
        assert!(
            pin.starts_with(&format!("{version}\"")),
            "a Paseo command pins maka-acp@{}",
            &pin[..pin.find('"').unwrap_or(pin.len())]
        );
    }

    // The icon: square, 16×16, monochrome through currentColor.
    let svg = read("dist/icon.svg");
    let attr = |name: &str| -> Option<String> {
        let head = &svg[svg.find("<svg")?..];
        let head = &head[..head.find('>')?];
        let at = head.find(&format!(" {name}=\""))? + name.len() + 3;
        Some(head[at..at + head[at..].find('"')?].to_string())
    };
    assert_eq!(attr("width").as_deref(), Some("16"));
    assert_eq!(attr("height").as_deref(), Some("16"));
    assert_eq!(attr("viewBox").as_deref(), Some("0 0 16 16"));
    assert!(svg.contains("currentColor"), "themable: uses currentColor");
    for key in ["fill", "stroke"] {
        for part in svg.split(&format!(" {key}=\"")).skip(1) {
            let value = &part[..part.find('"').unwrap()];
            assert!(
                ["currentcolor", "none", "inherit"].contains(&value.to_ascii_lowercase().as_str()),
                "hard-coded {key}={value}"
            );
        }
    }
    assert!(
        !svg.contains("style="),
        "no inline styles to hide colours in"
    );
    assert!(
        !svg.contains("<image") && !svg.contains("<script"),
        "vector only"
    );
}

/// `npx maka-acp`: the npm packages made from this build's binary, packed, installed from the
/// tarballs into an empty prefix with no registry, and `npx --offline maka-acp` answering an
/// ACP `initialize`; then `npx -y maka-acp@<version>` (the registry entry's string) from a
/// loopback registry holding the two tarballs, npm picking the platform package itself
/// (scripts/package-npm does and checks each step; CI runs it on the release binary too).
#[test]
fn the_npm_packages_install_offline_and_npx_runs_the_agent() {
    let version = env!("CARGO_PKG_VERSION");
    package_route(
        "scripts/package-npm",
        &[
            "npx --offline maka-acp: initialize answered".to_string(),
            format!("npx -y maka-acp@{version}: initialize answered"),
        ],
    );
}

/// `uvx maka-acp`: the wheel made from this build's binary (its manylinux tag read off the
/// binary), installed with pip into an empty venv with no index and run (also as
/// `python -m maka_acp`), then run by uvx from the wheel and as the registry entry names it
/// (`maka-acp==<version>`, found in a local folder), offline; each answers an ACP `initialize`.
#[test]
fn the_wheel_installs_with_pip_and_runs_with_uvx() {
    let version = env!("CARGO_PKG_VERSION");
    package_route(
        "scripts/package-wheel",
        &[
            "venv/bin/maka-acp: initialize answered".to_string(),
            "-m maka_acp: initialize answered".to_string(),
            "maka-acp: initialize answered".to_string(),
            format!("maka-acp=={version}: initialize answered"),
            "-py3-none-manylinux_2_".to_string(),
        ],
    );
}

fn package_route(script: &str, expect: &[String]) {
    let name = script.rsplit('/').next().unwrap();
    let out_dir = root().join("target/packaging-test").join(name);
    let (stdout, _) = run(
        root().join(script).to_str().unwrap(),
        &["--binary", BIN, "--out", out_dir.to_str().unwrap()],
    );
    for e in expect {
        assert!(
            stdout.contains(e.as_str()),
            "{script} printed no {e:?}:\n{stdout}"
        );
    }
    let _ = std::fs::remove_dir_all(&out_dir);
}
