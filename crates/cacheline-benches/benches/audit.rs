//! Audit throughput on a generated log: requests/s and MB/s.
//!
//! Run: `cargo bench -p cacheline-benches --bench audit`.
//!
//! The log is [`synthetic::write_log`]'s default: four interleaved sessions of 30 turns
//! (append-only, date in the system prompt, a per-turn injected message, tools re-sorted),
//! 8 MiB. Each iteration audits the whole log with a fresh [`Auditor`] (cold token cache,
//! `o200k_base`, default bounds), as `cacheline audit` does.
//!
//! `responses`: the same requests, each logged with its reply whole or as its streamed
//! reply's server-sent events (both with usage; [`Responses`]), the first 160 lines of each
//! (so that both audit the same requests): what reading a stream's usage costs against
//! reading a whole reply's.

use std::path::Path;
use std::sync::LazyLock;

use divan::counter::{BytesCount, ItemsCount};
use prompt_measure::audit::audit_reader;
use prompt_measure::synthetic::{Responses, SyntheticLog, write_log};
use prompt_measure::{AuditConfig, Auditor, O200kBase, Tokenizer};

fn main() {
    divan::main();
}

struct Log {
    bytes: Vec<u8>,
    lines: u64,
}

static LOG: LazyLock<Log> = LazyLock::new(|| {
    let mut bytes = Vec::new();
    let written = write_log(&mut bytes, &SyntheticLog::default())
        .unwrap_or_else(|e| panic!("generating the log: {e}"));
    Log {
        bytes,
        lines: written.lines,
    }
});

/// Lines of each log of replies.
const REPLY_LINES: usize = 160;

/// The first [`REPLY_LINES`] lines of the log with every reply logged as `responses` says.
fn log_of_replies(responses: Responses) -> Log {
    let mut all = Vec::new();
    let spec = SyntheticLog {
        target_bytes: 32 << 20,
        responses,
        ..SyntheticLog::default()
    };
    write_log(&mut all, &spec).unwrap_or_else(|e| panic!("generating the log: {e}"));
    let bytes: Vec<u8> = all
        .split_inclusive(|&b| b == b'\n')
        .take(REPLY_LINES)
        .flatten()
        .copied()
        .collect();
    Log {
        bytes,
        lines: REPLY_LINES as u64,
    }
}

static WHOLE_REPLIES: LazyLock<Log> = LazyLock::new(|| log_of_replies(Responses::Whole));
static STREAMED_REPLIES: LazyLock<Log> = LazyLock::new(|| log_of_replies(Responses::Streamed));

fn tokenizer() -> &'static O200kBase {
    O200kBase::shared().unwrap_or_else(|e| panic!("{e}"))
}

/// Audits `log` with a fresh auditor per iteration.
fn bench_audit(bencher: divan::Bencher, log: &Log) {
    let tok = tokenizer();
    bencher
        .counter(BytesCount::new(log.bytes.len()))
        .counter(ItemsCount::new(log.lines))
        .bench(|| {
            let mut auditor = Auditor::new(tok, AuditConfig::default());
            audit_reader(
                &log.bytes[..],
                Path::new("bench.jsonl"),
                &mut auditor,
                |_| Ok(()),
            )
            .unwrap_or_else(|e| panic!("{e}"));
            auditor.summary()
        });
}

/// The whole audit: parse, tokenize (each distinct message once), every rule, divergence.
#[divan::bench(sample_count = 20, sample_size = 1)]
fn audit_log(bencher: divan::Bencher) {
    bench_audit(bencher, &LOG);
}

/// Every request logged with its reply: whole, or streamed (its server-sent events).
#[divan::bench(args = ["whole", "streamed"], sample_count = 20, sample_size = 1)]
fn responses(bencher: divan::Bencher, logged: &str) {
    let log = if logged == "streamed" {
        &*STREAMED_REPLIES
    } else {
        &*WHOLE_REPLIES
    };
    bench_audit(bencher, log);
}

/// For scale: tokenizing the log's bytes once with `o200k_base`, no audit.
#[divan::bench(sample_count = 5, sample_size = 1)]
fn tokenize_log_once(bencher: divan::Bencher) {
    let log = &*LOG;
    let tok = tokenizer();
    let text = String::from_utf8_lossy(&log.bytes).into_owned();
    bencher
        .counter(BytesCount::new(text.len()))
        .bench(|| tok.encode(&text).len());
}
