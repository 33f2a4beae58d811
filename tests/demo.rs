//! The README's run command: `maka-acp demo` plays a whole conversation offline.

#![cfg(feature = "host")]

#[test]
fn the_demo_plays_a_complete_conversation() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_maka-acp"))
        .arg("demo")
        .env_remove("MAKA_HOST_URL")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "demo failed: {stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        !stdout.contains('\x1b'),
        "no colour codes when stdout is not a terminal"
    );
    for expected in [
        "agent › I'll start by reading the file.",
        "☰ plan:",
        "? permission requested: Edit greeting.txt",
        "-Hello, world!",
        "+Hello, ACP!",
        "you › Allow once",
        "│ Hello, ACP!",
        "Exit code 0",
        "stopReason = \"end_turn\"",
        "greeting.txt on disk now: \"Hello, ACP!\\n\"",
    ] {
        assert!(
            stdout.contains(expected),
            "missing {expected:?} in:\n{stdout}"
        );
    }
}
