//! Streamed replies: llama.cpp's captured streams record what its whole replies record; each
//! API's documented stream yields its events; any split of the bytes reads the same; every
//! failure is a typed error naming the event, and the session is left as it was.

use std::path::PathBuf;

use prompt_core::{ApiKind, Session};
use prompt_wire::stream::{
    Limit, MAX_EVENT_BYTES, MAX_STREAM_TOOL_CALLS, StreamError, StreamEvent, StreamReader,
    read_stream,
};
use prompt_wire::{Reply, Wire, compare};

use crate::fixtures::fixture;
use crate::stream_props::started;

/// The events and the reply of `bytes` fed in `pieces`, or the error.
fn read(api: ApiKind, pieces: &[&[u8]]) -> Result<(Vec<StreamEvent>, Reply), StreamError> {
    let mut reader = StreamReader::new(api);
    let mut events = Vec::new();
    for piece in pieces {
        reader.feed(piece)?;
        events.extend(std::iter::from_fn(|| reader.next_event()));
    }
    let reply = reader.into_reply()?;
    Ok((events, reply))
}

/// The events, one short line each, for comparing sequences.
fn shown(events: &[StreamEvent]) -> Vec<String> {
    events
        .iter()
        .map(|e| match e {
            StreamEvent::TextDelta { text } => format!("text {text}"),
            StreamEvent::ReasoningDelta { text } => format!("reasoning {text}"),
            StreamEvent::ToolCallStarted { index, id, name } => {
                format!("started {index} {} {name}", id.as_deref().unwrap_or("-"))
            }
            StreamEvent::ToolCallArgumentsDelta { index, delta } => {
                format!("arguments {index} {delta}")
            }
            StreamEvent::ToolCallFinished {
                index,
                name,
                arguments,
            } => format!("finished {index} {name} {arguments}"),
            StreamEvent::Usage(u) => format!("usage {}", u.provider.as_str()),
        })
        .collect()
}

fn llama_fixture(path: &str) -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/llama_cpp/stream")
        .join(path);
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `text` with every llama.cpp random id (32 letters and digits) replaced by `ID`.
fn without_ids(text: &str) -> String {
    let mut out = String::new();
    let mut run = String::new();
    for c in text.chars().chain(std::iter::once('\0')) {
        if c.is_ascii_alphanumeric() {
            run.push(c);
            continue;
        }
        out.push_str(if run.len() == 32 { "ID" } else { &run });
        run.clear();
        if c != '\0' {
            out.push(c);
        }
    }
    out
}

/// The bytes of the last history node.
fn last(s: &Session) -> String {
    s.history().nodes().last().unwrap().bytes().to_owned()
}

/// What tells that a session did not change.
fn state(s: &Session) -> (usize, usize, Option<String>) {
    (
        s.history().len(),
        s.history().serialized_len(),
        s.history().nodes().last().map(|n| n.id().to_string()),
    )
}

/// Records `stream` in `pieces` into `s`.
fn finish(w: &Wire, s: &mut Session, stream: &[u8], piece: usize) -> Result<Reply, StreamError> {
    let mut reader = w.stream_reader();
    for chunk in stream.chunks(piece.max(1)) {
        reader.feed(chunk)?;
    }
    reader.finish(s)
}

#[test]
fn llama_cpp_captured_streams_record_the_bytes_their_whole_replies_record() {
    for case in ["tools", "reasoning", "text"] {
        for (endpoint, api) in [
            ("chat", ApiKind::LlamaCpp),
            ("messages", ApiKind::Anthropic),
        ] {
            let whole = llama_fixture(&format!("{case}/{endpoint}.whole.json"));
            let stream = llama_fixture(&format!("{case}/{endpoint}.sse"));
            let (mut ws, ww, _) = started(api);
            let whole_reply = ww.record_reply(&mut ws, &whole).unwrap();
            let (mut ss, sw, first) = started(api);
            let stream_reply = finish(&sw, &mut ss, &stream, 7).unwrap();
            // Ids are random per request; everything else is byte-for-byte.
            assert_eq!(
                without_ids(&last(&ss)),
                without_ids(&last(&ws)),
                "{case} {endpoint}"
            );
            assert_eq!(stream_reply.text, whole_reply.text);
            assert_eq!(stream_reply.stop_reason, whole_reply.stop_reason);
            assert_eq!(
                stream_reply.usage.as_ref().map(|u| u.provider),
                whole_reply.usage.as_ref().map(|u| u.provider)
            );
            let calls = |r: &Reply| -> Vec<(String, String)> {
                r.tool_calls
                    .iter()
                    .map(|c| (c.name.clone(), c.arguments.clone()))
                    .collect()
            };
            assert_eq!(
                calls(&stream_reply),
                calls(&whole_reply),
                "{case} {endpoint}"
            );
            if case == "tools" {
                assert_eq!(stream_reply.tool_calls.len(), 2);
            }
            let mut sw = sw;
            for call in &stream_reply.tool_calls {
                ss.record_tool_result(&call.id, "sunny").unwrap();
            }
            let next = if stream_reply.tool_calls.is_empty() {
                ss.turn(prompt_core::Extensions::new(), "And Rome?")
                    .unwrap()
            } else {
                ss.continuation(prompt_core::Extensions::new()).unwrap()
            };
            let next = sw.body(&next).unwrap().to_bytes();
            assert!(
                compare(&first, &next).unwrap().extends(),
                "{case} {endpoint}"
            );
        }
    }
}

#[test]
fn llama_cpp_captured_responses_stream_records_its_completed_response() {
    let api = ApiKind::OpenAiResponses;
    for case in ["tools", "reasoning", "text"] {
        let stream = llama_fixture(&format!("{case}/responses.sse"));
        let text = String::from_utf8(stream.clone()).unwrap();
        let data = text
            .lines()
            .filter_map(|l| l.strip_prefix("data: "))
            .find(|d| d.starts_with("{\"type\":\"response.completed\""))
            .unwrap();
        let event: std::collections::BTreeMap<String, &serde_json::value::RawValue> =
            serde_json::from_str(data).unwrap();
        // The whole reply the stream amounts to: the response the last event carries.
        let response = event["response"].get().as_bytes();
        let (mut ws, ww, _) = started(api);
        let whole_reply = ww.record_reply(&mut ws, response).unwrap();
        let (mut ss, sw, _) = started(api);
        let stream_reply = finish(&sw, &mut ss, &stream, 5).unwrap();
        assert_eq!(last(&ss), last(&ws), "{case}");
        assert_eq!(stream_reply, whole_reply, "{case}");
        // The reply requested whole says the same (llama.cpp writes its items' keys in
        // another order there, and other random ids).
        let whole = llama_fixture(&format!("{case}/responses.whole.json"));
        let whole = prompt_wire::read_reply(api, &whole).unwrap();
        assert_eq!(stream_reply.text, whole.text, "{case}");
        let calls = |r: &Reply| -> Vec<(String, String)> {
            r.tool_calls
                .iter()
                .map(|c| (c.name.clone(), c.arguments.clone()))
                .collect()
        };
        assert_eq!(calls(&stream_reply), calls(&whole), "{case}");
    }
}

#[test]
fn openai_chat_stream_joins_parallel_tool_calls_by_index_and_reads_the_usage_chunk() {
    let stream = fixture(ApiKind::OpenAi, "stream_tool_calls.sse");
    let (events, reply) = read(ApiKind::OpenAi, &[&stream]).unwrap();
    assert_eq!(
        shown(&events),
        [
            "started 0 call_DdmO9pD3xa9XTPNJ32zg2hcA get_weather",
            "arguments 0 {\"",
            "arguments 0 location",
            "arguments 0 \":\"",
            "arguments 0 Paris",
            "arguments 0 , France",
            "arguments 0 \"}",
            "started 1 call_aL4dHiqSWf4Q3SumL7ZQm1cB get_weather",
            "arguments 1 {\"loc",
            "arguments 1 ation\":\"Bogot",
            "arguments 1 á, Colombia\"}",
            "finished 0 get_weather {\"location\":\"Paris, France\"}",
            "finished 1 get_weather {\"location\":\"Bogotá, Colombia\"}",
            "usage openai",
        ]
    );
    assert_eq!(
        reply.message,
        r#"{"role":"assistant","content":null,"tool_calls":[{"id":"call_DdmO9pD3xa9XTPNJ32zg2hcA","type":"function","function":{"name":"get_weather","arguments":"{\"location\":\"Paris, France\"}"}},{"id":"call_aL4dHiqSWf4Q3SumL7ZQm1cB","type":"function","function":{"name":"get_weather","arguments":"{\"location\":\"Bogotá, Colombia\"}"}}],"refusal":null,"annotations":[]}"#
    );
    assert_eq!(reply.stop_reason.as_deref(), Some("tool_calls"));
    assert!(reply.usage.unwrap().json.contains("\"cached_tokens\":1920"));
}

#[test]
fn chat_stream_reads_reasoning_content_as_deepseek_sends_it() {
    let stream = fixture(ApiKind::OpenAi, "stream_reasoning.sse");
    let (events, reply) = read(ApiKind::OpenAi, &[&stream]).unwrap();
    assert_eq!(
        shown(&events),
        [
            "reasoning The user",
            "reasoning  asks for",
            "reasoning  a greeting.",
            "text Hello",
            "text ! ",
            "text Καλημέρα.",
            // DeepSeek's cache counts: the meter reads them as DeepSeek's.
            "usage deepseek",
        ]
    );
    assert_eq!(
        reply.message,
        r#"{"role":"assistant","content":"Hello! Καλημέρα.","reasoning_content":"The user asks for a greeting.","refusal":null,"annotations":[]}"#
    );
}

#[test]
fn llama_cpp_chat_stream_reads_reasoning_tool_calls_and_timings() {
    let (events, reply) = read(ApiKind::LlamaCpp, &[&llama_fixture("reasoning/chat.sse")]).unwrap();
    assert!(matches!(events[0], StreamEvent::ReasoningDelta { .. }));
    assert!(
        reply
            .message
            .starts_with(r#"{"role":"assistant","content":"","reasoning_content":"\n\nParis"#)
    );
    let usage = reply.usage.unwrap();
    assert_eq!(usage.provider, prompt_core::profile::Provider::LlamaCpp);
    assert!(usage.json.starts_with(r#"{"cache_n":"#));
    let (events, reply) = read(ApiKind::LlamaCpp, &[&llama_fixture("tools/chat.sse")]).unwrap();
    let shown = shown(&events);
    assert_eq!(
        shown[0],
        format!("started 0 {} get_weather", reply.tool_calls[0].id)
    );
    assert_eq!(shown[1], "arguments 0 {\"city\":\"Paris\"}");
    assert_eq!(
        shown[3..6],
        [
            "arguments 1 {\"city\":\"Rome",
            "arguments 1 \"",
            "arguments 1 }"
        ]
    );
    assert_eq!(reply.tool_calls[1].arguments, r#"{"city":"Rome"}"#);
}

#[test]
fn anthropic_stream_reads_thinking_with_its_signature_text_and_tool_input() {
    let stream = fixture(ApiKind::Anthropic, "stream_tool_calls.sse");
    let (events, reply) = read(ApiKind::Anthropic, &[&stream]).unwrap();
    assert_eq!(
        shown(&events),
        [
            "usage anthropic",
            "reasoning The user wants the weather",
            "reasoning ; I'll call the tool.",
            "text Let me ",
            "text check.",
            "started 0 toolu_01A09q90qw90lq917835lq9 get_weather",
            "arguments 0 {\"location\": \"San Fra",
            "arguments 0 ncisco, CA\"}",
            "finished 0 get_weather {\"location\":\"San Francisco, CA\"}",
            "usage anthropic",
        ]
    );
    assert_eq!(
        reply.message,
        r#"{"role":"assistant","content":[{"type":"thinking","thinking":"The user wants the weather; I'll call the tool.","signature":"EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds..."},{"type":"text","text":"Let me check."},{"type":"tool_use","id":"toolu_01A09q90qw90lq917835lq9","name":"get_weather","input":{"location":"San Francisco, CA"}}],"tool_calls":[{"id":"toolu_01A09q90qw90lq917835lq9","type":"function","function":{"name":"get_weather","arguments":"{\"location\":\"San Francisco, CA\"}"}}]}"#
    );
    assert_eq!(reply.stop_reason.as_deref(), Some("tool_use"));
    // message_start's usage, with message_delta's output_tokens over it.
    assert_eq!(
        reply.usage.unwrap().json,
        r#"{"input_tokens":2095,"cache_creation_input_tokens":0,"cache_read_input_tokens":1800,"output_tokens":503}"#
    );
}

#[test]
fn anthropic_stream_of_llama_cpp_keeps_blocks_open_and_writes_an_empty_signature() {
    let (events, reply) =
        read(ApiKind::Anthropic, &[&llama_fixture("tools/messages.sse")]).unwrap();
    // Both tool_use blocks open before either stops, as llama.cpp's server streams them.
    let shown = shown(&events);
    assert!(shown[1].starts_with("started 0 "), "{shown:?}");
    assert!(shown[3].starts_with("started 1 "), "{shown:?}");
    assert_eq!(reply.tool_calls[1].arguments, r#"{"city":"Rome"}"#);
    let (_, reply) = read(
        ApiKind::Anthropic,
        &[&llama_fixture("reasoning/messages.sse")],
    )
    .unwrap();
    assert!(
        reply
            .message
            .contains(r#"European continent.","signature":""}"#),
        "{}",
        reply.message
    );
}

#[test]
fn responses_stream_reads_reasoning_text_and_function_call_items() {
    let stream = fixture(ApiKind::OpenAiResponses, "stream_tool_calls.sse");
    let (events, reply) = read(ApiKind::OpenAiResponses, &[&stream]).unwrap();
    assert_eq!(
        shown(&events),
        [
            "reasoning **Checking",
            "reasoning  the weather**",
            "text Let me",
            "text  check.",
            "started 0 call_12345xyz get_weather",
            "arguments 0 {\"location\":",
            "arguments 0 \"Paris, France\"}",
            "finished 0 get_weather {\"location\":\"Paris, France\"}",
            "usage openai",
        ]
    );
    assert_eq!(reply.text, "Let me check.");
    assert!(
        reply
            .message
            .contains(r#""encrypted_content":"gAAAAABoISQ24OyVRYbkYfukdaAPABUQ6V""#)
    );
    assert_eq!(reply.stop_reason.as_deref(), Some("completed"));
}

#[test]
fn gemini_stream_merges_text_parts_and_keeps_thought_signatures() {
    let stream = fixture(ApiKind::Gemini, "stream_tool_calls.sse");
    let (events, reply) = read(ApiKind::Gemini, &[&stream]).unwrap();
    assert_eq!(
        shown(&events),
        [
            "reasoning **Looking up the weather**\n\nThe user wants London's temperature.",
            "usage gemini",
            "text Let me ",
            "usage gemini",
            "text check.",
            "usage gemini",
            "started 0 - get_current_temperature",
            "arguments 0 {\"location\": \"London\"}",
            "finished 0 get_current_temperature {\"location\": \"London\"}",
            "usage gemini",
        ]
    );
    assert_eq!(
        reply.message.split_once(r#","parts":"#).unwrap().1,
        r#"[{"text":"**Looking up the weather**\n\nThe user wants London's temperature.","thought":true},{"text":"Let me check.","thoughtSignature":"CiQB0e2Kb7Y0jH2lJ0..."},{"functionCall": {"name": "get_current_temperature","args": {"location": "London"}},"thoughtSignature": "CiwB0e2Kb2m3u9Q..."}]}"#
    );
    assert_eq!(reply.tool_calls[0].name, "get_current_temperature");
    assert!(reply.tool_calls[0].id.starts_with("gemini-"));
    assert!(
        reply
            .usage
            .unwrap()
            .json
            .contains("\"thoughtsTokenCount\": 255")
    );
}

/// Every stream fixture, with its API.
fn fixtures() -> Vec<(ApiKind, Vec<u8>)> {
    let mut out = vec![
        (
            ApiKind::OpenAi,
            fixture(ApiKind::OpenAi, "stream_tool_calls.sse"),
        ),
        (
            ApiKind::OpenAi,
            fixture(ApiKind::OpenAi, "stream_reasoning.sse"),
        ),
        (
            ApiKind::OpenAiResponses,
            fixture(ApiKind::OpenAiResponses, "stream_tool_calls.sse"),
        ),
        (
            ApiKind::Anthropic,
            fixture(ApiKind::Anthropic, "stream_tool_calls.sse"),
        ),
        (
            ApiKind::Gemini,
            fixture(ApiKind::Gemini, "stream_tool_calls.sse"),
        ),
    ];
    for case in ["tools", "reasoning", "text"] {
        out.push((
            ApiKind::LlamaCpp,
            llama_fixture(&format!("{case}/chat.sse")),
        ));
        out.push((
            ApiKind::OpenAiResponses,
            llama_fixture(&format!("{case}/responses.sse")),
        ));
        out.push((
            ApiKind::Anthropic,
            llama_fixture(&format!("{case}/messages.sse")),
        ));
    }
    out
}

#[test]
fn every_split_of_each_stream_fixture_reads_the_same_events_and_reply() {
    for (api, stream) in fixtures() {
        let whole = read(api, &[&stream]).unwrap();
        // Every split of the small streams; of the long ones, one split in 7.
        let stride = if stream.len() <= 4096 { 1 } else { 7 };
        for at in (0..=stream.len()).step_by(stride) {
            let (a, b) = stream.split_at(at);
            assert_eq!(read(api, &[a, b]).unwrap(), whole, "{api:?} split at {at}");
        }
        let bytes: Vec<&[u8]> = stream.chunks(1).collect();
        assert_eq!(read(api, &bytes).unwrap(), whole, "{api:?} byte by byte");
    }
}

#[test]
fn the_stream_line_decoder_takes_every_line_ending_a_bom_comments_and_multi_line_data() {
    let chunk = |content: &str| {
        format!(
            r#"{{"choices":[{{"index":0,"delta":{{"content":"{content}"}},"finish_reason":null}}]}}"#
        )
    };
    for eol in ["\n", "\r\n", "\r"] {
        let stream = format!(
            "\u{feff}: a comment{eol}retry: 10{eol}id: 1{eol}event: message{eol}data: {}{eol}{eol}\
             {eol}{eol}event: nothing without data{eol}{eol}\
             data: {{\"choices\":[{{\"index\":0,{eol}data: \"delta\":{{\"content\":\"b\"}},\"finish_reason\":\"stop\"}}]}}{eol}{eol}\
             data:[DONE]{eol}{eol}",
            chunk("a")
        );
        let (events, reply) = read(ApiKind::OpenAi, &[stream.as_bytes()]).unwrap();
        assert_eq!(shown(&events), ["text a", "text b"], "{eol:?}");
        assert_eq!(reply.text, "ab");
        // A CR ending one piece and its LF opening the next are one line ending.
        let bytes = stream.as_bytes();
        for at in 0..bytes.len() {
            assert_eq!(
                read(ApiKind::OpenAi, &[&bytes[..at], &bytes[at..]])
                    .unwrap()
                    .1,
                reply
            );
        }
    }
}

#[test]
fn a_stream_cut_off_anywhere_records_nothing_and_the_request_can_be_sent_again() {
    for (api, stream) in fixtures() {
        let text = String::from_utf8(stream.clone()).unwrap();
        let eol = if text.contains("\r\n") {
            "\r\n\r\n"
        } else {
            "\n\n"
        };
        // Every prefix that ends on an event boundary, and one inside each event.
        let mut cuts: Vec<usize> = text
            .match_indices(eol)
            .map(|(i, _)| i + eol.len())
            .collect();
        cuts.pop();
        let inside: Vec<usize> = cuts.iter().map(|c| c.saturating_sub(9)).collect();
        cuts.extend(inside);
        let (mut s, w, first) = started(api);
        let before = state(&s);
        for cut in cuts {
            let err = finish(&w, &mut s, &stream[..cut], 64).unwrap_err();
            assert!(
                matches!(err, StreamError::CutOff { .. } | StreamError::Reply { .. }),
                "{api:?} at {cut}: {err}"
            );
            assert_eq!(state(&s), before, "{api:?} at {cut}: {err}");
        }
        // Sent again, the whole stream records, and the next body extends the first.
        let reply = finish(&w, &mut s, &stream, 64).unwrap();
        assert_eq!(s.history().len(), before.0 + 1);
        for call in &reply.tool_calls {
            s.record_tool_result(&call.id, "ok").unwrap();
        }
        let mut w = w;
        let next = if reply.tool_calls.is_empty() {
            s.turn(prompt_core::Extensions::new(), "next").unwrap()
        } else {
            s.continuation(prompt_core::Extensions::new()).unwrap()
        };
        let next = w.body(&next).unwrap().to_bytes();
        assert!(compare(&first, &next).unwrap().extends(), "{api:?}");
    }
}

/// `stream` fed whole into a fresh session after its first turn: the error, with the session
/// unchanged.
fn refused(api: ApiKind, stream: &str) -> StreamError {
    let (mut s, w, _) = started(api);
    let before = state(&s);
    let err = finish(&w, &mut s, stream.as_bytes(), usize::MAX).unwrap_err();
    assert_eq!(state(&s), before, "{api:?}: {err}");
    assert!(err.to_string().len() < 1024, "{err}");
    err
}

const CHAT_START: &str = r#"data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}

"#;
const ANTHROPIC_START: &str = r#"event: message_start
data: {"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"m","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":3,"output_tokens":1}}}

"#;

#[test]
fn provider_errors_in_a_stream_are_typed_errors_naming_the_event() {
    let cases = [
        (
            ApiKind::Anthropic,
            format!(
                "{ANTHROPIC_START}event: ping\ndata: {{\"type\": \"ping\"}}\n\nevent: error\ndata: {{\"type\": \"error\", \"error\": {{\"type\": \"overloaded_error\", \"message\": \"Overloaded\"}}}}\n\n"
            ),
            3,
            "Overloaded",
        ),
        (
            ApiKind::OpenAiResponses,
            "event: response.created\ndata: {\"type\":\"response.created\",\"response\":{\"id\":\"r\"}}\n\nevent: response.failed\ndata: {\"type\":\"response.failed\",\"response\":{\"id\":\"r\",\"status\":\"failed\",\"error\":{\"code\":\"server_error\",\"message\":\"The model failed.\"}}}\n\n".to_owned(),
            2,
            "The model failed.",
        ),
        (
            ApiKind::OpenAiResponses,
            "event: error\ndata: {\"type\":\"error\",\"code\":\"ERR_SOMETHING\",\"message\":\"Something went wrong\",\"param\":null}\n\n".to_owned(),
            1,
            "Something went wrong",
        ),
        (
            // llama.cpp's server, mid-stream: a chunk holding an error object.
            ApiKind::LlamaCpp,
            format!("{CHAT_START}data: {{\"error\":{{\"code\":500,\"message\":\"context shift is disabled\",\"type\":\"server_error\"}}}}\n\n"),
            2,
            "context shift is disabled",
        ),
        (
            ApiKind::Gemini,
            "data: {\"error\": {\"code\": 503, \"message\": \"The model is overloaded.\", \"status\": \"UNAVAILABLE\"}}\r\n\r\n".to_owned(),
            1,
            "The model is overloaded.",
        ),
    ];
    for (api, stream, event, message) in cases {
        match refused(api, &stream) {
            StreamError::Provider {
                event: at,
                message: m,
                ..
            } => assert_eq!((at, m.as_str()), (event, message), "{api:?}"),
            other => panic!("{api:?}: {other}"),
        }
    }
}

#[test]
fn a_stream_event_that_is_not_json_is_refused_with_its_number_and_an_excerpt() {
    let stream = format!(
        "{CHAT_START}data: {{\"choices\": [oops {}\n\n",
        "x".repeat(200)
    );
    let err = refused(ApiKind::OpenAi, &stream);
    assert!(
        matches!(&err, StreamError::NotJson { event: 2, excerpt, .. } if excerpt.len() <= 48 + "…".len() && excerpt.ends_with('…')),
        "{err}"
    );
    let err = refused(
        ApiKind::Anthropic,
        "event: message_start\ndata: message_start\n\n",
    );
    assert!(
        matches!(err, StreamError::NotJson { event: 1, .. }),
        "{err}"
    );
    let err = StreamReader::new(ApiKind::Gemini)
        .feed(b"data: \xff\n\n")
        .unwrap_err();
    assert!(
        matches!(err, StreamError::NotUtf8 { event: 1, .. }),
        "{err}"
    );
    let err = refused(ApiKind::OpenAiResponses, "data: [1]\n\n");
    assert!(
        matches!(err, StreamError::Malformed { event: 1, .. }),
        "{err}"
    );
}

#[test]
fn stream_events_out_of_order_are_refused_naming_the_event() {
    let delta = |index: u32, kind: &str, field: &str| {
        format!(
            "event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":{index},\"delta\":{{\"type\":\"{kind}\",\"{field}\":\"x\"}}}}\n\n"
        )
    };
    let start = |index: u32, block: &str| {
        format!(
            "event: content_block_start\ndata: {{\"type\":\"content_block_start\",\"index\":{index},\"content_block\":{block}}}\n\n"
        )
    };
    let stop = |index: u32| {
        format!(
            "event: content_block_stop\ndata: {{\"type\":\"content_block_stop\",\"index\":{index}}}\n\n"
        )
    };
    let text = r#"{"type":"text","text":""}"#;
    let message_stop = "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";
    let cases: Vec<(ApiKind, String, u64)> = vec![
        (ApiKind::Anthropic, delta(0, "text_delta", "text"), 1),
        (ApiKind::Anthropic, format!("{ANTHROPIC_START}{}", delta(0, "text_delta", "text")), 2),
        (ApiKind::Anthropic, format!("{ANTHROPIC_START}{}{}{}", start(0, text), stop(0), delta(0, "text_delta", "text")), 4),
        (ApiKind::Anthropic, format!("{ANTHROPIC_START}{}{}", start(0, text), start(0, text)), 3),
        (ApiKind::Anthropic, format!("{ANTHROPIC_START}{}{}", start(0, text), delta(0, "input_json_delta", "partial_json")), 3),
        (ApiKind::Anthropic, format!("{ANTHROPIC_START}{}{message_stop}", start(0, text)), 3),
        (ApiKind::Anthropic, format!("{ANTHROPIC_START}{message_stop}{message_stop}"), 3),
        (ApiKind::Anthropic, format!("{ANTHROPIC_START}{ANTHROPIC_START}"), 2),
        (
            ApiKind::OpenAi,
            format!("{CHAT_START}data: {{\"choices\":[{{\"index\":0,\"delta\":{{}},\"finish_reason\":\"stop\"}}]}}\n\ndata: {{\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"late\"}},\"finish_reason\":null}}]}}\n\n"),
            3,
        ),
        (ApiKind::OpenAi, format!("{CHAT_START}data: [DONE]\n\n"), 2),
        (
            ApiKind::OpenAi,
            format!("{CHAT_START}data: {{\"choices\":[{{\"index\":0,\"delta\":{{}},\"finish_reason\":\"stop\"}}]}}\n\ndata: [DONE]\n\n{CHAT_START}"),
            4,
        ),
        (
            ApiKind::OpenAiResponses,
            "event: response.output_text.delta\ndata: {\"type\":\"response.output_text.delta\",\"item_id\":\"msg_1\",\"output_index\":0,\"content_index\":0,\"delta\":\"x\"}\n\n".to_owned(),
            1,
        ),
        (
            ApiKind::OpenAiResponses,
            "data: {\"type\":\"response.output_item.added\",\"output_index\":0,\"item\":{\"id\":\"m\",\"type\":\"message\",\"content\":[]}}\n\ndata: {\"type\":\"response.output_item.done\",\"output_index\":0,\"item\":{\"id\":\"m\",\"type\":\"message\",\"content\":[]}}\n\ndata: {\"type\":\"response.output_item.done\",\"output_index\":0,\"item\":{\"id\":\"m\",\"type\":\"message\",\"content\":[]}}\n\n".to_owned(),
            3,
        ),
        (
            ApiKind::OpenAiResponses,
            "data: {\"type\":\"response.completed\",\"response\":{\"output\":[]}}\n\ndata: {\"type\":\"response.created\",\"response\":{}}\n\n".to_owned(),
            2,
        ),
        (
            ApiKind::Gemini,
            "data: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"a\"}],\"role\":\"model\"},\"finishReason\":\"STOP\"}]}\n\ndata: {\"candidates\":[{\"content\":{\"parts\":[{\"text\":\"b\"}],\"role\":\"model\"}}]}\n\n".to_owned(),
            2,
        ),
    ];
    for (api, stream, event) in cases {
        let err = refused(api, &stream);
        assert!(
            matches!(err, StreamError::OutOfOrder { .. }) && err.event() == event,
            "{api:?}: {err}\n{stream}"
        );
    }
}

#[test]
fn an_index_that_jumps_is_refused_in_every_stream() {
    let chat = format!(
        "{CHAT_START}data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"tool_calls\":[{{\"index\":0,\"id\":\"c0\",\"type\":\"function\",\"function\":{{\"name\":\"grep\",\"arguments\":\"\"}}}}]}},\"finish_reason\":null}}]}}\n\n\
         data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"tool_calls\":[{{\"index\":2,\"id\":\"c2\",\"type\":\"function\",\"function\":{{\"name\":\"grep\",\"arguments\":\"\"}}}}]}},\"finish_reason\":null}}]}}\n\n"
    );
    let anthropic = format!(
        "{ANTHROPIC_START}event: content_block_start\ndata: {{\"type\":\"content_block_start\",\"index\":1,\"content_block\":{{\"type\":\"text\",\"text\":\"\"}}}}\n\n"
    );
    let responses = "data: {\"type\":\"response.output_item.added\",\"output_index\":0,\"item\":{\"id\":\"m\",\"type\":\"message\",\"content\":[]}}\n\ndata: {\"type\":\"response.output_item.added\",\"output_index\":5,\"item\":{\"id\":\"n\",\"type\":\"message\",\"content\":[]}}\n\n";
    for (api, stream, event, expected, found) in [
        (ApiKind::OpenAi, chat.as_str(), 3, 1, 2),
        (ApiKind::Anthropic, anthropic.as_str(), 2, 0, 1),
        (ApiKind::OpenAiResponses, responses, 2, 1, 5),
    ] {
        match refused(api, stream) {
            StreamError::IndexJump {
                event: e,
                expected: x,
                found: f,
                ..
            } => assert_eq!((e, x, f), (event, expected, found), "{api:?}"),
            other => panic!("{api:?}: {other}"),
        }
    }
}

#[test]
fn stream_limits_hold_for_tool_calls_event_bytes_and_stream_bytes() {
    // One tool call more than the limit.
    let mut stream = CHAT_START.to_owned();
    for k in 0..=MAX_STREAM_TOOL_CALLS {
        stream.push_str(&format!(
            "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"tool_calls\":[{{\"index\":{k},\"id\":\"c{k}\",\"type\":\"function\",\"function\":{{\"name\":\"grep\",\"arguments\":\"{{}}\"}}}}]}},\"finish_reason\":null}}]}}\n\n"
        ));
    }
    let err = refused(ApiKind::OpenAi, &stream);
    assert!(
        matches!(err, StreamError::TooLarge { limit: Limit::ToolCalls, event, .. } if event == MAX_STREAM_TOOL_CALLS as u64 + 2),
        "{err}"
    );
    // A line longer than an event may be, fed in pieces: refused before it is whole.
    let mut reader = StreamReader::new(ApiKind::Anthropic);
    let piece = vec![b'x'; 1 << 20];
    reader.feed(b"data: ").unwrap();
    let mut fed = 6;
    let err = loop {
        match reader.feed(&piece) {
            Ok(()) => fed += piece.len(),
            Err(e) => break e,
        }
        assert!(fed <= MAX_EVENT_BYTES, "{fed} bytes taken");
    };
    assert!(
        matches!(
            err,
            StreamError::TooLarge {
                limit: Limit::EventBytes,
                event: 1,
                ..
            }
        ),
        "{err}"
    );
    // Once failed, always failed.
    assert!(matches!(
        reader.feed(b"\n\n"),
        Err(StreamError::Failed { event: 1, .. })
    ));
    // More bytes in all than a stream may carry (comments only).
    let mut reader = StreamReader::new(ApiKind::Gemini);
    let comment = format!(":{}\n", "x".repeat((1 << 20) - 2));
    let err = loop {
        if let Err(e) = reader.feed(comment.as_bytes()) {
            break e;
        }
    };
    assert!(
        matches!(
            err,
            StreamError::TooLarge {
                limit: Limit::StreamBytes,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn read_stream_reads_a_whole_stream_body_without_a_session() {
    let reply = read_stream(
        ApiKind::Anthropic,
        &fixture(ApiKind::Anthropic, "stream_tool_calls.sse"),
    )
    .unwrap();
    assert_eq!(reply.tool_calls.len(), 1);
    let err = read_stream(ApiKind::Anthropic, ANTHROPIC_START.as_bytes()).unwrap_err();
    assert_eq!(
        err.to_string(),
        "the Anthropic Messages stream was cut off after 1 events, before message_stop"
    );
}

#[test]
fn a_streamed_reply_the_session_refuses_is_a_typed_error_and_records_nothing() {
    let api = ApiKind::Anthropic;
    let (mut s, w, _) = started(api);
    let stream = fixture(api, "stream_tool_calls.sse");
    finish(&w, &mut s, &stream, 100).unwrap();
    let before = state(&s);
    // The tool call waits for its result: a second reply is refused by the session.
    let err = finish(&w, &mut s, &stream, 100).unwrap_err();
    assert!(
        matches!(&err, StreamError::Reply { source, .. } if matches!(**source, prompt_wire::WireError::Record(_))),
        "{err}"
    );
    assert_eq!(state(&s), before);
    // A Gemini stream of a blocked prompt holds no message, as its whole reply.
    let err = refused(
        ApiKind::Gemini,
        "data: {\"promptFeedback\": {\"blockReason\": \"SAFETY\"},\"usageMetadata\": {\"promptTokenCount\": 8}}\r\n\r\n",
    );
    assert_eq!(
        std::error::Error::source(&err)
            .map(|s| s.to_string())
            .as_deref(),
        Some("the Gemini generateContent reply holds no message to record: prompt blocked: SAFETY")
    );
}

#[test]
fn a_stream_reader_is_an_owned_value_an_async_client_can_move_across_threads() {
    fn owned<T: Send + Sync + 'static>(_: &T) {}
    let (_, w, _) = started(ApiKind::OpenAi);
    let reader = w.stream_reader();
    // The wire is still usable: the reader does not borrow it.
    drop(w);
    owned(&reader);
    let moved = std::thread::spawn(move || reader.events_read())
        .join()
        .unwrap();
    assert_eq!(moved, 0);
}

/// `stream` read as `api` and recorded gives what its whole reply `whole` gives.
fn stream_amounts_to(api: ApiKind, stream: &str, whole: &str) -> Reply {
    let (mut ws, ww, _) = started(api);
    let whole_reply = ww.record_reply(&mut ws, whole.as_bytes()).unwrap();
    let (mut ss, sw, _) = started(api);
    let stream_reply = finish(&sw, &mut ss, stream.as_bytes(), 3).unwrap();
    assert_eq!(last(&ss), last(&ws), "{api:?}");
    assert_eq!(stream_reply, whole_reply, "{api:?}");
    stream_reply
}

#[test]
fn stream_event_kinds_the_fixtures_lack_record_what_their_whole_replies_record() {
    // Chat Completions: a refusal and an annotation.
    let chunk = |delta: &str, finish: &str| {
        format!(
            "data: {{\"id\":\"c\",\"object\":\"chat.completion.chunk\",\"choices\":[{{\"index\":0,\"delta\":{delta},\"finish_reason\":{finish}}}]}}\n\n"
        )
    };
    let stream = [
        chunk(r#"{"role":"assistant","content":null,"refusal":""}"#, "null"),
        chunk(r#"{"refusal":"I can't "}"#, "null"),
        chunk(r#"{"refusal":"help with that.","annotations":[{"type":"url_citation","url_citation":{"url":"https://example.com"}}]}"#, "null"),
        chunk("{}", "\"stop\""),
        "data: [DONE]\n\n".to_owned(),
    ]
    .concat();
    let whole = r#"{"id":"c","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":null,"refusal":"I can't help with that.","annotations":[{"type":"url_citation","url_citation":{"url":"https://example.com"}}]},"finish_reason":"stop"}]}"#;
    let reply = stream_amounts_to(ApiKind::OpenAi, &stream, whole);
    assert_eq!(reply.text, "");

    // Responses: an incomplete response.
    let item = r#"{"id":"msg_1","type":"message","status":"incomplete","content":[{"type":"output_text","annotations":[],"text":"Part"}],"role":"assistant"}"#;
    let whole = format!(
        r#"{{"id":"r","object":"response","status":"incomplete","incomplete_details":{{"reason":"max_output_tokens"}},"output":[{item}],"usage":{{"input_tokens":5,"output_tokens":1,"total_tokens":6}}}}"#
    );
    let stream = format!(
        "event: response.output_item.added\ndata: {{\"type\":\"response.output_item.added\",\"output_index\":0,\"item\":{{\"id\":\"msg_1\",\"type\":\"message\",\"status\":\"in_progress\",\"content\":[],\"role\":\"assistant\"}}}}\n\n\
         event: response.output_text.delta\ndata: {{\"type\":\"response.output_text.delta\",\"item_id\":\"msg_1\",\"output_index\":0,\"content_index\":0,\"delta\":\"Part\"}}\n\n\
         event: response.output_item.done\ndata: {{\"type\":\"response.output_item.done\",\"output_index\":0,\"item\":{item}}}\n\n\
         event: response.incomplete\ndata: {{\"type\":\"response.incomplete\",\"response\":{whole}}}\n\n"
    );
    let reply = stream_amounts_to(ApiKind::OpenAiResponses, &stream, &whole);
    assert_eq!(reply.stop_reason.as_deref(), Some("max_output_tokens"));

    // Anthropic: a redacted thinking block, kept as it started, and a text block's citations.
    let redacted = r#"{"type":"redacted_thinking","data":"EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP"}"#;
    let citation = r#"{"type":"char_location","cited_text":"The sky is blue.","document_index":0,"document_title":"Facts","start_char_index":0,"end_char_index":16}"#;
    let stream = format!(
        "{ANTHROPIC_START}event: content_block_start\ndata: {{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{redacted}}}\n\n\
         event: content_block_stop\ndata: {{\"type\":\"content_block_stop\",\"index\":0}}\n\n\
         event: content_block_start\ndata: {{\"type\":\"content_block_start\",\"index\":1,\"content_block\":{{\"type\":\"text\",\"text\":\"\",\"citations\":[]}}}}\n\n\
         event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":1,\"delta\":{{\"type\":\"citations_delta\",\"citation\":{citation}}}}}\n\n\
         event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":1,\"delta\":{{\"type\":\"text_delta\",\"text\":\"It is blue.\"}}}}\n\n\
         event: content_block_stop\ndata: {{\"type\":\"content_block_stop\",\"index\":1}}\n\n\
         event: message_delta\ndata: {{\"type\":\"message_delta\",\"delta\":{{\"stop_reason\":\"end_turn\",\"stop_sequence\":null}},\"usage\":{{\"output_tokens\":12}}}}\n\n\
         event: message_stop\ndata: {{\"type\":\"message_stop\"}}\n\n"
    );
    let whole = format!(
        r#"{{"id":"msg_1","type":"message","role":"assistant","content":[{redacted},{{"type":"text","text":"It is blue.","citations":[{citation}]}}],"model":"m","stop_reason":"end_turn","stop_sequence":null,"usage":{{"input_tokens":3,"output_tokens":12}}}}"#
    );
    let reply = stream_amounts_to(ApiKind::Anthropic, &stream, &whole);
    assert_eq!(reply.text, "It is blue.");
}
