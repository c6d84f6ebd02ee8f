//! The `audit_line` target: arbitrary bytes as a few lines of a request log.

use std::io::BufReader;
use std::path::Path;

use prompt_measure::audit::{Event, Line, LineReader, audit_reader};
use prompt_measure::{AuditConfig, Auditor, Rule, SimConfig, Tokenizer};

/// The line cap of the target: small, so that the fuzzer reaches it.
const MAX_LINE: usize = 1024;

/// A tokenizer built in no time: runs of up to four ASCII letters or digits are one token,
/// any other byte is one. `o200k_base` takes 1.5–3 s to build its vocabulary on a loaded
/// machine (more under AddressSanitizer), which libFuzzer's 1 s limit counts against the first
/// input; the audit's logic does not depend on which tokenizer cut the text, and the stable
/// tests audit with `o200k_base`.
struct Chunks;

impl Tokenizer for Chunks {
    fn name(&self) -> &str {
        "fuzz_chunks"
    }

    fn encode(&self, text: &str) -> Vec<u32> {
        let bytes = text.as_bytes();
        let mut out = Vec::with_capacity(bytes.len() / 2 + 1);
        let mut i = 0;
        while i < bytes.len() {
            let mut j = i + 1;
            if bytes[i].is_ascii_alphanumeric() {
                while j < bytes.len() && j - i < 4 && bytes[j].is_ascii_alphanumeric() {
                    j += 1;
                }
            }
            let id = bytes[i..j]
                .iter()
                .fold(0u32, |h, &b| h.wrapping_mul(257).wrapping_add(u32::from(b)));
            out.push(id);
            i = j;
        }
        out
    }
}

static CHUNKS: Chunks = Chunks;

/// Streams `data` as a JSONL log (lines split on `\n`) through an [`Auditor`] with a small
/// window, small stores and a 1 KiB line cap, read in 7-byte chunks, tokenized by
/// `Chunks`. Lines may hold any API's request body and a response whole or streamed (the
/// corpus has seeds of each: `stream_*.jsonl`, `logged_as_text.jsonl`), so the guard's
/// reading of a body and the stream readers run under it too.
/// Invariants: no panic; the line reader yields exactly `data`'s lines, the ones over the cap
/// as skipped with their full length, and its buffer stays within the cap; every audited
/// request has each rule's cached tokens ≤ the physical limit's ≤ its tokens, Anthropic's
/// read + write ≤ its tokens; the summary counts every request and skipped line, its shares
/// are within `0..=1` and its stores within their bounds.
pub fn audit_line(data: &[u8]) {
    check_lines(data);
    let config = AuditConfig::default()
        .with_sim(
            SimConfig::default()
                .with_window(3)
                .with_window_tokens(4096)
                .with_block_capacity(256)
                .with_anthropic_capacity(16)
                .with_openai_minimum(32)
                .with_openai_increment(8)
                .with_deepseek_unit(4),
        )
        .with_token_cache(4096)
        .with_max_breakers(4)
        .with_max_line_bytes(MAX_LINE);
    let mut auditor = Auditor::new(&CHUNKS, config);
    let (mut requests, mut skipped) = (0u64, 0u64);
    let mut tokens = 0u64;
    let mut lanes = std::collections::HashSet::new();
    let result = audit_reader(
        BufReader::with_capacity(7, data),
        Path::new("fuzz.jsonl"),
        &mut auditor,
        |event| {
            match event {
                Event::Request(r) => {
                    requests += 1;
                    tokens += r.tokens;
                    let limit = r.cached.get(&Rule::Limit).copied().unwrap_or(0);
                    assert!(
                        limit <= r.tokens,
                        "line {}: limit {limit} > {}",
                        r.line,
                        r.tokens
                    );
                    for (rule, cached) in &r.cached {
                        assert!(
                            *cached <= limit,
                            "line {}: {rule} {cached} > limit {limit}",
                            r.line
                        );
                    }
                    let anthropic = r.cached.get(&Rule::Anthropic).copied().unwrap_or(0);
                    assert!(anthropic + r.anthropic_write <= r.tokens, "line {}", r.line);
                    if let Some(reported) = &r.reported {
                        assert!((0.0..=1.0).contains(&reported.hit_rate));
                    }
                    let v = &r.verdict;
                    lanes.insert(v.lane.clone());
                    // The engine counts each element as sent (the simulator, whose total is
                    // `r.tokens`, as cached): its shared tokens are within its own total.
                    assert!(
                        v.common_tokens <= v.tokens,
                        "line {}: {} shared of {}",
                        r.line,
                        v.common_tokens,
                        v.tokens
                    );
                    assert!(v.changes.len() <= prompt_wire::engine::MAX_CHANGES);
                    if let Some(p) = &v.predecessor {
                        assert!(p.tag < r.line, "line {}", r.line);
                    }
                    for c in &v.changes {
                        let e = &c.divergence.excerpt;
                        assert!(e.earlier.len() + e.later.len() <= 4096, "line {}", r.line);
                        assert!(c.json_path.len() <= 4096, "line {}", r.line);
                    }
                }
                Event::Skipped(e) => {
                    skipped += 1;
                    assert!(e.to_string().len() <= 4096, "line {}", e.line);
                }
            }
            Ok(())
        },
    );
    assert!(result.is_ok(), "reading a slice cannot fail: {result:?}");
    let s = auditor.summary();
    assert_eq!((s.requests, s.malformed), (requests, skipped));
    assert_eq!(s.tokens, tokens);
    for share in [s.hit_rate, s.limit_share] {
        assert!((0.0..=1.0).contains(&share), "{share}");
    }
    for (rule, b) in &s.backends {
        assert!((0.0..=1.0).contains(&b.cached_share), "{rule}");
        assert!((0.0..=1.0).contains(&b.limit_share), "{rule}");
    }
    // One simulator per lane (caches are per model), each within its bounds.
    let lanes = lanes.len().max(1);
    assert!(s.retained.requests <= 3 * lanes);
    assert!(s.retained.blocks <= 512 * lanes && s.retained.anthropic_entries <= 32 * lanes);
    assert!(s.engine.requests as u64 <= requests);
    assert!(s.top_breakers.len() <= 4);
}

/// The capped line reader against a plain split.
fn check_lines(data: &[u8]) {
    let mut expected: Vec<&[u8]> = data.split(|&b| b == b'\n').collect();
    if data.is_empty() || data.ends_with(b"\n") {
        expected.pop();
    }
    let mut reader = LineReader::new(BufReader::with_capacity(5, data), MAX_LINE);
    let mut n = 0usize;
    while let Ok(Some(line)) = reader.next_line() {
        let want = expected.get(n).copied().unwrap_or_default();
        match line {
            Line::Text(text) => {
                let mut trimmed = want;
                while let [rest @ .., b'\r'] = trimmed {
                    trimmed = rest;
                }
                assert_eq!(text, trimmed, "line {}", n + 1);
            }
            Line::TooLong(len) => {
                assert!(want.len() > MAX_LINE, "line {}", n + 1);
                assert_eq!(len, want.len() as u64, "line {}", n + 1);
            }
        }
        n += 1;
        assert_eq!(reader.line_number(), n as u64);
        assert!(reader.buffer_capacity() <= MAX_LINE);
    }
    assert_eq!(n, expected.len());
}
