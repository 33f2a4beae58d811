//! The test harness itself: strict schema validation must catch what users' clients would choke on.

mod support;
use serde_json::Value;
use support::schema::validate_agent_line;

#[test]
fn strict_validation_rejects_what_the_schema_alone_would_let_through() {
    let method = |_: &Value| Some("initialize".to_string());
    let good = r#"{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":1,"agentCapabilities":{"loadSession":false},"authMethods":[],"agentInfo":{"name":"a","version":"1"}}}"#;
    validate_agent_line(good, method).unwrap();
    let extra = good.replace(r#""loadSession":false"#, r#""loadSession":false,"bogus":1"#);
    assert!(validate_agent_line(&extra, method).is_err());
    let chunk = |extra: &str| {
        format!(
            r#"{{"jsonrpc":"2.0","method":"session/update","params":{{"sessionId":"s","update":{{"sessionUpdate":"agent_message_chunk","messageId":"m","content":{{"type":"text","text":"hi"{extra}}}}}}}}}"#
        )
    };
    validate_agent_line(&chunk(""), method).unwrap();
    assert!(validate_agent_line(&chunk(r#","x":1"#), method).is_err());
    let bad_stop = r#"{"jsonrpc":"2.0","id":3,"result":{"stopReason":"done"}}"#;
    assert!(validate_agent_line(bad_stop, |_| Some("session/prompt".into())).is_err());
    let ok_stop = r#"{"jsonrpc":"2.0","id":3,"result":{"stopReason":"cancelled"}}"#;
    validate_agent_line(ok_stop, |_| Some("session/prompt".into())).unwrap();
}
