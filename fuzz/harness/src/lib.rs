//! The bodies of the cargo-fuzz targets: each takes arbitrary bytes, drives one input path of
//! the workspace with them, and panics only when an invariant breaks (a bug). The nightly
//! `fuzz/` project wraps each in `fuzz_target!`; on stable, `tests/corpus.rs` replays the
//! checked-in corpus (`fuzz/corpus/<target>/`) and every minimized crash
//! (`fuzz/artifacts/<target>/`) through the same function, so a regression fails
//! `cargo test` without nightly.
#![forbid(unsafe_code)]

mod audit_line;
mod history_ops;
mod lock_file;
mod policy_loader;
mod proxy_request;
mod saved_session;
mod shared;
mod stabilize_body;
mod stream;
mod template_probe;
mod usage;
mod vec_system_prompt;
mod wire_bodies;

pub use audit_line::audit_line;
pub use history_ops::history_ops;
pub use lock_file::lock_file;
pub use policy_loader::policy_loader;
pub use proxy_request::{proxy_request, proxy_request_init};
pub use saved_session::saved_session;
pub use stabilize_body::stabilize_body;
pub use stream::{
    stream_anthropic, stream_gemini, stream_llama_cpp, stream_openai_chat, stream_openai_responses,
};
pub use template_probe::template_probe;
pub use usage::usage;
pub use vec_system_prompt::vec_system_prompt;
pub use wire_bodies::wire_bodies;

/// A fuzz target: its name (the `fuzz/fuzz_targets/<name>.rs` file and corpus folder) and
/// its body.
pub struct Target {
    /// The name.
    pub name: &'static str,
    /// The body.
    pub run: fn(&[u8]),
}

/// Every target.
pub const TARGETS: &[Target] = &[
    Target {
        name: "audit_line",
        run: audit_line,
    },
    Target {
        name: "history_ops",
        run: history_ops,
    },
    Target {
        name: "lock_file",
        run: lock_file,
    },
    Target {
        name: "policy_loader",
        run: policy_loader,
    },
    Target {
        name: "proxy_request",
        run: proxy_request,
    },
    Target {
        name: "saved_session",
        run: saved_session,
    },
    Target {
        name: "stabilize_body",
        run: stabilize_body,
    },
    Target {
        name: "stream_anthropic",
        run: stream_anthropic,
    },
    Target {
        name: "stream_gemini",
        run: stream_gemini,
    },
    Target {
        name: "stream_llama_cpp",
        run: stream_llama_cpp,
    },
    Target {
        name: "stream_openai_chat",
        run: stream_openai_chat,
    },
    Target {
        name: "stream_openai_responses",
        run: stream_openai_responses,
    },
    Target {
        name: "template_probe",
        run: template_probe,
    },
    Target {
        name: "usage",
        run: usage,
    },
    Target {
        name: "vec_system_prompt",
        run: vec_system_prompt,
    },
    Target {
        name: "wire_bodies",
        run: wire_bodies,
    },
];
