//! The bodies against the providers' documented request examples
//! (`tests/fixtures/<api>/request.json`, each cited in its folder's README).

use std::collections::BTreeSet;
use std::path::PathBuf;

use prompt_core::ApiKind;
use prompt_wire::{Verdict, compare};
use serde_json::Value;

use crate::common::{APIS, folder, json, play};

pub fn fixture(api: ApiKind, file: &str) -> Vec<u8> {
    fixture_in(folder(api), file)
}

/// A fixture of a folder that is not an API's (`deepseek`).
pub fn fixture_in(folder: &str, file: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(folder)
        .join(file);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Fields whose content is the caller's or the model's JSON (schemas, arguments): their
/// inside is not the API's structure.
const FREE_FORM: [&str; 4] = ["parameters", "input_schema", "input", "args"];

/// Every path of `v` with the JSON type found there (`.messages[].content:string`).
pub fn paths(v: &Value, at: &str, out: &mut BTreeSet<String>) {
    let kind = match v {
        Value::Null => "null",
        Value::Bool(_) => "bool",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    };
    out.insert(format!("{at}:{kind}"));
    match v {
        Value::Object(map) => {
            for (k, x) in map {
                if FREE_FORM.contains(&k.as_str()) {
                    out.insert(format!("{at}.{k}:…"));
                } else {
                    paths(x, &format!("{at}.{k}"), out);
                }
            }
        }
        Value::Array(items) => {
            for x in items {
                paths(x, &format!("{at}[]"), out);
            }
        }
        _ => {}
    }
}

#[test]
fn every_body_uses_only_paths_and_types_of_the_documented_request_example() {
    for api in APIS {
        let mut documented = BTreeSet::new();
        paths(&json(&fixture(api, "request.json")), "", &mut documented);
        let mut ours = BTreeSet::new();
        for s in play(api) {
            paths(&json(&s.bytes), "", &mut ours);
        }
        let undocumented: Vec<&String> = ours.difference(&documented).collect();
        assert!(undocumented.is_empty(), "{api:?}: {undocumented:#?}");
    }
}

#[test]
fn every_documented_request_example_is_recognised_and_extends_itself() {
    for (api, shape) in [
        (ApiKind::OpenAi, ApiKind::OpenAi),
        (ApiKind::LlamaCpp, ApiKind::OpenAi),
        (ApiKind::OpenAiResponses, ApiKind::OpenAiResponses),
        (ApiKind::Anthropic, ApiKind::Anthropic),
        (ApiKind::Gemini, ApiKind::Gemini),
    ] {
        let body = fixture(api, "request.json");
        assert_eq!(
            compare(&body, &body).unwrap(),
            Verdict::Extends { shape },
            "{api:?}"
        );
    }
}
