//! A conversation over its lifetime on every API: the wire follows its session (a refresh is
//! a new epoch on the same wire, another session is refused), one saved document restores
//! into the same bodies, an edited document is refused, and branches send bodies that extend
//! the body sent at their fork point.

use prompt_core::tools::{ToolSet, ToolSource};
use prompt_core::{ApiKind, Request, RestoreMode, Session, SessionContext, SessionOptions};
use prompt_wire::{Conversation, ConversationError, ConversationSnapshot, WireError, compare};
use serde_json::{Value, json};

use crate::common::{APIS, components, options, policy, reply, tools, values, wire};

/// The session options every conversation here starts (and is restored) with.
fn thread_options(api: ApiKind) -> SessionOptions {
    prompt_wire::session_options(api, tools()).with_session_id("thread-1")
}

fn start(api: ApiKind) -> Conversation {
    Conversation::start(
        components(),
        &policy(),
        SessionContext::default(),
        thread_options(api),
        api,
        options(api),
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

/// A bare session on `api` (no conversation around it), as an app driving its own wire has.
fn start_session(api: ApiKind) -> Session {
    Session::start(
        components(),
        &policy(),
        SessionContext::default(),
        prompt_wire::session_options(api, tools()),
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

/// The next turn's request of a bare session (an app's own wire writes its body).
fn session_turn<'s>(s: &'s mut Session, todo: &'static str, n: u64, question: &str) -> Request<'s> {
    s.turn(values(todo, n), question)
        .unwrap_or_else(|e| panic!("{e}"))
}

/// `snapshot` restored strictly with the test components, `session` options and `api`'s
/// wire options: the one restore every test here goes through.
fn try_restore(
    snapshot: &ConversationSnapshot,
    api: ApiKind,
    session: SessionOptions,
) -> Result<Conversation, ConversationError> {
    Conversation::restore(
        snapshot,
        components(),
        &policy(),
        SessionContext::default(),
        session,
        options(api),
        RestoreMode::Strict,
    )
    .map(|restored| restored.conversation)
}

/// [`try_restore`] with the options [`start`] used.
fn restore(snapshot: &ConversationSnapshot, api: ApiKind) -> Conversation {
    try_restore(snapshot, api, thread_options(api)).unwrap_or_else(|e| panic!("{api:?}: {e}"))
}

/// The bytes of the next turn's body.
fn turn_bytes(c: &mut Conversation, todo: &'static str, n: u64, question: &str) -> Vec<u8> {
    c.turn(values(todo, n), question)
        .unwrap_or_else(|e| panic!("{e}"))
        .to_bytes()
}

/// Three turns with replies; each body's stable body (the earlier body `compare` takes).
fn three_turns(c: &mut Conversation, api: ApiKind) -> Vec<Vec<u8>> {
    let mut sent = Vec::new();
    for (i, todo) in ["a", "a, b", "b"].iter().enumerate() {
        let body = c
            .turn(values(todo, i as u64), format!("question {i}").as_str())
            .unwrap_or_else(|e| panic!("{e}"));
        sent.push(body.stable_body());
        c.record_reply(reply(api, i, &format!("answer {i}"), &[]).as_bytes())
            .unwrap_or_else(|e| panic!("{api:?}: {e}"));
    }
    sent
}

fn extends(earlier: &[u8], later: &[u8]) -> bool {
    compare(earlier, later)
        .unwrap_or_else(|e| panic!("{e}"))
        .extends()
}

#[test]
fn the_wire_follows_its_session_through_a_refresh_and_refuses_a_second_session_with_the_same_prefix()
 {
    for api in APIS {
        let mut w = wire(api);
        let mut a = start_session(api);
        let first = w
            .body(&session_turn(&mut a, "a", 1, "hi"))
            .unwrap_or_else(|e| panic!("{e}"))
            .stable_body();
        // Before: a second session with the same prefix was accepted, and sent with the
        // first session's prompt_cache_key.
        let mut b = start_session(api);
        let err = w.body(&session_turn(&mut b, "a", 1, "hi")).unwrap_err();
        assert!(
            matches!(err, WireError::OtherSession { .. }),
            "{api:?}: {err}"
        );
        // Before: a refresh of the same session's tools was refused as another session.
        a.record_assistant(&json!({"role": "assistant", "content": "ok"}))
            .unwrap_or_else(|e| panic!("{e}"));
        let more = ToolSet::from_openai(&[(
            ToolSource::mcp("github"),
            &json!([{"name": "search", "description": "Search.", "parameters": {"type": "object"}}]),
        )])
        .unwrap_or_else(|e| panic!("{e}"));
        let merged = ToolSet::new(
            tools()
                .definitions()
                .iter()
                .chain(more.definitions())
                .cloned()
                .collect(),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        a.refresh(components(), &policy(), merged, None)
            .unwrap_or_else(|e| panic!("{e}"));
        let request = session_turn(&mut a, "a", 2, "again");
        let epoch = request.epoch();
        let body = w.body(&request).unwrap_or_else(|e| panic!("{api:?}: {e}"));
        let bytes = body.to_bytes();
        assert!(
            String::from_utf8_lossy(&bytes).contains("\"search\""),
            "{api:?}"
        );
        assert!(epoch > 0);
        // A new prefix: the body does not extend the first one (the guard says the tools
        // changed), and the next one of the new epoch extends it again.
        assert!(!extends(&first, &bytes), "{api:?}");
        let stable = body.stable_body();
        a.record_assistant(&json!({"role": "assistant", "content": "ok"}))
            .unwrap_or_else(|e| panic!("{e}"));
        let next = w
            .body(&session_turn(&mut a, "a", 3, "and again"))
            .unwrap_or_else(|e| panic!("{e}"))
            .to_bytes();
        assert!(extends(&stable, &next), "{api:?}");
    }
}

#[test]
fn a_conversation_restored_from_its_document_sends_the_same_bodies_on_every_api() {
    for api in APIS {
        for through_value in [false, true] {
            let mut c = start(api);
            three_turns(&mut c, api);
            let text = serde_json::to_string(&c.save()).unwrap_or_else(|e| panic!("{e}"));
            let snapshot: ConversationSnapshot = if through_value {
                let value: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}"));
                serde_json::from_value(value).unwrap_or_else(|e| panic!("{e}"))
            } else {
                serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}"))
            };
            let mut restored = restore(&snapshot, api);
            assert_eq!(restored.save(), c.save(), "{api:?}");
            assert_eq!(restored.routing_header(), c.routing_header(), "{api:?}");
            let a = turn_bytes(&mut c, "c", 4, "after");
            let b = turn_bytes(&mut restored, "c", 4, "after");
            assert_eq!(a, b, "{api:?}");
        }
    }
}

#[test]
fn a_conversation_saved_before_its_first_body_keeps_the_system_prompt_set_and_its_routing_header() {
    for api in APIS {
        let mut c = start(api);
        assert_eq!(
            c.set_system_prompt("Answer in French."),
            prompt_core::history::SystemPromptChange::Placed
        );
        let file = c.save().to_json();
        let snapshot =
            ConversationSnapshot::from_json(file.as_bytes()).unwrap_or_else(|e| panic!("{e}"));
        // The app restarts with options that carry no system prompt.
        let mut restored = restore(&snapshot, api);
        assert_eq!(
            restored.session().system_prompt().as_deref(),
            Some("Answer in French."),
            "{api:?}"
        );
        let a = turn_bytes(&mut c, "a", 1, "hi");
        let b = turn_bytes(&mut restored, "a", 1, "hi");
        assert!(
            String::from_utf8_lossy(&b).contains("Answer in French."),
            "{api:?}"
        );
        assert_eq!(a, b, "{api:?}");
        assert_eq!(restored.routing_header(), c.routing_header(), "{api:?}");
    }
}

#[test]
fn a_conversation_document_reads_back_through_from_json_and_one_over_the_limit_is_refused_unparsed()
{
    let mut c = start(ApiKind::OpenAi);
    three_turns(&mut c, ApiKind::OpenAi);
    let text = c.save().to_json();
    assert_eq!(
        text,
        serde_json::to_string(&c.save()).unwrap_or_else(|e| panic!("{e}"))
    );
    let read = ConversationSnapshot::from_json(text.as_bytes()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(read, c.save());
    let big = vec![b' '; prompt_core::snapshot::MAX_SNAPSHOT_BYTES + 1];
    let err = ConversationSnapshot::from_json(&big).unwrap_err();
    assert!(
        matches!(err, ConversationError::TooLarge { len, .. } if len == big.len()),
        "{err:?}"
    );
    assert!(
        err.to_string().starts_with("the saved conversation is "),
        "{err}"
    );
    let err = ConversationSnapshot::from_json(b"{\"format\": 1}").unwrap_err();
    assert!(matches!(err, ConversationError::Json(_)), "{err:?}");
}

#[test]
fn a_conversation_document_that_does_not_parse_is_named_with_the_parser_s_position() {
    let mut c = start(ApiKind::OpenAi);
    three_turns(&mut c, ApiKind::OpenAi);
    let text = c.save().to_json();
    // Cut off in the middle: the message names the document and where the parser stopped.
    let cut = &text.as_bytes()[..text.len() / 2];
    let err = ConversationSnapshot::from_json(cut).unwrap_err();
    let message = err.to_string();
    assert!(
        message.starts_with("the saved conversation does not parse: "),
        "{message}"
    );
    assert!(message.contains("line 1 column"), "{message}");
    assert!(!message.contains("session"), "{message}");
    // A saved session read as one names the session, with the position too.
    let session = c.session().save().to_json();
    let err = prompt_core::SessionSnapshot::from_json(&session.as_bytes()[..session.len() / 2])
        .unwrap_err();
    let message = err.to_string();
    assert!(
        message.starts_with("the saved session does not parse: "),
        "{message}"
    );
    assert!(message.contains("line 1 column"), "{message}");
}

#[test]
fn an_edited_conversation_document_is_refused_naming_the_part() {
    let api = ApiKind::Anthropic;
    let mut c = start(api);
    three_turns(&mut c, api);
    let doc: Value = serde_json::to_value(c.save()).unwrap_or_else(|e| panic!("{e}"));
    type Edit = fn(&mut Value);
    let edits: [(Edit, &str); 4] = [
        (|v| v["api"] = json!("openai"), "api"),
        (|v| v["wire"]["resume_point"]["parts"] = json!(0), "wire"),
        (
            |v| v["wire"]["previous_message_id"] = json!("msg_forged"),
            "wire",
        ),
        (
            |v| v["session"]["seals"]["history"] = json!("00"),
            "session",
        ),
    ];
    for (edit, part) in edits {
        let mut edited = doc.clone();
        edit(&mut edited);
        let snapshot: ConversationSnapshot =
            serde_json::from_value(edited).unwrap_or_else(|e| panic!("{e}"));
        match try_restore(&snapshot, api, prompt_wire::session_options(api, tools())) {
            Err(ConversationError::Edited { field }) => assert_eq!(field, part),
            other => panic!("{part}: expected Edited, got {other:?}"),
        }
    }
    // An edit inside the session is named by the session's own check.
    let mut edited = doc.clone();
    edited["session"]["history"]["nodes"][1]["text"] = json!("edited");
    let snapshot: ConversationSnapshot =
        serde_json::from_value(edited).unwrap_or_else(|e| panic!("{e}"));
    let err = try_restore(&snapshot, api, prompt_wire::session_options(api, tools())).unwrap_err();
    assert!(err.to_string().contains("history.nodes[1].text"), "{err}");
}

#[test]
fn a_regenerated_reply_is_the_last_body_again_and_an_edit_extends_the_body_before_it_on_every_api()
{
    for api in APIS {
        let mut c = start(api);
        let sent = three_turns(&mut c, api);
        // Regenerate: the same body again (its stable part), on a wire that followed.
        let mut again = c.regenerate().unwrap_or_else(|e| panic!("{e}"));
        let body = again
            .resend(values("b", 2))
            .unwrap_or_else(|e| panic!("{api:?}: {e}"));
        // Byte for byte, but for Anthropic's breakpoints, which follow the wire's last
        // body: there the blocks are the same ones (the guard compares blocks).
        if api != ApiKind::Anthropic {
            assert_eq!(body.stable_body(), sent[2], "{api:?}");
        }
        assert!(extends(&sent[2], &body.to_bytes()), "{api:?}");
        assert_eq!(again.routing_header(), c.routing_header(), "{api:?}");
        // Edit the second question: the body extends the first body, with its reply.
        let users: Vec<usize> = c
            .session()
            .history()
            .nodes()
            .iter()
            .enumerate()
            .filter(|(_, n)| n.kind() == prompt_core::node::NodeKind::User)
            .map(|(i, _)| i)
            .collect();
        let mut edited = c
            .edit_user_message(users[1])
            .unwrap_or_else(|e| panic!("{e}"));
        let body = edited
            .turn(values("a, b", 1), "question 1, edited")
            .unwrap_or_else(|e| panic!("{api:?}: {e}"))
            .to_bytes();
        assert!(extends(&sent[0], &body), "{api:?}");
        assert!(
            !String::from_utf8_lossy(&body).contains("answer 1"),
            "{api:?}"
        );
        // A fork goes on from the last body.
        let mut fork = c.fork();
        let body = turn_bytes(&mut fork, "b", 3, "sub-task");
        assert!(extends(&sent[2], &body), "{api:?}");
    }
}

#[test]
fn a_restored_conversation_names_the_last_reply_in_its_cache_diagnostics_streamed_or_whole() {
    use prompt_core::profile::Profile;
    let profile =
        Profile::lookup(ApiKind::Anthropic, "claude-opus-4-8", None).with_cache_diagnostics();
    let options = || {
        prompt_core::SessionOptions::for_profile(&profile)
            .with_tools(tools())
            .with_session_id("thread-1")
    };
    let wire_options = || {
        prompt_wire::WireOptions::for_profile(&profile)
            .param("max_tokens", &json!(1024))
            .param("stream", &json!(true))
    };
    let mut c = Conversation::start(
        components(),
        &policy(),
        SessionContext::default(),
        options(),
        ApiKind::Anthropic,
        wire_options(),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    c.turn(values("a", 1), "hi")
        .unwrap_or_else(|e| panic!("{e}"));
    // A streamed reply: its id is kept by the wire as a whole reply's is.
    let mut reader = c.wire().stream_reader();
    reader
        .feed(
            concat!(
                "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_streamed\",\"type\":\"message\",\"role\":\"assistant\",\"model\":\"claude-opus-4-8\",\"content\":[],\"stop_reason\":null,\"usage\":{\"input_tokens\":10,\"output_tokens\":1}}}\n\n",
                "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n",
                "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"Hello.\"}}\n\n",
                "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n",
                "event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":2}}\n\n",
                "event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n",
            )
            .as_bytes(),
        )
        .unwrap_or_else(|e| panic!("{e}"));
    c.finish_stream(reader).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        c.wire().previous_message_id().as_deref(),
        Some("msg_streamed")
    );
    let snapshot: ConversationSnapshot =
        serde_json::from_str(&serde_json::to_string(&c.save()).unwrap_or_else(|e| panic!("{e}")))
            .unwrap_or_else(|e| panic!("{e}"));
    let mut restored = Conversation::restore(
        &snapshot,
        components(),
        &policy(),
        SessionContext::default(),
        options(),
        wire_options(),
        RestoreMode::Strict,
    )
    .unwrap_or_else(|e| panic!("{e}"))
    .conversation;
    let body = turn_bytes(&mut restored, "a", 2, "again");
    let body: Value = serde_json::from_slice(&body).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        body["diagnostics"],
        json!({"previous_message_id": "msg_streamed"})
    );
}

#[test]
fn a_turn_after_an_unanswered_request_is_refused_and_resend_sends_the_question_once_on_every_api() {
    for api in APIS {
        let mut c = start(api);
        let body = c
            .turn(values("a", 1), "What is 2 + 2?")
            .unwrap_or_else(|e| panic!("{e}"));
        let (first, stable) = (body.to_bytes(), body.stable_body());
        let nodes = c.session().history().len();
        // The send failed (nothing recorded): retrying with a turn is refused, naming resend.
        let err = c
            .turn(values("a", 1), "What is 2 + 2?")
            .err()
            .unwrap_or_else(|| panic!("{api:?}: a second turn without a reply was composed"));
        assert!(
            matches!(
                err,
                ConversationError::Compose(prompt_core::ComposeError::Unanswered { request: 1 })
            ),
            "{api:?}: {err}"
        );
        assert!(err.to_string().contains("resend"), "{err}");
        assert_eq!(
            c.session().history().len(),
            nodes,
            "{api:?}: nothing appended"
        );
        assert_eq!(c.session().unanswered_request(), Some(1));
        // A saved and restored conversation still knows the request has no reply.
        let restored = restore(&c.save(), api);
        assert_eq!(restored.session().unanswered_request(), Some(1));
        // The retry: the same bytes, the question once.
        let again = c
            .resend(values("a", 1))
            .unwrap_or_else(|e| panic!("{api:?}: {e}"))
            .to_bytes();
        assert_eq!(again, first, "{api:?}");
        let text = String::from_utf8_lossy(&again);
        assert_eq!(text.matches("What is 2 + 2?").count(), 1, "{api:?}: {text}");
        // Once the reply is recorded, the next turn goes.
        c.record_reply(reply(api, 0, "4", &[]).as_bytes())
            .unwrap_or_else(|e| panic!("{api:?}: {e}"));
        assert_eq!(c.session().unanswered_request(), None);
        let next = turn_bytes(&mut c, "a", 2, "And 3 + 3?");
        assert!(extends(&stable, &next), "{api:?}");
    }
}

#[test]
fn shown_messages_leave_out_updates_and_edit_and_regenerate_by_handle_on_every_api() {
    use prompt_core::branch::{BranchError, MessageHandle};
    use prompt_core::node::NodeKind;
    for api in APIS {
        let mut c = start(api);
        let sent = three_turns(&mut c, api);
        let shown = c.shown_messages();
        let kinds: Vec<NodeKind> = shown.iter().map(|m| m.kind()).collect();
        use NodeKind::{Assistant, User};
        assert_eq!(
            kinds,
            [User, Assistant, User, Assistant, User, Assistant],
            "{api:?}"
        );
        // The history counts the library's updates: the second user message is not node 2.
        assert!(c.session().history().len() > shown.len(), "{api:?}");
        assert_ne!(shown[2].node_index(), 2, "{api:?}");
        assert!(shown[2].bytes().contains("question 1"), "{api:?}");
        let handle = shown[2].handle();
        assert_eq!(MessageHandle::parse(&handle.to_string()), Some(handle));
        assert_eq!(MessageHandle::parse("not a handle"), None);

        // Edit the second user message by its handle: the body extends the first request,
        // not the second (whose question it replaces).
        let mut edited = c
            .edit_user_message_by(handle)
            .unwrap_or_else(|e| panic!("{api:?}: {e}"));
        let body = edited
            .turn(values("a, b", 1), "question 1, edited")
            .unwrap_or_else(|e| panic!("{api:?}: {e}"));
        let verdict = body.extends(&sent[0]).unwrap_or_else(|e| panic!("{e}"));
        assert!(verdict.extends(), "{api:?}: {verdict:?}");
        let verdict = body.extends(&sent[1]).unwrap_or_else(|e| panic!("{e}"));
        assert!(!verdict.extends(), "{api:?}: {verdict:?}");
        let kept: Vec<MessageHandle> = edited.shown_messages()[..2]
            .iter()
            .map(|m| m.handle())
            .collect();
        let before: Vec<MessageHandle> = shown[..2].iter().map(|m| m.handle()).collect();
        assert_eq!(
            kept, before,
            "{api:?}: handles before the fork point are kept"
        );

        // Regenerate the second reply by its handle: the second request again.
        let mut again = c
            .regenerate_reply(shown[3].handle())
            .unwrap_or_else(|e| panic!("{api:?}: {e}"));
        let resent = again
            .resend(values("a, b", 1))
            .unwrap_or_else(|e| panic!("{api:?}: {e}"))
            .stable_body();
        assert_eq!(resent, sent[1], "{api:?}");

        // A handle of the wrong kind, or of no message, is refused by name.
        // Edit the first reply by its handle: the branch ends with the edited reply.
        let fixed = c
            .edit_assistant_message_by(
                shown[1].handle(),
                &json!({"role": "assistant", "content": "answer 0, corrected"}),
            )
            .unwrap_or_else(|e| panic!("{api:?}: {e}"));
        let fixed_shown = fixed.shown_messages();
        assert_eq!(fixed_shown.len(), 2, "{api:?}");
        assert!(fixed_shown[1].bytes().contains("answer 0, corrected"));
        assert_eq!(fixed_shown[0].handle(), shown[0].handle());

        // Assistant message 1 by the user-edit call; an assistant edit of a user message.
        // (the kind the call expected, its error)
        let wrong_kind = [
            ("user", c.edit_user_message_by(shown[1].handle()).err()),
            (
                "assistant",
                c.edit_assistant_message_by(
                    shown[0].handle(),
                    &json!({"role": "assistant", "content": "x"}),
                )
                .err(),
            ),
        ];
        for (kind, err) in wrong_kind {
            assert!(
                matches!(
                    &err,
                    Some(ConversationError::Branch(BranchError::NoSuchMessage {
                        expected,
                        ..
                    })) if *expected == kind
                ),
                "{api:?}: {err:?}"
            );
        }
        let stranger = MessageHandle::parse(&"0".repeat(32)).unwrap_or_else(|| panic!());
        assert!(c.regenerate_reply(stranger).is_err());

        // Handles survive a save and a restore.
        let restored = restore(&c.save(), api);
        let after: Vec<MessageHandle> = restored
            .shown_messages()
            .iter()
            .map(|m| m.handle())
            .collect();
        let now: Vec<MessageHandle> = shown.iter().map(|m| m.handle()).collect();
        assert_eq!(after, now, "{api:?}");
    }
}

#[test]
fn body_extends_is_the_engines_verdict() {
    for api in APIS {
        let mut c = start(api);
        let sent = three_turns(&mut c, api);
        let body = c
            .turn(values("b", 4), "question 3")
            .unwrap_or_else(|e| panic!("{e}"));
        let bytes = body.to_bytes();
        for earlier in &sent {
            let verdict = body.extends(earlier).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(
                verdict,
                compare(earlier, &bytes).unwrap_or_else(|e| panic!("{e}")),
                "{api:?}"
            );
            assert!(verdict.extends(), "{api:?}: {verdict:?}");
        }
        // An edited earlier body is not extended, and the break is named.
        let mut edited = sent[0].clone();
        let at = edited
            .windows(10)
            .position(|w| w == b"question 0")
            .unwrap_or_else(|| panic!("{api:?}"));
        edited[at] = b'Q';
        let verdict = body.extends(&edited).unwrap_or_else(|e| panic!("{e}"));
        assert!(
            matches!(verdict, prompt_wire::Verdict::Breaks(_)),
            "{api:?}: {verdict:?}"
        );
        assert!(body.extends(b"not json").is_err());
    }
}

/// What an app that wrote its own bodies last sent to `api` (its own key order, its own
/// `prompt_cache_key` when `key`), for the conversation "question 0", "answer 0",
/// "question 1", with the tools and parameters of [`options`].
fn app_last_body(api: ApiKind, key: Option<&str>) -> String {
    let read = r#"{"name":"read_file","description":"Read a file.","parameters":{"type":"object","properties":{"path":{"type":"string"}},"required":["path"]}}"#;
    let grep = r#"{"name":"grep","description":"Search files.","parameters":{"type":"object","properties":{"pattern":{"type":"string"}},"required":["pattern"]}}"#;
    match api {
        ApiKind::Anthropic => format!(
            r#"{{"model":"test-model","max_tokens":4096,"thinking":{{"type":"enabled","budget_tokens":1024}},"system":[{{"type":"text","text":"You are a careful coding assistant.","cache_control":{{"type":"ephemeral"}}}}],"tools":[{},{}],"messages":[{{"role":"user","content":"question 0"}},{{"role":"assistant","content":[{{"type":"text","text":"answer 0"}}]}},{{"role":"user","content":[{{"type":"text","text":"question 1","cache_control":{{"type":"ephemeral"}}}}]}}]}}"#,
            grep.replace("parameters", "input_schema"),
            read.replace("parameters", "input_schema").replace(
                r#""required":["path"]}"#,
                r#""required":["path"]},"cache_control":{"type":"ephemeral"}"#
            ),
        ),
        _ => {
            let key = key
                .map(|k| format!(r#","prompt_cache_key":"{k}""#))
                .unwrap_or_default();
            format!(
                r#"{{"messages":[{{"role":"system","content":"You are a careful coding assistant."}},{{"role":"user","content":"question 0"}},{{"role":"assistant","content":"answer 0"}},{{"role":"user","content":"question 1"}}],"model":"test-model","temperature":0.2,"max_tokens":1024,"tools":[{{"type":"function","function":{grep}}},{{"type":"function","function":{read}}}]{key}}}"#
            )
        }
    }
}

#[test]
fn continuing_from_the_apps_last_body_extends_it_and_keeps_its_cache_key() {
    for (api, key) in [
        (ApiKind::OpenAi, Some("app-thread-7")),
        (ApiKind::LlamaCpp, None),
        (ApiKind::Anthropic, None),
    ] {
        let last = app_last_body(api, key);
        let last_reply = reply(api, 1, "answer 1", &[]);
        let session_options = || prompt_wire::session_options(api, tools());
        let (mut c, report) = Conversation::continue_from(
            components(),
            &policy(),
            SessionContext::default(),
            session_options(),
            api,
            options(api),
            last.as_bytes(),
            Some(last_reply.as_bytes()),
            &prompt_core::adopt::AdoptOptions::new(),
        )
        .unwrap_or_else(|e| panic!("{api:?}: {e}"));
        assert!(report.prefix_frozen, "{api:?}: {report:?}");
        assert_eq!(c.wire().kept_cache_key().flatten(), key, "{api:?}");
        let body = c
            .turn(values("a", 3), "question 2")
            .unwrap_or_else(|e| panic!("{api:?}: {e}"));
        let verdict = body
            .extends(last.as_bytes())
            .unwrap_or_else(|e| panic!("{e}"));
        assert!(verdict.extends(), "{api:?}: {verdict:?}");
        let first = body.to_bytes();
        let text = String::from_utf8_lossy(&first).into_owned();
        match key {
            Some(key) => assert!(text.contains(&format!(r#""prompt_cache_key":"{key}""#))),
            None => assert!(!text.contains("prompt_cache_key"), "{api:?}: {text}"),
        }
        assert!(text.contains("answer 1"), "{api:?}: the reply is carried");
        // Saved and restored, the next body still carries the app's key (or none).
        c.record_reply(reply(api, 2, "answer 2", &[]).as_bytes())
            .unwrap_or_else(|e| panic!("{api:?}: {e}"));
        let saved = ConversationSnapshot::from_json(c.save().to_json().as_bytes())
            .unwrap_or_else(|e| panic!("{e}"));
        let mut restored =
            try_restore(&saved, api, session_options()).unwrap_or_else(|e| panic!("{api:?}: {e}"));
        let a = turn_bytes(&mut c, "a", 4, "question 3");
        let b = turn_bytes(&mut restored, "a", 4, "question 3");
        assert_eq!(a, b, "{api:?}");
        let verdict = compare(last.as_bytes(), &b).unwrap_or_else(|e| panic!("{e}"));
        assert!(verdict.extends(), "{api:?}: {verdict:?}");
        // A branch keeps the key too.
        let branch = restored.fork();
        assert_eq!(branch.wire().kept_cache_key().flatten(), key, "{api:?}");

        // Before: adopting the same messages wrote the library's own key (or a key where
        // the app sent none): the first request went to another cache.
        if api != ApiKind::Anthropic {
            let parts = prompt_wire::body_parts(last.as_bytes()).unwrap_or_else(|e| panic!("{e}"));
            let list = format!("[{}]", parts.messages.join(","));
            let (mut adopted, _) = Conversation::adopt(
                components(),
                &policy(),
                SessionContext::default(),
                session_options(),
                api,
                options(api),
                &list,
                &prompt_core::adopt::AdoptOptions::new(),
            )
            .unwrap_or_else(|e| panic!("{e}"));
            adopted
                .record_reply(last_reply.as_bytes())
                .unwrap_or_else(|e| panic!("{e}"));
            let body = adopted
                .turn(values("a", 3), "question 2")
                .unwrap_or_else(|e| panic!("{e}"));
            let verdict = body
                .extends(last.as_bytes())
                .unwrap_or_else(|e| panic!("{e}"));
            assert!(!verdict.extends(), "{api:?}: {verdict:?}");
        }
    }
}

#[test]
fn continuing_from_a_body_of_another_model_or_shape_is_refused_by_name() {
    let last = app_last_body(ApiKind::OpenAi, None);
    let go = |api: ApiKind, body: &[u8], options: prompt_wire::WireOptions| {
        Conversation::continue_from(
            components(),
            &policy(),
            SessionContext::default(),
            prompt_wire::session_options(api, tools()),
            api,
            options,
            body,
            None,
            &prompt_core::adopt::AdoptOptions::new(),
        )
        .err()
        .unwrap_or_else(|| panic!("{api:?}: accepted"))
    };
    let other_model = prompt_wire::WireOptions::new("another-model");
    let err = go(ApiKind::OpenAi, last.as_bytes(), other_model);
    assert!(
        matches!(err, ConversationError::LastBodyModel { .. }),
        "{err}"
    );
    assert!(err.to_string().contains("another-model"), "{err}");
    let err = go(
        ApiKind::Anthropic,
        last.as_bytes(),
        options(ApiKind::Anthropic),
    );
    assert!(
        matches!(err, ConversationError::LastBodyShape { .. }),
        "{err}"
    );
    assert!(
        err.to_string()
            .contains("a Chat Completions body; Anthropic Messages sends Anthropic Messages"),
        "{err}"
    );
    let err = go(ApiKind::Gemini, last.as_bytes(), options(ApiKind::Gemini));
    assert!(
        matches!(err, ConversationError::ContinueUnsupported { .. }),
        "{err}"
    );
    let err = go(ApiKind::OpenAi, b"[1,2]", options(ApiKind::OpenAi));
    assert!(matches!(err, ConversationError::LastBody(_)), "{err}");
    let long = last.replace(
        r#""model":"test-model""#,
        &format!(
            r#""model":"test-model","prompt_cache_key":"{}""#,
            "k".repeat(2000)
        ),
    );
    let err = go(ApiKind::OpenAi, long.as_bytes(), options(ApiKind::OpenAi));
    assert!(
        matches!(
            err,
            ConversationError::Wire(WireError::CacheKeyTooLong { .. })
        ),
        "{err}"
    );
}
