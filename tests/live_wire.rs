//! The wire on a real llama.cpp server: the scripted session (tools field, tool calls
//! answered in continuations, updates, an edited system prompt) played through the three
//! endpoints the server speaks, each request the exact body `prompt-wire` writes:
//! `/v1/chat/completions`, `/v1/responses` and Anthropic-shaped `/v1/messages`.
//!
//! For every request after the first, the tokens the server re-processed (what each API's
//! usage reports, read into `UsageFigures`) stay within the new tokens + 4, the new tokens
//! being the request's tokens beyond the previous body's stable part (counted by the
//! server's own token counters). The API's cached counter agrees with llama.cpp's timings:
//! `timings.cache_n` in a Chat Completions reply; the server log's "prompt eval" count
//! (what `timings.prompt_n` reports) for the other two, which carry no timings.

use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::process::Command;

use prompt_core::ApiKind;
use prompt_llama::LlamaClient;
use prompt_reference::components::ToolsField;
use prompt_reference::scenario::{self, RequestLabels, ScenarioSize};
use prompt_registry::snapshot::RestoreMode;
use prompt_registry::tools::ToolSet;
use prompt_registry::wire::{Reply, Wire, WireOptions, read_reply};
use prompt_registry::{
    Component, Conversation, ConversationSnapshot, Extensions, PromptPolicy, Registry, Request,
    Session, SessionContext,
};
use serde_json::{Value, json};

use crate::live_llama::{SLACK, TURNS, child_env, in_ci, say, server, server_log};

/// One request as sent and as the server answered it.
#[derive(Debug)]
pub(crate) struct Sent {
    pub(crate) label: String,
    /// The cache epoch (`None` when the request is not at hand).
    epoch: Option<u64>,
    /// The body's tokens, by the server's count.
    total: u64,
    /// Tokens the server re-processed, as the API's usage reports them.
    pub(crate) reprocessed: u64,
    /// Tokens served from the cache, as the API's usage reports them.
    cached: u64,
    /// `timings.cache_n` (Chat Completions only).
    timings_cache_n: Option<u64>,
    /// The log's prompt-eval count for this request, when the log is readable.
    logged_prompt_n: Option<u64>,
    /// Tokens of the body without its per-request tail, generation prompt excluded.
    stable: u64,
}

/// The endpoint of `api` on llama.cpp's server.
pub(crate) fn endpoint(api: ApiKind) -> &'static str {
    match api {
        ApiKind::OpenAiResponses => "/v1/responses",
        ApiKind::Anthropic => "/v1/messages",
        _ => "/v1/chat/completions",
    }
}

/// Greedy, four tokens: the replies are not recorded (the script's are), only measured.
pub(crate) fn options(api: ApiKind) -> WireOptions {
    scenario::llama_cpp_wire_options(api, 4, false)
}

pub(crate) fn post(client: &LlamaClient, path: &str, body: &[u8]) -> Value {
    let bytes = client
        .post_body(path, body)
        .unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// The server's token count of `body` for `api`, generation prompt included.
fn count_tokens(client: &LlamaClient, api: ApiKind, body: &[u8]) -> u64 {
    client
        .count_tokens(api, body)
        .unwrap_or_else(|e| panic!("counting tokens: {e}"))
}

/// The "prompt eval time = … / N tokens" counts the server logged after `offset`.
fn logged_prompt_evals(log: &Path, offset: u64) -> Option<Vec<u64>> {
    let mut file = std::fs::File::open(log).ok()?;
    file.seek(SeekFrom::Start(offset)).ok()?;
    let mut text = String::new();
    file.take(16 << 20).read_to_string(&mut text).ok()?;
    Some(
        text.lines()
            .filter(|l| l.contains("print_timing") && l.contains("prompt eval time"))
            .filter_map(|l| {
                let tokens = l.rsplit_once('/')?.1.trim();
                tokens.split_whitespace().next()?.parse().ok()
            })
            .collect(),
    )
}

fn log_len(log: Option<&Path>) -> u64 {
    log.and_then(|l| std::fs::metadata(l).ok())
        .map_or(0, |m| m.len())
}

/// What every session of these tests is made of: the reference components under the
/// built-in agent.toml, the compact script's session values, its tools in the tools field.
pub(crate) struct Setup {
    components: Vec<Component>,
    policy: PromptPolicy,
    tools: ToolSet,
}

impl Setup {
    pub(crate) fn new() -> Self {
        let registry = Registry::linked().unwrap_or_else(|e| panic!("{e}"));
        let policy = scenario::default_policy(&registry).unwrap_or_else(|e| panic!("{e}"));
        Self {
            components: registry.components().cloned().collect(),
            policy,
            tools: ScenarioSize::Compact
                .tools()
                .unwrap_or_else(|e| panic!("{e}")),
        }
    }

    /// The session's values (not `Clone`: made anew for each session).
    fn values() -> Extensions {
        let mut values = ScenarioSize::Compact
            .session_values()
            .unwrap_or_else(|e| panic!("{e}"));
        values.insert(ToolsField);
        values
    }

    fn start(&self, api: ApiKind) -> Session {
        Session::start(
            self.components.clone(),
            &self.policy,
            SessionContext::new(Self::values()),
            prompt_registry::wire::session_options(api, self.tools.clone()),
        )
        .unwrap_or_else(|e| panic!("{e}"))
    }

    /// A conversation to `api` over a wire with `options`.
    pub(crate) fn conversation(&self, api: ApiKind, options: WireOptions) -> Conversation {
        let wire = Wire::new(api, options).unwrap_or_else(|e| panic!("{e}"));
        Conversation::new(self.start(api), wire)
    }

    fn restore(&self, api: ApiKind, snapshot: &ConversationSnapshot) -> Conversation {
        let restored = Conversation::restore(
            snapshot,
            self.components.clone(),
            &self.policy,
            SessionContext::new(Self::values()),
            prompt_registry::wire::session_options(api, self.tools.clone()),
            options(api),
            RestoreMode::Strict,
        )
        .unwrap_or_else(|e| panic!("{e}"));
        assert!(restored.changes.is_none(), "the frozen prefix is unchanged");
        restored.conversation
    }
}

/// Sends bodies to the server and measures each.
pub(crate) struct Sender<'a> {
    client: &'a LlamaClient,
    api: ApiKind,
    log: Option<PathBuf>,
    generation: u64,
}

impl<'a> Sender<'a> {
    pub(crate) fn new(client: &'a LlamaClient, api: ApiKind) -> Self {
        let log = server_log().filter(|l| l.is_file());
        if log.is_none() {
            let why = "the server log (scripts/llama-server.sh's) is not readable";
            assert!(!in_ci(), "{api:?}: CI=true and {why}");
            say(&format!(
                "{api:?}: {why}: the cached counters are checked against timings only for Chat Completions"
            ));
        }
        Self {
            client,
            api,
            log,
            generation: client
                .generation_prompt_tokens()
                .unwrap_or_else(|e| panic!("{e}")),
        }
    }

    /// Sends `request`'s body, as `wire` writes it.
    fn send(&self, wire: &mut Wire, request: &Request<'_>, label: String) -> Sent {
        let (api, client) = (self.api, self.client);
        let path = endpoint(api);
        let body = wire.body(request).unwrap_or_else(|e| panic!("{e}"));
        let (bytes, stable_body) = (body.to_bytes(), body.stable_body());
        let before = self.log_offset();
        let answer = client
            .post_body(path, &bytes)
            .unwrap_or_else(|e| panic!("{path}: {e}"));
        // The reply reads back as the API's reply, and its usage through the meter.
        let reply = read_reply(api, &answer).unwrap_or_else(|e| {
            panic!(
                "{path}: {e}: {}",
                String::from_utf8_lossy(&answer[..answer.len().min(500)])
            )
        });
        let answer: Value = serde_json::from_slice(&answer).unwrap_or_else(|e| panic!("{e}"));
        let mut sent = self.measure(label, &reply, before, &stable_body);
        sent.epoch = Some(request.epoch());
        sent.timings_cache_n = answer["timings"]["cache_n"].as_u64();
        sent
    }

    /// Where the server log ends now: what it logs for the next request comes after.
    ///
    /// The server writes a request's timings after it has sent the reply, so the line of the
    /// request before may still be on its way: the log is first let settle (unchanged for
    /// 150 ms, at most 5 s), or that line would be read as the next request's.
    pub(crate) fn log_offset(&self) -> u64 {
        let log = self.log.as_deref();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        let mut len = log_len(log);
        while log.is_some() && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(150));
            let now = log_len(log);
            if now == len {
                break;
            }
            len = now;
        }
        len
    }

    /// What the server reported for the request whose body's stable part is `stable_body`:
    /// `reply`'s usage through the meter, and the log's prompt-eval count after `before`.
    pub(crate) fn measure(
        &self,
        label: String,
        reply: &Reply,
        before: u64,
        stable_body: &[u8],
    ) -> Sent {
        let path = endpoint(self.api);
        // This request's timings may be written just after its reply: wait for them (10 s
        // at most; none then is reported by the caller's assertion, not hidden here).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let logged = loop {
            let counts = self
                .log
                .as_deref()
                .and_then(|l| logged_prompt_evals(l, before));
            match counts.as_ref().and_then(|c| c.last().copied()) {
                Some(count) => break Some(count),
                None if self.log.is_some() && std::time::Instant::now() < deadline => {
                    std::thread::sleep(std::time::Duration::from_millis(20));
                }
                None => break None,
            }
        };
        // The engine's own figures, read from whichever API's usage the reply carries.
        let figures = reply
            .figures()
            .unwrap_or_else(|e| panic!("{path}: {e}"))
            .unwrap_or_else(|| panic!("{path}: no usage in the reply"));
        Sent {
            label,
            epoch: None,
            total: figures.prompt,
            reprocessed: figures.reprocessed,
            cached: figures.cached,
            timings_cache_n: None,
            logged_prompt_n: logged,
            stable: count_tokens(self.client, self.api, stable_body)
                .saturating_sub(self.generation),
        }
    }
}

/// Prints the per-request table of `sent`, under `title`.
pub(crate) fn print_table(title: &str, sent: &[Sent]) {
    let mut table = format!("{title}:\n  request  tokens  re-processed  cached  new\n");
    for pair in sent.windows(2) {
        let (previous, s) = (&pair[0], &pair[1]);
        table.push_str(&format!(
            "  {:>7}  {:>6}  {:>12}  {:>6}  {:>3}\n",
            s.label,
            s.total,
            s.reprocessed,
            s.cached,
            s.total.saturating_sub(previous.stable)
        ));
    }
    say(&table);
}

/// Plays the compact script's first [`TURNS`] turns through `api`'s endpoint.
fn play(client: &LlamaClient, api: ApiKind) -> Vec<Sent> {
    let mut session = Setup::new().start(api);
    let mut wire = Wire::new(api, options(api)).unwrap_or_else(|e| panic!("{e}"));
    let sender = Sender::new(client, api);
    let path = endpoint(api);
    let mut labels = RequestLabels::default();
    let mut sent = Vec::new();
    ScenarioSize::Compact
        .play(&mut session, 1..=TURNS, &mut |step, request| {
            let label = labels.next(step.turn, request.is_continuation());
            sent.push(sender.send(&mut wire, request, label));
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{e}"));
    print_table(&format!("{api:?} through {path}"), &sent);
    sent
}

fn check(api: ApiKind, test: &str) {
    let Some((client, _guard)) = server(test) else {
        return;
    };
    let sent = play(&client, api);
    assert_reprocesses_only_new_tokens(api, &sent);
}

/// What every live session asserts of its requests: the usage adds up, agrees with the
/// server's timings and log, and each request after the first re-processes only its new
/// tokens (+ [`SLACK`]).
pub(crate) fn assert_reprocesses_only_new_tokens(api: ApiKind, sent: &[Sent]) {
    assert!(
        sent.len() > TURNS as usize,
        "{api:?}: tool calls are continuations"
    );
    for s in sent {
        assert_eq!(s.reprocessed + s.cached, s.total, "{api:?} {}", s.label);
        if let Some(cache_n) = s.timings_cache_n {
            assert_eq!(
                s.cached, cache_n,
                "{api:?} {}: cached != timings.cache_n",
                s.label
            );
        }
        if let Some(prompt_n) = s.logged_prompt_n {
            assert_eq!(
                s.reprocessed, prompt_n,
                "{api:?} {}: the usage's uncached tokens != the server's prompt eval count",
                s.label
            );
        }
    }
    // llama.cpp evaluates at least one token of every prompt. (The first request may find
    // its frozen prefix cached by an earlier test: the server is shared.)
    assert!(sent.iter().all(|s| s.reprocessed >= 1), "{api:?}: {sent:?}");
    for pair in sent.windows(2) {
        let (previous, s) = (&pair[0], &pair[1]);
        if let (Some(before), Some(now)) = (previous.epoch, s.epoch) {
            assert_eq!(before, now, "no compaction within {TURNS} turns");
        }
        let new = s.total.saturating_sub(previous.stable);
        assert!(
            s.reprocessed <= new + SLACK,
            "{api:?} request {}: re-processed {} tokens, but only {new} are new ({} in all)",
            s.label,
            s.reprocessed,
            s.total
        );
    }
}

#[test]
fn wire_chat_completions_reprocesses_only_new_tokens() {
    check(
        ApiKind::LlamaCpp,
        "wire_chat_completions_reprocesses_only_new_tokens",
    );
}

#[test]
fn wire_responses_reprocesses_only_new_tokens() {
    check(
        ApiKind::OpenAiResponses,
        "wire_responses_reprocesses_only_new_tokens",
    );
}

#[test]
fn wire_anthropic_messages_reprocesses_only_new_tokens() {
    check(
        ApiKind::Anthropic,
        "wire_anthropic_messages_reprocesses_only_new_tokens",
    );
}

/// Set in the child process of the resume test: the file the parent saved.
const RESUME_CHILD: &str = "CACHELINE_LIVE_RESUME_FILE";
/// The turn the parent saves after.
const SAVED_AFTER: u64 = 4;

/// A session played to turn [`SAVED_AFTER`] through `/v1/chat/completions` and saved; a new
/// process (this test binary again, in child mode) restores it and sends the next turn's
/// first request: the server re-processes only its new tokens.
/// Plays the compact script's turns `1..=turns` through `api`'s endpoint: the session and
/// wire as they are after, the sender, the labels, and the last request as measured.
fn play_to(
    client: &LlamaClient,
    api: ApiKind,
    turns: u64,
) -> (Session, Wire, Sender<'_>, RequestLabels, Sent) {
    let mut session = Setup::new().start(api);
    let mut wire = Wire::new(api, options(api)).unwrap_or_else(|e| panic!("{e}"));
    let sender = Sender::new(client, api);
    let mut labels = RequestLabels::default();
    let mut last = None;
    ScenarioSize::Compact
        .play(&mut session, 1..=turns, &mut |step, request| {
            let label = labels.next(step.turn, request.is_continuation());
            last = Some(sender.send(&mut wire, request, label));
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{e}"));
    let last = last.unwrap_or_else(|| panic!("nothing was sent"));
    (session, wire, sender, labels, last)
}

#[test]
fn wire_resumed_session_in_a_new_process_reprocesses_only_new_tokens() {
    if let Some(file) = std::env::var_os(RESUME_CHILD) {
        resume_in_child(Path::new(&file));
        return;
    }
    let test = "wire_resumed_session_in_a_new_process_reprocesses_only_new_tokens";
    let Some((client, _guard)) = server(test) else {
        return;
    };
    let api = ApiKind::LlamaCpp;
    let (session, wire, _sender, labels, last) = play_to(&client, api, SAVED_AFTER);
    let dir = std::env::temp_dir().join(format!("cacheline-live-resume-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    let file = dir.join("saved.json");
    let saved = json!({
        // One document for the session and its wire, through `serde_json::Value`, as an
        // agent keeping its state in one would.
        "conversation": Conversation::new(session, wire).save(),
        "labels": labels.state(),
    });
    std::fs::write(&file, saved.to_string()).unwrap_or_else(|e| panic!("{e}"));

    let output = Command::new(std::env::current_exe().unwrap_or_else(|e| panic!("{e}")))
        .args(["--exact", &format!("live_wire::{test}"), "--nocapture"])
        .env(RESUME_CHILD, &file)
        // The parent's server, not an instance of the child's own.
        .envs(child_env(&client))
        .output()
        .unwrap_or_else(|e| panic!("cannot start the child: {e}"));
    assert!(
        output.status.success(),
        "the child failed: {}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let result = std::fs::read_to_string(dir.join("result.json"))
        .unwrap_or_else(|e| panic!("the child wrote no result: {e}"));
    let result: Value = serde_json::from_str(&result).unwrap_or_else(|e| panic!("{e}"));
    let count = |key: &str| {
        result[key]
            .as_u64()
            .unwrap_or_else(|| panic!("no {key} in {result}"))
    };
    let (total, reprocessed, cache_n) = (count("total"), count("reprocessed"), count("cache_n"));
    let new = total.saturating_sub(last.stable);
    say(&format!(
        "resumed in a new process, request {}: {total} tokens, {reprocessed} re-processed, {cache_n} cached, {new} new",
        result["label"]
    ));
    assert_eq!(result["label"], format!("{}", SAVED_AFTER + 1));
    assert_eq!(reprocessed + cache_n, total);
    assert!(
        reprocessed <= new + SLACK,
        "the resumed session's first request re-processed {reprocessed} tokens, but only {new} are new ({total} in all)"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// The child: restores the saved session and wire, sends the next turn's first request,
/// and writes what the server reported beside the saved file.
fn resume_in_child(file: &Path) {
    let client = match prompt_llama::locate_server() {
        Ok(prompt_llama::ServerLocation::Found { url, .. }) => LlamaClient::new(url),
        other => panic!("the child finds no server: {other:?}"),
    };
    let api = ApiKind::LlamaCpp;
    let saved: Value =
        serde_json::from_str(&std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{e}")))
            .unwrap_or_else(|e| panic!("{e}"));
    let snapshot: ConversationSnapshot =
        serde_json::from_value(saved["conversation"].clone()).unwrap_or_else(|e| panic!("{e}"));
    let (turn, continuation) = serde_json::from_value::<(u64, u64)>(saved["labels"].clone())
        .unwrap_or_else(|e| panic!("{e}"));
    let (mut session, mut wire) = Setup::new().restore(api, &snapshot).into_parts();
    let sender = Sender::new(&client, api);
    let mut labels = RequestLabels::resume(turn, continuation);
    let mut first = None;
    let played = ScenarioSize::Compact.play(
        &mut session,
        SAVED_AFTER + 1..=SAVED_AFTER + 1,
        &mut |step, request| {
            let label = labels.next(step.turn, request.is_continuation());
            first = Some(sender.send(&mut wire, request, label));
            // The first request is the one measured.
            Err(prompt_reference::scenario::ScenarioError::Stopped)
        },
    );
    assert!(matches!(
        played,
        Err(prompt_reference::scenario::ScenarioError::Stopped)
    ));
    let first = first.unwrap_or_else(|| panic!("nothing was sent"));
    let result = json!({
        "label": first.label,
        "total": first.total,
        "reprocessed": first.reprocessed,
        "cache_n": first.timings_cache_n,
    });
    let out = file.with_file_name("result.json");
    std::fs::write(out, result.to_string()).unwrap_or_else(|e| panic!("{e}"));
}

/// Tokens of a Chat Completions body's first `messages` messages, by the server's template
/// and tokenizer, without a generation prompt: what a later prompt sharing them finds cached.
fn chat_tokens_of_first(client: &LlamaClient, body: &[u8], messages: usize) -> u64 {
    let mut body: Value = serde_json::from_slice(body).unwrap_or_else(|e| panic!("{e}"));
    if let Some(list) = body["messages"].as_array_mut() {
        list.truncate(messages);
    }
    body["add_generation_prompt"] = json!(false);
    let prompt = post(client, "/apply-template", body.to_string().as_bytes());
    client
        .tokenize(prompt["prompt"].as_str().unwrap_or_default())
        .unwrap_or_else(|e| panic!("tokenize: {e}"))
        .len() as u64
}

/// Branches on the live server: after the compact script's first turns, a regenerated
/// reply's request re-processes only the generation prompt (the server evaluates at least
/// its last token), and an edit of an earlier user message re-processes only what follows
/// the messages before it.
#[test]
fn wire_branch_regenerate_and_edit_of_message_k_reprocess_only_what_follows_the_fork_point() {
    let test =
        "wire_branch_regenerate_and_edit_of_message_k_reprocess_only_what_follows_the_fork_point";
    let Some((client, _guard)) = server(test) else {
        return;
    };
    let api = ApiKind::LlamaCpp;
    let (session, wire, sender, _labels, last) = play_to(&client, api, SAVED_AFTER);
    let conversation = Conversation::new(session, wire);
    let values = || scenario::turn_values(&ScenarioSize::Compact.script(SAVED_AFTER));

    // Regenerate: the last request again, on a branch; the server holds it in its cache.
    let (mut branch, mut branch_wire) = conversation
        .regenerate()
        .unwrap_or_else(|e| panic!("{e}"))
        .into_parts();
    let again = branch.resend(values()).unwrap_or_else(|e| panic!("{e}"));
    let regenerated = sender.send(&mut branch_wire, &again, "regenerate".to_owned());
    say(&format!(
        "regenerate of request {}: {} tokens, {} re-processed, {} cached (generation prompt: {} tokens)",
        last.label,
        regenerated.total,
        regenerated.reprocessed,
        regenerated.cached,
        sender.generation
    ));
    assert_eq!(regenerated.total, last.total, "the same request");
    assert!(
        regenerated.reprocessed <= sender.generation.max(1),
        "a regenerate re-processed {} tokens; the generation prompt is {}",
        regenerated.reprocessed,
        sender.generation
    );

    // Edit the user message of turn 2, then send it: the server's cache (the regenerated
    // request) shares every message before it.
    let users: Vec<usize> = conversation
        .session()
        .history()
        .nodes()
        .iter()
        .enumerate()
        .filter(|(_, n)| n.kind() == prompt_registry::NodeKind::User)
        .map(|(i, _)| i)
        .collect();
    let k = users[1];
    let (mut edited, mut edited_wire) = conversation
        .edit_user_message(k)
        .unwrap_or_else(|e| panic!("{e}"))
        .into_parts();
    let request = edited
        .turn(
            scenario::turn_values(&ScenarioSize::Compact.script(2)),
            "Actually, start with the README: what does it promise?",
        )
        .unwrap_or_else(|e| panic!("{e}"));
    let body = edited_wire
        .body(&request)
        .unwrap_or_else(|e| panic!("{e}"))
        .to_bytes();
    // The prefix message, then history nodes 0..k.
    let before_k = chat_tokens_of_first(&client, &body, k + 1);
    let sent = sender.send(&mut edited_wire, &request, "edit".to_owned());
    let follows = sent.total.saturating_sub(before_k);
    say(&format!(
        "edit of message {k}: {} tokens, {} re-processed, {} cached; {before_k} before message {k}, {follows} from it on",
        sent.total, sent.reprocessed, sent.cached
    ));
    assert!(
        sent.reprocessed <= follows + SLACK,
        "an edit of message {k} re-processed {} tokens, but only {follows} follow the fork point ({} in all)",
        sent.reprocessed,
        sent.total
    );
    assert!(sent.cached >= before_k.saturating_sub(SLACK), "{sent:?}");
}
