//! The `main` built from README.md's third `[dependencies]` snippet (with the llama.cpp
//! helpers): the URL file read again after a restart, and a server that is not there named
//! in the error.

use prompt_llama::{LiveError, LlamaClient, NewTokens, ServerUrl};
use prompt_registry::{ApiKind, Report};

fn main() -> Result<(), Report> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let file = std::env::temp_dir().join(format!("snippet-llama-{}.url", std::process::id()));
    std::fs::write(&file, format!("http://127.0.0.1:{port}\n"))?;
    let mut server = ServerUrl::file(&file);
    let url = server.refresh()?.ok_or(Report::msg("the first read gives the URL"))?;
    std::fs::remove_file(&file)?;
    let llama = LlamaClient::new(url);
    // Nothing listens there: a typed error naming the URL.
    let error = llama.health().err().ok_or(Report::msg("nothing listens there"))?;
    assert!(matches!(error, LiveError::Transport { .. }), "{error}");
    let mut counter = NewTokens::new(ApiKind::LlamaCpp);
    assert!(counter.count(&llama, b"{}", b"{}").is_err());
    println!("llama: ok");
    Ok(())
}
