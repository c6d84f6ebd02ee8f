//! The body reader: one request body of any API the engine knows (OpenAI Chat Completions
//! and Responses, Anthropic Messages, Gemini, llama.cpp's server) read once, into slices of
//! the body, in time linear in its size.

pub(crate) mod element;
pub(crate) mod error;
pub(crate) mod memo;
pub(crate) mod parse;
pub(crate) mod parts;
pub(crate) mod shape;
