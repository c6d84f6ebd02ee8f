//! The JSON the engine reads: `prompt_core::raw_json`, the workspace's one reader of given
//! JSON as raw text.

pub(crate) use prompt_core::raw_json::{
    Object, elements_of, is_null, kind_of, kind_of_text, offset_in, push_quoted, quote, string_of,
};
