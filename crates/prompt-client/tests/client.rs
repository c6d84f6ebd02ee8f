//! The client against a scripted loopback server: each API's URL and headers, the wire's
//! bytes sent as they are, retries only before the first event, nothing recorded on an
//! error or a drop, typed and bounded errors.

use std::time::Duration;

use prompt_client::{Client, ClientError, Endpoint, RetryPolicy, ScriptedResponse, ScriptedServer};
use prompt_core::tools::ToolSet;
use prompt_core::{ApiKind, Extensions, PromptPolicy, SessionContext};
use prompt_wire::stream::{StreamError, StreamEvent};
use prompt_wire::{Conversation, MAX_REPLY_BYTES, Next, WireOptions};
use serde_json::json;

/// A conversation to `api`, streamed unless `whole`.
fn conversation(api: ApiKind, whole: bool) -> Conversation {
    let mut options = WireOptions::new("test-model");
    if api == ApiKind::Anthropic {
        options = options.param("max_tokens", &json!(16));
    }
    if !whole && api != ApiKind::Gemini {
        options = options.param("stream", &json!(true));
    }
    Conversation::start(
        vec![],
        &PromptPolicy::default(),
        SessionContext::default(),
        prompt_wire::session_options(api, ToolSet::empty()),
        api,
        options,
    )
    .unwrap()
}

/// A streamed reply saying `text`, as `api` streams it.
fn sse(api: ApiKind, text: &str) -> String {
    let t = serde_json::to_string(text).unwrap();
    match api {
        ApiKind::OpenAi | ApiKind::LlamaCpp => format!(
            "data: {{\"choices\":[{{\"index\":0,\"delta\":{{\"role\":\"assistant\",\"content\":{t}}},\"finish_reason\":null}}]}}\n\n\
             data: {{\"choices\":[{{\"index\":0,\"delta\":{{}},\"finish_reason\":\"stop\"}}]}}\n\n\
             data: [DONE]\n\n"
        ),
        ApiKind::OpenAiResponses => format!(
            "event: response.output_item.added\ndata: {{\"type\":\"response.output_item.added\",\"output_index\":0,\"item\":{{\"type\":\"message\",\"id\":\"msg_1\",\"status\":\"in_progress\",\"role\":\"assistant\",\"content\":[]}}}}\n\n\
             event: response.output_text.delta\ndata: {{\"type\":\"response.output_text.delta\",\"output_index\":0,\"item_id\":\"msg_1\",\"content_index\":0,\"delta\":{t}}}\n\n\
             event: response.completed\ndata: {{\"type\":\"response.completed\",\"response\":{{\"id\":\"resp_1\",\"status\":\"completed\",\"output\":[{{\"type\":\"message\",\"id\":\"msg_1\",\"status\":\"completed\",\"role\":\"assistant\",\"content\":[{{\"type\":\"output_text\",\"text\":{t},\"annotations\":[]}}]}}],\"usage\":{{\"input_tokens\":5,\"output_tokens\":1,\"total_tokens\":6}}}}}}\n\n"
        ),
        ApiKind::Anthropic => format!(
            "event: message_start\ndata: {{\"type\":\"message_start\",\"message\":{{\"id\":\"msg_1\",\"type\":\"message\",\"role\":\"assistant\",\"content\":[],\"model\":\"m\",\"stop_reason\":null,\"stop_sequence\":null,\"usage\":{{\"input_tokens\":3,\"output_tokens\":1}}}}}}\n\n\
             event: content_block_start\ndata: {{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{{\"type\":\"text\",\"text\":\"\"}}}}\n\n\
             event: content_block_delta\ndata: {{\"type\":\"content_block_delta\",\"index\":0,\"delta\":{{\"type\":\"text_delta\",\"text\":{t}}}}}\n\n\
             event: content_block_stop\ndata: {{\"type\":\"content_block_stop\",\"index\":0}}\n\n\
             event: message_delta\ndata: {{\"type\":\"message_delta\",\"delta\":{{\"stop_reason\":\"end_turn\",\"stop_sequence\":null}},\"usage\":{{\"output_tokens\":2}}}}\n\n\
             event: message_stop\ndata: {{\"type\":\"message_stop\"}}\n\n"
        ),
        ApiKind::Gemini => format!(
            "data: {{\"candidates\":[{{\"content\":{{\"parts\":[{{\"text\":{t}}}],\"role\":\"model\"}},\"finishReason\":\"STOP\"}}],\"usageMetadata\":{{\"promptTokenCount\":3,\"candidatesTokenCount\":1}}}}\n\n"
        ),
    }
}

/// A whole Chat Completions reply saying `text`.
fn whole_chat(text: &str) -> String {
    json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": text},
        "finish_reason": "stop"}]})
    .to_string()
}

fn fast_retries(retries: u32) -> RetryPolicy {
    RetryPolicy::new(retries, Duration::from_millis(1), Duration::from_millis(5))
}

fn client(server: &ScriptedServer, retries: u32) -> Client {
    Client::new(Endpoint::new(format!("{}/v1", server.url())).key("sk-test"))
        .unwrap()
        .retry(fast_retries(retries))
}

fn hi() -> Next {
    Next::turn(Extensions::new(), "Hi")
}

/// Sends the last request again, streamed, and returns its recorded reply.
async fn resend(client: &Client, chat: &mut Conversation) -> prompt_wire::Reply {
    let stream = client
        .stream(chat, Next::resend(Extensions::new()))
        .unwrap();
    stream.finish().await.unwrap()
}

/// The error a streamed turn of "Hi" ends with (the tests below expect one).
async fn streamed_error(client: &Client, chat: &mut Conversation) -> ClientError {
    client
        .stream(chat, hi())
        .unwrap()
        .finish()
        .await
        .unwrap_err()
}

/// A client for `server`'s address once it has stopped: its port refuses connections.
fn client_after_stop(server: ScriptedServer, retries: u32) -> Client {
    let url = server.url().to_owned();
    drop(server);
    Client::new(Endpoint::new(format!("{url}/v1")))
        .unwrap()
        .retry(fast_retries(retries))
}

/// Every event of a stream, or the first error.
async fn events(
    stream: &mut prompt_client::ReplyStream<'_>,
) -> Result<Vec<StreamEvent>, ClientError> {
    let mut out = Vec::new();
    while let Some(event) = stream.next_event().await {
        out.push(event?);
    }
    Ok(out)
}

#[tokio::test]
async fn each_api_gets_its_url_its_headers_and_the_wires_bytes_as_they_are() {
    let apis = [
        ApiKind::OpenAi,
        ApiKind::LlamaCpp,
        ApiKind::OpenAiResponses,
        ApiKind::Anthropic,
        ApiKind::Gemini,
    ];
    for api in apis {
        let server =
            ScriptedServer::start(vec![ScriptedResponse::sse(sse(api, "Hello."))]).unwrap();
        let mut chat = conversation(api, false);
        let body = chat.compose(hi()).unwrap().to_bytes();
        let (routing, key) = chat.routing_header().unwrap();
        let routing = routing.to_owned();
        let reply = client(&server, 0)
            .stream_body(&mut chat, body.clone())
            .unwrap()
            .finish()
            .await
            .unwrap_or_else(|e| panic!("{api:?}: {e}"));
        assert_eq!(reply.text, "Hello.", "{api:?}");
        assert_eq!(chat.session().history().len(), 2, "{api:?}: recorded");

        let sent = server.requests();
        assert_eq!(sent.len(), 1);
        let request = &sent[0];
        assert_eq!(request.method, "POST");
        let path = match api {
            ApiKind::OpenAi | ApiKind::LlamaCpp => "/v1/chat/completions",
            ApiKind::OpenAiResponses => "/v1/responses",
            ApiKind::Anthropic => "/v1/messages",
            ApiKind::Gemini => "/v1/models/test-model:streamGenerateContent?alt=sse",
        };
        assert_eq!(request.target, path, "{api:?}");
        assert_eq!(request.body, body, "{api:?}: the wire's bytes, unchanged");
        assert_eq!(request.header("content-type"), Some("application/json"));
        assert_eq!(request.header("accept"), Some("text/event-stream"));
        assert_eq!(request.header(&routing), Some(key.as_str()), "{api:?}");
        let (bearer, anthropic, google) = (
            request.header("authorization"),
            (
                request.header("x-api-key"),
                request.header("anthropic-version"),
            ),
            request.header("x-goog-api-key"),
        );
        match api {
            ApiKind::Anthropic => {
                assert_eq!(anthropic, (Some("sk-test"), Some("2023-06-01")));
                assert_eq!((bearer, google), (None, None));
            }
            ApiKind::Gemini => {
                assert_eq!(google, Some("sk-test"));
                assert_eq!((bearer, anthropic), (None, (None, None)));
            }
            _ => {
                assert_eq!(bearer, Some("Bearer sk-test"), "{api:?}");
                assert_eq!((anthropic, google), ((None, None), None));
            }
        }
    }
}

#[tokio::test]
async fn a_whole_reply_is_read_and_recorded_and_gemini_whole_goes_to_generate_content() {
    let server = ScriptedServer::start(vec![
        ScriptedResponse::json(whole_chat("Whole.")),
        ScriptedResponse::json(
            r#"{"candidates":[{"content":{"parts":[{"text":"G."}],"role":"model"},"finishReason":"STOP"}]}"#,
        ),
    ])
    .unwrap();
    let client = client(&server, 0);
    let mut chat = conversation(ApiKind::OpenAi, true);
    let reply = client.send(&mut chat, hi()).await.unwrap();
    assert_eq!(reply.text, "Whole.");
    assert_eq!(chat.session().history().len(), 2);
    let mut gemini = conversation(ApiKind::Gemini, true);
    assert_eq!(client.send(&mut gemini, hi()).await.unwrap().text, "G.");
    let sent = server.requests();
    assert_eq!(sent[0].header("accept"), Some("application/json"));
    assert_eq!(sent[1].target, "/v1/models/test-model:generateContent");
}

#[tokio::test]
async fn the_stream_parameter_must_say_what_is_asked_and_nothing_is_sent_otherwise() {
    let server = ScriptedServer::start(vec![]).unwrap();
    let client = client(&server, 0);
    let mut whole = conversation(ApiKind::OpenAi, true);
    assert!(matches!(
        client.stream(&mut whole, hi()),
        Err(ClientError::StreamParameter {
            streaming: true,
            ..
        })
    ));
    let mut streamed = conversation(ApiKind::Anthropic, false);
    assert!(matches!(
        client.send(&mut streamed, hi()).await,
        Err(ClientError::StreamParameter {
            streaming: false,
            ..
        })
    ));
    assert!(server.requests().is_empty());
}

#[tokio::test]
async fn a_5xx_and_a_429_before_the_first_event_are_sent_again_and_the_reply_recorded_once() {
    let api = ApiKind::OpenAi;
    let server = ScriptedServer::start(vec![
        ScriptedResponse::status(503, r#"{"error":{"message":"overloaded"}}"#),
        ScriptedResponse::status(429, r#"{"error":{"message":"slow down"}}"#)
            .header("retry-after", "0"),
        ScriptedResponse::sse(sse(api, "Third time.")),
    ])
    .unwrap();
    let mut chat = conversation(api, false);
    let mut stream = client(&server, 2).stream(&mut chat, hi()).unwrap();
    let shown = events(&mut stream).await.unwrap();
    assert_eq!(stream.attempts(), 3);
    assert_eq!(stream.reply().map(|r| r.text.as_str()), Some("Third time."));
    drop(stream);
    assert_eq!(
        shown,
        [StreamEvent::TextDelta {
            text: "Third time.".to_owned()
        }]
    );
    assert_eq!(chat.session().history().len(), 2, "recorded once");
    let sent = server.requests();
    assert_eq!(sent.len(), 3);
    assert!(
        sent.windows(2).all(|w| w[0].body == w[1].body),
        "the same bytes each time"
    );
}

#[tokio::test]
async fn a_body_cut_off_before_the_first_event_is_sent_again() {
    let api = ApiKind::Anthropic;
    let text = sse(api, "Again.");
    let server = ScriptedServer::start(vec![
        ScriptedResponse::sse(text.clone()).cut_after(20),
        ScriptedResponse::sse(text),
    ])
    .unwrap();
    let mut chat = conversation(api, false);
    let mut stream = client(&server, 1).stream(&mut chat, hi()).unwrap();
    events(&mut stream).await.unwrap();
    assert_eq!(stream.attempts(), 2);
    drop(stream);
    assert_eq!(chat.session().history().len(), 2);
}

#[tokio::test]
async fn after_the_first_event_an_error_is_not_retried_nothing_is_recorded_and_the_request_can_be_sent_again()
 {
    let api = ApiKind::Anthropic;
    let text = sse(api, "Partly.");
    let first_event_ends = text.find("\n\n").unwrap() + 2;
    let server = ScriptedServer::start(vec![
        ScriptedResponse::sse(text.clone()).cut_after(first_event_ends + 30),
        ScriptedResponse::sse(text),
    ])
    .unwrap();
    let client = client(&server, 3);
    let mut chat = conversation(api, false);
    let mut stream = client.stream(&mut chat, hi()).unwrap();
    let error = events(&mut stream).await.unwrap_err();
    assert!(
        matches!(error, ClientError::Cut { attempts: 1, .. }),
        "{error}"
    );
    assert!(stream.next_event().await.is_none(), "the stream has ended");
    assert!(matches!(stream.finish().await, Err(ClientError::Spent)));
    assert_eq!(server.requests().len(), 1, "not retried after an event");
    assert_eq!(chat.session().history().len(), 1, "nothing recorded");

    let reply = resend(&client, &mut chat).await;
    assert_eq!(reply.text, "Partly.");
    assert_eq!(chat.session().history().len(), 2);
    let sent = server.requests();
    assert_eq!(sent[0].body, sent[1].body, "the same request again");
}

/// A reply cut after text has streamed is `ClientError::Cut`, with the text shown, the
/// events and bytes received and what never came, and the connection's error under it; a
/// server that is not there is `Transport`. The app tells "send it again" from "the answer
/// was cut".
#[tokio::test]
async fn a_reply_cut_after_text_streamed_is_a_cut_error_with_what_was_received_not_a_transport_error()
 {
    let api = ApiKind::OpenAi;
    let text = concat!(
        r#"data: {"choices":[{"index":0,"delta":{"role":"assistant","content":"The answer"},"finish_reason":null}]}"#,
        "\n\n",
        r#"data: {"choices":[{"index":0,"delta":{"content":" is 42"},"finish_reason":null}]}"#,
        "\n\n",
        r#"data: {"choices":[{"index":0,"delta":{"content":" because"},"finish_reason":"stop"}]}"#,
        "\n\n",
        "data: [DONE]\n\n"
    );
    // Two events whole, then 10 bytes of the third, and the connection closes mid-chunk.
    let third = text.match_indices("data: ").nth(2).unwrap().0;
    let cut_at = third + 10;
    let server =
        ScriptedServer::start(vec![ScriptedResponse::sse(text).cut_after(cut_at)]).unwrap();
    let mut chat = conversation(api, false);
    let mut stream = client(&server, 3).stream(&mut chat, hi()).unwrap();
    let mut shown = String::new();
    let error = loop {
        match stream.next_event().await {
            Some(Ok(StreamEvent::TextDelta { text })) => shown.push_str(&text),
            Some(Ok(_)) => {}
            Some(Err(error)) => break error,
            None => panic!("the stream ended without its error"),
        }
    };
    assert_eq!(shown, "The answer is 42");
    match &error {
        ClientError::Cut {
            attempts,
            events,
            received,
            text,
            missing,
            source,
            ..
        } => {
            assert_eq!(*attempts, 1, "not retried once text was shown");
            assert_eq!(*events, 2);
            assert_eq!(*received, cut_at as u64);
            assert_eq!(text, "The answer is 42");
            assert_eq!(*missing, Some("data: [DONE]"));
            assert!(source.is_some(), "the connection's error is the cause");
        }
        other => panic!("not a cut: {other}"),
    }
    let message = error.to_string();
    assert!(
        message.contains(&format!("cut off after 2 event(s) and {cut_at} byte(s)"))
            && message.contains("before data: [DONE]")
            && message.contains("Next::resend"),
        "{message}"
    );
    assert!(std::error::Error::source(&error).is_some(), "{message}");
    assert!(stream.timing().first_token.is_some() && stream.timing().total.is_some());
    drop(stream);
    assert_eq!(chat.session().history().len(), 1, "nothing recorded");

    // A body that ends cleanly before its last event is cut too, with no transport error.
    let server = ScriptedServer::start(vec![ScriptedResponse::sse(&text[..third])]).unwrap();
    let mut chat = conversation(api, false);
    let error = streamed_error(&client(&server, 0), &mut chat).await;
    assert!(
        matches!(&error, ClientError::Cut { events: 2, source: None, missing: Some("data: [DONE]"), text, .. } if text == "The answer is 42"),
        "{error}"
    );
    assert!(
        error
            .to_string()
            .contains("the server closed the connection"),
        "{error}"
    );

    // A whole reply whose body breaks off: cut, with the bytes received, no events.
    let whole = whole_chat("A whole answer that is cut.");
    let server = ScriptedServer::start(vec![ScriptedResponse::json(whole).cut_after(30)]).unwrap();
    let mut chat = conversation(api, true);
    let error = client(&server, 0).send(&mut chat, hi()).await.unwrap_err();
    assert!(
        matches!(
            &error,
            ClientError::Cut {
                events: 0,
                received: 30,
                missing: None,
                source: Some(_),
                ..
            }
        ),
        "{error}"
    );

    // No server at all: no response began, a transport error.
    let client = client_after_stop(server, 0);
    let mut chat = conversation(api, false);
    let error = streamed_error(&client, &mut chat).await;
    assert!(matches!(error, ClientError::Transport { .. }), "{error}");
}

/// The client's clock: the time to the response, to the first token (the first event with
/// content, not an empty delta) and to the end, with the pieces `pause` apart.
#[tokio::test]
async fn a_stream_s_timing_counts_to_the_first_token_and_to_its_end() {
    let api = ApiKind::OpenAi;
    let pause = Duration::from_millis(60);
    let body = concat!(
        r#"data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}"#,
        "\n\n",
        r#"data: {"choices":[{"index":0,"delta":{"content":"Hi"},"finish_reason":null}]}"#,
        "\n\n",
        r#"data: {"choices":[{"index":0,"delta":{"content":"!"},"finish_reason":"stop"}]}"#,
        "\n\n",
        "data: [DONE]\n\n"
    );
    let first = body.find("\n\n").unwrap() + 2;
    let server =
        ScriptedServer::start(vec![ScriptedResponse::sse(body).in_pieces(first, pause)]).unwrap();
    let mut chat = conversation(api, false);
    let stream = client(&server, 0).stream(&mut chat, hi()).unwrap();
    let (reply, timing) = stream.finish_timed().await.unwrap();
    assert_eq!(reply.text, "Hi!");
    let response = timing.response.unwrap();
    let first_token = timing.first_token.unwrap();
    let total = timing.total.unwrap();
    // The empty first delta is not a token: the first comes one pause after it.
    assert!(first_token >= pause, "{timing:?}");
    assert!(
        response <= first_token && first_token <= total,
        "{timing:?}"
    );
    assert!(total >= 2 * pause, "{timing:?}");
}

#[tokio::test]
async fn dropping_the_stream_after_its_first_event_records_nothing() {
    let api = ApiKind::LlamaCpp;
    let server = ScriptedServer::start(vec![
        ScriptedResponse::sse(sse(api, "Never recorded.")).in_pieces(16, Duration::from_millis(5)),
        ScriptedResponse::sse(sse(api, "Recorded.")),
    ])
    .unwrap();
    let client = client(&server, 0);
    let mut chat = conversation(api, false);
    let mut stream = client.stream(&mut chat, hi()).unwrap();
    let first = stream.next_event().await.unwrap().unwrap();
    assert_eq!(
        first,
        StreamEvent::TextDelta {
            text: "Never recorded.".to_owned()
        }
    );
    drop(stream);
    assert_eq!(chat.session().history().len(), 1);
    let reply = resend(&client, &mut chat).await;
    assert_eq!(reply.text, "Recorded.");
    let last = chat
        .session()
        .history()
        .nodes()
        .last()
        .unwrap()
        .bytes()
        .to_owned();
    assert!(
        last.contains("Recorded.") && !last.contains("Never"),
        "{last}"
    );
}

#[tokio::test]
async fn a_provider_error_event_is_a_typed_stream_error_after_the_events_before_it() {
    let api = ApiKind::Anthropic;
    let text = sse(api, "Half");
    let cut = text.find("event: content_block_stop").unwrap();
    let body = format!(
        "{}event: error\ndata: {{\"type\":\"error\",\"error\":{{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}}}\n\n",
        &text[..cut]
    );
    let server = ScriptedServer::start(vec![ScriptedResponse::sse(body)]).unwrap();
    let mut chat = conversation(api, false);
    let mut stream = client(&server, 2).stream(&mut chat, hi()).unwrap();
    let mut shown = Vec::new();
    let error = loop {
        match stream.next_event().await {
            Some(Ok(event @ StreamEvent::TextDelta { .. })) => shown.push(event),
            Some(Ok(_)) => {}
            Some(Err(e)) => break e,
            None => panic!("no error"),
        }
    };
    assert_eq!(
        shown,
        [StreamEvent::TextDelta {
            text: "Half".to_owned()
        }]
    );
    match error {
        ClientError::Stream(StreamError::Provider { event, message, .. }) => {
            assert_eq!(event, 4);
            assert!(message.contains("Overloaded"), "{message}");
        }
        other => panic!("{other}"),
    }
    drop(stream);
    assert_eq!(server.requests().len(), 1);
    assert_eq!(chat.session().history().len(), 1);
}

#[tokio::test]
async fn an_error_status_is_typed_with_a_bounded_excerpt_and_a_4xx_is_not_retried() {
    let long = format!("{{\"error\":{{\"message\":\"{}\"}}}}", "x".repeat(10_000));
    let server = ScriptedServer::start(vec![ScriptedResponse::status(400, long)]).unwrap();
    let mut chat = conversation(ApiKind::OpenAi, false);
    let error = streamed_error(&client(&server, 3), &mut chat).await;
    match &error {
        ClientError::Status {
            status,
            attempts,
            excerpt,
            ..
        } => {
            assert_eq!((*status, *attempts), (400, 1));
            assert!(
                excerpt.len() <= prompt_client::ERROR_EXCERPT_BYTES + 3,
                "{}",
                excerpt.len()
            );
            assert!(excerpt.starts_with("{\"error\""));
        }
        other => panic!("{other}"),
    }
    assert_eq!(server.requests().len(), 1);
    assert_eq!(chat.session().history().len(), 1);
}

#[tokio::test]
async fn no_server_is_a_transport_error_after_every_retry() {
    // A server with nothing to answer stops at once: its port refuses connections.
    let client = client_after_stop(ScriptedServer::start(vec![]).unwrap(), 2);
    let mut chat = conversation(ApiKind::OpenAi, false);
    let error = streamed_error(&client, &mut chat).await;
    assert!(
        matches!(error, ClientError::Transport { attempts: 3, .. }),
        "{error}"
    );
    let mut whole = conversation(ApiKind::OpenAi, true);
    let error = client.send(&mut whole, hi()).await.unwrap_err();
    assert!(
        matches!(error, ClientError::Transport { attempts: 3, .. }),
        "{error}"
    );
    assert_eq!(chat.session().history().len(), 1);
}

#[tokio::test]
async fn a_transport_error_shows_the_connection_error_under_reqwest_s_message() {
    let client = client_after_stop(ScriptedServer::start(vec![]).unwrap(), 0);
    let mut whole = conversation(ApiKind::OpenAi, true);
    let message = client.send(&mut whole, hi()).await.unwrap_err().to_string();
    // reqwest's own message is only "error sending request"; what failed is in its causes.
    assert!(
        message.contains("no response after 1 attempt(s): "),
        "{message}"
    );
    assert!(
        message.to_lowercase().contains("connection refused"),
        "{message}"
    );
    assert!(message.len() < 4 * 300 + 200, "{message}");
}

#[tokio::test]
async fn a_whole_reply_over_the_limit_is_refused_unread_and_nothing_is_recorded() {
    let huge = format!("{{\"pad\":\"{}\"}}", "x".repeat(MAX_REPLY_BYTES));
    let server = ScriptedServer::start(vec![
        ScriptedResponse::json(huge).in_pieces(1 << 20, Duration::ZERO),
    ])
    .unwrap();
    let mut chat = conversation(ApiKind::OpenAi, true);
    let error = client(&server, 0).send(&mut chat, hi()).await.unwrap_err();
    assert!(
        matches!(
            error,
            ClientError::TooLarge {
                max: MAX_REPLY_BYTES,
                ..
            }
        ),
        "{error}"
    );
    assert_eq!(chat.session().history().len(), 1);
}

#[test]
fn a_reply_stream_can_be_sent_to_another_task() {
    fn send<T: Send>() {}
    send::<prompt_client::ReplyStream<'static>>();
    send::<Client>();
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(24))]

    /// Whatever pieces the network cuts a streamed reply into, the client records what the
    /// sans-IO reader reads from the whole body, and shows its text as it comes.
    #[test]
    fn any_pieces_of_a_streamed_reply_record_what_the_whole_body_records(
        api in proptest::sample::select(vec![
            ApiKind::OpenAi, ApiKind::LlamaCpp, ApiKind::OpenAiResponses,
            ApiKind::Anthropic, ApiKind::Gemini,
        ]),
        text in "[a-zé\\\"\n ]{0,40}",
        piece in 1usize..48,
    ) {
        let body = sse(api, &text);
        let expected = prompt_wire::stream::read_stream(api, body.as_bytes()).unwrap();
        let server = ScriptedServer::start(vec![
            ScriptedResponse::sse(body).in_pieces(piece, Duration::ZERO),
        ]).unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let mut chat = conversation(api, false);
        let client = client(&server, 0);
        let (shown, reply) = runtime.block_on(async {
            let mut stream = client.stream(&mut chat, hi()).unwrap();
            let mut shown = String::new();
            while let Some(event) = stream.next_event().await {
                if let StreamEvent::TextDelta { text } = event.unwrap() {
                    shown.push_str(&text);
                }
            }
            (shown, stream.finish().await.unwrap())
        });
        proptest::prop_assert_eq!(&shown, &expected.text);
        proptest::prop_assert_eq!(&reply.message, &expected.message);
        let last = chat.session().history().nodes().last().unwrap().bytes().to_owned();
        proptest::prop_assert_eq!(last, expected.message);
    }
}

#[tokio::test]
async fn after_a_failed_send_a_turn_is_refused_unsent_and_resend_carries_the_question_once() {
    let api = ApiKind::OpenAi;
    let server = ScriptedServer::start(vec![
        ScriptedResponse::status(500, r#"{"error":"overloaded"}"#),
        ScriptedResponse::sse(sse(api, "Hello.")),
    ])
    .unwrap();
    let client = client(&server, 0);
    let mut chat = conversation(api, false);
    let error = client.stream(&mut chat, hi()).unwrap().finish().await;
    assert!(
        matches!(error, Err(ClientError::Status { status: 500, .. })),
        "{error:?}"
    );
    // Retrying with the turn again would carry "Hi" twice: refused before anything is sent.
    let refused = client.stream(&mut chat, hi()).err();
    assert!(
        matches!(
            &refused,
            Some(ClientError::Compose(
                prompt_wire::ConversationError::Compose(prompt_core::ComposeError::Unanswered {
                    request: 1
                })
            ))
        ),
        "{refused:?}"
    );
    assert!(refused.unwrap().to_string().contains("resend"));
    assert_eq!(server.requests().len(), 1, "nothing sent");
    let reply = resend(&client, &mut chat).await;
    assert_eq!(reply.text, "Hello.");
    let sent = server.requests();
    assert_eq!(sent[0].body, sent[1].body, "the same request again");
    let body = String::from_utf8_lossy(&sent[1].body);
    assert_eq!(body.matches(r#""content":"Hi""#).count(), 1, "{body}");

    // No server at all: the transport error leaves the turn unanswered too.
    let nowhere = client_after_stop(ScriptedServer::start(vec![]).unwrap(), 0);
    let mut whole = conversation(api, true);
    let error = nowhere.send(&mut whole, hi()).await.unwrap_err();
    assert!(matches!(error, ClientError::Transport { .. }), "{error}");
    let error = nowhere.send(&mut whole, hi()).await.unwrap_err();
    assert!(
        matches!(
            error,
            ClientError::Compose(prompt_wire::ConversationError::Compose(
                prompt_core::ComposeError::Unanswered { request: 1 }
            ))
        ),
        "{error}"
    );
    assert_eq!(whole.session().history().len(), 1);
}
