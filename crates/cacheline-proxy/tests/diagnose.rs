//! `--diagnose` between a raw client and a real upstream on a socket: what the upstream
//! receives, what the client gets back, and the verdict line with the provider's reason.
//!
//! Reply shapes: Anthropic's cache diagnostics
//! (<https://platform.claude.com/docs/en/build-with-claude/cache-diagnostics>: the reply's
//! `diagnostics.cache_miss_reason`), OpenAI's prompt cache diagnostics
//! (<https://developers.openai.com/api/docs/guides/prompt-caching/diagnostics>: the
//! response's `prompt_cache_diagnostics`; in a stream, assumed on the response
//! `response.completed` carries).

mod common;

use std::sync::Arc;

use cacheline_proxy::{ProxyConfig, RequestRow};
use common::*;
use serde_json::json;

fn filler() -> String {
    "lorem ipsum dolor sit amet ".repeat(400)
}

fn anthropic(turns: usize, tool: &str) -> Vec<u8> {
    let f = filler();
    let mut messages = Vec::new();
    for t in 0..turns {
        messages.push(json!({"role": "user", "content": format!("user {t}: {f}")}));
        messages.push(json!({"role": "assistant", "content": [{"type": "text", "text": format!("assistant {t}: {f}"), "cache_control": {"type": "ephemeral"}}]}));
    }
    messages.push(json!({"role": "user", "content": format!("user {turns}: {f}")}));
    // Written with a space and a newline before the closing brace: kept as they are.
    let body = json!({
        "model": "claude-sonnet-4-5", "max_tokens": 64,
        "tools": [{"name": "read", "description": tool, "input_schema": {"type": "object"}}],
        "system": "You are a coding agent.", "messages": messages,
    });
    format!("{} \n", body).into_bytes()
}

fn responses(turns: usize, tool: &str) -> Vec<u8> {
    let f = filler();
    let mut input = Vec::new();
    for t in 0..turns {
        input.push(json!({"role": "user", "content": format!("user {t}: {f}")}));
        input.push(json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": format!("assistant {t}: {f}")}]}));
    }
    input.push(json!({"role": "user", "content": format!("user {turns}: {f}")}));
    serde_json::to_vec(&json!({
        "model": "gpt-5.6", "instructions": "You are a coding agent.", "stream": true,
        "tools": [{"type": "function", "name": tool, "parameters": {"type": "object"}}],
        "input": input,
    }))
    .unwrap()
}

fn anthropic_reply(id: &str, diagnostics: Option<&str>) -> Vec<u8> {
    let diag = diagnostics
        .map(|d| format!(r#","diagnostics":{d}"#))
        .unwrap_or_default();
    format!(
        r#"{{"id":"{id}","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{{"type":"text","text":"ok"}}],"stop_reason":"end_turn","stop_sequence":null,"usage":{{"input_tokens":13000,"cache_read_input_tokens":0,"cache_creation_input_tokens":0,"output_tokens":1}}{diag}}}"#
    )
    .into_bytes()
}

fn responses_stream(id: &str, diagnostics: Option<&str>) -> Vec<u8> {
    let diag = diagnostics
        .map(|d| format!(r#","prompt_cache_diagnostics":{d}"#))
        .unwrap_or_default();
    let whole = format!(
        r#"{{"id":"{id}","object":"response","status":"completed","model":"gpt-5.6","output":[{{"type":"message","id":"m_{id}","role":"assistant","status":"completed","content":[{{"type":"output_text","text":"OK","annotations":[]}}]}}],"usage":{{"input_tokens":13000,"input_tokens_details":{{"cached_tokens":0}},"output_tokens":1,"total_tokens":13001}}{diag}}}"#
    );
    format!(
        "event: response.created\ndata: {{\"type\":\"response.created\",\"sequence_number\":0,\"response\":{{\"id\":\"{id}\",\"object\":\"response\",\"status\":\"in_progress\",\"model\":\"gpt-5.6\",\"output\":[]}}}}\n\n\
event: response.completed\ndata: {{\"type\":\"response.completed\",\"sequence_number\":1,\"response\":{whole}}}\n\n"
    )
    .into_bytes()
}

/// An upstream answering request `n` with `replies[n]` (the last one after).
fn scripted(content_type: &'static str, replies: Vec<Vec<u8>>) -> Script {
    Arc::new(move |n, _| {
        let body = &replies[n.min(replies.len() - 1)];
        vec![Step::Send(whole(
            "200 OK",
            &[("Content-Type", content_type)],
            body,
        ))]
    })
}

fn head_and_body(request: &[u8]) -> (String, Vec<u8>) {
    split(request)
}

/// The agent's body with `field` spliced in before its closing brace.
fn spliced(body: &[u8], field: &str) -> Vec<u8> {
    let close = body.iter().rposition(|&b| b == b'}').unwrap();
    [&body[..close], b",", field.as_bytes(), &body[close..]].concat()
}

async fn send_all(
    config: ProxyConfig,
    upstream: &Upstream,
    path: &str,
    headers: &[(&str, &str)],
    bodies: &[Vec<u8>],
) -> (Vec<Vec<u8>>, Vec<RequestRow>, cacheline_proxy::ProxySummary) {
    let proxy = proxy(config, &upstream.url()).await;
    let mut events = proxy.state().subscribe();
    let mut replies = Vec::new();
    for b in bodies {
        let (reply, _) = raw(proxy.addr(), &post(path, headers, b)).await;
        replies.push(reply);
    }
    rows(&proxy.state(), bodies.len() as u64).await;
    let mut printed = Vec::new();
    for _ in 0..bodies.len() {
        printed.push(events.recv().await.unwrap());
    }
    let summary = proxy.shutdown().await;
    (replies, printed, summary)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn diagnose_adds_anthropics_field_and_beta_and_the_verdict_shows_agreement() {
    let second = anthropic_reply(
        "msg_02",
        Some(r#"{"cache_miss_reason":{"type":"tools_changed","cache_missed_input_tokens":12900}}"#),
    );
    let up = upstream(scripted(
        "application/json",
        vec![anthropic_reply("msg_01", None), second.clone()],
    ))
    .await;
    let dir = std::env::temp_dir().join(format!("cacheline-diagnose-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let log = dir.join("proxy.jsonl");
    let _ = std::fs::remove_file(&log);
    let bodies = [anthropic(2, "Read a file."), anthropic(3, "Read any file.")];
    let headers = [
        ("x-claude-code-session-id", "s-1"),
        ("anthropic-beta", "fine-grained-tool-streaming-2025-05-14"),
    ];
    let (replies, rows, summary) = send_all(
        ProxyConfig::default().with_diagnose(true).with_log(&log),
        &up,
        "/v1/messages",
        &headers,
        &bodies,
    )
    .await;
    let got = up.received();
    for (i, previous) in ["null", r#""msg_01""#].iter().enumerate() {
        let (head, body) = head_and_body(&got[i]);
        let want = spliced(
            &bodies[i],
            &format!(r#""diagnostics":{{"previous_message_id":{previous}}}"#),
        );
        assert_eq!(
            body, want,
            "request {i}: every other byte as the agent sent it"
        );
        assert_eq!(
            header(&head, "anthropic-beta"),
            Some("fine-grained-tool-streaming-2025-05-14,cache-diagnosis-2026-04-07")
        );
        assert_eq!(
            header(&head, "content-length"),
            Some(want.len().to_string().as_str())
        );
    }
    // The client gets the upstream's reply unchanged.
    assert!(replies[1].ends_with(&second));
    let verdict = &rows[1].verdict;
    assert!(
        verdict.contains("; provider: tools_changed, ~12,900 tokens missed (agrees)"),
        "{verdict}"
    );
    assert_eq!(summary.diagnose.unwrap().added, 2);
    assert_eq!(summary.audit.unwrap().provider_verdicts.agree, 1);
    // The log keeps the agent's own request, and names the reply it was compared with.
    let written = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<serde_json::Value> = written
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let second = written.lines().nth(1).unwrap();
    assert_eq!(
        prompt_measure::logged::read_line(second)
            .unwrap()
            .request
            .as_bytes(),
        &bodies[1][..]
    );
    assert_eq!(lines[1]["diagnosed_against"], "msg_01");
    assert!(lines[0].get("diagnosed_against").is_none());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn diagnose_names_the_streamed_openai_reply_and_the_verdict_shows_disagreement() {
    let second = responses_stream(
        "resp_02",
        Some(r#"{"type":"cache_miss","reason":"input_changed","cache_missed_tokens":4000}"#),
    );
    let up = upstream(scripted(
        "text/event-stream",
        vec![responses_stream("resp_01", None), second.clone()],
    ))
    .await;
    let bodies = [responses(2, "read"), responses(3, "read_file")];
    let (replies, rows, summary) = send_all(
        ProxyConfig::default().with_diagnose(true),
        &up,
        "/v1/responses",
        &[("session_id", "s-2")],
        &bodies,
    )
    .await;
    let got = up.received();
    // No earlier reply: the first goes unchanged; the second names the first's id, read
    // from its stream's `response.created`.
    assert_eq!(head_and_body(&got[0]).1, bodies[0]);
    assert_eq!(
        head_and_body(&got[1]).1,
        spliced(
            &bodies[1],
            r#""prompt_cache_options":{"comparison_response_id":"resp_01"}"#
        )
    );
    assert_eq!(header(&head_and_body(&got[1]).0, "anthropic-beta"), None);
    assert!(replies[1].ends_with(&second));
    let verdict = &rows[1].verdict;
    assert!(
        verdict.contains(
            "; provider: input_changed, ~4,000 tokens missed — we say tools_changed (disagrees)"
        ),
        "{verdict}"
    );
    let counts = summary.diagnose.unwrap();
    assert_eq!((counts.added, counts.no_previous), (1, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_diagnose_or_a_named_session_nothing_changes() {
    let bodies = [anthropic(2, "Read a file."), anthropic(3, "Read a file.")];
    let headers = [
        ("x-claude-code-session-id", "s-3"),
        ("anthropic-beta", "fine-grained-tool-streaming-2025-05-14"),
    ];
    let up = upstream(scripted(
        "application/json",
        vec![anthropic_reply("msg_01", None)],
    ))
    .await;
    let (_, rows, summary) = send_all(
        ProxyConfig::default(),
        &up,
        "/v1/messages",
        &headers,
        &bodies,
    )
    .await;
    for (i, got) in up.received().iter().enumerate() {
        let (head, body) = head_and_body(got);
        assert_eq!(body, bodies[i]);
        assert_eq!(
            header(&head, "anthropic-beta"),
            Some("fine-grained-tool-streaming-2025-05-14")
        );
    }
    assert!(
        !rows[1].verdict.contains("provider:"),
        "{}",
        rows[1].verdict
    );
    assert!(summary.diagnose.is_none());

    // On, but the requests name no session: unchanged, and counted.
    let up = upstream(scripted(
        "application/json",
        vec![anthropic_reply("msg_01", None)],
    ))
    .await;
    let (_, _, summary) = send_all(
        ProxyConfig::default().with_diagnose(true),
        &up,
        "/v1/messages",
        &[],
        &bodies,
    )
    .await;
    for (i, got) in up.received().iter().enumerate() {
        assert_eq!(head_and_body(got).1, bodies[i]);
    }
    let counts = summary.diagnose.unwrap();
    assert_eq!((counts.added, counts.unnamed), (0, 2));
    assert!(
        summary.text().contains("2 naming no session"),
        "{}",
        summary.text()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_malformed_diagnostics_reply_reaches_the_client_unchanged_and_the_verdict_says_so() {
    let bad = anthropic_reply("msg_02", Some(r#"{"cache_miss_reason":{"type":7}}"#));
    let up = upstream(scripted(
        "application/json",
        vec![anthropic_reply("msg_01", None), bad.clone()],
    ))
    .await;
    let bodies = [anthropic(2, "Read a file."), anthropic(3, "Read any file.")];
    let (replies, rows, _) = send_all(
        ProxyConfig::default().with_diagnose(true),
        &up,
        "/v1/messages",
        &[("x-claude-code-session-id", "s-4")],
        &bodies,
    )
    .await;
    let (head, body) = split(&replies[1]);
    assert!(head.starts_with("HTTP/1.1 200 OK"), "{head}");
    assert_eq!(body, bad);
    let verdict = &rows[1].verdict;
    assert!(
        verdict.contains("; provider: diagnostics unreadable ("),
        "{verdict}"
    );
}
