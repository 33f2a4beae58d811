//! Artifacts over the real binaries: a 20 MiB file uploaded in parts, interrupted (the agent
//! and its host killed) and resumed, checked by SHA-256 (computed here by `sha256sum`, not by
//! the code under test), read back in ranges, referenced from a prompt and read by the model in
//! pages; large attachments and a command's whole output stored as artifacts.

#![cfg(feature = "host")]

mod support;
use maka_acp::host::codec::{base64_decode, base64_encode};
use serde_json::{json, Value};
use std::io::Write;
use support::host::TempDir;
use support::{error_of, AgentProcess};

const MIB: usize = 1024 * 1024;

fn script() -> Value {
    json!({
        "rules": [
            {"when": "read the log", "responses": [
                [{"tool": "read_artifact", "args": {"artifact": "big.log", "offset": 130, "limit": 26}}],
                [{"text": "Read."}]]},
            {"when": "big output", "responses": [
                [{"tool": "run_command", "args": {"command": "seq 1 100000"}}],
                [{"text": "Ran."}]]},
            {"when": "what did i say", "responses": [[{"echo": "user"}]]}
        ],
        "default": [[{"echo": "user"}]]
    })
}

fn agent(data: &std::path::Path) -> AgentProcess {
    let mut a = AgentProcess::scripted(&script(), data);
    a.initialize();
    a
}

fn sha256sum(data: &[u8]) -> String {
    let mut child = std::process::Command::new("sha256sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("sha256sum (coreutils)");
    child.stdin.take().unwrap().write_all(data).unwrap();
    let out = child.wait_with_output().unwrap();
    String::from_utf8(out.stdout).unwrap()[..64].to_string()
}

/// 20 MiB of numbered 13-byte lines ("line 0000000\n").
fn big_log() -> Vec<u8> {
    let mut out = Vec::with_capacity(20 * MIB + 13);
    let mut i = 0;
    while out.len() < 20 * MIB {
        out.extend_from_slice(format!("line {i:07}\n").as_bytes());
        i += 1;
    }
    out.truncate(20 * MIB);
    out
}

fn ingest(a: &mut AgentProcess, params: Value) -> Value {
    a.call_ok("_maka/artifact/ingest", params)
}

#[test]
fn a_20_mib_upload_resumes_after_a_crash_is_hash_checked_read_in_ranges_and_used_in_prompts() {
    let data = TempDir::new("art-data");
    let ws = TempDir::new("art-ws");
    let file = big_log();
    let sha = sha256sum(&file);
    let part = 2 * MIB;

    let mut a = agent(data.path());
    let s = a.new_session(ws.path());
    a.call_ok(
        "session/set_mode",
        json!({"sessionId": s, "modeId": "bypass"}),
    );
    let begun = ingest(
        &mut a,
        json!({"sessionId": s, "kind": "begin", "name": "big.log", "mimeType": "text/plain",
               "totalBytes": file.len(), "sha256": sha}),
    );
    let upload = begun["uploadId"].as_str().unwrap().to_string();
    for k in 0..4 {
        let r = ingest(
            &mut a,
            json!({"sessionId": s, "kind": "part", "uploadId": upload, "offset": k * part,
                   "dataBase64": base64_encode(&file[k * part..(k + 1) * part])}),
        );
        assert_eq!(r["received"], (k + 1) * part);
    }
    // Interrupted: the agent and its embedded host are killed mid-upload.
    drop(a);

    let mut b = agent(data.path());
    let status = ingest(
        &mut b,
        json!({"sessionId": s, "kind": "status", "uploadId": upload}),
    );
    assert_eq!(status["received"], 4 * part, "{status}");
    // A part at the wrong offset says where to continue.
    let (resp, _) = b.call(
        "_maka/artifact/ingest",
        json!({"sessionId": s, "kind": "part", "uploadId": upload, "offset": 0,
               "dataBase64": base64_encode(&file[..part])}),
    );
    assert_eq!(error_of(&resp)["data"]["details"]["received"], 4 * part);
    let (resp, _) = b.call(
        "_maka/artifact/ingest",
        json!({"sessionId": s, "kind": "commit", "uploadId": upload}),
    );
    assert!(error_of(&resp)["message"]
        .as_str()
        .unwrap()
        .contains("send the rest first"));
    for k in 4..10 {
        ingest(
            &mut b,
            json!({"sessionId": s, "kind": "part", "uploadId": upload, "offset": k * part,
                   "dataBase64": base64_encode(&file[k * part..(k + 1) * part])}),
        );
    }
    let committed = ingest(
        &mut b,
        json!({"sessionId": s, "kind": "commit", "uploadId": upload}),
    );
    let art = &committed["artifact"];
    assert_eq!(art["bytes"], 20 * MIB);
    assert_eq!(art["sha256"], sha.as_str());
    let id = art["artifactId"].as_str().unwrap().to_string();

    // Read back in ranges: the first MiB, and the last bytes (with no next offset).
    let first = b.call_ok(
        "_maka/artifact/read",
        json!({"sessionId": s, "artifactId": id}),
    );
    assert_eq!(first["nextOffset"], MIB);
    assert_eq!(
        base64_decode(first["dataBase64"].as_str().unwrap()).unwrap(),
        &file[..MIB]
    );
    let last = b.call_ok(
        "_maka/artifact/read",
        json!({"sessionId": s, "artifactId": id, "offset": 20 * MIB - 100, "maxBytes": 4096}),
    );
    assert_eq!(last["nextOffset"], Value::Null);
    assert_eq!(
        base64_decode(last["dataBase64"].as_str().unwrap()).unwrap(),
        &file[20 * MIB - 100..]
    );

    // A wrong hash: refused, nothing kept.
    let bad = ingest(
        &mut b,
        json!({"sessionId": s, "kind": "begin", "name": "x.bin", "totalBytes": 3,
               "sha256": sha256sum(b"abd")}),
    );
    let bad_id = bad["uploadId"].as_str().unwrap();
    ingest(
        &mut b,
        json!({"sessionId": s, "kind": "part", "uploadId": bad_id, "offset": 0, "dataBase64": base64_encode(b"abc")}),
    );
    let (resp, _) = b.call(
        "_maka/artifact/ingest",
        json!({"sessionId": s, "kind": "commit", "uploadId": bad_id}),
    );
    assert!(
        error_of(&resp)["message"]
            .as_str()
            .unwrap()
            .contains("SHA-256"),
        "{resp}"
    );

    // Referenced from a prompt, and read by the model in pages (by name).
    b.call_ok(
        "session/load",
        json!({"sessionId": s, "cwd": ws.path(), "mcpServers": []}),
    );
    b.expect_commands(&s);
    let t = b.drive(
        "session/prompt",
        json!({"sessionId": s, "prompt": [
            {"type": "text", "text": "what did i say"},
            {"type": "resource_link", "uri": format!("maka-artifact://{id}"), "name": "big.log"}]}),
        |r| panic!("unexpected {r}"),
    );
    assert!(
        t.text().contains(&format!(
            "[attached artifact big.log: stored as artifact {id}; read it with read_artifact]"
        )),
        "{}",
        t.text()
    );
    let t = b.prompt(&s, "read the log", |r| panic!("unexpected {r}"));
    let result = t
        .updates_for(&s)
        .into_iter()
        .find(|u| u["sessionUpdate"] == "tool_call_update" && u["status"] == "completed")
        .cloned()
        .unwrap();
    let text = result["content"][0]["content"]["text"].as_str().unwrap();
    assert!(
        text.contains("bytes 130–156 of 20971520; continue with offset 156"),
        "{text}"
    );
    assert!(text.ends_with("line 0000010\nline 0000011\n"), "{text}");

    // Delete: gone from the list, unreadable.
    let deleted = b.call_ok(
        "_maka/artifact/delete",
        json!({"sessionId": s, "artifactId": id}),
    );
    assert_eq!(deleted["deleted"], true);
    let (resp, _) = b.call(
        "_maka/artifact/read",
        json!({"sessionId": s, "artifactId": id}),
    );
    assert_eq!(error_of(&resp)["code"], -32002);
    let (resp, _) = b.call(
        "_maka/artifact/ingest",
        json!({"sessionId": s, "kind": "teleport"}),
    );
    assert!(error_of(&resp)["message"]
        .as_str()
        .unwrap()
        .contains("`kind`"));
}

#[test]
fn large_attachments_and_whole_command_output_become_artifacts() {
    let data = TempDir::new("art2-data");
    let ws = TempDir::new("art2-ws");
    let mut a = agent(data.path());
    let s = a.new_session(ws.path());
    a.call_ok(
        "session/set_mode",
        json!({"sessionId": s, "modeId": "bypass"}),
    );
    let big_text = "0123456789abcdef\n".repeat(20_000); // 340 000 bytes
    let t = a.drive(
        "session/prompt",
        json!({"sessionId": s, "prompt": [
            {"type": "text", "text": "what did i say"},
            {"type": "resource", "resource": {"uri": "file:///tmp/dump.txt", "mimeType": "text/plain", "text": big_text}}]}),
        |r| panic!("unexpected {r}"),
    );
    assert!(
        t.text()
            .contains("[attached text dump.txt: stored as artifact art_"),
        "{}",
        t.text()
    );

    let t = a.prompt(&s, "big output please", |r| panic!("unexpected {r}"));
    let shown = t
        .updates_for(&s)
        .into_iter()
        .filter_map(|u| u["content"][0]["content"]["text"].as_str())
        .find(|t| t.contains("Whole output: maka-artifact://"))
        .map(String::from)
        .unwrap_or_else(|| panic!("no artifact link: {:?}", t.updates));
    let listed = a.call_ok("_maka/artifact/list", json!({"sessionId": s}));
    let arts = listed["artifacts"].as_array().unwrap();
    let sources: Vec<&str> = arts.iter().map(|x| x["source"].as_str().unwrap()).collect();
    assert_eq!(sources, ["attachment", "tool_output"]);
    assert_eq!(arts[0]["bytes"], big_text.len());
    let out_id = arts[1]["artifactId"].as_str().unwrap();
    assert!(shown.ends_with(out_id), "{shown}");
    // The whole output, not just the tail the result keeps.
    let expected: String = (1..=100_000).map(|i| format!("{i}\n")).collect();
    let mut got = Vec::new();
    let mut offset = 0;
    loop {
        let chunk = a.call_ok(
            "_maka/artifact/read",
            json!({"sessionId": s, "artifactId": out_id, "offset": offset}),
        );
        got.extend(base64_decode(chunk["dataBase64"].as_str().unwrap()).unwrap());
        match chunk["nextOffset"].as_u64() {
            Some(n) => offset = n,
            None => break,
        }
    }
    assert_eq!(String::from_utf8(got).unwrap(), expected);
}
