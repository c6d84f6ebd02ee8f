//! Does the model follow a system-prompt update, depending on where the update is put?
//!
//! A short conversation (a system prompt, then `h` scripted exchanges) ends with a question
//! about the assistant's name. Before the question the system prompt changes to give the
//! assistant a new name, delivered one of four ways ([`Condition`]). A reply follows the
//! update when it contains the new name. Every request is greedy (`temperature` 0,
//! `top_k` 1, fixed seed) with the prompt cache off, so the table is reproducible on a given
//! server build and model.
//!
//! A name is the one instruction a 135M-parameter model follows at all: instructions about
//! language, case or a suffix are ignored in every placement, head rewrite included.

use std::io::{self, Write};

use prompt_core::{
    Component, ComponentId, DeliveryStyle, Extensions, Placement, PromptPolicy, Session,
    SessionContext, SessionOptions,
};
use serde::Serialize;
use serde_json::{Value, json};

use super::client::{ChatOptions, LiveError, LlamaClient};

/// How the update reaches the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Condition {
    /// No update: the baseline rate of saying the new name unprompted.
    NoUpdate,
    /// Message 0 rewritten with the new system prompt (breaks the prompt cache).
    HeadRewrite,
    /// The library's delivery for llama.cpp: `set_system_prompt` appends the new prompt
    /// after the history as a `role: "system"` message wrapped in `<system-update>`.
    AppendedSystem,
    /// The same, delivered as a `role: "user"` message wrapped in `<system-reminder>`.
    AppendedUserReminder,
}

impl Condition {
    /// All four, in table order.
    pub const ALL: [Condition; 4] = [
        Condition::NoUpdate,
        Condition::HeadRewrite,
        Condition::AppendedSystem,
        Condition::AppendedUserReminder,
    ];

    /// A label for tables.
    pub fn label(self) -> &'static str {
        match self {
            Condition::NoUpdate => "no update",
            Condition::HeadRewrite => "head rewrite",
            Condition::AppendedSystem => "appended system message (library)",
            Condition::AppendedUserReminder => "appended user reminder",
        }
    }
}

/// The system prompt before the update.
pub const BASE_PROMPT: &str = "You are a helpful assistant. Answer in one or two short sentences.";
/// The instruction the update adds.
pub const UPDATE_SENTENCE: &str = "From now on your name is Zorblax.";
/// What a compliant reply contains (case-insensitive).
pub const MARKER: &str = "zorblax";

/// Questions asked after the update.
pub const QUESTIONS: [&str; 4] = [
    "What is your name?",
    "Who are you?",
    "Please introduce yourself.",
    "What should I call you?",
];

/// Scripted exchanges before the update (the first `h` are used).
const EXCHANGES: [(&str, &str); 6] = [
    (
        "What is the capital of France?",
        "The capital of France is Paris.",
    ),
    (
        "How many legs does a spider have?",
        "A spider has eight legs.",
    ),
    ("What color is the sky on a clear day?", "It is blue."),
    ("Name a fruit that is yellow.", "A banana is yellow."),
    ("What is two plus two?", "Two plus two is four."),
    (
        "Which planet is closest to the sun?",
        "Mercury is the closest planet to the sun.",
    ),
];

/// Tokens generated per probe reply: enough for a name and a short sentence.
pub const MAX_TOKENS: u32 = 24;

/// History lengths (exchanges before the update) in the probe set.
pub const HISTORIES: [usize; 3] = [1, 3, 6];

/// The updated system prompt.
pub fn updated_prompt() -> String {
    format!("{BASE_PROMPT} {UPDATE_SENTENCE}")
}

/// One probe: a condition, a history length, a question, and the request.
#[derive(Debug, Clone)]
pub struct ProbeCase {
    /// Where the update is.
    pub condition: Condition,
    /// Exchanges before the update.
    pub history: usize,
    /// The question.
    pub question: &'static str,
    /// The serialized messages.
    pub messages: Vec<u8>,
}

fn session(delivery: DeliveryStyle) -> Result<Session, LiveError> {
    let components = vec![
        Component::constant(ComponentId::new("assistant_instructions")?, BASE_PROMPT)
            .placement(Placement::Prefix),
    ];
    let policy = PromptPolicy::from_agent_toml(
        "[prompt]\nprefix_allow = [\"assistant_instructions\"]",
        "<probe agent.toml>",
        &components,
    )?
    .deny_warnings()?;
    Ok(Session::start(
        components,
        &policy,
        SessionContext::default(),
        SessionOptions::new().with_delivery(delivery),
    )?)
}

/// Composes one probe's request with the library (head rewrite: the no-update request with
/// message 0 replaced).
pub fn compose(
    condition: Condition,
    history: usize,
    question: &'static str,
) -> Result<ProbeCase, LiveError> {
    let delivery = match condition {
        Condition::AppendedUserReminder => DeliveryStyle::user_reminder("system-reminder"),
        _ => DeliveryStyle::system(),
    };
    let mut s = session(delivery)?;
    for (q, a) in EXCHANGES.iter().take(history) {
        s.turn(Extensions::new(), *q)?;
        s.record_assistant(&json!({"role": "assistant", "content": a}))?;
    }
    if matches!(
        condition,
        Condition::AppendedSystem | Condition::AppendedUserReminder
    ) {
        s.set_system_prompt(&updated_prompt());
    }
    let mut messages = s.turn(Extensions::new(), question)?.to_bytes();
    if condition == Condition::HeadRewrite {
        let mut value: Value =
            serde_json::from_slice(&messages).map_err(|source| LiveError::Composed {
                what: "probe request",
                source,
            })?;
        if let Some(head) = value.get_mut(0) {
            head["content"] = Value::String(updated_prompt());
        }
        messages = prompt_core::raw_json::canonical(&value).into_bytes();
    }
    Ok(ProbeCase {
        condition,
        history,
        question,
        messages,
    })
}

/// The whole probe set: every condition × history length × question.
pub fn cases() -> Result<Vec<ProbeCase>, LiveError> {
    let mut out = Vec::new();
    for condition in Condition::ALL {
        for history in HISTORIES {
            for question in QUESTIONS {
                out.push(compose(condition, history, question)?);
            }
        }
    }
    Ok(out)
}

/// One probe's reply.
#[derive(Debug, Clone, Serialize)]
pub struct ProbeOutcome {
    /// Where the update was.
    pub condition: Condition,
    /// Exchanges before the update.
    pub history: usize,
    /// The question.
    pub question: &'static str,
    /// The reply.
    pub reply: String,
    /// Whether the reply contains the new name.
    pub followed: bool,
}

/// All outcomes.
#[derive(Debug, Clone, Serialize)]
pub struct ComplianceTable {
    /// The server.
    pub url: String,
    /// One per probe.
    pub outcomes: Vec<ProbeOutcome>,
}

impl ComplianceTable {
    /// (followed, total) for `condition`, over every history length and question.
    pub fn rate(&self, condition: Condition) -> (usize, usize) {
        self.rate_where(|o| o.condition == condition)
    }

    /// (followed, total) for `condition` at one history length.
    pub fn rate_at(&self, condition: Condition, history: usize) -> (usize, usize) {
        self.rate_where(|o| o.condition == condition && o.history == history)
    }

    fn rate_where(&self, keep: impl Fn(&ProbeOutcome) -> bool) -> (usize, usize) {
        let kept = self.outcomes.iter().filter(|o| keep(o));
        let (mut followed, mut total) = (0, 0);
        for o in kept {
            total += 1;
            followed += usize::from(o.followed);
        }
        (followed, total)
    }

    /// Writes the table (followed / asked per condition and history length) and every reply.
    pub fn write_table(&self, out: &mut dyn Write, replies: bool) -> io::Result<()> {
        write!(out, "| condition |")?;
        for h in HISTORIES {
            write!(out, " history {h} |")?;
        }
        writeln!(out, " total |")?;
        write!(out, "|---|")?;
        for _ in HISTORIES {
            write!(out, "---|")?;
        }
        writeln!(out, "---|")?;
        for c in Condition::ALL {
            write!(out, "| {} |", c.label())?;
            for h in HISTORIES {
                let (f, t) = self.rate_at(c, h);
                write!(out, " {f}/{t} |")?;
            }
            let (f, t) = self.rate(c);
            writeln!(out, " {f}/{t} |")?;
        }
        if replies {
            writeln!(out)?;
            for o in &self.outcomes {
                writeln!(
                    out,
                    "{:<34} h={} {:<28} {} {:?}",
                    o.condition.label(),
                    o.history,
                    o.question,
                    if o.followed { "FOLLOWED" } else { "-       " },
                    o.reply.trim()
                )?;
            }
        }
        Ok(())
    }
}

/// Runs every probe on `client`: greedy, uncached, `max_tokens` per reply.
pub fn run(client: &LlamaClient, max_tokens: u32) -> Result<ComplianceTable, LiveError> {
    let options = ChatOptions::greedy_uncached(max_tokens);
    let mut outcomes = Vec::new();
    for case in cases()? {
        let reply = client.chat(&case.messages, &options)?;
        outcomes.push(ProbeOutcome {
            condition: case.condition,
            history: case.history,
            question: case.question,
            followed: reply.content.to_lowercase().contains(MARKER),
            reply: reply.content,
        });
    }
    Ok(ComplianceTable {
        url: client.base_url().to_owned(),
        outcomes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn messages(case: &ProbeCase) -> Vec<Value> {
        serde_json::from_slice::<Vec<Value>>(&case.messages).unwrap()
    }

    #[test]
    fn conditions_put_the_update_where_they_say() {
        let none = compose(Condition::NoUpdate, 3, QUESTIONS[0]).unwrap();
        let head = compose(Condition::HeadRewrite, 3, QUESTIONS[0]).unwrap();
        let sys = compose(Condition::AppendedSystem, 3, QUESTIONS[0]).unwrap();
        let rem = compose(Condition::AppendedUserReminder, 3, QUESTIONS[0]).unwrap();
        let (none, head, sys, rem) = (
            messages(&none),
            messages(&head),
            messages(&sys),
            messages(&rem),
        );
        assert_eq!(none.len(), 8);
        assert_eq!(none[0]["content"], BASE_PROMPT);
        assert_eq!(head.len(), 8);
        assert_eq!(head[0]["content"], updated_prompt().as_str());
        assert_eq!(head[1..], none[1..]);
        assert_eq!(sys.len(), 9);
        assert_eq!(sys[..7], none[..7]);
        assert_eq!(sys[7]["role"], "system");
        assert!(
            sys[7]["content"]
                .as_str()
                .unwrap()
                .contains(UPDATE_SENTENCE)
        );
        assert!(
            sys[7]["content"]
                .as_str()
                .unwrap()
                .starts_with("<system-update")
        );
        assert_eq!(rem[7]["role"], "user");
        assert!(
            rem[7]["content"]
                .as_str()
                .unwrap()
                .starts_with("<system-reminder")
        );
        assert_eq!(
            cases().unwrap().len(),
            4 * HISTORIES.len() * QUESTIONS.len()
        );
    }
}
