//! A multi-turn session measured on a live server: the library's composition against
//! replace-at-head on the same conversation.
//!
//! The conversation runs over the reference components: the date rolls over at turn 4,
//! the todo list changes every third turn, plan mode is on at turns 3–4, the assistant
//! instructions are edited at turn 5 (`set_system_prompt`: appended), and the git state and
//! recalled memories are ephemeral tail output of every request. The assistant's replies
//! are scripted, so both arms send the same conversation whatever the model generates; the
//! model only generates a few tokens per request, which is all the time to first token needs.
//!
//! Each arm runs alone on the server's single slot (library first, then replace-at-head),
//! so each request finds the previous request of its own arm in the cache.

use std::io::{self, Write};

use prompt_core::{Content, Extensions, PromptPolicy, SessionContext, SessionOptions, TurnContext};
use serde::Serialize;
use serde_json::json;

use super::client::{ChatOptions, ChatReply, LiveError, LlamaClient};
use crate::Registry;
use crate::reference::{
    ASSISTANT_INSTRUCTIONS, Environment, GitState, PlanMode, ProjectMemory, RecalledMemories,
    SkillList, Today, TodoList,
};

/// One request of the scripted conversation, in both compositions.
#[derive(Debug, Clone)]
pub struct ScriptedTurn {
    /// Turn number, from 1.
    pub turn: u64,
    /// What changed before this turn.
    pub events: Vec<String>,
    /// The request as the library composes it (prefix, append-only history, tail).
    pub library: Vec<u8>,
    /// The same turn with every writer rendered into message 0 (replace-at-head).
    pub head: Vec<u8>,
}

/// One request's figures for one arm.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct ArmTurn {
    /// Tokens in the prompt (`usage.prompt_tokens`).
    pub prompt_tokens: u64,
    /// Tokens of this prompt that are not a prefix of the previous prompt of the same arm:
    /// the least a perfect prefix cache must evaluate (server tokenizer, computed apart
    /// from the cache; all of it at turn 1).
    pub new_tokens: u64,
    /// Tokens the server re-processed (`timings.prompt_n`).
    pub prompt_n: u64,
    /// Tokens it reused from its cache (`timings.cache_n`).
    pub cache_n: u64,
    /// `usage.prompt_tokens_details.cached_tokens`.
    pub cached_tokens: Option<u64>,
    /// Server time spent on the prompt (`timings.prompt_ms`).
    pub prompt_ms: f64,
    /// Client wall time to the first streamed token.
    pub ttft_ms: f64,
}

impl ArmTurn {
    fn of(reply: &ChatReply, new_tokens: u64) -> Self {
        Self {
            prompt_tokens: reply.usage.prompt_tokens,
            new_tokens,
            prompt_n: reply.timings.prompt_n,
            cache_n: reply.timings.cache_n,
            cached_tokens: reply.usage.cached_tokens,
            prompt_ms: reply.timings.prompt_ms,
            ttft_ms: reply.ttft.unwrap_or(reply.elapsed).as_secs_f64() * 1000.0,
        }
    }
}

/// One turn, both arms.
#[derive(Debug, Clone, Serialize)]
pub struct BenchTurn {
    /// Turn number, from 1.
    pub turn: u64,
    /// What changed before this turn.
    pub events: Vec<String>,
    /// The library's composition.
    pub library: ArmTurn,
    /// Replace-at-head.
    pub head: ArmTurn,
}

/// Sums over turns for one arm.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct ArmTotals {
    /// Σ prompt tokens.
    pub prompt_tokens: u64,
    /// Σ new tokens.
    pub new_tokens: u64,
    /// Σ tokens re-processed.
    pub prompt_n: u64,
    /// Σ server prompt time, ms.
    pub prompt_ms: f64,
    /// Σ time to first token, ms.
    pub ttft_ms: f64,
}

/// The measurement.
#[derive(Debug, Clone, Serialize)]
pub struct BenchReport {
    /// The server.
    pub url: String,
    /// Per turn.
    pub turns: Vec<BenchTurn>,
}

fn totals<'a>(arms: impl Iterator<Item = &'a ArmTurn>) -> ArmTotals {
    arms.fold(ArmTotals::default(), |mut t, a| {
        t.prompt_tokens += a.prompt_tokens;
        t.new_tokens += a.new_tokens;
        t.prompt_n += a.prompt_n;
        t.prompt_ms += a.prompt_ms;
        t.ttft_ms += a.ttft_ms;
        t
    })
}

fn ratio(a: f64, b: f64) -> f64 {
    if b == 0.0 { f64::INFINITY } else { a / b }
}

impl BenchReport {
    /// Library totals over `turns` (a range of turn numbers).
    pub fn library_totals(&self, turns: std::ops::RangeInclusive<u64>) -> ArmTotals {
        totals(
            self.turns
                .iter()
                .filter(|t| turns.contains(&t.turn))
                .map(|t| &t.library),
        )
    }

    /// Replace-at-head totals over `turns`.
    pub fn head_totals(&self, turns: std::ops::RangeInclusive<u64>) -> ArmTotals {
        totals(
            self.turns
                .iter()
                .filter(|t| turns.contains(&t.turn))
                .map(|t| &t.head),
        )
    }

    /// Writes the per-turn table, the totals and the ratios.
    pub fn write_table(&self, out: &mut dyn Write) -> io::Result<()> {
        writeln!(out, "llama-server: {}", self.url)?;
        writeln!(
            out,
            "                 library (append-only)                  |   replace-at-head"
        )?;
        writeln!(
            out,
            "turn  prompt  new  re-processed  reused  prompt ms  TTFT ms |  prompt  re-processed  reused  prompt ms  TTFT ms"
        )?;
        for t in &self.turns {
            let (l, h) = (&t.library, &t.head);
            writeln!(
                out,
                "{:>4}  {:>6}  {:>3}  {:>12}  {:>6}  {:>9.0}  {:>7.0} |  {:>6}  {:>12}  {:>6}  {:>9.0}  {:>7.0}",
                t.turn,
                l.prompt_tokens,
                l.new_tokens,
                l.prompt_n,
                l.cache_n,
                l.prompt_ms,
                l.ttft_ms,
                h.prompt_tokens,
                h.prompt_n,
                h.cache_n,
                h.prompt_ms,
                h.ttft_ms
            )?;
            if !t.events.is_empty() {
                writeln!(out, "      events: {}", t.events.join("; "))?;
            }
        }
        let last = self.turns.last().map_or(0, |t| t.turn);
        for (label, range) in [("all turns", 1..=last), ("turns 2+", 2..=last)] {
            let l = self.library_totals(range.clone());
            let h = self.head_totals(range);
            writeln!(
                out,
                "total ({label}): library re-processed {} of {} prompt tokens ({} new), TTFT {:.1} s; replace-at-head re-processed {} of {}, TTFT {:.1} s; ratio head/library: {:.1}x tokens re-processed, {:.1}x TTFT",
                l.prompt_n,
                l.prompt_tokens,
                l.new_tokens,
                l.ttft_ms / 1000.0,
                h.prompt_n,
                h.prompt_tokens,
                h.ttft_ms / 1000.0,
                ratio(h.prompt_n as f64, l.prompt_n as f64),
                ratio(h.ttft_ms, l.ttft_ms),
            )?;
        }
        Ok(())
    }
}

const QUESTIONS: [&str; 8] = [
    "Add a --json flag to the status command.",
    "Why does the check command exit with 2 on this file?",
    "Refactor the table printer so columns align with wide characters.",
    "Write a test for the deny-wins rule.",
    "Summarize what changed today.",
    "Is the prefix fingerprint stable across processes?",
    "Rename the session option to delivery and update the docs.",
    "What is left on the todo list?",
];

const REPLIES: [&str; 4] = [
    "I read src/cli.rs first. The status command builds its table in print_status; I added a --json flag that serializes the same report with serde_json and a test that parses the output.",
    "The check command exits with 2 when the [prompt] section has an error. Line 4 lists a component id that does not exist, so the policy is rejected; fix the id and it exits with 0.",
    "Done: the printer now measures display width instead of bytes, and the table test covers a row with CJK characters. The change is twelve lines in one function.",
    "I wrote the test in tests/core_policy.rs: a component in both prefix_allow and prefix_deny lands in the tail, and the status report names the deny rule as the reason.",
];

const TODO_ITEMS: [&str; 5] = [
    "add --json to status",
    "test deny-wins",
    "align table columns",
    "document agent.toml",
    "benchmark one turn",
];

fn todo_at(turn: u64) -> Vec<String> {
    let start = (turn / 3) as usize % TODO_ITEMS.len();
    (0..3)
        .map(|i| TODO_ITEMS[(start + i) % TODO_ITEMS.len()].to_owned())
        .collect()
}

fn session_values() -> Extensions {
    Extensions::new()
        .with(Environment {
            os: "linux".into(),
            project_root: "/home/dev/cacheline".into(),
        })
        .with(ProjectMemory(
            "Rust workspace. Run `cargo test --workspace`. Errors use thiserror. Keep README tables measured.".into(),
        ))
        .with(SkillList(vec![
            ("release".into(), "cut a release: changelog, tag, publish".into()),
            ("bench".into(), "run and record benchmarks".into()),
        ]))
}

fn turn_values(turn: u64) -> Extensions {
    let date = if turn >= 4 {
        "2026-12-01"
    } else {
        "2026-11-30"
    };
    Extensions::new()
        .with(Today(date.into()))
        .with(TodoList(todo_at(turn)))
        .with(PlanMode(plan_at(turn)))
        .with(GitState {
            branch: "main".into(),
            dirty: (0..turn % 3).map(|i| format!("src/file{i}.rs")).collect(),
        })
        .with(RecalledMemories(vec![format!(
            "memory relevant to question {turn}"
        )]))
}

fn plan_at(turn: u64) -> bool {
    matches!(turn % 6, 3 | 4)
}

/// The turn at which the assistant instructions are edited.
pub const INSTRUCTIONS_EDIT_TURN: u64 = 5;

/// Composes the scripted conversation for `turns` turns, both ways.
pub fn script(
    registry: &Registry,
    policy: &PromptPolicy,
    turns: u64,
) -> Result<Vec<ScriptedTurn>, LiveError> {
    let mut session = registry.start_session(
        policy,
        SessionContext::new(session_values()),
        SessionOptions::default(),
    )?;
    let baseline_ctx = SessionContext::new(session_values());
    let mut head_history: Vec<serde_json::Value> = Vec::new();
    let mut instructions = ASSISTANT_INSTRUCTIONS.to_owned();
    let mut out = Vec::new();
    for turn in 1..=turns {
        let mut events = Vec::new();
        if turn == 4 {
            events.push("date rolled over".to_owned());
        }
        if turn > 1 && todo_at(turn) != todo_at(turn - 1) {
            events.push("todo list changed".to_owned());
        }
        if turn > 1 && plan_at(turn) != plan_at(turn - 1) {
            events.push(format!(
                "plan mode {}",
                if plan_at(turn) { "on" } else { "off" }
            ));
        }
        if turn == INSTRUCTIONS_EDIT_TURN {
            instructions.push_str(" Answer in at most five sentences unless asked for more.");
            session.set_system_prompt(&instructions);
            events.push("assistant instructions edited (system-prompt update)".to_owned());
        }
        let question = QUESTIONS[(turn as usize - 1) % QUESTIONS.len()];
        let library = session.turn(turn_values(turn), question)?.to_bytes();

        let values = turn_values(turn);
        let turn_ctx = TurnContext::new(&baseline_ctx, &values, turn);
        let mut head_text = vec![instructions.clone()];
        for c in registry
            .components()
            .filter(|c| c.id().as_str() != "assistant_instructions")
        {
            let text = match c.content() {
                Content::Static(t) => Some(t.to_string()),
                Content::Session(f) => f(&baseline_ctx),
                Content::Turn(f) => f(&turn_ctx),
            };
            head_text.extend(text);
        }
        head_history.push(json!({"role": "user", "content": question}));
        let mut head = vec![json!({"role": "system", "content": head_text.join("\n\n")})];
        head.extend(head_history.iter().cloned());
        let head = serde_json::Value::Array(head).to_string().into_bytes();

        out.push(ScriptedTurn {
            turn,
            events,
            library,
            head,
        });
        let reply =
            json!({"role": "assistant", "content": REPLIES[(turn as usize - 1) % REPLIES.len()]});
        session.record_assistant(&reply)?;
        head_history.push(reply);
    }
    Ok(out)
}

/// Options of a bench run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BenchOptions {
    /// Turns.
    pub turns: u64,
    /// Tokens generated per request.
    pub max_tokens: u32,
    /// Uncached warm-up requests before measuring (a cold server is slow at first).
    pub warmup: u32,
}

impl Default for BenchOptions {
    fn default() -> Self {
        Self {
            turns: 8,
            max_tokens: 4,
            warmup: 1,
        }
    }
}

/// Sends uncached requests of about `messages`' size so that later timings are steady.
pub fn warm_up(client: &LlamaClient, messages: &[u8], requests: u32) -> Result<(), LiveError> {
    for _ in 0..requests {
        client.chat(messages, &ChatOptions::greedy_uncached(4))?;
    }
    Ok(())
}

fn common_prefix(a: &[i64], b: &[i64]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// Runs one arm: each request in order, with the prompt cache on.
fn run_arm(
    client: &LlamaClient,
    requests: &[&[u8]],
    options: &ChatOptions,
) -> Result<Vec<ArmTurn>, LiveError> {
    let mut previous: Vec<i64> = Vec::new();
    let mut out = Vec::with_capacity(requests.len());
    for request in requests {
        let tokens = client.prompt_tokens(request)?;
        let new_tokens = (tokens.len() - common_prefix(&previous, &tokens)) as u64;
        let reply = client.chat(request, options)?;
        out.push(ArmTurn::of(&reply, new_tokens));
        previous = tokens;
    }
    Ok(out)
}

/// Composes the scripted conversation and measures it on `client`: the library's arm, then
/// the replace-at-head arm, each request streamed with `cache_prompt: true`.
pub fn run(
    client: &LlamaClient,
    registry: &Registry,
    policy: &PromptPolicy,
    options: BenchOptions,
) -> Result<BenchReport, LiveError> {
    let script = script(registry, policy, options.turns)?;
    if let Some(first) = script.first() {
        warm_up(client, &first.head, options.warmup)?;
    }
    let chat = ChatOptions::cached(options.max_tokens);
    let library: Vec<&[u8]> = script.iter().map(|t| &t.library[..]).collect();
    let library = run_arm(client, &library, &chat)?;
    let head: Vec<&[u8]> = script.iter().map(|t| &t.head[..]).collect();
    let head = run_arm(client, &head, &chat)?;
    let turns = script
        .into_iter()
        .zip(library)
        .zip(head)
        .map(|((s, library), head)| BenchTurn {
            turn: s.turn,
            events: s.events,
            library,
            head,
        })
        .collect();
    Ok(BenchReport {
        url: client.base_url().to_owned(),
        turns,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::reference::DEFAULT_AGENT_TOML;

    #[test]
    fn library_requests_extend_each_other_and_head_requests_do_not() {
        let registry = Registry::linked().unwrap();
        let policy = registry
            .load_policy(DEFAULT_AGENT_TOML, "agent.toml")
            .unwrap()
            .policy;
        let script = script(&registry, &policy, 8).unwrap();
        assert_eq!(script.len(), 8);
        for pair in script.windows(2) {
            let common = pair[0]
                .library
                .iter()
                .zip(&pair[1].library)
                .take_while(|(a, b)| a == b)
                .count();
            // Everything but the previous request's ephemeral tail and closing bracket.
            assert!(
                common > pair[0].library.len() * 9 / 10,
                "turn {}",
                pair[1].turn
            );
            let head_common = pair[0]
                .head
                .iter()
                .zip(&pair[1].head)
                .take_while(|(a, b)| a == b)
                .count();
            assert!(
                head_common < pair[0].head.len() / 2,
                "turn {}",
                pair[1].turn
            );
        }
        assert!(script[4].events.iter().any(|e| e.contains("system-prompt")));
    }
}
