//! The chat-template probe over every template in `tests/fixtures/chat-templates` (copies of
//! `../shared/chat-templates`, origins in that folder's README).
//!
//! Each test states the classification expected from *reading* the template, with the lines
//! that decide it, and compares it with the probe. The probe conversations are: a system
//! message (when the template accepts one), user, assistant, user; the mid-history probe adds
//! a system message before the second user message.

use std::path::{Path, PathBuf};

use prompt_core::{
    Component, ComponentId, Extensions, Placement, PrefixRole, PromptPolicy, Session,
    SessionContext, SessionOptions, UpdateRole,
};
use prompt_registry::Registry;
use prompt_registry::cli::run_with;
use prompt_registry::template::{
    ChatTemplate, HeadSystem, MidSystem, PrefixStability, ProbeReport, REMINDER_TAG, probe,
    session_options_for_template,
};
use serde_json::{Value, json};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/chat-templates")
}

fn source(file: &str) -> String {
    std::fs::read_to_string(fixtures().join(file)).unwrap_or_else(|e| panic!("{file}: {e}"))
}

/// What reading the template says.
struct Expected {
    /// `in_place`, `raises`, `dropped`, `hoisted`, `merged`, `render_error`.
    mid_system: &'static str,
    /// For `raises`: the template's message.
    raises: Option<&'static str>,
    /// `None` when prefix-stable; else the first failing scenario and the region of the
    /// first differing byte.
    unstable: Option<(&'static str, &'static str)>,
    /// How updates travel: `system`, `user_reminder`, `merged_into_user`.
    updates: &'static str,
    /// Where the prefix goes: `system` or `first_user`.
    prefix: &'static str,
}

const STABLE_SYSTEM: Expected = Expected {
    mid_system: "in_place",
    raises: None,
    unstable: None,
    updates: "system",
    prefix: "system",
};

fn check(file: &str, expected: Expected) -> ProbeReport {
    let report = probe(&source(file));
    let context = format!("{file}:\n{report}");
    assert_eq!(report.mid_system.label(), expected.mid_system, "{context}");
    if let Some(message) = expected.raises {
        assert_eq!(
            report.mid_system,
            MidSystem::Raises {
                message: message.to_owned()
            },
            "{context}"
        );
    }
    match (expected.unstable, &report.prefix_stable) {
        (None, PrefixStability::Stable) => {}
        (
            Some((scenario, region)),
            PrefixStability::Unstable {
                scenario: s,
                divergence,
            },
        ) => {
            assert_eq!(
                (*s, divergence.region.as_str()),
                (scenario, region),
                "{context}"
            );
        }
        (want, got) => panic!("{context}\nexpected instability {want:?}, got {got:?}"),
    }
    let style = report
        .delivery_style()
        .unwrap_or_else(|| panic!("{context}\nno delivery style"));
    let updates = match style.role {
        UpdateRole::System => "system",
        UpdateRole::UserReminder => "user_reminder",
        UpdateRole::MergedIntoUser => "merged_into_user",
    };
    let prefix = match style.prefix {
        PrefixRole::System => "system",
        PrefixRole::FirstUser => "first_user",
    };
    assert_eq!(
        (updates, prefix),
        (expected.updates, expected.prefix),
        "{context}"
    );
    let label = if style.role == UpdateRole::System {
        "system"
    } else {
        "user_reminder"
    };
    assert_eq!(report.to_json()["delivery"], label, "{context}");
    report
}

// ---- Templates that render a later system message in place and are prefix-stable. ----

/// `elif message.role in ["user", "system"]` renders every later system message as
/// `<seed:bos>system\n…<seed:eos>`; reasoning_content is rendered in every assistant turn,
/// never stripped.
#[test]
fn bytedance_seed_oss() {
    check("ByteDance-Seed-OSS.jinja", STABLE_SYSTEM);
}

/// `message.role|lower == 'system' and not (loop.first and developer_preamble)` renders a
/// later system turn in place; the closing `<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>` is
/// exactly how the next assistant turn starts.
#[test]
fn cohere_command_r7b() {
    check(
        "CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja",
        STABLE_SYSTEM,
    );
}

/// `message.role == "user" or message.role == "system"` → `<|im_start|>system` in place
/// (the fixed tool preamble is a separate block before it).
#[test]
fn hermes_2_pro() {
    check(
        "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja",
        STABLE_SYSTEM,
    );
}

/// Same template as Hermes 2 Pro.
#[test]
fn hermes_3() {
    check(
        "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja",
        STABLE_SYSTEM,
    );
}

/// `(message.role == "system" and not loop.first)` → ChatML block in place; assistant
/// content is never rewritten.
#[test]
fn qwen2_5() {
    check("Qwen-Qwen2.5-7B-Instruct.jinja", STABLE_SYSTEM);
}

/// Date fixed at "26 Jul 2024" unless `date_string` is given; the generic branch renders a
/// later `<|start_header_id|>system` turn in place.
#[test]
fn llama_3_1() {
    check("meta-llama-Llama-3.1-8B-Instruct.jinja", STABLE_SYSTEM);
}

/// As 3.1, but `Today Date` comes from `strftime_now`: stable for a fixed clock, and the
/// probe flags the date dependence (the head changes when the date does).
#[test]
fn llama_3_2() {
    let report = check("meta-llama-Llama-3.2-3B-Instruct.jinja", STABLE_SYSTEM);
    assert!(report.clock_dependent);
}

/// Same template as 3.1.
#[test]
fn llama_3_3() {
    let report = check("meta-llama-Llama-3.3-70B-Instruct.jinja", STABLE_SYSTEM);
    assert!(!report.clock_dependent);
}

/// Plain ChatML loop over every message; the default system block only when
/// `messages[0]` is not system.
#[test]
fn smollm2() {
    check("hf-SmolLM2.jinja", STABLE_SYSTEM);
}

/// `message['role'] == 'system'` → `<|im_start|>system<|im_sep|>` wherever it stands.
#[test]
fn phi_4() {
    check("hf-microsoft-phi-4.jinja", STABLE_SYSTEM);
}

/// A system message with content renders `<|system|>` in place; the `eos_token` added
/// without a generation prompt is generation-side only.
#[test]
fn phi_3_5() {
    check("microsoft-Phi-3.5-mini-instruct.jinja", STABLE_SYSTEM);
}

/// `loop_messages` (after the first system) are all rendered with their own role.
#[test]
fn granite_3_3() {
    check("ibm-granite-granite-3.3-2B-Instruct.jinja", STABLE_SYSTEM);
}

/// Needs `functions` and `datetime` (llama.cpp provides them); `loop.index0 > 0` renders a
/// later system turn in place; the assistant header is always appended and is how the next
/// assistant turn starts. `Today is <datetime>` in the head: date-dependent.
#[test]
fn firefunction_v2() {
    let report = check("fireworks-ai-llama-3-firefunction-v2.jinja", STABLE_SYSTEM);
    assert!(report.clock_dependent);
}

/// `message['role'] == 'user' or message['role'] == 'system'` → in place; `tools` none is
/// fine for both minijinja and Jinja2.
#[test]
fn functionary_v3_1() {
    check("meetkai-functionary-medium-v3.1.jinja", STABLE_SYSTEM);
}

/// Same in-place branch; the generation prompt `…\n\n>>>` is how `>>>all\n` starts.
#[test]
fn functionary_v3_2() {
    check("meetkai-functionary-medium-v3.2.jinja", STABLE_SYSTEM);
}

/// `message['role'] == 'system'` → `<|im_system|>system<|im_middle|>` in place.
#[test]
fn kimi_k2() {
    check("moonshotai-Kimi-K2.jinja", STABLE_SYSTEM);
}

/// `elif message['role'] == 'system'` → `[SYSTEM_PROMPT]…[/SYSTEM_PROMPT]` in place, no
/// alternation check.
#[test]
fn devstral_small() {
    check("unsloth-mistral-Devstral-Small-2507.jinja", STABLE_SYSTEM);
}

// ---- In place, but not prefix-stable. ----

/// In place (`elif message.role == 'system'`), but a fixed `Write 'Action:'…` system turn
/// is rendered after the last message, so turn N+1 replaces it: reuse stops at the last
/// message. Updates still work as system messages.
#[test]
fn cohere_command_r_plus() {
    check(
        "CohereForAI-c4ai-command-r-plus-tool_use.jinja",
        Expected {
            unstable: Some(("turn", "after_last_message")),
            ..STABLE_SYSTEM
        },
    );
}

/// In place; `if not loop.last: content.split('</think>')[-1]` strips the reasoning of an
/// earlier reply written inline, so the finished turn is not a prefix of the next.
#[test]
fn qwq_32b() {
    check(
        "Qwen-QwQ-32B.jinja",
        Expected {
            unstable: Some(("reply_reasoning_inline", "assistant_2")),
            ..STABLE_SYSTEM
        },
    );
}

/// In place; `loop.index0 > ns.last_query_index` renders `<think>` only for replies after
/// the last user query, so a reply's reasoning disappears once a new user message follows.
#[test]
fn qwen3() {
    check(
        "Qwen-Qwen3-0.6B.jinja",
        Expected {
            unstable: Some(("reply_reasoning_field", "assistant_2")),
            ..STABLE_SYSTEM
        },
    );
}

// ---- Templates that reject a later system message. ----

/// `raise_exception('System role not supported')` on any leading system message, and a
/// system message later breaks `(message['role'] == 'user') != (loop.index0 % 2 == 0)`.
/// Updates must ride inside the next user turn, and the prefix too.
#[test]
fn gemma_2() {
    let report = check(
        "google-gemma-2-2b-it.jinja",
        Expected {
            mid_system: "raises",
            raises: Some("Conversation roles must alternate user/assistant/user/assistant/..."),
            unstable: None,
            updates: "merged_into_user",
            prefix: "first_user",
        },
    );
    assert_eq!(
        report.head_system,
        HeadSystem::Raises {
            message: "System role not supported".to_owned()
        }
    );
}

/// A first system message is folded into the first user turn (`first_user_prefix`), a
/// later one breaks the alternation check. The head is stable, so the prefix may stay a
/// system message; updates are merged into the user turn.
#[test]
fn gemma_3() {
    let report = check(
        "hf-google-gemma-3.jinja",
        Expected {
            mid_system: "raises",
            raises: Some("Conversation roles must alternate user/assistant/user/assistant/..."),
            unstable: None,
            updates: "merged_into_user",
            prefix: "system",
        },
    );
    assert_eq!(report.head_system, HeadSystem::FoldedIntoFirstUser);
}

/// The alternation check counts a later system message (`not (message.role == "tool" or
/// message.get('tool_calls'))`) and raises before the in-place `[SYSTEM_PROMPT]` branch is
/// reached. The first system message is a stable `[SYSTEM_PROMPT]` head.
#[test]
fn mistral_small_3_2() {
    check(
        "Mistral-Small-3.2-24B-Instruct-2506.jinja",
        Expected {
            mid_system: "raises",
            raises: Some(
                "After the optional system message, conversation roles must alternate user/assistant/user/assistant/...",
            ),
            unstable: None,
            updates: "merged_into_user",
            prefix: "system",
        },
    );
}

/// Raises on a later system message (alternation check); the first system message is
/// rendered inside the *last* user message (`loop.last and system_message is defined`), so
/// it moves every turn: not prefix-stable. Only a session with no system message at all,
/// the prefix and updates inside user turns, keeps the prefix.
#[test]
fn mistral_nemo() {
    let report = check(
        "mistralai-Mistral-Nemo-Instruct-2407.jinja",
        Expected {
            mid_system: "raises",
            raises: Some(
                "After the optional system message, conversation roles must alternate user/assistant/user/assistant/...",
            ),
            unstable: Some(("turn", "user_2")),
            updates: "merged_into_user",
            prefix: "first_user",
        },
    );
    assert_eq!(report.head_system, HeadSystem::Moved);
}

// ---- Templates that drop a later system message. ----

/// Only `messages[0]` becomes `<|system|>`; the loop renders `message['role'] != 'system'`
/// only, so a later system message vanishes. Updates as user messages.
#[test]
fn phi_4_mini() {
    check(
        "llama-cpp-microsoft-Phi-4-mini-instruct.jinja",
        Expected {
            mid_system: "dropped",
            raises: None,
            unstable: None,
            updates: "user_reminder",
            prefix: "system",
        },
    );
}

/// Only `messages[0]` is read as system; the loop renders user, tool and assistant only.
/// The last assistant message is special-cased (`<think>\n` + content) and rendered plainly
/// once it is no longer last: the finished turn is not a prefix of the next.
#[test]
fn nemotron_nano_v2() {
    check(
        "NVIDIA-Nemotron-Nano-v2.jinja",
        Expected {
            mid_system: "dropped",
            raises: None,
            unstable: Some(("reply_reasoning_field", "assistant_2")),
            updates: "user_reminder",
            prefix: "system",
        },
    );
}

/// Only `messages[0]` becomes the developer message; the loop renders assistant, tool and
/// user only. `thinking` is rendered for the last assistant message only ("CoT is dropped
/// during all previous turns"). `Current date:` from `strftime_now` in the head.
#[test]
fn gpt_oss() {
    let report = check(
        "openai-gpt-oss-120b.jinja",
        Expected {
            mid_system: "dropped",
            raises: None,
            unstable: Some(("reply_reasoning_field", "assistant_2")),
            updates: "user_reminder",
            prefix: "system",
        },
    );
    assert!(report.clock_dependent);
}

// ---- Templates that hoist system messages to the head. ----

/// `{% set ns.system_prompt = message['content'] %}` for every system message, then
/// `{{ns.system_prompt}}` right after `bos_token`: the last system message replaces the
/// first at byte 0.
#[test]
fn deepseek_r1_distill_llama() {
    check(
        "deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja",
        Expected {
            mid_system: "hoisted",
            raises: None,
            unstable: Some(("system_update", "head")),
            updates: "user_reminder",
            prefix: "system",
        },
    );
}

/// Same template as the Llama distill.
#[test]
fn deepseek_r1_distill_qwen() {
    check(
        "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja",
        Expected {
            mid_system: "hoisted",
            raises: None,
            unstable: Some(("system_update", "head")),
            updates: "user_reminder",
            prefix: "system",
        },
    );
}

/// llama.cpp's R1 template: same `ns.system_prompt` hoisting.
#[test]
fn llama_cpp_deepseek_r1() {
    let report = check(
        "llama-cpp-deepseek-r1.jinja",
        Expected {
            mid_system: "hoisted",
            raises: None,
            unstable: Some(("system_update", "head")),
            updates: "user_reminder",
            prefix: "system",
        },
    );
    assert_eq!(report.mid_system, MidSystem::Hoisted { head_kept: false });
}

/// Every system message is concatenated (`'\n\n'`) into `ns.system_prompt` at the head:
/// merged into the head, the first one kept.
#[test]
fn deepseek_v3_1() {
    let report = check(
        "deepseek-ai-DeepSeek-V3.1.jinja",
        Expected {
            mid_system: "hoisted",
            raises: None,
            unstable: Some(("system_update", "head")),
            updates: "user_reminder",
            prefix: "system",
        },
    );
    assert_eq!(report.mid_system, MidSystem::Hoisted { head_kept: true });
}

/// `ns.system_prompt` takes the last system message and is printed as `System: …` at the
/// head.
#[test]
fn rwkv_world() {
    check(
        "llama-cpp-rwkv-world.jinja",
        Expected {
            mid_system: "hoisted",
            raises: None,
            unstable: Some(("system_update", "head")),
            updates: "user_reminder",
            prefix: "system",
        },
    );
}

// ---- Coverage of the shared folder. ----

/// Every template has a test above, every fixture is a byte copy of the shared folder
/// (when it is there), and the README names each one.
#[test]
fn every_shared_template_is_a_fixture_with_a_test() {
    let tested = [
        "ByteDance-Seed-OSS.jinja",
        "CohereForAI-c4ai-command-r-plus-tool_use.jinja",
        "CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja",
        "Mistral-Small-3.2-24B-Instruct-2506.jinja",
        "NVIDIA-Nemotron-Nano-v2.jinja",
        "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja",
        "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja",
        "Qwen-QwQ-32B.jinja",
        "Qwen-Qwen2.5-7B-Instruct.jinja",
        "Qwen-Qwen3-0.6B.jinja",
        "deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja",
        "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja",
        "deepseek-ai-DeepSeek-V3.1.jinja",
        "fireworks-ai-llama-3-firefunction-v2.jinja",
        "google-gemma-2-2b-it.jinja",
        "hf-SmolLM2.jinja",
        "hf-google-gemma-3.jinja",
        "hf-microsoft-phi-4.jinja",
        "ibm-granite-granite-3.3-2B-Instruct.jinja",
        "llama-cpp-deepseek-r1.jinja",
        "llama-cpp-microsoft-Phi-4-mini-instruct.jinja",
        "llama-cpp-rwkv-world.jinja",
        "meetkai-functionary-medium-v3.1.jinja",
        "meetkai-functionary-medium-v3.2.jinja",
        "meta-llama-Llama-3.1-8B-Instruct.jinja",
        "meta-llama-Llama-3.2-3B-Instruct.jinja",
        "meta-llama-Llama-3.3-70B-Instruct.jinja",
        "microsoft-Phi-3.5-mini-instruct.jinja",
        "mistralai-Mistral-Nemo-Instruct-2407.jinja",
        "moonshotai-Kimi-K2.jinja",
        "openai-gpt-oss-120b.jinja",
        "unsloth-mistral-Devstral-Small-2507.jinja",
    ];
    let list = |dir: &Path| -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".jinja"))
            .collect();
        names.sort();
        names
    };
    let fixtures_dir = fixtures();
    let mut expected: Vec<String> = tested.iter().map(|s| (*s).to_owned()).collect();
    expected.sort();
    assert_eq!(list(&fixtures_dir), expected);
    let readme = source("README.md");
    for name in &expected {
        assert!(
            readme.contains(name.as_str()),
            "README.md does not list {name}"
        );
    }
    let shared = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/chat-templates");
    if shared.is_dir() {
        assert_eq!(list(&shared), expected, "the shared folder changed");
        for name in &expected {
            let a = std::fs::read(shared.join(name)).unwrap_or_else(|e| panic!("{e}"));
            let b = std::fs::read(fixtures_dir.join(name)).unwrap_or_else(|e| panic!("{e}"));
            assert!(a == b, "{name} differs from the shared copy");
        }
    }
}

// ---- Sessions configured from a template. ----

fn id(text: &str) -> ComponentId {
    ComponentId::new(text).unwrap_or_else(|e| panic!("{e}"))
}

/// A session with a prefix component and a persisting tail update that changes every turn;
/// a system-prompt change before turn 3. Returns each turn's request bytes.
fn run_session(options: SessionOptions) -> Vec<Vec<u8>> {
    let components = vec![
        Component::constant(
            id("assistant_instructions"),
            "You are a careful coding assistant.",
        )
        .placement(Placement::Prefix),
        Component::turn(id("todo_addendum"), |t| {
            Some(format!("Open task {} of 3.", t.turn()))
        })
        .placement(Placement::Tail),
    ];
    let policy = PromptPolicy::from_agent_toml(
        "[prompt]\nprefix_allow = [\"assistant_instructions\"]",
        "agent.toml",
        components.iter().map(Component::id),
    )
    .unwrap_or_else(|e| panic!("{e:?}"))
    .policy;
    let mut session = Session::start(components, &policy, SessionContext::default(), options)
        .unwrap_or_else(|e| panic!("{e}"));
    let mut requests = Vec::new();
    for turn in 1..=3u64 {
        if turn == 3 {
            session.set_system_prompt("From now on, answer in French.");
        }
        let request = session
            .turn(Extensions::new(), format!("Question {turn}?"))
            .unwrap_or_else(|e| panic!("{e}"))
            .to_bytes();
        session
            .record_assistant(&json!({"role": "assistant", "content": format!("Answer {turn}.")}))
            .unwrap_or_else(|e| panic!("{e}"));
        requests.push(request);
    }
    requests
}

/// Renders each request (with the generation prompt) and checks that each rendered request
/// is a byte prefix of the next.
fn rendered_prefix_chain(template: &ChatTemplate, requests: &[Vec<u8>]) -> Vec<String> {
    let rendered: Vec<String> = requests
        .iter()
        .map(|r| {
            template
                .render_request(r, true)
                .unwrap_or_else(|e| panic!("{e}\nrequest: {}", String::from_utf8_lossy(r)))
        })
        .collect();
    for pair in rendered.windows(2) {
        assert!(
            pair[1].starts_with(&pair[0]),
            "rendered request is not a prefix of the next:\n{}\n----\n{}",
            pair[0],
            pair[1]
        );
    }
    rendered
}

fn roles(request: &[u8]) -> Vec<String> {
    let messages: Vec<Value> = serde_json::from_slice(request).unwrap_or_else(|e| panic!("{e}"));
    messages
        .iter()
        .map(|m| m["role"].as_str().unwrap_or("").to_owned())
        .collect()
}

#[test]
fn gemma_2_session_delivers_updates_as_user_reminders_and_stays_a_prefix() {
    let src = source("google-gemma-2-2b-it.jinja");
    let options = session_options_for_template(&src).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(options.delivery.role, UpdateRole::MergedIntoUser);
    assert_eq!(options.delivery.prefix, PrefixRole::FirstUser);
    assert_eq!(options.delivery.tag, REMINDER_TAG);
    let requests = run_session(options);
    for request in &requests {
        let roles = roles(request);
        assert!(!roles.iter().any(|r| r == "system"), "{roles:?}");
        let alternating = roles
            .iter()
            .enumerate()
            .all(|(i, r)| r == if i % 2 == 0 { "user" } else { "assistant" });
        assert!(alternating, "{roles:?}");
    }
    let template = ChatTemplate::new(&src).unwrap_or_else(|e| panic!("{e}"));
    let rendered = rendered_prefix_chain(&template, &requests);
    let last = rendered.last().map(String::as_str).unwrap_or("");
    // The prefix opens the first user turn; each update rides in a user turn as a reminder.
    assert!(
        last.starts_with("<s><start_of_turn>user\nYou are a careful coding assistant."),
        "{last}"
    );
    assert!(last.contains(
        "<start_of_turn>user\n<system-reminder from=\"system_prompt\">\nFrom now on, answer in French.\n</system-reminder>\n\n\
         <system-reminder from=\"todo_addendum\">\nOpen task 3 of 3.\n</system-reminder>\n\nQuestion 3?<end_of_turn>"
    ), "{last}");
}

#[test]
fn smollm2_session_delivers_updates_as_system_messages_and_stays_a_prefix() {
    let src = source("hf-SmolLM2.jinja");
    let report = probe(&src);
    let options = SessionOptions::try_from(&report).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(options.delivery.role, UpdateRole::System);
    assert_eq!(options.delivery.prefix, PrefixRole::System);
    let requests = run_session(options);
    assert_eq!(
        roles(requests.last().map(Vec::as_slice).unwrap_or(b"[]")),
        [
            "system",
            "system",
            "user",
            "assistant",
            "system",
            "user",
            "assistant",
            "system",
            "system",
            "user"
        ]
    );
    let template = ChatTemplate::new(&src).unwrap_or_else(|e| panic!("{e}"));
    let rendered = rendered_prefix_chain(&template, &requests);
    let last = rendered.last().map(String::as_str).unwrap_or("");
    assert!(
        last.starts_with("<|im_start|>system\nYou are a careful coding assistant.<|im_end|>\n")
    );
    assert!(last.contains(
        "<|im_start|>system\n<system-update from=\"todo_addendum\">\nOpen task 3 of 3.\n</system-update><|im_end|>\n"
    ));
}

/// The same session in the default (system) style breaks Gemma 2 and Mistral Nemo, which
/// is what the probe protects against.
#[test]
fn default_style_fails_where_the_probe_says_so() {
    for file in [
        "google-gemma-2-2b-it.jinja",
        "mistralai-Mistral-Nemo-Instruct-2407.jinja",
    ] {
        let template = ChatTemplate::new(&source(file)).unwrap_or_else(|e| panic!("{e}"));
        let requests = run_session(SessionOptions::default());
        let failed = requests
            .iter()
            .any(|r| template.render_request(r, true).is_err());
        assert!(failed, "{file}");
    }
}

#[test]
fn cli_probe_template_json_has_the_three_keys() {
    let registry = Registry::linked().unwrap_or_else(|e| panic!("{e}"));
    let path = fixtures().join("google-gemma-2-2b-it.jinja");
    let path = path.to_string_lossy();
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = run_with(
        ["cacheline", "probe-template", path.as_ref(), "--json"],
        &registry,
        None,
        &mut out,
        &mut err,
    );
    assert_eq!(code, 0, "{}", String::from_utf8_lossy(&err));
    let json: Value = serde_json::from_slice(&out).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(json["mid_system"], "raises");
    assert_eq!(json["prefix_stable"], true);
    assert_eq!(json["delivery"], "user_reminder");
    assert_eq!(
        json["mid_system_detail"]["message"],
        "Conversation roles must alternate user/assistant/user/assistant/..."
    );
    assert_eq!(json["delivery_detail"]["updates"], "merged_into_user");
    assert_eq!(json["delivery_detail"]["prefix"], "first_user");

    let (mut out, mut err) = (Vec::new(), Vec::new());
    let path = fixtures().join("deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja");
    let path = path.to_string_lossy();
    let code = run_with(
        ["cacheline", "probe-template", path.as_ref()],
        &registry,
        None,
        &mut out,
        &mut err,
    );
    assert_eq!(code, 0);
    let text = String::from_utf8_lossy(&out);
    assert!(text.contains("mid_system:    hoisted"), "{text}");
    assert!(text.contains("prefix_stable: no: system_update"), "{text}");
    assert!(text.contains("delivery:      user_reminder"), "{text}");

    let (mut out, mut err) = (Vec::new(), Vec::new());
    let code = run_with(
        ["cacheline", "probe-template", "/nonexistent/template.jinja"],
        &registry,
        None,
        &mut out,
        &mut err,
    );
    assert_eq!(code, 2);
}
