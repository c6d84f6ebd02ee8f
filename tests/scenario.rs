//! The scripted session of `prompt-reference`, as `demo`, `simulate` and `bench-live`
//! compose it: the library never rewrites a sent byte; the baseline does every turn.

use prompt_core::divergence::{check_prefix, common_prefix_len};
use prompt_reference::scenario::{
    self, INSTRUCTIONS_EDIT_TURN, ScenarioSize, Strategy as Composition,
};
use prompt_registry::Registry;

#[test]
fn the_cacheline_strategy_never_rewrites_a_sent_byte_and_the_baseline_does() {
    let registry = Registry::linked().unwrap_or_else(|e| panic!("{e}"));
    let array = |messages: &[String]| format!("[{}]", messages.join(","));
    let requests =
        scenario::compose(Composition::Cacheline, &registry, 30).unwrap_or_else(|e| panic!("{e}"));
    let compactions: Vec<u64> = requests
        .iter()
        .filter(|r| !r.continuation)
        .map(|r| r.turn)
        .filter(|t| scenario::script(*t).compaction.is_some())
        .collect();
    assert_eq!(compactions, [10, 24]);
    for pair in requests.windows(2) {
        let (a, b) = (&pair[0], &pair[1]);
        assert_eq!(
            a.messages[0], b.messages[0],
            "the prefix moved at turn {}",
            b.turn
        );
        let stable = a.breakpoints[1];
        let earlier = array(&a.messages[..stable]);
        // The user request of a turn that follows a compaction (10, 24) starts a new cache
        // epoch; every other request, continuations included, extends the previous one.
        if b.continuation || scenario::script(b.turn).compaction.is_none() {
            assert!(
                check_prefix(earlier.as_bytes(), array(&b.messages).as_bytes()).is_prefix(),
                "turn {} rewrote bytes of turn {}",
                b.turn,
                a.turn
            );
        }
    }
    let head = scenario::compose(Composition::ReplaceAtHead, &registry, 5)
        .unwrap_or_else(|e| panic!("{e}"));
    // Every turn rewrites message 0 (the per-turn writers are in it); within a turn its
    // continuations keep it.
    let user_requests: Vec<_> = head.iter().filter(|r| !r.continuation).collect();
    assert!(
        user_requests
            .windows(2)
            .all(|p| p[0].messages[0] != p[1].messages[0])
    );
}

#[test]
fn library_requests_extend_each_other_and_head_requests_share_only_message_0() {
    let registry = Registry::linked().unwrap_or_else(|e| panic!("{e}"));
    let policy = scenario::default_policy(&registry).unwrap_or_else(|e| panic!("{e}"));
    let script = ScenarioSize::Compact
        .paired(&registry, &policy, 8)
        .unwrap_or_else(|e| panic!("{e}"));
    let turns: Vec<u64> = script.iter().map(|t| t.turn).collect();
    assert_eq!(turns.iter().max(), Some(&8));
    assert!(script.len() > 8, "tool calls are played as continuations");
    for pair in script.windows(2) {
        // Everything but the previous request's ephemeral tail and closing bracket.
        assert!(
            common_prefix_len(&pair[0].library, &pair[1].library) > pair[0].library.len() * 9 / 10,
            "turn {}",
            pair[1].turn
        );
        // Replace-at-head rewrites its per-turn writers at the end of message 0 each
        // turn, so nothing of the history after it is a shared prefix from one turn to the
        // next (a continuation keeps the turn's message 0).
        if pair[0].turn == pair[1].turn {
            continue;
        }
        let head: Vec<&serde_json::value::RawValue> =
            serde_json::from_slice(&pair[0].head).unwrap();
        assert!(
            common_prefix_len(&pair[0].head, &pair[1].head) < 1 + head[0].get().len(),
            "turn {}",
            pair[1].turn
        );
    }
    let edit = script
        .iter()
        .find(|t| t.label == INSTRUCTIONS_EDIT_TURN.to_string())
        .unwrap_or_else(|| panic!("no turn {INSTRUCTIONS_EDIT_TURN}"));
    assert!(edit.events.iter().any(|e| e.contains("instructions")));
}

/// The demo's instructions edit (turn 7) outlives the compaction before turn 10: every
/// later request still carries it.
#[test]
fn the_edited_instructions_survive_the_scripted_compactions() {
    let registry = Registry::linked().unwrap_or_else(|e| panic!("{e}"));
    let edited = scenario::script(INSTRUCTIONS_EDIT_TURN)
        .instructions
        .unwrap_or_else(|| panic!("turn {INSTRUCTIONS_EDIT_TURN} edits the instructions"));
    let tail = edited
        .rsplit_once(". ")
        .map_or(edited.as_str(), |(_, tail)| tail)
        .to_owned();
    let requests =
        scenario::compose(Composition::Cacheline, &registry, 30).unwrap_or_else(|e| panic!("{e}"));
    for request in requests.iter().filter(|r| r.turn >= INSTRUCTIONS_EDIT_TURN) {
        assert!(
            request.messages.iter().any(|m| m.contains(&tail)),
            "turn {}: the edited instructions are gone",
            request.turn
        );
    }
}
