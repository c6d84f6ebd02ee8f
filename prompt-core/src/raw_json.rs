//! JSON read as raw text, for the crates of this workspace (the history here, the wire's
//! bodies and replies): one reader, so every crate treats given JSON alike.
//!
//! Everything given (history nodes, reply bodies, bodies under audit) is read as raw text:
//! objects as their keys in order with each value's exact bytes, arrays as their elements'
//! exact bytes. Nothing given is converted to a `serde_json::Value` and written back, so
//! vendor fields, key order and number spellings (`1e400`) survive, and a duplicated key is
//! caught (in O(n log n)). Every string is still checked to decode: a lone surrogate escape
//! (`"\ud800"`) is refused, since no decoder downstream could read it back. What the library
//! writes itself it writes with keys in a fixed order, whatever the host program's serde_json
//! features.
//!
//! ```
//! use prompt_core::raw_json::{Object, Problem};
//! let o = Object::parse(r#"{"role":"user","n":1e400}"#).unwrap();
//! assert_eq!(o.str("role").as_deref(), Some("user"));
//! assert_eq!(o.get("n").map(|v| v.get()), Some("1e400"));
//! assert!(matches!(Object::parse(r#"{"a":1,"a":2}"#), Err(Problem::DuplicateKey(_))));
//! ```

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

/// What follows the backslash of each byte's escape (`u` for `\u00XX`), 0 for a byte
/// written as it is: serde_json's table.
const ESCAPES: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut b = 0;
    while b < 0x20 {
        table[b] = b'u';
        b += 1;
    }
    table[0x08] = b'b';
    table[0x09] = b't';
    table[0x0a] = b'n';
    table[0x0c] = b'f';
    table[0x0d] = b'r';
    table[b'"' as usize] = b'"';
    table[b'\\' as usize] = b'\\';
    table
};

/// Whether any of the 8 bytes of `word` is a control byte, `"` or `\`: a word without one
/// is copied as it is (the usual case inside prose). Exact as a yes/no (the classic
/// "has a zero byte" / "has a byte less than n" tests, n ≤ 128).
fn word_needs_escape(word: u64) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let below_space = word.wrapping_sub(ONES * 0x20) & !word & HIGH;
    let quote = word ^ (ONES * u64::from(b'"'));
    let backslash = word ^ (ONES * u64::from(b'\\'));
    let zero_in = |v: u64| v.wrapping_sub(ONES) & !v & HIGH;
    (below_space | zero_in(quote) | zero_in(backslash)) != 0
}

/// Appends `text` as a JSON string literal, quotes included, escaped as serde_json does.
/// Runs of bytes that need no escape are found 8 at a time: a log line holds whole request
/// bodies, and this is most of what writing one costs.
pub fn push_quoted(out: &mut String, text: &str) {
    out.reserve(text.len() + 2);
    out.push('"');
    let bytes = text.as_bytes();
    let mut copied = 0;
    let mut at = 0;
    while at < bytes.len() {
        while let Some(word) = bytes.get(at..at + 8) {
            let word = u64::from_le_bytes(<[u8; 8]>::try_from(word).unwrap_or([0; 8]));
            if word_needs_escape(word) {
                break;
            }
            at += 8;
        }
        let Some(&byte) = bytes.get(at) else {
            break;
        };
        let escape = ESCAPES[usize::from(byte)];
        if escape == 0 {
            at += 1;
            continue;
        }
        // `at` is at an ASCII byte: a character boundary.
        out.push_str(&text[copied..at]);
        out.push('\\');
        if escape == b'u' {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            out.push_str("u00");
            out.push(char::from(HEX[usize::from(byte >> 4)]));
            out.push(char::from(HEX[usize::from(byte & 0xf)]));
        } else {
            out.push(char::from(escape));
        }
        at += 1;
        copied = at;
    }
    out.push_str(&text[copied..]);
    out.push('"');
}

/// `text` as a JSON string literal.
pub fn quote(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    push_quoted(&mut out, text);
    out
}

/// `value` written compactly with every object's keys sorted (by bytes), at every depth:
/// the bytes serde_json writes without its `preserve_order` feature, whichever features the
/// host program enabled. Everything the library serializes from a `serde_json::Value` (tool
/// schemas, messages and parameters given as values) goes through here, so one program
/// built twice, or a session restored across two builds, sends the same bytes.
///
/// ```
/// use prompt_core::raw_json::canonical;
/// let value = serde_json::json!({"type": "object", "properties": {"q": {"type": "string"}}, "a": [3, "é"]});
/// assert_eq!(canonical(&value), r#"{"a":[3,"é"],"properties":{"q":{"type":"string"}},"type":"object"}"#);
/// ```
pub fn canonical(value: &serde_json::Value) -> String {
    // Serializing a `Value` cannot fail (its keys are strings); serde_json's own `Display`
    // for `Value` rests on the same fact, and is the fallback.
    serde_json::to_string(&SortedKeys(value)).unwrap_or_else(|_| value.to_string())
}

/// A `Value` that serializes every object's entries in key order, whatever serde_json's
/// `Map` keeps: [`canonical`] with another serializer or formatter.
#[derive(Debug, Clone, Copy)]
pub struct SortedKeys<'a>(pub &'a serde_json::Value);

impl Serialize for SortedKeys<'_> {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        use serde_json::Value;
        match self.0 {
            Value::Object(map) => {
                let mut entries: Vec<(&String, &Value)> = map.iter().collect();
                entries.sort_unstable_by(|a, b| a.0.cmp(b.0));
                let mut out = serializer.serialize_map(Some(entries.len()))?;
                for (key, value) in entries {
                    out.serialize_entry(key, &SortedKeys(value))?;
                }
                out.end()
            }
            Value::Array(items) => serializer.collect_seq(items.iter().map(SortedKeys)),
            scalar => scalar.serialize(serializer),
        }
    }
}

/// Why a text is not the JSON expected.
#[derive(Debug)]
pub enum Problem {
    /// Not JSON at all.
    Syntax(serde_json::Error),
    /// JSON, but not an object: what it is.
    NotAnObject(&'static str),
    /// A key given twice.
    DuplicateKey(String),
    /// A `\u` escape of one half of a surrogate pair without its other half: JSON's grammar
    /// admits it, but it is not Unicode text, so no provider (nor serde_json) can decode it.
    LoneSurrogate {
        /// The byte offset of the escape's backslash.
        offset: usize,
        /// The escape itself (six characters, `\ud800`).
        escape: String,
    },
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Problem::Syntax(e) => write!(f, "not JSON ({e})"),
            Problem::NotAnObject(kind) => write!(f, "{kind}, not an object"),
            Problem::DuplicateKey(key) => write!(
                f,
                "the key \"{}\" is given twice",
                crate::input::excerpt(key, crate::input::EXCERPT_BYTES)
            ),
            Problem::LoneSurrogate { offset, escape } => write!(
                f,
                "the escape `{escape}` at byte {offset} is half a surrogate pair, not Unicode text"
            ),
        }
    }
}

/// A JSON object read as its keys, in order, and its values as raw text.
#[derive(Debug)]
pub struct Object<'a> {
    /// The keys, in order, with each value's raw text.
    pub fields: Vec<(Cow<'a, str>, &'a RawValue)>,
}

impl<'a> Object<'a> {
    /// Reads `text` as one JSON object with unique keys; values are only checked to be JSON
    /// whose strings decode.
    pub fn parse(text: &'a str) -> Result<Self, Problem> {
        let mut de = serde_json::Deserializer::from_str(text);
        let parsed = ObjectSeed.deserialize(&mut de).map_err(Problem::Syntax)?;
        de.end().map_err(Problem::Syntax)?;
        if let Some(offset) = lone_surrogate(text) {
            return Err(Problem::LoneSurrogate {
                offset,
                escape: text
                    .get(offset..offset.saturating_add(6))
                    .unwrap_or("")
                    .to_owned(),
            });
        }
        match parsed {
            Parsed::Object(fields) => {
                let mut keys: Vec<&str> = fields.iter().map(|(k, _)| k.as_ref()).collect();
                keys.sort_unstable();
                if let Some(pair) = keys.windows(2).find(|w| w[0] == w[1]) {
                    return Err(Problem::DuplicateKey(pair[0].to_owned()));
                }
                Ok(Self { fields })
            }
            Parsed::Other(kind) => Err(Problem::NotAnObject(kind)),
        }
    }

    /// Reads a raw value as an object.
    pub fn of(raw: &'a RawValue) -> Result<Self, Problem> {
        Self::parse(raw.get())
    }

    /// The raw value of `key`.
    pub fn get(&self, key: &str) -> Option<&'a RawValue> {
        self.fields
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, value)| *value)
    }

    /// Whether `key` is present.
    pub fn has(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// The string value of `key`; `None` when absent or not a string.
    pub fn str(&self, key: &str) -> Option<Cow<'a, str>> {
        self.get(key).and_then(string_of)
    }

    /// The object again, compactly, with `key`'s value replaced (or added at the end).
    pub fn with(&self, key: &str, value: &str) -> String {
        let mut out = String::from("{");
        let mut replaced = false;
        for (i, (k, v)) in self.fields.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            push_quoted(&mut out, k);
            out.push(':');
            if k == key {
                out.push_str(value);
                replaced = true;
            } else {
                out.push_str(v.get());
            }
        }
        if !replaced {
            if !self.fields.is_empty() {
                out.push(',');
            }
            push_quoted(&mut out, key);
            out.push(':');
            out.push_str(value);
        }
        out.push('}');
        out
    }

    /// The object again, compactly, without `key`; `None` when `key` is absent (keep the
    /// given bytes then).
    pub fn without(&self, key: &str) -> Option<String> {
        if !self.has(key) {
            return None;
        }
        let mut out = String::from("{");
        for (k, v) in self.fields.iter().filter(|(k, _)| k != key) {
            if out.len() > 1 {
                out.push(',');
            }
            push_quoted(&mut out, k);
            out.push(':');
            out.push_str(v.get());
        }
        out.push('}');
        Some(out)
    }
}

/// The text of a JSON string value; `None` when `raw` is not a string.
pub fn string_of(raw: &RawValue) -> Option<Cow<'_, str>> {
    if !raw.get().starts_with('"') {
        return None;
    }
    Cow::<str>::deserialize(raw).ok()
}

/// The elements of a JSON array, raw; `None` when `raw` is not an array.
pub fn array_of(raw: &RawValue) -> Option<Vec<&RawValue>> {
    if !raw.get().starts_with('[') {
        return None;
    }
    <Vec<&RawValue>>::deserialize(raw).ok()
}

/// The elements of a JSON array as slices of its text, each without the whitespace around
/// it; `None` when `raw` is not an array. What [`array_of`] reads, found in a fraction of its
/// time: a `RawValue` is valid JSON already (serde_json makes one only by reading it), so
/// this only finds where each element ends, and skips a string at once to its closing
/// quote (found with SIMD), not at every escape inside it. The slices are valid JSON.
pub fn elements_of(raw: &RawValue) -> Option<Vec<&str>> {
    let text = raw.get();
    let bytes = text.as_bytes();
    if bytes.first() != Some(&b'[') {
        return None;
    }
    let mut elements = Vec::new();
    // Inside the current element: how deep, where it began, where its last byte ends.
    let mut depth = 0usize;
    let mut start: Option<usize> = None;
    let mut end = 0;
    let mut at = 1;
    while let Some(&byte) = bytes.get(at) {
        match byte {
            b' ' | b'\t' | b'\n' | b'\r' => {}
            b',' if depth == 0 => {
                elements.push(text.get(start.take()?..end)?);
            }
            b']' | b'}' if depth == 0 => {
                if let Some(start) = start {
                    elements.push(text.get(start..end)?);
                }
                return Some(elements);
            }
            _ => {
                start.get_or_insert(at);
                match byte {
                    b'"' => at = string_end(bytes, at + 1)?.checked_sub(1)?,
                    b'[' | b'{' => depth += 1,
                    b']' | b'}' => depth -= 1,
                    _ => {}
                }
                end = at + 1;
            }
        }
        at += 1;
    }
    None
}

/// One past the closing quote of the string whose text starts at `from` (one past its
/// opening quote), in valid JSON: the first quote after `from` that an odd run of
/// backslashes does not escape (inside a string a backslash always begins an escape, so a
/// run before a quote is escaped backslashes, and one more escapes the quote itself). Found
/// with SIMD, not stopping at every escape. `None` when no quote ends it (not valid JSON).
pub fn string_end(bytes: &[u8], from: usize) -> Option<usize> {
    let mut from = from;
    loop {
        let quote = from + memchr::memchr(b'"', bytes.get(from..)?)?;
        let backslashes = bytes
            .get(..quote)?
            .iter()
            .rev()
            .take_while(|&&b| b == b'\\')
            .count();
        if backslashes % 2 == 0 {
            return Some(quote + 1);
        }
        from = quote + 1;
    }
}

/// What kind of JSON value `raw` is, in words.
pub fn kind_of(raw: &RawValue) -> &'static str {
    kind_of_text(raw.get())
}

/// What kind of JSON value the valid JSON `text` is, in words (what [`kind_of`] says).
pub fn kind_of_text(text: &str) -> &'static str {
    match text.as_bytes().first() {
        Some(b'{') => "an object",
        Some(b'[') => "an array",
        Some(b'"') => "a string",
        Some(b't' | b'f') => "a boolean",
        Some(b'n') => "null",
        _ => "a number",
    }
}

/// Whether `raw` is JSON `null`.
pub fn is_null(raw: &RawValue) -> bool {
    raw.get() == "null"
}

/// Where `part` (a sub-slice of `whole`) starts in `whole`; `None` when it is not one.
pub fn offset_in(whole: &str, part: &str) -> Option<usize> {
    let start = (part.as_ptr() as usize).checked_sub(whole.as_ptr() as usize)?;
    (start.checked_add(part.len())? <= whole.len()).then_some(start)
}

/// The offset of the first `\u` escape that is half a surrogate pair without its other
/// half. `RawValue` skips escapes without decoding them (what a string means depends on the
/// later, real read), so this is the one thing a raw read lets through that no decoder
/// accepts. `json` must be valid JSON, where a backslash only ever starts a string escape.
fn lone_surrogate(json: &str) -> Option<usize> {
    // Most JSON has no `\u` escape at all: one fast scan says so (`str::contains` searches
    // a short needle with SIMD where it can), instead of stopping at every `\n` and `\"`.
    if !json.contains("\\u") {
        return None;
    }
    let bytes = json.as_bytes();
    let unit_at = |at: usize| {
        let digits = bytes.get(at..at.checked_add(4)?)?;
        u16::from_str_radix(std::str::from_utf8(digits).ok()?, 16).ok()
    };
    let mut at = 0;
    while let Some(found) = bytes.get(at..)?.iter().position(|&b| b == b'\\') {
        let escape = at + found;
        if bytes.get(escape + 1) != Some(&b'u') {
            at = escape + 2;
            continue;
        }
        match unit_at(escape + 2)? {
            0xD800..=0xDBFF => {
                let low = escape + 6;
                let paired = bytes.get(low..low + 2) == Some(b"\\u".as_slice())
                    && matches!(unit_at(low + 2), Some(0xDC00..=0xDFFF));
                if !paired {
                    return Some(escape);
                }
                at = low + 6;
            }
            0xDC00..=0xDFFF => return Some(escape),
            _ => at = escape + 6,
        }
    }
    None
}

enum Parsed<'a> {
    Object(Vec<(Cow<'a, str>, &'a RawValue)>),
    Other(&'static str),
}

struct ObjectSeed;

impl<'de> DeserializeSeed<'de> for ObjectSeed {
    type Value = Parsed<'de>;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_any(ObjectVisitor)
    }
}

struct ObjectVisitor;

impl<'de> Visitor<'de> for ObjectVisitor {
    type Value = Parsed<'de>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut fields = Vec::new();
        while let Some(key) = map.next_key::<Cow<'de, str>>()? {
            let value: &'de RawValue = map.next_value()?;
            fields.push((key, value));
        }
        Ok(Parsed::Object(fields))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<&'de RawValue>()?.is_some() {}
        Ok(Parsed::Other("an array"))
    }

    fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
        Ok(Parsed::Other("a string"))
    }

    fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
        Ok(Parsed::Other("a boolean"))
    }

    fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
        Ok(Parsed::Other("a number"))
    }

    fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
        Ok(Parsed::Other("a number"))
    }

    fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
        Ok(Parsed::Other("a number"))
    }

    fn visit_unit<E>(self) -> Result<Self::Value, E> {
        Ok(Parsed::Other("null"))
    }
}

#[cfg(test)]
mod tests {
    use proptest::strategy::Strategy;

    use super::*;

    #[test]
    fn quoting_matches_serde_json() {
        for text in [
            "plain",
            "say \"hi\"\n",
            "tab\tnul\u{0}\u{1f}\u{7f}",
            "é ✓ \\",
        ] {
            assert_eq!(quote(text), serde_json::Value::from(text).to_string());
        }
    }

    #[test]
    fn objects_keep_raw_values_and_refuse_duplicate_keys() {
        let o = Object::parse(r#"{"a":1e400, "b" : "x","cache_control":{}}"#).unwrap();
        assert_eq!(o.get("a").map(RawValue::get), Some("1e400"));
        assert_eq!(o.str("b").as_deref(), Some("x"));
        assert_eq!(
            o.without("cache_control").as_deref(),
            Some(r#"{"a":1e400,"b":"x"}"#)
        );
        assert!(o.without("zzz").is_none());
        assert!(matches!(
            Object::parse(r#"{"a":1,"a":2}"#),
            Err(Problem::DuplicateKey(k)) if k == "a"
        ));
        assert!(matches!(
            Object::parse("[1]"),
            Err(Problem::NotAnObject("an array"))
        ));
    }

    #[test]
    fn lone_surrogates_are_refused_and_pairs_kept() {
        for (text, offset) in [
            (r#"{"a":"\ud800"}"#, 6),
            (r#"{"a":"x\uDBFFy"}"#, 7),
            (r#"{"a":"\udc00"}"#, 6),
            (r#"{"a":["ok","\ud83d\u0041"]}"#, 12),
            (r#"{"a":{"b":"\ud83d\ude00\ud800"}}"#, 23),
        ] {
            match Object::parse(text) {
                Err(Problem::LoneSurrogate { offset: at, escape }) => {
                    assert_eq!((at, escape.len()), (offset, 6), "{text}");
                    assert!(escape.starts_with("\\u"), "{escape}");
                }
                other => panic!("{text}: {other:?}"),
            }
            // serde_json refuses the same texts when it decodes them.
            assert!(
                serde_json::from_str::<serde_json::Value>(text).is_err(),
                "{text}"
            );
        }
        for text in [
            r#"{"a":"\ud83d\ude00"}"#,
            r#"{"a":"\\ud800"}"#,
            r#"{"a":"\u00e9\n\"\\"}"#,
            r#"{"\ud83d\ude00":1e400}"#,
        ] {
            assert!(Object::parse(text).is_ok(), "{text}");
        }
    }

    proptest::proptest! {
        /// Any text, the fast runs and the escapes at every offset within a word among them.
        #[test]
        fn quoting_matches_serde_json_on_any_text(
            text in proptest::string::string_regex("(.|[\\x00-\\x1f\"\\\\]|[a-z ]{8,20}|é){0,64}").unwrap(),
        ) {
            proptest::prop_assert_eq!(quote(&text), serde_json::Value::from(text.as_str()).to_string());
        }


        /// Over strings of escapes and text, the raw reader accepts exactly what serde_json
        /// decodes, and reads the same text back.
        #[test]
        fn the_raw_reader_accepts_exactly_the_strings_serde_json_decodes(
            pieces in proptest::collection::vec(
                proptest::prop_oneof![
                    (0xd7f0u16..0xe010).prop_map(|unit| format!("\\u{unit:04x}")),
                    proptest::strategy::Just("\\\\".to_owned()),
                    proptest::strategy::Just("\\n".to_owned()),
                    "[a-zé✓u]{0,3}",
                ],
                0..8,
            )
        ) {
            let text = format!(r#"{{"k":"{}"}}"#, pieces.concat());
            let decoded = serde_json::from_str::<std::collections::BTreeMap<String, String>>(&text);
            let raw = Object::parse(&text);
            proptest::prop_assert_eq!(raw.is_ok(), decoded.is_ok(), "{}", text);
            if let (Ok(raw), Ok(decoded)) = (raw, decoded) {
                let read = raw.str("k");
                proptest::prop_assert_eq!(read.as_deref(), decoded.get("k").map(String::as_str));
            }
        }
    }

    /// Any JSON value, its strings full of what ends a string early if misread (quotes
    /// after runs of backslashes, brackets, commas).
    fn any_json() -> impl Strategy<Value = serde_json::Value> {
        use serde_json::Value;
        let leaf = proptest::prop_oneof![
            proptest::strategy::Just(Value::Null),
            proptest::bool::ANY.prop_map(Value::Bool),
            proptest::num::i64::ANY.prop_map(Value::from),
            proptest::num::f64::NORMAL.prop_map(Value::from),
            "([\\\\\"\\[\\]{},:\n\t a-zé✓]|\\\\{1,4}\"){0,12}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 48, 6, |inner| {
            proptest::prop_oneof![
                proptest::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                proptest::collection::vec(("[a-z\"\\\\]{0,4}", inner), 0..6)
                    .prop_map(|fields| Value::Object(fields.into_iter().collect())),
            ]
        })
    }

    proptest::proptest! {
        /// The fast split of a valid array finds exactly the elements serde_json reads, with
        /// the array written compactly, pretty-printed, or with odd whitespace anywhere
        /// between tokens.
        #[test]
        fn the_fast_split_finds_the_elements_serde_json_reads(
            items in proptest::collection::vec(any_json(), 0..6),
            pad in proptest::collection::vec("[ \t\r\n]{0,2}", 1..8),
        ) {
            let compact = serde_json::Value::Array(items.clone()).to_string();
            let pretty = serde_json::to_string_pretty(&items).unwrap();
            // Whitespace after each top-level comma and bracket, drawn from `pad`.
            let mut padded = String::new();
            for (i, element) in items.iter().enumerate() {
                padded.push(if i == 0 { '[' } else { ',' });
                padded.push_str(&pad[i % pad.len()]);
                padded.push_str(&element.to_string());
                padded.push_str(&pad[(i + 1) % pad.len()]);
            }
            if items.is_empty() {
                padded.push('[');
                padded.push_str(&pad[0]);
            }
            padded.push(']');
            for text in [compact, pretty, padded] {
                let raw: &RawValue = serde_json::from_str(&text).unwrap();
                let by_serde: Vec<&str> = array_of(raw).unwrap().into_iter().map(RawValue::get).collect();
                proptest::prop_assert_eq!(elements_of(raw), Some(by_serde), "{}", text);
            }
        }
    }

    #[test]
    fn the_fast_split_reads_only_arrays_and_cuts_strings_at_their_own_end() {
        for (text, elements) in [
            ("[]", vec![]),
            (" [ ] ".trim(), vec![]),
            (r#"["a\\",1]"#, vec![r#""a\\""#, "1"]),
            (
                r#"["a\"]",[{"b":"}"}] ,null]"#,
                vec![r#""a\"]""#, r#"[{"b":"}"}]"#, "null"],
            ),
            (r#"[ -1.5e3 , true ]"#, vec!["-1.5e3", "true"]),
        ] {
            let raw: &RawValue = serde_json::from_str(text).unwrap();
            assert_eq!(elements_of(raw), Some(elements), "{text}");
        }
        for text in [r#"{"a":[1]}"#, r#""[1]""#, "1", "null"] {
            let raw: &RawValue = serde_json::from_str(text).unwrap();
            assert_eq!(elements_of(raw), None, "{text}");
        }
    }

    #[test]
    fn a_slice_knows_its_offset_in_the_whole() {
        let whole = r#"{"a":[1,2]}"#;
        let o = Object::parse(whole).unwrap();
        let a = o.get("a").unwrap().get();
        assert_eq!(offset_in(whole, a), Some(5));
        assert_eq!(offset_in(whole, &String::from("elsewhere")), None);
    }
}
