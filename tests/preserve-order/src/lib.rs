//! The bytes the library writes from `serde_json::Value`s, rendered as one text: tool
//! schemas, tool-result parts, user and assistant messages given as values, a wire
//! parameter, a whole Anthropic body, and the scripted reference session. Every object
//! here is written with its keys out of sorted order, so a writer that follows
//! serde_json's map order gives other bytes under `preserve_order`.
//!
//! Rendered by this crate's test (serde_json with `preserve_order`) and by
//! `crates/prompt-reference/tests/value_bytes.rs` (the normal build, which writes the fixture
//! [`FIXTURE`] when `CACHELINE_WRITE_FIXTURES=1`): both must match it.

use prompt_reference::scenario::{self, ScenarioSize, Strategy};
use prompt_registry::hash::Digest128;
use prompt_registry::session::{ToolResult, UserInput};
use prompt_registry::tools::{ToolSet, ToolSource};
use prompt_registry::wire::{Wire, WireOptions};
use prompt_registry::{
    ApiKind, Component, ComponentId, Extensions, Placement, PromptPolicy, Registry, Session,
    SessionContext,
};
use serde_json::json;

/// The fixture, relative to the workspace root.
pub const FIXTURE: &str = "tests/preserve-order/fixtures/value_bytes.txt";

/// Whether this build's serde_json keeps insertion order.
pub fn preserve_order_enabled() -> bool {
    let map = json!({"b": 0, "a": 0});
    map.as_object()
        .and_then(|m| m.keys().next())
        .is_some_and(|first| first == "b")
}

/// Every case, `## name` then its bytes.
pub fn render() -> Result<String, Box<dyn std::error::Error>> {
    let mut out = String::new();
    let mut case = |name: &str, bytes: &[u8]| {
        out.push_str("## ");
        out.push_str(name);
        out.push('\n');
        out.push_str(&String::from_utf8_lossy(bytes));
        out.push('\n');
    };

    let listing = json!([
        {"type": "function", "function": {"name": "search", "description": "Search issues.",
         "parameters": {"type": "object", "required": ["q"],
                        "properties": {"q": {"type": "string", "description": "query"},
                                       "limit": {"type": "integer", "minimum": 1}}}}},
        {"name": "read_file", "description": "Read a file.",
         "input_schema": {"type": "object", "properties": {"path": {"type": "string"}}}},
    ]);
    let tools = ToolSet::from_openai(&[(ToolSource::mcp("GitHub"), &listing)])?;
    case("ToolSet::from_openai", tools.openai_json().as_bytes());

    let parts = ToolResult::parts(
        "call_1",
        &json!([{"type": "text", "text": "a"}, {"type": "image_url", "image_url": {"url": "u", "detail": "low"}}]),
    );
    case("ToolResult::parts", parts.to_json().as_bytes());

    let components = vec![
        Component::constant(ComponentId::new("house_rules")?, "You are terse.")
            .placement(Placement::Prefix),
    ];
    let policy = PromptPolicy::from_agent_toml(
        "[prompt]\nprefix_allow = [\"house_rules\"]",
        "agent.toml",
        &components,
    )?
    .deny_warnings()?;
    let options = prompt_registry::wire::session_options(ApiKind::Anthropic, tools);
    let mut session = Session::start(components, &policy, SessionContext::default(), options)?;
    let mut wire = Wire::new(
        ApiKind::Anthropic,
        WireOptions::new("claude-sonnet-4-5")
            .param("max_tokens", &json!(1024))
            .param(
                "metadata",
                &json!({"user_id": "u1", "tier": {"z": 1, "a": 2}}),
            ),
    )?;
    let user = json!({"role": "user", "content": [{"type": "text", "text": "Read main.rs", "cache": false}]});
    let first = session.turn(Extensions::new(), UserInput::Message(user))?;
    case("UserInput::Message", first.to_bytes().as_slice());
    session.record_assistant(&json!({"role": "assistant", "content": "Reading.",
                                     "x_vendor": {"score": 1, "id": "r1"}}))?;
    let next = session.turn(Extensions::new(), "And now?")?;
    case("Session::record_assistant", next.to_bytes().as_slice());
    case(
        "Wire::body (Anthropic)",
        wire.body(&next)?.to_bytes().as_slice(),
    );

    // The scripted reference session: its prefix writers (tool schemas), tool calls and
    // results, as `cacheline demo` composes them; digests, the bytes are large.
    let registry = Registry::linked()?;
    let tools = ScenarioSize::Full.tools()?;
    case(
        "reference tools",
        format!(
            "{} bytes, {}",
            tools.openai_json().len(),
            Digest128::of(&[tools.openai_json().as_bytes()])
        )
        .as_bytes(),
    );
    for strategy in Strategy::ALL {
        for request in scenario::compose(strategy, &registry, 4)? {
            let bytes = request.to_bytes();
            case(
                &format!("reference {strategy:?} request {}", request.sequence),
                format!("{} bytes, {}", bytes.len(), Digest128::of(&[&bytes])).as_bytes(),
            );
        }
    }
    Ok(out)
}
