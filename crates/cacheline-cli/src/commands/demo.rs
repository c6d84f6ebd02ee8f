//! `cacheline demo`: the scripted session, byte by byte, against replace-at-head.

use std::error::Error;
use std::io::Write;
use std::path::PathBuf;

use prompt_core::delivery::PrefixRole;
use prompt_core::input;
use prompt_reference::demo::{self, DemoOptions, DemoState, DemoTurn};
use prompt_reference::scenario::ScenarioSize;
use prompt_registry::wire::{ResumePoint, Wire, WireOptions};
use prompt_registry::{ApiKind, DeliveryStyle, Profile, Registry, cli};
use serde::{Deserialize, Serialize};

use super::DEFAULT_CONFIG;
use crate::output::{pct_of, progress, write_json_error};

/// Arguments of `demo`.
#[derive(Debug, clap::Args)]
pub(crate) struct DemoArgs {
    /// agent.toml to use (default: the built-in one); `-` reads standard input.
    #[arg(long)]
    config: Option<PathBuf>,
    /// The last turn to play (with --resume: play on from the saved turn to this one).
    #[arg(long, default_value_t = 12)]
    turns: u64,
    /// How updates are delivered: system, user-reminder, merged (into the next user
    /// message) or first-user (merged, and the prefix in the first user message). Default:
    /// the --api's own (user-reminder for anthropic and gemini), else system.
    #[arg(long, value_parser = parse_delivery)]
    delivery: Option<DeliveryStyle>,
    /// Measure and write each request as this API's body, with the tools in its tools
    /// field: openai, openai-responses, anthropic, gemini or llama-cpp. Without it, a
    /// request is its messages array and the tools are text in the prefix.
    #[arg(long, value_parser = parse_api)]
    api: Option<ApiKind>,
    /// The model the bodies are for (with --api): its provider profile decides how updates
    /// travel, which system messages may follow the first, the TTL and retention fields
    /// (see docs/wire.md, Provider profiles); the agent.toml's `[provider]` section applies
    /// over it. Without it (and without a `[provider]` section) the bodies name `demo-model`
    /// and updates travel the --api's way.
    #[arg(long, requires = "api")]
    model: Option<String>,
    /// The base URL the model is served at (with --model): a host the profile table knows
    /// (`api.deepseek.com`, a Bedrock endpoint for Claude, …) picks its row.
    #[arg(long, value_name = "URL", requires = "model")]
    base_url: Option<String>,
    /// Write the session after the last turn to FILE (resume it with --resume).
    #[arg(long, value_name = "FILE")]
    save: Option<PathBuf>,
    /// Go on from a session written by --save.
    #[arg(long, value_name = "FILE")]
    resume: Option<PathBuf>,
    /// Write every request exactly as it would be sent, one file per request:
    /// DIR/request-001.json, request-002.json, … (numbered across --save and --resume).
    #[arg(long, value_name = "DIR")]
    write_bodies: Option<PathBuf>,
    /// Print JSON instead of text.
    #[arg(long)]
    json: bool,
}

/// The most a saved demo may hold: 256 MiB (a long session's history).
const SAVED_LIMIT: u64 = 256 << 20;

fn parse_api(s: &str) -> Result<ApiKind, String> {
    match s {
        "openai" => Ok(ApiKind::OpenAi),
        "openai-responses" => Ok(ApiKind::OpenAiResponses),
        "anthropic" => Ok(ApiKind::Anthropic),
        "gemini" => Ok(ApiKind::Gemini),
        "llama-cpp" => Ok(ApiKind::LlamaCpp),
        other => Err(format!(
            "unknown api `{other}`: expected openai, openai-responses, anthropic, gemini or llama-cpp"
        )),
    }
}

/// The name `--api` takes for `api`.
fn api_flag(api: ApiKind) -> &'static str {
    match api {
        ApiKind::OpenAi => "openai",
        ApiKind::OpenAiResponses => "openai-responses",
        ApiKind::Anthropic => "anthropic",
        ApiKind::Gemini => "gemini",
        ApiKind::LlamaCpp => "llama-cpp",
    }
}

/// What `--save` writes: the demo, and with `--api` the API and where its wire stopped
/// (Anthropic's rolling breakpoints depend on the previous body).
#[derive(Debug, Serialize, Deserialize)]
struct SavedDemo {
    demo: DemoState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    api: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    wire: Option<ResumePoint>,
}

/// The model the bodies name without --model.
const DEMO_MODEL: &str = "demo-model";

/// The body parameters each API needs besides the model (Anthropic requires `max_tokens`),
/// and the profile, when one applies.
fn wire_options(api: ApiKind, profile: Option<&Profile>) -> WireOptions {
    let options = match profile {
        Some(profile) => WireOptions::for_profile(profile),
        None => WireOptions::new(DEMO_MODEL),
    };
    match api {
        ApiKind::Anthropic => options.param("max_tokens", &serde_json::json!(1024)),
        _ => options,
    }
}

fn parse_delivery(s: &str) -> Result<DeliveryStyle, String> {
    match s {
        "system" => Ok(DeliveryStyle::system()),
        "user-reminder" => Ok(DeliveryStyle::user_reminder("system-reminder")),
        "merged" => Ok(DeliveryStyle::merged_into_user("system-reminder")),
        "first-user" => {
            Ok(DeliveryStyle::merged_into_user("system-reminder")
                .with_prefix(PrefixRole::FirstUser))
        }
        other => Err(format!(
            "unknown delivery `{other}`: expected system, user-reminder, merged or first-user"
        )),
    }
}

const LEGEND: &str = "\
Each turn's request is composed twice: by the library (a frozen prefix, an append-only
history, per-turn writers appended after it) and by the old replace-at-head composition
(every writer rewritten into message 0 each turn, constant and session writers first, its
most charitable order). A turn is a user request (`3`) and the continuations the agent
sends after each round of tool results (`3.1`, `3.2`). Columns: request B = bytes sent;
reused B = bytes shared with the previous request of the same composition (what a prefix
cache keeps); reused % = reused over sent. Lines under a request: what happened before it
(events), the history nodes new in it (+), and the messages sent at the end of this request
only (ephemeral).
";

pub(crate) fn run(
    args: &DemoArgs,
    registry: &Registry,
    out: &mut dyn Write,
    err: &mut dyn Write,
) -> Result<u8, Box<dyn Error>> {
    let Some((policy, provider)) =
        cli::load_agent_toml(args.config.as_deref(), registry, Some(DEFAULT_CONFIG), err)?
    else {
        return Ok(2);
    };
    // The profile of the model asked for, the operator's [provider] section over it.
    let profile = match args.api {
        Some(api) if args.model.is_some() || provider.is_present() => Some(provider.profile(
            api,
            args.model.as_deref().unwrap_or(DEMO_MODEL),
            args.base_url.as_deref(),
        )),
        _ => None,
    };
    let resume = match &args.resume {
        None => None,
        Some(path) => {
            let text = match input::read_text(path, SAVED_LIMIT) {
                Ok(text) => text,
                Err(e) => {
                    cli::write_error(err, None, &e);
                    return Ok(2);
                }
            };
            match serde_json::from_str::<SavedDemo>(&text) {
                Ok(saved) => {
                    let given = args.api.map(api_flag);
                    if saved.api.as_deref() != given {
                        let flag = |api: Option<&str>| {
                            api.map_or("no --api".to_owned(), |a| format!("--api {a}"))
                        };
                        writeln!(
                            err,
                            "{}: error: saved with {}; resume it with the same (given: {})",
                            path.display(),
                            flag(saved.api.as_deref()),
                            flag(given)
                        )?;
                        return Ok(2);
                    }
                    Some(saved)
                }
                Err(e) => {
                    write_json_error(err, path, &e);
                    return Ok(2);
                }
            }
        }
    };
    let mut wire = match args.api {
        None => None,
        Some(api) => {
            let mut wire = Wire::new(api, wire_options(api, profile.as_ref()))?;
            if let Some(point) = resume.as_ref().and_then(|r| r.wire) {
                wire.resume_from(point);
            }
            Some(wire)
        }
    };
    if let Some(dir) = &args.write_bodies {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("{}: cannot create the directory: {e}", dir.display()))?;
    }
    // About three requests per turn (tool calls are continuations), twice.
    let bar = progress(
        args.turns.saturating_mul(6),
        "{spinner} composing {pos}/{len} requests {wide_bar}",
    );
    let mut on_progress = |n: u64| bar.set_position(n);
    let mut write_body = |sequence: u64, bytes: &[u8]| -> std::io::Result<()> {
        match &args.write_bodies {
            Some(dir) => std::fs::write(dir.join(format!("request-{sequence:03}.json")), bytes),
            None => Ok(()),
        }
    };
    let mut encode =
        |request: &prompt_registry::Request<'_>| -> Result<Vec<u8>, Box<dyn Error + Send + Sync>> {
            match wire.as_mut() {
                Some(wire) => Ok(wire.body(request)?.to_bytes()),
                None => Ok(request.to_bytes()),
            }
        };
    let mut options = DemoOptions::new(args.turns);
    options.delivery = match (&args.delivery, &profile, args.api) {
        (Some(delivery), _, _) => delivery.clone(),
        (None, Some(profile), _) => profile.delivery(),
        (None, None, Some(api)) => api.delivery(),
        (None, None, None) => DeliveryStyle::system(),
    };
    if args.api.is_some() {
        options.tools = Some(ScenarioSize::Full.tools()?);
    }
    options.resume = resume.map(|r| r.demo);
    options.progress = Some(&mut on_progress);
    options.sink = Some(&mut write_body);
    options.encode = Some(&mut encode);
    let delivery = options.delivery.clone();
    let tools = options.tools.clone();
    let run = demo::run_demo(registry, &policy, options)?;
    // Each branch gets the wire forked for it: a wire follows one session.
    let mut encode_branch =
        |request: &prompt_registry::Request<'_>| -> Result<Vec<u8>, Box<dyn Error + Send + Sync>> {
            match wire.as_ref() {
                Some(wire) => Ok(wire
                    .fork_for(request.session_id())
                    .body(request)?
                    .to_bytes()),
                None => Ok(request.to_bytes()),
            }
        };
    let lifecycle =
        demo::play_lifecycle(registry, &policy, &run, delivery, tools, &mut encode_branch)?;
    bar.finish_and_clear();
    if let Some(path) = &args.save {
        let saved = SavedDemo {
            demo: run.state,
            api: args.api.map(api_flag).map(str::to_owned),
            wire: wire.as_ref().and_then(Wire::resume_point),
        };
        let text = serde_json::to_string(&saved)?;
        std::fs::write(path, text).map_err(|e| format!("{}: cannot write: {e}", path.display()))?;
    }
    let report = run.turns;
    if args.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&report)?)?;
    } else {
        print(&report, out)?;
        if let Some(profile) = &profile {
            writeln!(out, "profile: {profile}")?;
        }
        print_lifecycle(&lifecycle, out)?;
    }
    Ok(0)
}

fn print_lifecycle(steps: &[demo::LifecycleStep], out: &mut dyn Write) -> std::io::Result<()> {
    writeln!(
        out,
        "\nwhat the cache keeps when the app branches or restarts (each request against the last one sent):"
    )?;
    for step in steps {
        writeln!(
            out,
            "  {}: {} B, {} reused ({}): {}",
            step.action,
            step.request_bytes,
            step.reused_bytes,
            pct_of(step.reused_bytes as u64, step.request_bytes as u64),
            step.kept
        )?;
    }
    Ok(())
}

fn print(turns: &[DemoTurn], out: &mut dyn Write) -> std::io::Result<()> {
    out.write_all(LEGEND.as_bytes())?;
    writeln!(out)?;
    writeln!(
        out,
        "turn   request B  reused B  reused %  | replace-at-head: request B  reused B  reused %"
    )?;
    let (mut sent, mut reused, mut head_sent, mut head_reused) = (0u64, 0u64, 0u64, 0u64);
    for t in turns {
        writeln!(
            out,
            "{:>5}  {:>9}  {:>8}  {:>8}  | {:>27}  {:>8}  {:>8}",
            t.label,
            t.request_bytes,
            t.reused_bytes,
            pct_of(t.reused_bytes as u64, t.request_bytes as u64),
            t.head_rewrite_bytes,
            t.head_rewrite_reused,
            pct_of(t.head_rewrite_reused as u64, t.head_rewrite_bytes as u64)
        )?;
        if !t.events.is_empty() {
            writeln!(out, "      events: {}", t.events.join("; "))?;
        }
        for a in &t.appended {
            writeln!(
                out,
                "      + {} ({:?}, {} B): {}",
                a.producer, a.kind, a.bytes, a.why
            )?;
        }
        if !t.ephemeral.is_empty() {
            writeln!(
                out,
                "      ephemeral (this request only): {}",
                t.ephemeral.join(", ")
            )?;
        }
        sent = sent.saturating_add(t.request_bytes as u64);
        reused = reused.saturating_add(t.reused_bytes as u64);
        head_sent = head_sent.saturating_add(t.head_rewrite_bytes as u64);
        head_reused = head_reused.saturating_add(t.head_rewrite_reused as u64);
    }
    writeln!(
        out,
        "total: cacheline reused {reused} of {sent} B ({}); replace-at-head reused {head_reused} of {head_sent} B ({})",
        pct_of(reused, sent),
        pct_of(head_reused, head_sent)
    )?;
    if let Some(first) = turns.first() {
        writeln!(
            out,
            "prefix fingerprint: {}; routing key (prompt_cache_key): {}",
            first.fingerprint, first.routing_key
        )?;
    }
    Ok(())
}
