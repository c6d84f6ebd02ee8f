//! The `main` built from README.md's first `[dependencies]` snippet (the facade with `cli`):
//! a writer declared with the attribute, an agent.toml, a session's first body, and the
//! `status` command over the program's own registry.

use prompt_registry::{Extensions, Registry, Report, SessionContext, SessionOptions, prompt_component};

/// Who the assistant is.
#[prompt_component(placement = "prefix")]
const HOUSE_STYLE: &str = "You are a careful coding assistant.";

fn main() -> Result<(), Report> {
    let registry = Registry::linked()?;
    let policy = registry
        .load_policy("[prompt]\nprefix_allow = [\"house_style\"]\n", "agent.toml")?
        .deny_warnings()?;
    let mut session =
        registry.start_session(&policy, SessionContext::default(), SessionOptions::default())?;
    let body = String::from_utf8(session.turn(Extensions::new(), "Hi.")?.to_bytes())?;
    assert!(body.starts_with(r#"[{"role":"system","content":"You are a careful coding assistant."}"#), "{body}");

    let (mut out, mut err) = (Vec::new(), Vec::new());
    let app = prompt_registry::cli::App::new("my-agent", "0.1.0");
    let code = prompt_registry::cli::run_with(app, ["my-agent", "status"], &registry, &mut out, &mut err);
    let status = String::from_utf8(out)?;
    assert_eq!(code, 0, "{}", String::from_utf8_lossy(&err));
    assert!(status.lines().any(|l| l.starts_with("house_style") && l.contains("prefix")), "{status}");
    println!("facade: ok");
    Ok(())
}
