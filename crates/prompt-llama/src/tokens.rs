//! New prompt tokens per request, counted by the server's own chat template and tokenizer:
//! what a cache holding the previous request's prompt must still evaluate, to set beside what
//! the engine reports it re-processed (`UsageFigures::reprocessed` of `prompt-wire`,
//! `timings.prompt_n`). A llama.cpp slot also holds the tokens it generated for the previous
//! reply, so when the history carries that reply as generated it re-processes fewer (the
//! agent_loop example's continuation: 89 new, 62 re-processed).

use prompt_core::ApiKind;

use crate::{LiveError, LlamaClient};

/// A request's prompt tokens and how many of them are new.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TokenCount {
    /// The body's prompt tokens, generation prompt included, by the server's count.
    pub prompt: u64,
    /// Of those, the tokens beyond the previous request's stable part (all of them for the
    /// first request).
    pub new: u64,
}

/// Counts, request after request, each body's prompt tokens and its new tokens: those
/// beyond the stable part of the body before it (what a cache holding the previous request
/// can serve), by the server's own counters (`/apply-template` + `/tokenize` for Chat
/// Completions, `/v1/responses/input_tokens`, `/v1/messages/count_tokens`).
///
/// ```no_run
/// use prompt_core::ApiKind;
/// use prompt_llama::{LlamaClient, NewTokens};
/// # fn main() -> Result<(), Box<dyn std::error::Error>> {
/// let server = LlamaClient::new("http://127.0.0.1:8080");
/// let mut counter = NewTokens::new(ApiKind::LlamaCpp);
/// # let (body, stable): (Vec<u8>, Vec<u8>) = (vec![], vec![]);
/// // For each request: its bytes, and its stable part (`Body::stable_body()`).
/// let count = counter.count(&server, &body, &stable)?;
/// println!("{} prompt tokens, {} new", count.prompt, count.new);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct NewTokens {
    api: ApiKind,
    generation: Option<u64>,
    previous_stable: Option<u64>,
}

impl NewTokens {
    /// A counter for bodies of `api` (Chat Completions or llama.cpp, Responses, Anthropic
    /// Messages).
    pub fn new(api: ApiKind) -> Self {
        Self {
            api,
            generation: None,
            previous_stable: None,
        }
    }

    /// Counts `body` (a whole request body, as sent) against the previous request, then
    /// keeps `stable` (this body's stable part, `Body::stable_body()`) for the next; by
    /// `server`'s template and tokenizer (the server the request goes to, or one with the
    /// same model).
    pub fn count(
        &mut self,
        server: &LlamaClient,
        body: &[u8],
        stable: &[u8],
    ) -> Result<TokenCount, LiveError> {
        let prompt = server.count_tokens(self.api, body)?;
        let new = prompt.saturating_sub(self.previous_stable.unwrap_or(0));
        let generation = match self.generation {
            Some(n) => n,
            None => {
                let n = server.generation_prompt_tokens()?;
                self.generation = Some(n);
                n
            }
        };
        // The count of a body includes the generation prompt; a later body's does not
        // extend this one's there.
        self.previous_stable = Some(
            server
                .count_tokens(self.api, stable)?
                .saturating_sub(generation),
        );
        Ok(TokenCount { prompt, new })
    }

    /// Forgets the previous request: the next is counted as new whole (after a compaction or
    /// a refresh, a new cache epoch).
    pub fn reset(&mut self) {
        self.previous_stable = None;
    }
}
