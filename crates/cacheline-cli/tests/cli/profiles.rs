//! Provider profiles from the command line (issue 19): `demo --model` writes the bodies a
//! profile gives, `status` and `check` show the profile and warn on a delivery that breaks
//! the cache, `simulate --idle-gap` prices a pause per provider.

use serde_json::Value;

use crate::{cacheline, temp_file};

/// The bodies `demo --api API --model MODEL` writes, in order.
fn demo_bodies(api: &str, model: &str) -> Vec<Value> {
    let dir = std::env::temp_dir().join(format!(
        "cacheline-profile-{}-{api}-{model}",
        std::process::id()
    ));
    let dir_arg = dir.to_string_lossy().into_owned();
    let (code, out, err) = cacheline(&[
        "demo",
        "--api",
        api,
        "--model",
        model,
        "--write-bodies",
        &dir_arg,
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("profile: "), "{out}");
    let (code, audit, err) = cacheline(&["audit", &dir_arg, "--json"]);
    assert_eq!(code, 0, "{err}");
    let audit: Value = serde_json::from_str(&audit).unwrap();
    let breaks = audit["pairs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["outcome"] == "breaks")
        .count();
    assert_eq!(
        breaks, 1,
        "{api} {model}: only the compaction breaks the cache"
    );
    let mut names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    names.sort();
    let bodies = names
        .iter()
        .map(|p| serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap())
        .collect();
    std::fs::remove_dir_all(&dir).unwrap();
    bodies
}

fn messages(body: &Value) -> &[Value] {
    body["messages"].as_array().map_or(&[], Vec::as_slice)
}

#[test]
fn profile_demo_model_writes_the_bodies_that_profile_gives() {
    // DeepSeek: no system message after the first, in any body.
    let deepseek = demo_bodies("openai", "deepseek-chat");
    for body in &deepseek {
        assert!(messages(body).iter().skip(1).all(|m| m["role"] != "system"));
    }
    // The same demo for OpenAI sends updates as system messages: the model decides.
    let openai = demo_bodies("openai", "gpt-4.1");
    assert!(
        openai
            .iter()
            .any(|b| messages(b).iter().skip(1).any(|m| m["role"] == "system"))
    );
    // Claude Opus 4.8: updates are system messages inside `messages`, never with a
    // breakpoint; Claude Sonnet 4.5: user reminders, no system message.
    let opus = demo_bodies("anthropic", "claude-opus-4-8");
    let mut system = 0;
    for body in &opus {
        let m = messages(body);
        for (i, msg) in m.iter().enumerate().filter(|(_, m)| m["role"] == "system") {
            system += 1;
            assert_eq!(m[i - 1]["role"], "user");
            assert!(i + 1 == m.len() || m[i + 1]["role"] == "assistant");
            for block in msg["content"].as_array().unwrap() {
                assert!(block.get("cache_control").is_none(), "{block}");
            }
        }
    }
    assert!(system > 0);
    let sonnet = demo_bodies("anthropic", "claude-sonnet-4-5");
    assert!(
        sonnet
            .iter()
            .all(|b| messages(b).iter().all(|m| m["role"] != "system"))
    );
    assert_eq!(sonnet[0]["model"], "claude-sonnet-4-5");
}

#[test]
fn profile_status_and_check_show_the_profile_and_warn_on_a_cache_breaking_delivery() {
    let file = temp_file(
        "profile-deepseek.toml",
        "[prompt]\nprefix_allow = [\"assistant_instructions\"]\n\n[provider]\nname = \"deepseek\"\nmodel = \"deepseek-chat\"\ndelivery = \"system\"\n",
    );
    let path = file.to_string_lossy().into_owned();
    let (code, out, err) = cacheline(&["check", &path]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains(&format!("{path}:7:12: warning: delivery = \"system\" on deepseek deepseek-chat: the provider moves every `role: \"system\"` message to the front")),
        "{err}"
    );
    assert!(
        out.contains("provider: deepseek deepseek-chat (the deepseek row)"),
        "{out}"
    );
    assert!(
        out.contains("updates: system messages (agent.toml)"),
        "{out}"
    );
    assert_eq!(cacheline(&["check", &path, "--strict"]).0, 1);
    let (_, json, _) = cacheline(&["check", &path, "--json"]);
    let json: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(json["provider"]["delivery_risk"], "hoisted");
    assert_eq!(json["provider"]["later_system"], "hoisted");
    assert_eq!(json["diagnostics"][0]["line"], 7);

    // An Anthropic model that refuses system messages inside `messages`.
    let file = temp_file(
        "profile-sonnet.toml",
        "[provider]\nname = \"anthropic\"\nmodel = \"claude-sonnet-4-5\"\ndelivery = \"system\"\nttl = \"1h\"\n",
    );
    let (code, _, err) = cacheline(&["check", &file.to_string_lossy()]);
    assert_eq!(code, 0, "{err}");
    assert!(
        err.contains(
            "4:12: warning: delivery = \"system\" on anthropic claude-sonnet-4-5: the model refuses"
        ),
        "{err}"
    );
    let (_, json, _) = cacheline(&["status", "--config", &file.to_string_lossy(), "--json"]);
    let status: Value = serde_json::from_str(&json).unwrap();
    let provider = &status["provider"];
    assert_eq!(provider["delivery_risk"], "rejected");
    assert_eq!(provider["ttl"], "1h");
    assert_eq!(
        provider["prefix_lifetime"],
        serde_json::json!({"kind": "idle", "seconds": 3600})
    );
    assert_eq!(
        provider["lifetime"],
        serde_json::json!({"kind": "idle", "seconds": 300})
    );
    // docs/status-json.md: every `provider` key, with its type.
    assert!(
        provider["section"]
            .as_str()
            .is_some_and(|s| s.starts_with("[provider] name = anthropic"))
    );
    assert_eq!(provider["provider"], "anthropic");
    assert_eq!(provider["model"], "claude-sonnet-4-5");
    assert_eq!(provider["family"], "claude-sonnet-4-5");
    assert_eq!(provider["fallback"], false);
    assert_eq!(provider["fallback_reason"], Value::Null);
    assert_eq!(provider["updates"], "system");
    assert_eq!(provider["updates_from"], "agent.toml");
    assert_eq!(provider["first_system"], "system");
    assert_eq!(provider["later_system"], "rejected");
    assert_eq!(provider["sends_later_system"], true);
    assert_eq!(provider["min_cache_tokens"], 1024);
    assert_eq!(provider["retention"], Value::Null);
    assert_eq!(provider["cache_diagnostics"], false);
    assert_eq!(provider["signatures_required"], false);
    assert_eq!(provider["platform"], Value::Null);
    assert!(
        provider["source"]
            .as_str()
            .is_some_and(|s| s.contains("prompt-caching"))
    );
    let keys = provider.as_object().unwrap().len();
    assert_eq!(keys, 21, "a key this test does not know: {provider}");

    // An unknown model: the safe default, and status says so.
    let file = temp_file(
        "profile-unknown.toml",
        "[provider]\nmodel = \"my-finetune\"\n",
    );
    let (code, out, err) = cacheline(&["status", "--config", &file.to_string_lossy()]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("provider: unknown my-finetune (fallback: no provider known for model `my-finetune`; the safe default applies)"), "{out}");
    assert!(out.contains("updates: user reminders (profile)"), "{out}");
    assert!(
        err.contains("2:9: warning: model `my-finetune` is not in the profile table"),
        "{err}"
    );
    let (_, json, _) = cacheline(&["status", "--config", &file.to_string_lossy(), "--json"]);
    let status: Value = serde_json::from_str(&json).unwrap();
    assert_eq!(status["provider"]["fallback"], true);
    assert_eq!(status["provider"]["updates"], "user_reminder");

    // Without a [provider] section there is no profile to show; errors fail closed.
    let (_, json, _) = cacheline(&["status", "--json"]);
    assert_eq!(
        serde_json::from_str::<Value>(&json).unwrap()["provider"],
        Value::Null
    );
    let file = temp_file("profile-bad.toml", "[provider]\nname = \"deepseak\"\n");
    let (code, _, err) = cacheline(&["check", &file.to_string_lossy()]);
    assert_eq!(code, 2);
    assert!(
        err.contains("2:8: error: unknown provider \"deepseak\""),
        "{err}"
    );
    assert!(err.contains("did you mean `deepseek`?"), "{err}");
    assert_eq!(
        cacheline(&["status", "--config", &file.to_string_lossy()]).0,
        2
    );
}

#[test]
fn profile_simulate_reports_the_cost_of_an_idle_gap_longer_than_the_ttl_per_provider() {
    let run = |extra: &[&str]| -> Value {
        let mut args = vec!["simulate", "--turns", "6", "--idle-gap", "10m", "--json"];
        args.extend_from_slice(extra);
        let (code, out, err) = cacheline(&args);
        assert_eq!(code, 0, "{err}");
        serde_json::from_str::<Value>(&out).unwrap()["idle_gap"].clone()
    };
    let provider = |gap: &Value, rule: &str| -> Value {
        gap["providers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["rule"] == rule)
            .cloned()
            .unwrap_or_else(|| panic!("{rule}: {gap}"))
    };
    let gap = run(&[]);
    assert_eq!(gap["gap_seconds"], 600);
    assert_eq!(gap["arm"], "cacheline");
    for rule in ["openai", "anthropic"] {
        let p = provider(&gap, rule);
        assert_eq!(p["fate"], "expired", "{rule}");
        assert!(p["extra_cost"].as_f64().unwrap() > 0.0, "{rule}: {p}");
    }
    for rule in ["llama_cpp", "vllm"] {
        assert_eq!(provider(&gap, rule)["extra_cost"], 0.0, "{rule}");
    }
    assert_eq!(provider(&gap, "deepseek")["fate"], "unknown");
    assert_eq!(provider(&gap, "deepseek")["extra_cost"], Value::Null);
    // The 1-hour TTL keeps the prefix through the pause; 24-hour retention keeps it all.
    let longer = run(&["--anthropic-ttl", "1h", "--openai-retention", "24h"]);
    let (five, hour) = (provider(&gap, "anthropic"), provider(&longer, "anthropic"));
    assert!(hour["extra_cost"].as_f64() < five["extra_cost"].as_f64());
    assert!(hour["after_gap"]["read"].as_u64().unwrap() > 0);
    assert_eq!(provider(&longer, "openai")["extra_cost"], 0.0);
    // The table says it in words; a turn the session does not have is an error.
    let (code, out, err) = cacheline(&["simulate", "--turns", "6", "--idle-gap", "10m"]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("idle gap of 10 min before turn 4"), "{out}");
    let (code, _, err) = cacheline(&[
        "simulate",
        "--turns",
        "6",
        "--idle-gap",
        "10m",
        "--gap-before-turn",
        "9",
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("no turn 9"), "{err}");
    assert_ne!(cacheline(&["simulate", "--idle-gap", "ten minutes"]).0, 0);
}
