//! The helpers a live agent uses, offline: the new tokens counted by a server's tokenizer
//! (a scripted loopback server answering as llama.cpp's `/apply-template` and `/tokenize`
//! do), and the URL file read again after a restart.

use prompt_client::{ScriptedResponse, ScriptedServer};
use prompt_llama::{LiveError, LlamaClient, NewTokens, ServerUrl, TokenCount};
use prompt_registry::ApiKind;

fn template(prompt: &str) -> ScriptedResponse {
    ScriptedResponse::json(format!("{{\"prompt\":{prompt:?}}}"))
}

fn tokens(n: usize) -> ScriptedResponse {
    let list: Vec<String> = (0..n).map(|i| i.to_string()).collect();
    ScriptedResponse::json(format!("{{\"tokens\":[{}]}}", list.join(",")))
}

/// Each request's new tokens are its tokens beyond the previous request's stable part
/// (generation prompt excluded), by the server's own template and tokenizer; the first
/// request's are all new.
#[test]
fn new_tokens_are_the_body_s_tokens_beyond_the_previous_request_s_stable_part() {
    let server = ScriptedServer::start(vec![
        // Request 1: the body (10 tokens), the generation prompt (5 - 2 = 3 tokens, asked
        // once), the stable part (9 tokens, so 6 without the generation prompt).
        template("body 1"),
        tokens(10),
        template("with generation prompt"),
        tokens(5),
        template("without"),
        tokens(2),
        template("stable 1"),
        tokens(9),
        // Request 2: the body (14 tokens: 8 beyond the 6), its stable part (12).
        template("body 2"),
        tokens(14),
        template("stable 2"),
        tokens(12),
    ])
    .unwrap();
    let llama = LlamaClient::new(server.url());
    let mut counter = NewTokens::new(ApiKind::LlamaCpp);
    let first = counter.count(&llama, b"{\"messages\":[]}", b"{}").unwrap();
    assert_eq!(
        first,
        TokenCount {
            prompt: 10,
            new: 10
        }
    );
    let second = counter.count(&llama, b"{\"messages\":[1]}", b"{}").unwrap();
    assert_eq!(second, TokenCount { prompt: 14, new: 8 });
    let targets: Vec<String> = server.requests().into_iter().map(|r| r.target).collect();
    assert_eq!(
        targets.iter().filter(|t| *t == "/apply-template").count(),
        6,
        "{targets:?}"
    );
    // Without a server: a transport error.
    drop(server);
    let error = counter.count(&llama, b"{}", b"{}").unwrap_err();
    assert!(matches!(error, LiveError::Transport { .. }), "{error}");
}

/// After `scripts/llama-server.sh stop` and `start` the server is on a new port, written to
/// the same URL file: `ServerUrl::refresh` says so, `url` reads it; a file gone or empty is
/// an error naming the file.
#[test]
fn a_restarted_server_s_new_url_is_read_again_from_its_url_file() {
    let dir = std::env::temp_dir().join(format!("prompt-llama-helpers-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("llama-server.url");
    std::fs::write(&file, "http://127.0.0.1:8080\n").unwrap();
    let mut server = ServerUrl::file(&file);
    assert_eq!(server.source(), file.display().to_string());
    assert_eq!(
        server.refresh().unwrap().as_deref(),
        Some("http://127.0.0.1:8080")
    );
    assert_eq!(server.refresh().unwrap(), None);
    std::fs::write(&file, "http://127.0.0.1:9191\n").unwrap();
    assert_eq!(
        server.refresh().unwrap().as_deref(),
        Some("http://127.0.0.1:9191")
    );
    std::fs::write(&file, "\n").unwrap();
    let error = server.url().unwrap_err().to_string();
    assert!(
        error.contains(&file.display().to_string()) && error.contains("empty"),
        "{error}"
    );
    std::fs::remove_file(&file).unwrap();
    assert!(matches!(server.url(), Err(LiveError::UrlFile { .. })));
    std::fs::remove_dir_all(&dir).unwrap();
}
