//! `stream_<api>`: arbitrary bytes as a streamed reply of one API, fed whole and in pieces.

use prompt_core::ApiKind;
use prompt_wire::Reply;
use prompt_wire::stream::{StreamError, StreamEvent, StreamReader};

use crate::wire_bodies::{fresh, next_body_extends};

/// What reading gave: the events, then the reply or the error's number and text.
type Outcome = (Vec<StreamEvent>, Result<Reply, (u64, String)>);

fn read(api: ApiKind, pieces: &mut dyn Iterator<Item = &[u8]>) -> Outcome {
    let mut reader = StreamReader::new(api);
    let mut events = Vec::new();
    for piece in pieces {
        let fed = reader.feed(piece);
        events.extend(std::iter::from_fn(|| reader.next_event()));
        if let Err(e) = fed {
            return (events, Err(described(&e)));
        }
    }
    let reply = reader.into_reply().map_err(|e| described(&e));
    (events, reply)
}

fn described(e: &StreamError) -> (u64, String) {
    let text = e.to_string();
    assert!(
        text.len() <= 2048,
        "a {}-byte diagnostic: {text:.200}",
        text.len()
    );
    (e.event(), text)
}

/// Invariants: no panic; the bytes read in pieces (of a size the input picks) give the same
/// events and the same reply or error as read at once; diagnostics stay short; a reply's
/// text and calls are the ones the events showed (but for Responses, whose completed
/// response is what is recorded); an accepted reply records into a fresh session, its calls
/// answered, and the next body composes, is JSON and extends the previous one.
pub(crate) fn stream(api: ApiKind, data: &[u8]) {
    let whole = read(api, &mut std::iter::once(data));
    let piece = 1 + data.len() % 61;
    let split = read(api, &mut data.chunks(piece));
    assert_eq!(whole, split, "{api:?}: pieces of {piece} read otherwise");
    let (events, Ok(reply)) = whole else {
        return;
    };
    if api != ApiKind::OpenAiResponses {
        let text = StreamEvent::shown_text(&events);
        assert_eq!(
            text, reply.text,
            "{api:?}: the text shown is not the reply's"
        );
        // By index: blocks a stream keeps open may finish in any order (llama.cpp's
        // Anthropic stream closes them at the end); each call finishes once.
        let mut finished: Vec<(usize, &str, &str)> = events
            .iter()
            .filter_map(|e| match e {
                StreamEvent::ToolCallFinished {
                    index,
                    name,
                    arguments,
                } => Some((*index, name.as_str(), arguments.as_str())),
                _ => None,
            })
            .collect();
        finished.sort_by_key(|(index, ..)| *index);
        let calls: Vec<(usize, &str, &str)> = reply
            .tool_calls
            .iter()
            .enumerate()
            .map(|(index, c)| (index, c.name.as_str(), c.arguments.as_str()))
            .collect();
        assert_eq!(
            finished, calls,
            "{api:?}: the calls shown are not the reply's"
        );
    }
    let (mut session, mut wire, first) = fresh(api);
    let mut reader = wire.stream_reader();
    if reader.feed(data).is_err() {
        panic!("{api:?}: a stream read once is refused the second time");
    }
    // The session may refuse what the reader accepts (a role it does not take).
    let Ok(recorded) = reader.finish(&mut session) else {
        return;
    };
    next_body_extends(api, &mut session, &mut wire, &first, &recorded.tool_calls);
}

/// `stream_openai_chat`: OpenAI Chat Completions chunks.
pub fn stream_openai_chat(data: &[u8]) {
    stream(ApiKind::OpenAi, data);
}

/// `stream_llama_cpp`: llama.cpp's server's Chat Completions chunks.
pub fn stream_llama_cpp(data: &[u8]) {
    stream(ApiKind::LlamaCpp, data);
}

/// `stream_openai_responses`: OpenAI Responses events.
pub fn stream_openai_responses(data: &[u8]) {
    stream(ApiKind::OpenAiResponses, data);
}

/// `stream_anthropic`: Anthropic Messages events.
pub fn stream_anthropic(data: &[u8]) {
    stream(ApiKind::Anthropic, data);
}

/// `stream_gemini`: Gemini `streamGenerateContent` chunks.
pub fn stream_gemini(data: &[u8]) {
    stream(ApiKind::Gemini, data);
}
