//! Audit throughput on a generated log: requests/s and MB/s.
//!
//! Run: `cargo bench -p cacheline-benches --bench audit`.
//!
//! The log is [`synthetic::write_log`]'s default: four interleaved sessions of 30 turns
//! (append-only, date in the system prompt, a per-turn injected message, tools re-sorted),
//! 8 MiB. Each iteration audits the whole log with a fresh [`Auditor`] (cold token cache,
//! `o200k_base`, default bounds), as `cacheline audit` does.

use std::path::Path;
use std::sync::LazyLock;

use divan::counter::{BytesCount, ItemsCount};
use prompt_measure::audit::audit_reader;
use prompt_measure::synthetic::{SyntheticLog, write_log};
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

fn tokenizer() -> &'static O200kBase {
    O200kBase::shared().unwrap_or_else(|e| panic!("{e}"))
}

/// The whole audit: parse, tokenize (each distinct message once), every rule, divergence.
#[divan::bench(sample_count = 20, sample_size = 1)]
fn audit_log(bencher: divan::Bencher) {
    let log = &*LOG;
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
