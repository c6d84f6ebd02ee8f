//! Reproducers for the defects of issue 20 that live in prompt-core, one test per defect,
//! named after the defect it reproduces.

use prompt_core::adopt::AdoptOptions;
use prompt_core::history::HistoryError;
use prompt_core::node::{NodeKind, Producer};
use prompt_core::refresh::Refresh;
use prompt_core::session::{ComposeError, UserInput};
use prompt_core::snapshot::{RestoreError, RestoreMode};
use prompt_core::tools::ToolSet;
use prompt_core::{
    Component, DeliveryStyle, Extensions, History, Placement, PromptPolicy, Session,
    SessionContext, SessionOptions,
};

use crate::support::id;

fn components() -> Vec<Component> {
    vec![
        Component::constant(id("assistant_instructions"), "You are terse.")
            .placement(Placement::Prefix),
    ]
}

fn policy() -> PromptPolicy {
    PromptPolicy::from_agent_toml(
        "[prompt]\nprefix_allow = [\"assistant_instructions\"]",
        "agent.toml",
        &components(),
    )
    .unwrap()
    .ignore_warnings()
}

/// The one way this module starts a session.
fn session() -> Session {
    Session::start(
        components(),
        &policy(),
        SessionContext::default(),
        SessionOptions::default(),
    )
    .unwrap()
}

/// A lone surrogate escape is not a Unicode scalar value: no provider can read it back.
const LONE_SURROGATE: &str = r#""\ud800""#;

fn is_not_unicode(e: &HistoryError) -> bool {
    matches!(e, HistoryError::NotUnicode { escape, .. } if escape.len() == 6)
}

fn composed_not_unicode(e: &ComposeError) -> bool {
    matches!(e, ComposeError::History(h) if is_not_unicode(h))
}

/// Defect 1: a lone surrogate is refused with a typed error on every path that stores text
/// (user messages, tool results, assistant replies, adopted conversations, snapshots), in a
/// string value at any depth; a valid pair and an escaped backslash before `ud800` are not.
#[test]
fn defect1_lone_surrogate_is_refused_on_every_path_that_stores_text() {
    let user = format!(r#"{{"role":"user","content":{LONE_SURROGATE}}}"#);
    let nested =
        format!(r#"{{"role":"user","content":[{{"type":"text","text":{LONE_SURROGATE}}}]}}"#);
    let trailing = r#"{"role":"user","content":"ok \udfff"}"#.to_owned();
    for message in [&user, &nested, &trailing] {
        let mut h = History::new(DeliveryStyle::system());
        let err = h
            .append_raw(Producer::User, NodeKind::User, message)
            .unwrap_err();
        assert!(is_not_unicode(&err), "{message}: {err:?}");
        assert!(err.to_string().contains("not Unicode text"), "{err}");
        assert_eq!(h.len(), 0);
        let mut s = session();
        let err = s
            .turn(Extensions::new(), UserInput::Raw(message.clone()))
            .map(|_| ())
            .unwrap_err();
        assert!(composed_not_unicode(&err), "{message}: {err:?}");
        assert_eq!(s.history().len(), 0, "a refused turn stores nothing");
    }

    // Assistant replies and tool results.
    let mut s = session();
    s.turn(Extensions::new(), "read it").unwrap();
    let reply = format!(r#"{{"role":"assistant","content":{LONE_SURROGATE}}}"#);
    let err = s.record_assistant_raw(&reply).unwrap_err();
    assert!(composed_not_unicode(&err), "{err:?}");
    s.record_assistant_raw(
        r#"{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"read_file","arguments":"{}"}}]}"#,
    )
    .unwrap();
    let result = format!(r#"{{"role":"tool","tool_call_id":"c1","content":{LONE_SURROGATE}}}"#);
    let err = s.record_tool_raw(&result).unwrap_err();
    assert!(composed_not_unicode(&err), "{err:?}");
    // Well-formed text with the same letters is accepted.
    s.record_tool_raw(r#"{"role":"tool","tool_call_id":"c1","content":"\ud83d\ude00 \\ud800"}"#)
        .unwrap();

    // An adopted conversation.
    let conversation = format!(r#"[{{"role":"user","content":{LONE_SURROGATE}}}]"#);
    let err = Session::adopt(
        components(),
        &policy(),
        SessionContext::default(),
        SessionOptions::default(),
        &conversation,
        &AdoptOptions::default(),
    )
    .map(drop)
    .unwrap_err();
    assert!(
        matches!(
            err,
            prompt_core::adopt::AdoptError::NotAMessage { index: 0 }
        ),
        "{err:?}"
    );

    // A snapshot whose stored message was edited to hold one.
    let mut s = session();
    s.turn(Extensions::new(), "hi").unwrap();
    let mut value: serde_json::Value = serde_json::from_str(&s.save().to_json()).unwrap();
    let last = value["history"]["nodes"].as_array().unwrap().len() - 1;
    value["history"]["nodes"][last]["message"] = serde_json::Value::String(user.clone());
    let snapshot: prompt_core::SessionSnapshot = serde_json::from_value(value).unwrap();
    let err = Session::restore(
        &snapshot,
        components(),
        &policy(),
        SessionContext::default(),
        SessionOptions::default(),
        RestoreMode::Strict,
    )
    .map(drop)
    .unwrap_err();
    assert!(
        matches!(err, RestoreError::NotAMessage { index } if index == last),
        "{err:?}"
    );
}

/// Every node's bytes and id, to compare a history before and after.
fn node_bytes(history: &History) -> Vec<(String, String)> {
    history
        .nodes()
        .iter()
        .map(|n| (n.id().to_string(), n.bytes().to_owned()))
        .collect()
}

/// Defect 2: compacting the empty span `safe_cut` returns when there is nothing to cut (or
/// a span whose every node survives) changes nothing: no summary, no new epoch, the next
/// request extends the previous one, and a refresh held for the next compaction stays held.
#[test]
fn defect2_an_empty_compaction_changes_nothing() {
    let mut h = History::new(DeliveryStyle::system());
    h.set_system_prompt("Be brief.");
    h.append_user("hi").unwrap();
    let (before, epoch) = (node_bytes(&h), h.epoch());
    let cut = h.safe_cut(0, h.len());
    assert_eq!(cut, 0);
    let c = h
        .compact_keeping(cut..cut, "Nothing to summarize.", &|_| false)
        .unwrap();
    assert_eq!((node_bytes(&h), h.epoch()), (before.clone(), epoch));
    assert!(c.is_empty() && c.summary.is_none() && c.removed.is_empty());
    assert_eq!((c.epoch, c.system_prompt), (epoch, None));
    // Everything in the span survives: nothing is removed, so nothing changes either.
    let c = h
        .compact_keeping(0..h.len(), "Nothing removed.", &|_| true)
        .unwrap();
    assert_eq!((node_bytes(&h), h.epoch()), (before, epoch));
    assert!(c.is_empty());
    // A span that removes a node still compacts.
    let c = h.compact(0..1, "Summary.").unwrap();
    assert!(!c.is_empty() && c.summary.is_some());
    assert_eq!(c.epoch, epoch + 1);

    let mut s = session();
    let first = s.turn(Extensions::new(), "one").unwrap().to_bytes();
    s.record_assistant_raw(r#"{"role":"assistant","content":"1"}"#)
        .unwrap();
    let (before, epoch) = (node_bytes(s.history()), s.history().epoch());
    let held = s
        .refresh_at_next_compaction(components(), &policy(), ToolSet::default(), None)
        .unwrap();
    assert_eq!(held, Refresh::Deferred);
    let cut = s.history().safe_cut(0, s.history().len());
    assert!(
        s.compact(cut..cut, "Nothing to summarize.")
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        (node_bytes(s.history()), s.history().epoch()),
        (before, epoch)
    );
    assert_eq!(s.take_refresh_report(), None, "the refresh is still held");
    let second = s.turn(Extensions::new(), "two").unwrap();
    assert_eq!(second.epoch(), epoch);
    assert_eq!(second.extends(&first), prompt_core::PrefixCheck::Prefix);
    s.record_assistant_raw(r#"{"role":"assistant","content":"2"}"#)
        .unwrap();
    // The next real compaction applies it.
    assert!(!s.compact(0..2, "Summary.").unwrap().is_empty());
    assert_eq!(s.take_refresh_report(), Some(Refresh::Unchanged));
}

/// The errors of a policy file that must not load, as `(line, column, message)`.
fn policy_errors(toml: &str) -> Vec<(usize, usize, String)> {
    match PromptPolicy::from_agent_toml(toml, "agent.toml", &components()) {
        Ok(_) => panic!("must not load:\n{toml}"),
        Err(prompt_core::config::Diagnostics(errors)) => errors
            .into_iter()
            .map(|e| (e.position.line, e.position.column, e.problem.to_string()))
            .collect(),
    }
}

/// Defect 8: toml's "recursion limit" for a key of too many dotted parts (in a key/value
/// line, a table header, an inline table) has no span of its own; it is reported where the
/// key crosses the limit (its 81st part), not at 1:1.
#[test]
fn defect8_a_dotted_key_past_the_recursion_limit_is_reported_where_it_crosses_it() {
    let deep = "a.".repeat(100);
    // Keys outside `[prompt]`: the loader ignores other tables, toml still parses them.
    let head = "[prompt]\nprefix_allow = []\n[other]\n";
    // 80 parts before the last one are the limit: the 81st part starts the excess.
    for (src, line, column) in [
        (format!("{head}{deep}b = 1\n"), 4, 1 + 2 * 80),
        (format!("{head}[{deep}b]\nx = 1\n"), 4, 2 + 2 * 80),
        (format!("{head}[[{deep}b]]\n"), 4, 3 + 2 * 80),
        (format!("{head}t = {{ {deep}b = 1 }}\n"), 4, 7 + 2 * 80),
        (
            format!("{head}[x]\n\"q.q\" . {}b = 1\n", "c . ".repeat(90)),
            5,
            9 + 4 * 79,
        ),
    ] {
        let got = policy_errors(&src);
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!((got[0].0, got[0].1), (line, column), "{src}: {got:?}");
        assert!(got[0].2.contains("recursion limit"), "{got:?}");
    }
    // 80 parts load (and 81 do not).
    let fits = format!("{head}{}b = 1\n", "a.".repeat(79));
    assert!(PromptPolicy::from_agent_toml(&fits, "agent.toml", &components()).is_ok());
    let over = format!("{head}{}b = 1\n", "a.".repeat(80));
    assert_eq!(policy_errors(&over)[0].1, 1 + 2 * 80);
}

/// The shared fixture components and `git_state`, a per-turn writer.
fn agent_components() -> Vec<Component> {
    let mut components = crate::support::components();
    components.push(Component::turn(id("git_state"), |_| {
        Some("On branch main.".to_owned())
    }));
    components
}

/// Defect 10: deny wins over a per-turn writer's prefix request. With `prefix_allow = ["*"]`,
/// `prefix_deny = ["date", "git_*"]` and `[prompt.placement] date = "prefix"` the file loads,
/// `date` lands in the tail (denied), and the entry is a warning saying the deny demotes it;
/// the same request without a deny that demotes it stays an error (it would promote a
/// per-turn writer), as does an exact allow entry for one.
#[test]
fn defect10_a_deny_demotes_a_per_turn_prefix_request_with_a_warning() {
    let components = agent_components();
    let src = "[prompt]\nprefix_allow = [\"*\"]\nprefix_deny = [\"date\", \"git_*\"]\n[prompt.placement]\ndate = \"prefix\"\ngit_state = \"prefix\"\n";
    let loaded = PromptPolicy::from_agent_toml(src, "agent.toml", &components)
        .unwrap_or_else(|e| panic!("deny wins: the file must load: {e}"));
    let warnings: Vec<String> = loaded.warnings().iter().map(ToString::to_string).collect();
    assert_eq!(warnings.len(), 2, "{warnings:#?}");
    assert!(
        warnings[0].starts_with("agent.toml:5:1: `date` in [prompt.placement] requests the prefix")
            && warnings[0].contains("prefix_deny entry `date` keeps it in the tail"),
        "{warnings:#?}"
    );
    assert!(
        warnings[1].starts_with("agent.toml:6:1: `git_state`")
            && warnings[1].contains("prefix_deny entry `git_*` keeps it in the tail"),
        "{warnings:#?}"
    );
    for name in ["date", "git_state"] {
        let c = components.iter().find(|c| c.id().as_str() == name).unwrap();
        let resolution = loaded.clone().ignore_warnings().resolve(c);
        assert_eq!(resolution.placement, Placement::Tail, "{name}");
        assert!(
            matches!(
                resolution.reason,
                prompt_core::policy::Reason::Denied { .. }
            ),
            "{name}: {:?}",
            resolution.reason
        );
    }
    // Without a deny that demotes it, the request would promote a per-turn writer: an error.
    let src = "[prompt]\nprefix_allow = [\"*\"]\nprefix_deny = [\"git_*\"]\n[prompt.placement]\ndate = \"prefix\"\n";
    let Err(prompt_core::config::Diagnostics(errors)) =
        PromptPolicy::from_agent_toml(src, "agent.toml", &components)
    else {
        panic!("a per-turn writer promoted by configuration is refused");
    };
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        errors[0]
            .to_string()
            .starts_with("agent.toml:5:1: `date` in [prompt.placement]")
    );
    // An exact allow entry for a per-turn writer, denied too: a warning as well.
    let src = "[prompt]\nprefix_allow = [\"date\"]\nprefix_deny = [\"d*\"]\n";
    let loaded = PromptPolicy::from_agent_toml(src, "agent.toml", &components)
        .unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(loaded.warnings().len(), 1, "{:?}", loaded.warnings());
    assert!(
        loaded.warnings()[0]
            .to_string()
            .contains("prefix_deny entry `d*` keeps it in the tail"),
        "{}",
        loaded.warnings()[0]
    );
}
