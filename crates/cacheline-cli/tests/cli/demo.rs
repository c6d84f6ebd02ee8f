//! `demo`: the scripted session, byte by byte, against replace-at-head.

use std::collections::HashMap;

use serde_json::Value;
use serde_json::value::RawValue;

use crate::cacheline;

#[test]
fn demo_runs_the_scripted_session_and_reuses_the_prefix_every_turn() {
    let (code, out, err) = cacheline(&["demo", "--turns", "12", "--json"]);
    assert_eq!(code, 0, "{err}");
    let turns: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}"));
    let turns = turns.as_array().unwrap_or_else(|| panic!("{out}"));
    let user_requests = turns.iter().filter(|t| t["continuation"] == false).count();
    assert_eq!(user_requests, 12);
    assert!(turns.len() > 12, "tool calls are played as continuations");
    assert!(turns.iter().any(|t| t["label"] == "3.1"), "{out}");
    let events: Vec<String> = turns
        .iter()
        .flat_map(|t| t["events"].as_array().cloned().unwrap_or_default())
        .filter_map(|e| e.as_str().map(str::to_owned))
        .collect();
    for expected in [
        "date rolled over",
        "todo list changed",
        "plan mode turned on",
        "instructions were edited",
        "compacted",
        "called read_file",
    ] {
        assert!(
            events.iter().any(|e| e.contains(expected)),
            "no event {expected}: {events:?}"
        );
    }
    let bytes = |t: &Value, key: &str| {
        t[key]
            .as_u64()
            .unwrap_or_else(|| panic!("turn {}: no {key}", t["turn"]))
    };
    let (fingerprint, key) = (&turns[0]["fingerprint"], &turns[0]["routing_key"]);
    // Bytes sent again, not served by the previous request's prefix, from turn 2 on.
    let (mut resent, mut head_resent) = (0, 0);
    for pair in turns.windows(2) {
        let (before, t) = (&pair[0], &pair[1]);
        assert_eq!(
            &t["fingerprint"], fingerprint,
            "prefix fingerprint is stable"
        );
        assert_eq!(&t["routing_key"], key, "one routing key for the session");
        let reused = bytes(t, "reused_bytes");
        let head = bytes(t, "head_rewrite_reused");
        resent += bytes(t, "request_bytes") - reused;
        head_resent += bytes(t, "head_rewrite_bytes") - head;
        let compacted = t["events"].as_array().is_some_and(|e| {
            e.iter()
                .any(|e| e.as_str().is_some_and(|e| e.contains("compacted")))
        });
        if compacted {
            // A new cache epoch: the frozen prefix is still reused, nearly as much as the
            // unchanged start of replace-at-head's system message.
            assert!(
                10 * reused >= 9 * head,
                "turn {}: reused {reused} vs replace-at-head {head}",
                t["turn"]
            );
            continue;
        }
        // All of the previous request is reused but its ephemeral tail (git state, memory
        // recall).
        let lost = bytes(before, "request_bytes") - reused;
        assert!(
            lost < 1024,
            "request {}: {lost} B of the previous request not reused",
            t["label"]
        );
        // From one turn to the next, never less than replace-at-head reuses. (Within a turn
        // replace-at-head keeps its message 0, per-turn writers included, so it may keep
        // the few bytes of the ephemeral tail that the library sends at the end.)
        if t["continuation"] == false {
            assert!(
                reused >= head,
                "turn {}: reused {reused} vs replace-at-head {head}",
                t["turn"]
            );
        }
    }
    // Replace-at-head re-sends its whole history every turn.
    assert!(
        head_resent > 3 * resent,
        "re-sent: cacheline {resent} B, replace-at-head {head_resent} B"
    );
    // The edit of the instructions is appended, never written over message 0.
    let edit = turns
        .iter()
        .find(|t| t["label"] == "7")
        .unwrap_or_else(|| panic!("turn 7"));
    assert!(
        edit["appended"]
            .as_array()
            .is_some_and(|a| a.iter().any(|n| n["producer"] == "system_prompt"))
    );
    // Replace-at-head rewrites the start of message 0 there and keeps almost nothing.
    let (reused, head) = (
        bytes(edit, "reused_bytes"),
        bytes(edit, "head_rewrite_reused"),
    );
    assert!(
        reused > 5 * head,
        "turn 7: reused {reused} vs replace-at-head {head}"
    );
}

/// The files of a `--write-bodies` directory, by name.
fn bodies(dir: &std::path::Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|entry| {
            let path = entry.unwrap_or_else(|e| panic!("{e}")).path();
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            (name, std::fs::read(&path).unwrap_or_else(|e| panic!("{e}")))
        })
        .collect();
    files.sort();
    files
}

/// `demo --save` after turn K and `demo --resume` to turn N write the same request bodies,
/// byte for byte, as one run of N turns, in every delivery style and as every API's body.
#[test]
fn a_saved_and_resumed_demo_writes_the_same_bodies_as_one_run() {
    let root = std::env::temp_dir().join(format!("cacheline-demo-resume-{}", std::process::id()));
    let deliveries = ["system", "user-reminder", "merged", "first-user"].map(|d| ["--delivery", d]);
    for [flag, value] in deliveries.into_iter().chain(APIS.map(|a| ["--api", a])) {
        let delivery = format!("{flag} {value}");
        let dir = root.join(value);
        let (whole, split, saved) = (dir.join("whole"), dir.join("split"), dir.join("saved"));
        // `cacheline demo --turns N FLAG VALUE --write-bodies DIR EXTRA…`.
        let demo = |turns: &str, bodies: &std::path::Path, extra: &[&str]| {
            let bodies = bodies.to_string_lossy();
            let mut args = vec![
                "demo",
                "--turns",
                turns,
                flag,
                value,
                "--write-bodies",
                &bodies,
            ];
            args.extend_from_slice(extra);
            cacheline(&args)
        };
        let (code, _, err) = demo("11", &whole, &[]);
        assert_eq!(code, 0, "{delivery}: {err}");
        let saved = saved.to_string_lossy();
        let (code, _, err) = demo("4", &split, &["--save", &saved]);
        assert_eq!(code, 0, "{delivery}: {err}");
        let (code, out, err) = demo("11", &split, &["--resume", &saved, "--json"]);
        assert_eq!(code, 0, "{delivery}: {err}");
        let resumed: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            resumed[0]["turn"], 5,
            "{delivery}: the resumed run starts at turn 5"
        );
        let (whole, split) = (bodies(&whole), bodies(&split));
        assert!(whole.len() > 11, "{delivery}: {} bodies", whole.len());
        assert_eq!(
            whole.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
            split.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>(),
            "{delivery}"
        );
        for ((name, a), (_, b)) in whole.iter().zip(&split) {
            assert!(a == b, "{delivery}: {name} differs after a save and resume");
        }
    }
}

/// `--api` values.
const APIS: [&str; 5] = [
    "openai",
    "openai-responses",
    "anthropic",
    "gemini",
    "llama-cpp",
];

/// The top-level fields of a body, as sent.
fn fields(body: &[u8]) -> HashMap<String, Box<RawValue>> {
    serde_json::from_slice(body).unwrap_or_else(|e| panic!("{e}"))
}

/// For every API, the demo's bodies: one per request; the tools field byte-identical in
/// each; one `prompt_cache_key` (OpenAI shapes); Anthropic's breakpoints at most four and
/// never on a block of the per-request tail; and `cacheline audit DIR` finds each body
/// extending the one before (up to its per-request tail) except at the compaction.
#[test]
fn demo_bodies_of_every_api_carry_one_tools_field_and_extend_each_other_until_the_compaction() {
    let root = std::env::temp_dir().join(format!("cacheline-demo-api-{}", std::process::id()));
    for api in APIS {
        let dir = root.join(api);
        let dir_arg = dir.to_string_lossy().into_owned();
        let (code, out, err) =
            cacheline(&["demo", "--api", api, "--write-bodies", &dir_arg, "--json"]);
        assert_eq!(code, 0, "{api}: {err}");
        let report: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}"));
        let requests = report.as_array().unwrap_or_else(|| panic!("{out}"));
        let written = bodies(&dir);
        assert_eq!(written.len(), requests.len(), "{api}: one body per request");
        assert_eq!(written[0].0, "request-001.json");

        let tools: Vec<String> = written
            .iter()
            .map(|(name, b)| {
                fields(b)
                    .get("tools")
                    .unwrap_or_else(|| panic!("{api} {name}: no tools field"))
                    .get()
                    .to_owned()
            })
            .collect();
        assert!(tools[0].contains("read_file"), "{api}: {}", tools[0]);
        assert!(
            tools.iter().all(|t| *t == tools[0]),
            "{api}: the tools field changed"
        );

        let routing_key = requests[0]["routing_key"].as_str().unwrap_or_default();
        for (name, b) in &written {
            let key = fields(b)
                .get("prompt_cache_key")
                .map(|k| k.get().to_owned());
            match api {
                "anthropic" | "gemini" => assert_eq!(key, None, "{api} {name}"),
                _ => assert_eq!(key, Some(format!("\"{routing_key}\"")), "{api} {name}"),
            }
        }

        if api == "anthropic" {
            for ((name, b), request) in written.iter().zip(requests) {
                let text = String::from_utf8_lossy(b);
                assert!(text.matches("cache_control").count() <= 4, "{name}");
                let body: Value = serde_json::from_slice(b).unwrap_or_else(|e| panic!("{e}"));
                let ephemeral: Vec<&str> = request["ephemeral"]
                    .as_array()
                    .map(|e| e.iter().filter_map(Value::as_str).collect())
                    .unwrap_or_default();
                let blocks = body["messages"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default());
                let mut tail_blocks = 0;
                for block in blocks {
                    let text = block["text"].as_str().unwrap_or_default();
                    if ephemeral
                        .iter()
                        .any(|id| text.contains(&format!("from=\"{id}\"")))
                    {
                        tail_blocks += 1;
                        assert!(block.get("cache_control").is_none(), "{name}: {block}");
                    }
                }
                assert_eq!(tail_blocks, ephemeral.len(), "{name}: the tail's blocks");
            }
        }

        let (code, out, err) = cacheline(&["audit", &dir_arg, "--json"]);
        assert_eq!(code, 0, "{api}: {err}");
        let audit: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}\n{out}"));
        let pairs = audit["pairs"].as_array().unwrap_or_else(|| panic!("{out}"));
        assert_eq!(pairs.len(), written.len() - 1);
        for (pair, request) in pairs.iter().zip(&requests[1..]) {
            let compacted = request["events"].as_array().is_some_and(|e| {
                e.iter()
                    .any(|e| e.as_str().is_some_and(|e| e.contains("compacted")))
            });
            let outcome = pair["outcome"].as_str().unwrap_or_default();
            if compacted {
                assert_eq!(outcome, "breaks", "{api}: {pair}");
                assert_eq!(pair["at"]["cause"], "system_changed", "{api}: {pair}");
            } else {
                assert!(
                    outcome == "extends" || outcome == "tail_dropped",
                    "{api} {}: {pair}",
                    request["label"]
                );
            }
        }
        assert_eq!(audit["summary"]["breaks"], 1, "{api}: {}", audit["summary"]);
    }
}

/// `(request bytes, reused bytes)` of the lifecycle line that starts with `action`.
fn lifecycle_line(out: &str, action: &str) -> (u64, u64) {
    let line = out
        .lines()
        .find(|l| l.trim_start().starts_with(action))
        .unwrap_or_else(|| panic!("no line {action:?} in:\n{out}"));
    let figures: Vec<u64> = line
        .split(": ")
        .nth(1)
        .unwrap_or_default()
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|n| n.parse().ok())
        .take(2)
        .collect();
    (figures[0], figures[1])
}

#[test]
fn demo_plays_a_regenerate_an_edit_and_a_restart_with_edited_instructions_and_says_what_the_cache_kept()
 {
    for api in [None, Some("anthropic"), Some("openai")] {
        let mut args = vec!["demo", "--turns", "12"];
        if let Some(api) = api {
            args.extend(["--api", api]);
        }
        let (code, out, err) = cacheline(&args);
        assert_eq!(code, 0, "{err}");
        // A regenerate sends the last request again: all of it is reused.
        let (sent, reused) = lifecycle_line(&out, "regenerate the last reply (turn 12)");
        assert_eq!(sent, reused, "{api:?}");
        // An edit of turn 11's message reuses everything before that message.
        let (sent, reused) = lifecycle_line(&out, "edit the user message of turn 11");
        assert!(reused * 10 > sent * 9, "{api:?}: {reused} of {sent}");
        assert!(reused < sent, "{api:?}: the edited message is new");
        // A restart with edited instructions keeps the saved prefix: the edit is appended.
        let (sent, reused) = lifecycle_line(&out, "restart the app with edited instructions");
        assert!(reused * 10 > sent * 9, "{api:?}: {reused} of {sent}");
        assert!(
            out.contains("restored Strict; the edit appended"),
            "{api:?}: {out}"
        );
    }
}

#[test]
fn demo_resume_refuses_a_saved_state_whose_turn_was_edited() {
    let dir = std::env::temp_dir().join(format!("cacheline-demo-turn-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{e}"));
    let saved = dir.join("saved.json");
    let saved_arg = saved.to_string_lossy().into_owned();
    let (code, _, err) = cacheline(&["demo", "--turns", "3", "--save", &saved_arg]);
    assert_eq!(code, 0, "{err}");
    let text = std::fs::read_to_string(&saved).unwrap_or_else(|e| panic!("{e}"));
    let mut state: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}"));
    // Before: `turn + 1` wrapped to 0 in a release build and the demo replayed from the
    // start, silently.
    for turn in [Value::from(u64::MAX), Value::from(7u64)] {
        state["demo"]["turn"] = turn.clone();
        std::fs::write(&saved, state.to_string()).unwrap_or_else(|e| panic!("{e}"));
        let (code, _, err) = cacheline(&["demo", "--turns", "12", "--resume", &saved_arg]);
        assert_eq!(code, 2, "turn {turn}: {err}");
        assert!(err.contains("saved demo"), "turn {turn}: {err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
