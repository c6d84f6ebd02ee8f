//! A multi-turn session measured on a live server: the library's composition against
//! replace-at-head on the same conversation.
//!
//! The caller composes the conversation both ways ([`ComposedTurn`]); `cacheline bench-live`
//! uses `prompt-reference`'s scripted session, the one `cacheline demo` and
//! `cacheline simulate` use, at its compact size: the same events at
//! the same turns (tool calls after two turns in three, the todo list changing at turn 5,
//! plan mode on at turns 5–6, the assistant instructions edited at turn 7, the history
//! compacted before turn 10, the date rolling over at turn 12), with fewer tool schemas, a
//! short project memory, short tool outputs and short replies. The library's arm is the session
//! under the given policy; the replace-at-head arm is the baseline as `cacheline simulate`
//! composes it: every writer in message 0
//! in the library's prefix order (constant, session, then per-turn writers, the most
//! charitable order for it), then the history. The assistant's messages are scripted, so
//! both arms send the same conversation whatever the model generates; the model only
//! generates a few tokens per request, which is all the time to first token needs.
//!
//! Each arm runs alone on the server's single slot (library first, then replace-at-head),
//! starting from a cleared slot, so each request finds the previous request of its own arm
//! in the cache and nothing else.

use std::io::{self, Write};

use prompt_core::divergence::common_prefix_len;
use serde::Serialize;

use super::client::{ChatOptions, ChatReply, LiveError, LlamaClient};

/// One request of the scripted conversation, in both compositions.
#[derive(Debug, Clone)]
pub struct ComposedTurn {
    /// Turn number, from 1.
    pub turn: u64,
    /// The request's label (`3`, or `3.1` for a continuation after tool results).
    pub label: String,
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
    /// The request's label (`3`, or `3.1` for a continuation after tool results).
    pub label: String,
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
            "turn   prompt  new  re-processed  reused  prompt ms  TTFT ms |  prompt  re-processed  reused  prompt ms  TTFT ms"
        )?;
        for t in &self.turns {
            let (l, h) = (&t.library, &t.head);
            writeln!(
                out,
                "{:>5} {:>6}  {:>3}  {:>12}  {:>6}  {:>9.0}  {:>7.0} |  {:>6}  {:>12}  {:>6}  {:>9.0}  {:>7.0}",
                t.label,
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

/// Options of a bench run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct BenchOptions {
    /// Tokens generated per request.
    pub max_tokens: u32,
    /// Uncached warm-up requests before measuring (a cold server is slow at first).
    pub warmup: u32,
}

impl BenchOptions {
    /// The same, with `max_tokens` (tokens generated per request).
    pub fn with_max_tokens(mut self, max_tokens: u32) -> Self {
        self.max_tokens = max_tokens;
        self
    }

    /// The same, with `warmup` (uncached warm-up requests before measuring (a cold server is slow at first)).
    pub fn with_warmup(mut self, warmup: u32) -> Self {
        self.warmup = warmup;
        self
    }
}

impl Default for BenchOptions {
    fn default() -> Self {
        Self {
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

/// Leaves a short unrelated prompt in the slot (one uncached request), so that an arm's
/// first request finds nothing of the warm-up or of the other arm in the cache: both arms
/// begin with the same instructions, guidelines and tool schemas.
fn clear_slot(client: &LlamaClient) -> Result<(), LiveError> {
    client.chat(
        br#"[{"role":"user","content":"Hello."}]"#,
        &ChatOptions::greedy_uncached(1),
    )?;
    Ok(())
}

/// Runs one arm: each request in order, with the prompt cache on.
fn run_arm(
    client: &LlamaClient,
    requests: &[&[u8]],
    options: &ChatOptions,
    progress: &mut dyn FnMut(usize),
) -> Result<Vec<ArmTurn>, LiveError> {
    let mut previous: Vec<i64> = Vec::new();
    let mut out = Vec::with_capacity(requests.len());
    for request in requests {
        let tokens = client.prompt_tokens(request)?;
        let new_tokens = (tokens.len() - common_prefix_len(&previous, &tokens)) as u64;
        let reply = client.chat(request, options)?;
        out.push(ArmTurn::of(&reply, new_tokens));
        progress(out.len());
        previous = tokens;
    }
    Ok(out)
}

/// Measures a composed conversation on `client`: the library's arm, then the
/// replace-at-head arm, each from a cleared slot, each request streamed with
/// `cache_prompt: true`.
pub fn run(
    client: &LlamaClient,
    script: Vec<ComposedTurn>,
    options: BenchOptions,
) -> Result<BenchReport, LiveError> {
    run_with_progress(client, script, options, |_| {})
}

/// [`run`], calling `progress` with the number of measured requests sent so far.
pub fn run_with_progress(
    client: &LlamaClient,
    script: Vec<ComposedTurn>,
    options: BenchOptions,
    mut progress: impl FnMut(usize),
) -> Result<BenchReport, LiveError> {
    let mut sent = 0usize;
    if let Some(first) = script.first() {
        warm_up(client, &first.head, options.warmup)?;
    }
    let chat = ChatOptions::cached(options.max_tokens);
    clear_slot(client)?;
    let library: Vec<&[u8]> = script.iter().map(|t| &t.library[..]).collect();
    let library = run_arm(client, &library, &chat, &mut |n| progress(sent + n))?;
    sent += library.len();
    clear_slot(client)?;
    let head: Vec<&[u8]> = script.iter().map(|t| &t.head[..]).collect();
    let head = run_arm(client, &head, &chat, &mut |n| progress(sent + n))?;
    let turns = script
        .into_iter()
        .zip(library)
        .zip(head)
        .map(|((s, library), head)| BenchTurn {
            turn: s.turn,
            label: s.label,
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
