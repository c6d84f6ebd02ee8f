//! The chat-template probe over every template in `tests/fixtures/chat-templates` (copies of
//! `../shared/chat-templates`, origins in that folder's README).
//!
//! Each test states the classification expected from *reading* the template, with the lines
//! that decide it, and compares it with the probe. The probe conversations are: a system
//! message (when the template accepts one), user, assistant, user; the mid-history probe adds
//! a system message before the second user message.

use std::path::{Path, PathBuf};

use prompt_core::{
    Component, ComponentId, Extensions, Placement, PromptPolicy, Session, SessionContext,
    SessionOptions, delivery::PrefixRole, delivery::UpdateRole,
};
use prompt_template_probe::{
    ChatTemplate, MidSystem, PrefixStability, ProbeReport, REMINDER_TAG, probe,
    session_options_for_template,
};
use serde_json::{Value, json};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/chat-templates")
}

fn source(file: &str) -> String {
    std::fs::read_to_string(fixtures().join(file)).unwrap_or_else(|e| panic!("{file}: {e}"))
}

/// What reading the template says.
#[derive(Clone)]
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

/// A later system message dropped, updates as user reminders: a reading several templates
/// share, named once.
const DROPPED: Expected = Expected {
    mid_system: "dropped",
    raises: None,
    unstable: None,
    updates: "user_reminder",
    prefix: "system",
};

/// A later system message hoisted into the head, so a system update changes the head's
/// bytes: a reading several templates share, named once.
const HOISTED: Expected = Expected {
    mid_system: "hoisted",
    unstable: Some(("system_update", "head")),
    ..DROPPED
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

/// One template: what reading it says, and the lines that decide it.
struct Case {
    /// A short name, for failure messages.
    name: &'static str,
    /// The fixture file.
    file: &'static str,
    /// Why, from reading the template.
    reading: &'static str,
    /// The classification expected.
    expected: Expected,
    /// The mid-history classification in full, as `{:?}` prints it, where the reading says
    /// more than its label.
    mid_system_detail: Option<&'static str>,
    /// The head-system classification, as `{:?}` prints it, where the reading says.
    head_system: Option<&'static str>,
    /// Whether the template reads the clock (`strftime_now`).
    clock_dependent: bool,
}

/// Every fixture template, as reading it classifies it.
const CASES: &[Case] = &[
    Case {
        name: "bytedance_seed_oss",
        file: "ByteDance-Seed-OSS.jinja",
        reading: "`elif message.role in [\"user\", \"system\"]` renders every later system message as `<seed:bos>system\\n…<seed:eos>`; reasoning_content is rendered in every assistant turn, never stripped.",
        expected: STABLE_SYSTEM,
        mid_system_detail: None,
        head_system: None,
        clock_dependent: false,
    },
    Case {
        name: "cohere_command_r7b",
        file: "CohereForAI-c4ai-command-r7b-12-2024-tool_use.jinja",
        reading: "`message.role|lower == 'system' and not (loop.first and developer_preamble)` renders a later system turn in place; the closing `<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>` is exactly how the next assistant turn starts.",
        expected: STABLE_SYSTEM,
        mid_system_detail: None,
        head_system: None,
        clock_dependent: false,
    },
    Case {
        name: "hermes_2_pro",
        file: "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja",
        reading: "`message.role == \"user\" or message.role == \"system\"` → `<|im_start|>system` in place (the fixed tool preamble is a separate block before it).",
        expected: STABLE_SYSTEM,
        mid_system_detail: None,
        head_system: None,
        clock_dependent: false,
    },
    Case {
        name: "hermes_3",
        file: "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja",
        reading: "Same template as Hermes 2 Pro.",
        expected: STABLE_SYSTEM,
        mid_system_detail: None,
        head_system: None,
        clock_dependent: false,
    },
    Case {
        name: "qwen2_5",
        file: "Qwen-Qwen2.5-7B-Instruct.jinja",
        reading: "`(message.role == \"system\" and not loop.first)` → ChatML block in place; assistant content is never rewritten.",
        expected: STABLE_SYSTEM,
        mid_system_detail: None,
        head_system: None,
        clock_dependent: false,
    },
    Case {
        name: "llama_3_1",
        file: "meta-llama-Llama-3.1-8B-Instruct.jinja",
        reading: "Date fixed at \"26 Jul 2024\" unless `date_string` is given; the generic branch renders a later `<|start_header_id|>system` turn in place.",
        expected: STABLE_SYSTEM,
        mid_system_detail: None,
        head_system: None,
        clock_dependent: false,
    },
    Case {
        name: "llama_3_2",
        file: "meta-llama-Llama-3.2-3B-Instruct.jinja",
        reading: "As 3.1, but `Today Date` comes from `strftime_now`: stable for a fixed clock, and the probe flags the date dependence (the head changes when the date does).",
        expected: STABLE_SYSTEM,
        mid_system_detail: None,
        head_system: None,
        clock_dependent: true,
    },
    Case {
        name: "llama_3_3",
        file: "meta-llama-Llama-3.3-70B-Instruct.jinja",
        reading: "Same template as 3.1.",
        expected: STABLE_SYSTEM,
        mid_system_detail: None,
        head_system: None,
        clock_dependent: false,
    },
    Case {
        name: "smollm2",
        file: "hf-SmolLM2.jinja",
        reading: "Plain ChatML loop over every message; the default system block only when `messages[0]` is not system.",
        expected: STABLE_SYSTEM,
        mid_system_detail: None,
        head_system: None,
        clock_dependent: false,
    },
    Case {
        name: "phi_4",
        file: "hf-microsoft-phi-4.jinja",
        reading: "`message['role'] == 'system'` → `<|im_start|>system<|im_sep|>` wherever it stands.",
        expected: STABLE_SYSTEM,
        mid_system_detail: None,
        head_system: None,
        clock_dependent: false,
    },
    Case {
        name: "phi_3_5",
        file: "microsoft-Phi-3.5-mini-instruct.jinja",
        reading: "A system message with content renders `<|system|>` in place; the `eos_token` added without a generation prompt is generation-side only.",
        expected: STABLE_SYSTEM,
        mid_system_detail: None,
        head_system: None,
        clock_dependent: false,
    },
    Case {
        name: "granite_3_3",
        file: "ibm-granite-granite-3.3-2B-Instruct.jinja",
        reading: "`loop_messages` (after the first system) are all rendered with their own role.",
        expected: STABLE_SYSTEM,
        mid_system_detail: None,
        head_system: None,
        clock_dependent: false,
    },
    Case {
        name: "firefunction_v2",
        file: "fireworks-ai-llama-3-firefunction-v2.jinja",
        reading: "Needs `functions` and `datetime` (llama.cpp provides them); `loop.index0 > 0` renders a later system turn in place; the assistant header is always appended and is how the next assistant turn starts. `Today is <datetime>` in the head: date-dependent.",
        expected: STABLE_SYSTEM,
        mid_system_detail: None,
        head_system: None,
        clock_dependent: true,
    },
    Case {
        name: "functionary_v3_1",
        file: "meetkai-functionary-medium-v3.1.jinja",
        reading: "`message['role'] == 'user' or message['role'] == 'system'` → in place; `tools` none is fine for both minijinja and Jinja2.",
        expected: STABLE_SYSTEM,
        mid_system_detail: None,
        head_system: None,
        clock_dependent: false,
    },
    Case {
        name: "functionary_v3_2",
        file: "meetkai-functionary-medium-v3.2.jinja",
        reading: "Same in-place branch; the generation prompt `…\\n\\n>>>` is how `>>>all\\n` starts.",
        expected: STABLE_SYSTEM,
        mid_system_detail: None,
        head_system: None,
        clock_dependent: false,
    },
    Case {
        name: "kimi_k2",
        file: "moonshotai-Kimi-K2.jinja",
        reading: "`message['role'] == 'system'` → `<|im_system|>system<|im_middle|>` in place.",
        expected: STABLE_SYSTEM,
        mid_system_detail: None,
        head_system: None,
        clock_dependent: false,
    },
    Case {
        name: "devstral_small",
        file: "unsloth-mistral-Devstral-Small-2507.jinja",
        reading: "`elif message['role'] == 'system'` → `[SYSTEM_PROMPT]…[/SYSTEM_PROMPT]` in place, no alternation check.",
        expected: STABLE_SYSTEM,
        mid_system_detail: None,
        head_system: None,
        clock_dependent: false,
    },
    Case {
        name: "cohere_command_r_plus",
        file: "CohereForAI-c4ai-command-r-plus-tool_use.jinja",
        reading: "In place (`elif message.role == 'system'`), but a fixed `Write 'Action:'…` system turn is rendered after the last message, so turn N+1 replaces it: reuse stops at the last message. Updates still work as system messages.",
        expected: Expected {
            unstable: Some(("turn", "after_last_message")),
            ..STABLE_SYSTEM
        },
        mid_system_detail: None,
        head_system: None,
        clock_dependent: false,
    },
    Case {
        name: "qwq_32b",
        file: "Qwen-QwQ-32B.jinja",
        reading: "In place; `if not loop.last: content.split('</think>')[-1]` strips the reasoning of an earlier reply written inline, so the finished turn is not a prefix of the next.",
        expected: Expected {
            unstable: Some(("reply_reasoning_inline", "assistant_2")),
            ..STABLE_SYSTEM
        },
        mid_system_detail: None,
        head_system: None,
        clock_dependent: false,
    },
    Case {
        name: "qwen3",
        file: "Qwen-Qwen3-0.6B.jinja",
        reading: "In place; `loop.index0 > ns.last_query_index` renders `<think>` only for replies after the last user query, so a reply's reasoning disappears once a new user message follows.",
        expected: Expected {
            unstable: Some(("reply_reasoning_field", "assistant_2")),
            ..STABLE_SYSTEM
        },
        mid_system_detail: None,
        head_system: None,
        clock_dependent: false,
    },
    Case {
        name: "gemma_2",
        file: "google-gemma-2-2b-it.jinja",
        reading: "`raise_exception('System role not supported')` on any leading system message, and a system message later breaks `(message['role'] == 'user') != (loop.index0 % 2 == 0)`. Updates must ride inside the next user turn, and the prefix too.",
        expected: Expected {
            mid_system: "raises",
            raises: Some("Conversation roles must alternate user/assistant/user/assistant/..."),
            unstable: None,
            updates: "merged_into_user",
            prefix: "first_user",
        },
        mid_system_detail: None,
        head_system: Some(r#"Raises { message: "System role not supported" }"#),
        clock_dependent: false,
    },
    Case {
        name: "gemma_3",
        file: "hf-google-gemma-3.jinja",
        reading: "A first system message is folded into the first user turn (`first_user_prefix`), a later one breaks the alternation check. The head is stable, so the prefix may stay a system message; updates are merged into the user turn.",
        expected: Expected {
            mid_system: "raises",
            raises: Some("Conversation roles must alternate user/assistant/user/assistant/..."),
            unstable: None,
            updates: "merged_into_user",
            prefix: "system",
        },
        mid_system_detail: None,
        head_system: Some("FoldedIntoFirstUser"),
        clock_dependent: false,
    },
    Case {
        name: "mistral_small_3_2",
        file: "Mistral-Small-3.2-24B-Instruct-2506.jinja",
        reading: "The alternation check counts a later system message (`not (message.role == \"tool\" or message.get('tool_calls'))`) and raises before the in-place `[SYSTEM_PROMPT]` branch is reached. The first system message is a stable `[SYSTEM_PROMPT]` head.",
        expected: Expected {
            mid_system: "raises",
            raises: Some(
                "After the optional system message, conversation roles must alternate user/assistant/user/assistant/...",
            ),
            unstable: None,
            updates: "merged_into_user",
            prefix: "system",
        },
        mid_system_detail: None,
        head_system: None,
        clock_dependent: false,
    },
    Case {
        name: "mistral_nemo",
        file: "mistralai-Mistral-Nemo-Instruct-2407.jinja",
        reading: "Raises on a later system message (alternation check); the first system message is rendered inside the *last* user message (`loop.last and system_message is defined`), so it moves every turn: not prefix-stable. Only a session with no system message at all, the prefix and updates inside user turns, keeps the prefix.",
        expected: Expected {
            mid_system: "raises",
            raises: Some(
                "After the optional system message, conversation roles must alternate user/assistant/user/assistant/...",
            ),
            unstable: Some(("turn", "user_2")),
            updates: "merged_into_user",
            prefix: "first_user",
        },
        mid_system_detail: None,
        head_system: Some("Moved"),
        clock_dependent: false,
    },
    Case {
        name: "phi_4_mini",
        file: "llama-cpp-microsoft-Phi-4-mini-instruct.jinja",
        reading: "Only `messages[0]` becomes `<|system|>`; the loop renders `message['role'] != 'system'` only, so a later system message vanishes. Updates as user messages.",
        expected: DROPPED,
        mid_system_detail: None,
        head_system: None,
        clock_dependent: false,
    },
    Case {
        name: "nemotron_nano_v2",
        file: "NVIDIA-Nemotron-Nano-v2.jinja",
        reading: "Only `messages[0]` is read as system; the loop renders user, tool and assistant only. The last assistant message is special-cased (`<think>\\n` + content) and rendered plainly once it is no longer last: the finished turn is not a prefix of the next.",
        expected: Expected {
            unstable: Some(("reply_reasoning_field", "assistant_2")),
            ..DROPPED
        },
        mid_system_detail: None,
        head_system: None,
        clock_dependent: false,
    },
    Case {
        name: "gpt_oss",
        file: "openai-gpt-oss-120b.jinja",
        reading: "Only `messages[0]` becomes the developer message; the loop renders assistant, tool and user only. `thinking` is rendered for the last assistant message only (\"CoT is dropped during all previous turns\"). `Current date:` from `strftime_now` in the head.",
        expected: Expected {
            unstable: Some(("reply_reasoning_field", "assistant_2")),
            ..DROPPED
        },
        mid_system_detail: None,
        head_system: None,
        clock_dependent: true,
    },
    Case {
        name: "deepseek_r1_distill_llama",
        file: "deepseek-ai-DeepSeek-R1-Distill-Llama-8B.jinja",
        reading: "`{% set ns.system_prompt = message['content'] %}` for every system message, then `{{ns.system_prompt}}` right after `bos_token`: the last system message replaces the first at byte 0.",
        expected: HOISTED,
        mid_system_detail: None,
        head_system: None,
        clock_dependent: false,
    },
    Case {
        name: "deepseek_r1_distill_qwen",
        file: "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja",
        reading: "Same template as the Llama distill.",
        expected: HOISTED,
        mid_system_detail: None,
        head_system: None,
        clock_dependent: false,
    },
    Case {
        name: "llama_cpp_deepseek_r1",
        file: "llama-cpp-deepseek-r1.jinja",
        reading: "llama.cpp's R1 template: same `ns.system_prompt` hoisting.",
        expected: HOISTED,
        mid_system_detail: Some("Hoisted { head_kept: false }"),
        head_system: None,
        clock_dependent: false,
    },
    Case {
        name: "deepseek_v3_1",
        file: "deepseek-ai-DeepSeek-V3.1.jinja",
        reading: "Every system message is concatenated (`'\\n\\n'`) into `ns.system_prompt` at the head: merged into the head, the first one kept.",
        expected: HOISTED,
        mid_system_detail: Some("Hoisted { head_kept: true }"),
        head_system: None,
        clock_dependent: false,
    },
    Case {
        name: "rwkv_world",
        file: "llama-cpp-rwkv-world.jinja",
        reading: "`ns.system_prompt` takes the last system message and is printed as `System: …` at the head.",
        expected: HOISTED,
        mid_system_detail: None,
        head_system: None,
        clock_dependent: false,
    },
];

/// The probe agrees with reading, template by template. Every mismatch is reported, not
/// only the first.
#[test]
fn every_template_is_classified_as_reading_it_says() {
    let mut failures = Vec::new();
    for case in CASES {
        let outcome = std::panic::catch_unwind(|| {
            let report = check(case.file, case.expected.clone());
            if let Some(mid) = case.mid_system_detail {
                assert_eq!(format!("{:?}", report.mid_system), mid, "{}", case.file);
            }
            if let Some(head) = case.head_system {
                assert_eq!(format!("{:?}", report.head_system), head, "{}", case.file);
            }
            assert_eq!(
                report.clock_dependent, case.clock_dependent,
                "{}",
                case.file
            );
        });
        if let Err(panic) = outcome {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_default();
            failures.push(format!(
                "{} ({}): {message}\nreading: {}",
                case.name, case.file, case.reading
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
    assert_eq!(CASES.len(), 32);
}

#[test]
fn every_shared_template_is_a_fixture_with_a_test() {
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
    let mut expected: Vec<String> = CASES.iter().map(|c| c.file.to_owned()).collect();
    expected.sort();
    expected.dedup();
    assert_eq!(list(&fixtures_dir), expected);
    let readme = source("README.md");
    for name in &expected {
        assert!(
            readme.contains(name.as_str()),
            "README.md does not list {name}"
        );
    }
    let shared = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/chat-templates");
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
        &components,
    )
    .unwrap_or_else(|e| panic!("{e:?}"))
    .ignore_warnings();
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
    assert_eq!(options.delivery().role, UpdateRole::MergedIntoUser);
    assert_eq!(options.delivery().prefix, PrefixRole::FirstUser);
    assert_eq!(options.delivery().tag, REMINDER_TAG);
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
    assert_eq!(options.delivery().role, UpdateRole::System);
    assert_eq!(options.delivery().prefix, PrefixRole::System);
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
