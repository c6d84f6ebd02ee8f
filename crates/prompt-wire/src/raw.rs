//! The JSON this crate reads: `prompt_core::raw_json`, the workspace's one reader of given
//! JSON as raw text.

pub(crate) use prompt_core::raw_json::{
    Object, array_of, canonical, is_null, kind_of, push_quoted, quote, string_of,
};
