//! JSON field extraction by JSON Pointer (`/data/object/id`), without building a tree.
//!
//! A plugin reads a handful of fields from a body of kilobytes, once per request, in a
//! fresh instance. Building a `serde_json::Value` for the whole body allocates a node
//! per field and dominated a plugin's cost. Instead the body is validated once and kept
//! as text (serde_json, which builds nothing when asked to ignore). The same pass notes
//! where each top-level member's value lies, so a pointer goes straight to its member.
//! Below it, each step of the path reads the value it is in only as far as the member
//! or element it names (serde_json again, stopping there).

use crate::Rejection;
use alloc::borrow::{Cow, ToOwned as _};
use alloc::format;
use alloc::string::String;
use alloc::vec::Vec;
use core::cell::{Cell, RefCell};
use core::ops::Range;
use serde::Deserializer as _;
use serde::de::{self, IgnoredAny, MapAccess, SeqAccess, Visitor};
use serde_json::Value;
use serde_json::value::RawValue;

/// What a JSON value is, from its first byte.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Object,
    Array,
    String,
    Number,
    True,
    False,
    Null,
}

/// A JSON document, validated, read lazily.
#[derive(Debug, Clone)]
pub struct Json {
    text: String,
    /// For an object: each top-level member, in document order, as its key and the
    /// span of its value in `text` (`None` for a member the validating pass entered
    /// to find a pointer, see [`Json::parse_finding`]). `None` for any other document.
    members: Option<Vec<(Key, Option<Range<usize>>)>>,
    /// The pointers [`Json::parse_finding`] found in the validating pass, with the span
    /// of each one's value.
    found: Vec<(&'static str, Range<usize>)>,
}

/// A top-level member's key: the span of its text in the document, or the key
/// unescaped when it has escapes.
#[derive(Debug, Clone)]
enum Key {
    Span(Range<usize>),
    Unescaped(String),
}

impl Json {
    /// Validate bytes as one JSON value; anything else is `MalformedBody`.
    pub fn parse(bytes: &[u8]) -> Result<Self, Rejection> {
        Json::read::<false>(bytes, &[])
    }

    /// As [`Json::parse`], and find `pointers` in the same pass that validates the
    /// document, instead of reading the document again for each when it is looked up.
    /// Every lookup answers as after [`Json::parse`]; for a pointer to a member near
    /// the end of a large object, this saves a second reading of the object. Pointers
    /// into an object document only, each token non-empty; others are looked up as
    /// usual.
    pub fn parse_finding(bytes: &[u8], pointers: &[&'static str]) -> Result<Self, Rejection> {
        Json::read::<true>(bytes, pointers)
    }

    /// `parse` and `parse_finding`: two builds of one function, so that a plugin that
    /// never looks for pointers in the pass does not carry the code that would.
    fn read<const FIND: bool>(bytes: &[u8], pointers: &[&'static str]) -> Result<Self, Rejection> {
        let text = core::str::from_utf8(bytes)
            .map_err(|_| Rejection::MalformedBody("body is not UTF-8 JSON".into()))?
            .to_owned();
        // One pass: serde_json validates the whole document (skipping nested values
        // iteratively, so a hostile "[[[[…" cannot exhaust the plugin's small stack)
        // and hands back each top-level member's key and raw value, and the value at
        // each pointer found.
        let wanted: Vec<Path<'_>> = pointers
            .iter()
            .enumerate()
            .filter(|(_, pointer)| findable(pointer))
            .filter_map(|(at, pointer)| Path::new(at, pointer))
            .collect();
        let found_raw = RefCell::new(alloc::vec![None; pointers.len()]);
        let members = top_level::<FIND>(&text, wanted, &found_raw)
            .map_err(|e| Rejection::MalformedBody(format!("body is not JSON: {e}")))?;
        // Every key and value serde_json borrowed lies in `text`; were one not to, the
        // document is read by scanning it whole, as for any non-object.
        let members = members.and_then(|members| {
            members
                .into_iter()
                .map(|(key, value)| {
                    let key = match key {
                        Cow::Borrowed(key) => Key::Span(span(&text, key)?),
                        Cow::Owned(key) => Key::Unescaped(key),
                    };
                    let value = match value {
                        Some(value) => Some(span(&text, value.get())?),
                        None => None,
                    };
                    Some((key, value))
                })
                .collect()
        });
        let found = pointers
            .iter()
            .zip(found_raw.into_inner())
            .filter_map(|(pointer, raw)| Some((*pointer, span(&text, raw?)?)))
            .collect();
        Ok(Json {
            text,
            members,
            found,
        })
    }

    /// Find a JSON Pointer: the raw text of the value there, and its kind.
    fn lookup(&self, pointer: &str) -> Option<(&str, Kind)> {
        if pointer.is_empty() {
            return Some((&self.text, kind(&self.text)));
        }
        if let Some((_, at)) = self.found.iter().find(|(found, _)| *found == pointer) {
            let value = &self.text[at.clone()];
            return Some((value, kind(value)));
        }
        let Some(members) = &self.members else {
            return self.scan(&self.text, pointer);
        };
        let (first, rest) = first_token(pointer)?;
        if first.is_empty() {
            return None;
        }
        // The first member of that name, as a scan of the document would find.
        let (_, at) = members.iter().find(|(key, _)| {
            let key = match key {
                Key::Span(at) => &self.text[at.clone()],
                Key::Unescaped(key) => key.as_str(),
            };
            key == first
        })?;
        // A member the validating pass entered without keeping its span: read the
        // document from the start, which meets the same first member.
        let Some(at) = at else {
            return self.scan(&self.text, pointer);
        };
        let value = &self.text[at.clone()];
        if rest.is_empty() {
            Some((value, kind(value)))
        } else {
            self.scan(value, rest)
        }
    }

    /// Find a JSON Pointer within `within` (the document or a value in it).
    fn scan<'a>(&'a self, within: &'a str, pointer: &str) -> Option<(&'a str, Kind)> {
        RawJson(within).lookup(pointer)
    }

    /// Whether the document is a JSON object.
    pub fn is_object(&self) -> bool {
        kind(&self.text) == Kind::Object
    }

    /// Whether the document is an object whose members are all named in `names`, as
    /// [`RawJson::has_only_members`].
    pub fn has_only_members(&self, names: &[&str]) -> bool {
        RawJson(&self.text).has_only_members(names)
    }

    /// The elements of the array at a JSON Pointer (`""`: the document is the array),
    /// read one at a time as the iterator is advanced; `None` when there is no array
    /// there. Nothing is collected, so a batch of any length is read in constant memory.
    pub fn elements(&self, pointer: &str) -> Option<Elements<'_>> {
        elements(self.lookup(pointer)?)
    }

    /// The raw JSON text of each element of the array at a JSON Pointer (`""`: the
    /// document is the array), in order; `None` when there is no array there. For a
    /// list an API returns: each element is stored exactly as listed.
    pub fn items(&self, pointer: &str) -> Option<Vec<&str>> {
        Some(self.elements(pointer)?.map(RawJson::text).collect())
    }

    /// The raw JSON text at a JSON Pointer (`""` is the whole document).
    pub fn raw(&self, pointer: &str) -> Option<&str> {
        self.lookup(pointer).map(|(raw, _)| raw)
    }

    /// The value at a JSON Pointer, parsed (owned).
    pub fn get(&self, pointer: &str) -> Option<Value> {
        value(self.raw(pointer)?).ok()
    }

    /// The whole document as a `serde_json::Value`.
    pub fn value(&self) -> Value {
        value(&self.text).unwrap_or(Value::Null)
    }

    /// A string field (borrowed unless it contains escapes).
    pub fn str(&self, pointer: &str) -> Option<Cow<'_, str>> {
        as_str(self.lookup(pointer)?)
    }

    /// A string field that must be present: absent → `MalformedBody` naming it.
    pub fn required_str(&self, pointer: &str) -> Result<Cow<'_, str>, Rejection> {
        self.str(pointer)
            .ok_or_else(|| Rejection::MalformedBody(format!("missing string field {pointer}")))
    }

    /// An integer field (a JSON number, or a string of digits as some senders write ids).
    pub fn i64(&self, pointer: &str) -> Option<i64> {
        number_text(self.lookup(pointer)?)?.parse().ok()
    }

    /// A non-negative integer field.
    pub fn u64(&self, pointer: &str) -> Option<u64> {
        number_text(self.lookup(pointer)?)?.parse().ok()
    }

    /// A field as an id string: strings as they are, integers in decimal.
    pub fn id(&self, pointer: &str) -> Option<String> {
        as_id(self.lookup(pointer)?)
    }

    /// An RFC 3339 timestamp field as unix seconds.
    pub fn rfc3339(&self, pointer: &str) -> Option<i64> {
        self.str(pointer)
            .and_then(|t| crate::decode::rfc3339_seconds(&t))
    }

    /// An RFC 3339 timestamp field as unix milliseconds (for resource versions).
    pub fn rfc3339_millis(&self, pointer: &str) -> Option<u64> {
        self.str(pointer)
            .and_then(|t| crate::decode::rfc3339_millis(&t))
    }
}

/// A value inside a validated document (an element of a batch, say), borrowed from it
/// and read like [`Json`]: JSON Pointers are relative to this value (`""` is the value
/// itself), and each lookup reads only as far as the value it names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RawJson<'a>(&'a str);

impl<'a> RawJson<'a> {
    /// The value's JSON text, as written.
    pub fn text(self) -> &'a str {
        self.0
    }

    /// Whether the value is a JSON object.
    pub fn is_object(self) -> bool {
        kind(self.0) == Kind::Object
    }

    fn lookup(self, pointer: &str) -> Option<(&'a str, Kind)> {
        let value = if pointer.is_empty() {
            self.0
        } else {
            walk(self.0, pointer)?
        };
        Some((value, kind(value)))
    }

    /// The raw JSON text at a JSON Pointer within this value.
    pub fn raw(self, pointer: &str) -> Option<&'a str> {
        self.lookup(pointer).map(|(raw, _)| raw)
    }

    /// This object's first member of each name, in one reading of it: `None` for a
    /// name it lacks (for every name, when this is not an object). For several fields
    /// of each event in a batch, each event is read once instead of once per field.
    pub fn members<const N: usize>(self, names: [&str; N]) -> [Option<RawJson<'a>>; N] {
        let mut found = [None; N];
        let picker = Picker {
            names: &names,
            found: &mut found,
            ends: None,
        };
        let _ = serde_json::Deserializer::from_str(self.0).deserialize_any(picker);
        found
    }

    /// Whether this is an object whose members are all named in `names`: the shape of
    /// one kind of event, where an unsigned header says which kind a body is.
    ///
    /// ```
    /// # use hookhost_plugin_sdk::Json;
    /// let json = Json::parse(br#"{"action": "deleted", "repository": {}, "key": {}}"#)?;
    /// assert!(json.has_only_members(&["action", "repository", "key"]));
    /// assert!(!json.has_only_members(&["action", "repository"]));
    /// # Ok::<(), hookhost_plugin_sdk::Rejection>(())
    /// ```
    pub fn has_only_members(self, names: &[&str]) -> bool {
        let only = OnlyMembers { names };
        // The first other name ends the reading early, as an error: `false` too.
        let read = serde_json::Deserializer::from_str(self.0).deserialize_any(only);
        read.unwrap_or(false)
    }

    /// The value at a JSON Pointer within this value, as a view of its own.
    pub fn at(self, pointer: &str) -> Option<RawJson<'a>> {
        self.raw(pointer).map(RawJson)
    }

    /// The elements of the array at a JSON Pointer within this value, as
    /// [`Json::elements`].
    pub fn elements(self, pointer: &str) -> Option<Elements<'a>> {
        elements(self.lookup(pointer)?)
    }

    /// A string field (borrowed unless it contains escapes).
    pub fn str(self, pointer: &str) -> Option<Cow<'a, str>> {
        as_str(self.lookup(pointer)?)
    }

    /// An integer field (a JSON number, or a string of digits), as [`Json::i64`].
    pub fn i64(self, pointer: &str) -> Option<i64> {
        number_text(self.lookup(pointer)?)?.parse().ok()
    }

    /// A non-negative integer field, as [`Json::u64`].
    pub fn u64(self, pointer: &str) -> Option<u64> {
        number_text(self.lookup(pointer)?)?.parse().ok()
    }

    /// A field as an id string: strings as they are, integers in decimal.
    pub fn id(self, pointer: &str) -> Option<String> {
        as_id(self.lookup(pointer)?)
    }
}

/// The elements of an array in a validated document, each as written, in order.
/// Each step reads one element and stops after it.
#[derive(Debug, Clone)]
pub struct Elements<'a> {
    /// The array's text after `[` or after the last element given.
    rest: &'a str,
    /// How many elements were given.
    given: usize,
}

impl<'a> Iterator for Elements<'a> {
    type Item = RawJson<'a>;

    fn next(&mut self) -> Option<RawJson<'a>> {
        // The array was validated: what follows is `]`, or (after a `,` once an
        // element was given) the next element.
        let rest = self.rest.trim_start();
        let rest = rest.strip_prefix(',').unwrap_or(rest);
        let mut reader = serde_json::Deserializer::from_str(rest);
        let element: Option<&RawValue> = de::Deserialize::deserialize(&mut reader).ok();
        let Some(at) = element.and_then(|element| span(rest, element.get())) else {
            self.rest = "";
            return None;
        };
        self.rest = &rest[at.end..];
        self.given += 1;
        Some(RawJson(&rest[at]))
    }
}

impl<'a> Elements<'a> {
    /// The first member of each name in the next element, as [`RawJson::members`]
    /// gives them but from the same reading of the element that finds where it ends:
    /// for a batch whose events are each read for a few fields, each event is read
    /// once. An element that is not an object is `MalformedBody`, naming its place.
    ///
    /// ```
    /// # use hookhost_plugin_sdk::{Json, Rejection};
    /// let json = Json::parse(br#"[{"id": "a", "type": "t"}, {"id": "b"}, 3]"#)?;
    /// let mut events = json.elements("").expect("an array");
    /// let [id, kind] = events.next_object(["id", "type"]).expect("first")?;
    /// assert_eq!((id.map(|id| id.text()), kind.is_some()), (Some(r#""a""#), true));
    /// let [_, kind] = events.next_object(["id", "type"]).expect("second")?;
    /// assert!(kind.is_none());
    /// assert!(events.next_object(["id", "type"]).expect("third").is_err());
    /// # Ok::<(), Rejection>(())
    /// ```
    pub fn next_object<const N: usize>(
        &mut self,
        names: [&str; N],
    ) -> Option<Result<[Option<RawJson<'a>>; N], Rejection>> {
        let at = self.given;
        let (element, found) = self.next_members(names)?;
        Some(if element.is_object() {
            Ok(found)
        } else {
            Err(Rejection::MalformedBody(format!(
                "element {at} of the array is not an object"
            )))
        })
    }

    /// The next element, with the first member of each name in it (every one `None`
    /// when the element is not an object), as [`Elements::next_object`] reads them.
    fn next_members<const N: usize>(
        &mut self,
        names: [&str; N],
    ) -> Option<(RawJson<'a>, [Option<RawJson<'a>>; N])> {
        let rest = self.rest.trim_start();
        let rest = rest.strip_prefix(',').unwrap_or(rest).trim_start();
        if !rest.starts_with('{') {
            return self.next().map(|element| (element, [None; N]));
        }
        let mut found = [None; N];
        // Just past the last member's value (past the `{` while there is none).
        let mut last = Some(1);
        let picker = Picker {
            names: &names,
            found: &mut found,
            ends: Some((rest, &mut last)),
        };
        let read = serde_json::Deserializer::from_str(rest).deserialize_any(picker);
        // The object was validated: after its last value, only spaces and its `}`.
        let end = read
            .ok()
            .and(last)
            .and_then(|last| Some(last + rest.get(last..)?.find('}')? + 1));
        let Some(end) = end else {
            self.rest = "";
            return None;
        };
        self.rest = &rest[end..];
        self.given += 1;
        Some((RawJson(&rest[..end]), found))
    }
}

/// A visitor's answer to each scalar serde_json reads (null, a boolean, a number, a
/// string): `$value`. Every visitor this module gives serde_json answers every kind
/// of value itself. serde's default answer, a type error, would link serde_json's
/// float formatter (17 KB of tables) into each plugin's data, which a fresh
/// instance's reset copies back on every request (docs/performance.md, section 45).
macro_rules! scalars {
    ($value:expr) => {
        fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
            Ok($value)
        }

        fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
            Ok($value)
        }

        fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
            Ok($value)
        }

        fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
            Ok($value)
        }

        fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
            Ok($value)
        }

        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok($value)
        }
    };
}

/// Reads an object for [`RawJson::members`]: the first member of each name is kept,
/// the others skipped, and the reader stops once every name is found. With `ends`
/// (the text the object starts, and where its last value ended) it reads the whole
/// object instead, noting where each value ends.
struct Picker<'n, 'f, 'de, const N: usize> {
    names: &'n [&'n str; N],
    found: &'f mut [Option<RawJson<'de>>; N],
    ends: Option<(&'de str, &'f mut Option<usize>)>,
}

impl<'de, const N: usize> Visitor<'de> for Picker<'_, '_, 'de, N> {
    type Value = ();

    fn expecting(&self, f: &mut core::fmt::Formatter) -> core::fmt::Result {
        f.write_str("an object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        if let Some((text, last)) = self.ends {
            while let Some(key) = map.next_key_seed(KeyText)? {
                let value: &RawValue = map.next_value()?;
                if let Some(at) = self.names.iter().position(|name| *name == key) {
                    self.found[at].get_or_insert(RawJson(value.get()));
                }
                *last = span(text, value.get()).map(|at| at.end);
            }
            return Ok(());
        }
        let mut left = N;
        while left > 0 {
            let Some(key) = map.next_key_seed(KeyText)? else {
                return Ok(());
            };
            match self.names.iter().position(|name| *name == key) {
                Some(at) if self.found[at].is_none() => {
                    let value: &RawValue = map.next_value()?;
                    self.found[at] = Some(RawJson(value.get()));
                    left -= 1;
                }
                _ => map.next_value::<IgnoredAny>().map(drop)?,
            }
        }
        stop()
    }

    // Not an object: no members.
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(())
    }

    scalars!(());
}

/// Reads an object's member names, skipping their values: whether each is one of
/// `names`. Anything but an object is `false`.
struct OnlyMembers<'n> {
    names: &'n [&'n str],
}

impl<'de> Visitor<'de> for OnlyMembers<'_> {
    type Value = bool;

    fn expecting(&self, f: &mut core::fmt::Formatter) -> core::fmt::Result {
        f.write_str("an object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<bool, A::Error> {
        while let Some(key) = map.next_key_seed(KeyText)? {
            if !self.names.iter().any(|name| *name == key) {
                return Ok(false);
            }
            map.next_value::<IgnoredAny>()?;
        }
        Ok(true)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<bool, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(false)
    }

    scalars!(false);
}

/// An iterator over the array a lookup found; `None` for any other kind.
fn elements((raw, found): (&str, Kind)) -> Option<Elements<'_>> {
    let rest = raw.trim_start().strip_prefix('[')?;
    (found == Kind::Array).then_some(Elements { rest, given: 0 })
}

/// A string value's text.
fn as_str((raw, found): (&str, Kind)) -> Option<Cow<'_, str>> {
    (found == Kind::String).then(|| string(raw)).flatten()
}

/// A number's text, or a string's (some senders write integers as strings).
fn number_text((raw, found): (&str, Kind)) -> Option<Cow<'_, str>> {
    match found {
        Kind::Number => Some(Cow::Borrowed(raw)),
        Kind::String => string(raw),
        _ => None,
    }
}

/// A string as it is, or an integer in decimal.
fn as_id((raw, found): (&str, Kind)) -> Option<String> {
    match found {
        Kind::String => string(raw).map(Cow::into_owned),
        // What serde_json reads as an `i64` or `u64` (not `-0`, which it reads as a
        // float): a validated JSON integer is already its own decimal text. Not through
        // `serde_json::Number`, whose `Display` would link its float formatter
        // (`scalars!`).
        Kind::Number => {
            let digits = raw.trim();
            let integer = digits.parse::<i64>().is_ok() || digits.parse::<u64>().is_ok();
            (integer && digits != "-0").then(|| digits.to_owned())
        }
        _ => None,
    }
}

/// Validate `text` as one JSON value; for an object, its members' keys (borrowed
/// unless escaped) and raw values, in document order (no value for a member entered
/// to find one of `wanted`), and each of `wanted` found into `found`.
#[allow(clippy::type_complexity)]
fn top_level<'de, const FIND: bool>(
    text: &'de str,
    wanted: Vec<Path<'_>>,
    found: &RefCell<Vec<Option<&'de str>>>,
) -> serde_json::Result<Option<Vec<(Cow<'de, str>, Option<&'de RawValue>)>>> {
    whole(text, TopLevel::<FIND> { wanted, found })
}

/// `text` read by `visitor` as one JSON value, with nothing after it but whitespace.
fn whole<'de, V: Visitor<'de>>(text: &'de str, visitor: V) -> serde_json::Result<V::Value> {
    let mut reader = serde_json::Deserializer::from_str(text);
    let read = reader.deserialize_any(visitor)?;
    reader.end()?;
    Ok(read)
}

/// Visits the document's outermost value: an object's members are kept, and (with
/// `FIND`) the wanted pointers are looked for in them; anything else is only
/// validated.
struct TopLevel<'p, 'f, 'de, const FIND: bool> {
    wanted: Vec<Path<'p>>,
    found: &'f RefCell<Vec<Option<&'de str>>>,
}

impl<'de, const FIND: bool> Visitor<'de> for TopLevel<'_, '_, 'de, FIND> {
    #[allow(clippy::type_complexity)]
    type Value = Option<Vec<(Cow<'de, str>, Option<&'de RawValue>)>>;

    fn expecting(&self, f: &mut core::fmt::Formatter) -> core::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
        let mut members = Vec::new();
        if !FIND {
            while let Some(key) = map.next_key_seed(KeyText)? {
                members.push((key, Some(map.next_value::<&RawValue>()?)));
            }
            return Ok(Some(members));
        }
        let mut finder = Finder {
            paths: self.wanted,
            found: self.found,
        };
        while let Some(key) = map.next_key_seed(KeyText)? {
            let value = finder.member(&key, &mut map)?;
            members.push((key, value));
        }
        Ok(Some(members))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(None)
    }

    scalars!(None);
}

/// A member's key: borrowed from the document unless it had escapes.
struct KeyText;

impl<'de> de::DeserializeSeed<'de> for KeyText {
    type Value = Cow<'de, str>;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeyText {
    type Value = Cow<'de, str>;

    fn expecting(&self, f: &mut core::fmt::Formatter) -> core::fmt::Result {
        f.write_str("a string key")
    }

    fn visit_borrowed_str<E>(self, key: &'de str) -> Result<Self::Value, E> {
        Ok(Cow::Borrowed(key))
    }

    fn visit_str<E>(self, key: &str) -> Result<Self::Value, E> {
        Ok(Cow::Owned(key.to_owned()))
    }
}

/// A pointer being looked for in the validating pass: which of the wanted it is, its
/// step into the value being read (a member's name, unescaped, and as an index), and
/// what is left of it below that step (`""` at the last).
struct Path<'p> {
    at: usize,
    step: Cow<'p, str>,
    index: Option<usize>,
    rest: &'p str,
}

impl<'p> Path<'p> {
    /// Wanted pointer `at`, or what is left of it (starting with `/`).
    fn new(at: usize, pointer: &'p str) -> Option<Path<'p>> {
        let (step, rest) = first_token(pointer)?;
        let index = index(&step);
        Some(Path {
            at,
            step,
            index,
            rest,
        })
    }
}

/// Whether [`Json::parse_finding`] looks for `pointer` in its pass: a pointer with
/// every token non-empty, so that each step is a member name or an index.
fn findable(pointer: &str) -> bool {
    pointer.len() > 1 && pointer.starts_with('/') && !pointer[1..].split('/').any(str::is_empty)
}

/// Reads a value for [`Json::parse_finding`], and finds in it the value at each of
/// `paths` as [`walk`] would: at each step the first member of the name, or the
/// element at the index, is entered, and the rest is skipped (which validates it).
/// Unlike `walk`, it never stops early: the pass validates the whole value.
struct Finder<'p, 'f, 'de> {
    paths: Vec<Path<'p>>,
    found: &'f RefCell<Vec<Option<&'de str>>>,
}

impl<'p, 'de> Finder<'p, '_, 'de> {
    /// The paths whose next step `matches` (a member's key or an element's index);
    /// they leave `self`, so a later member of the same name is not entered for them.
    fn take(&mut self, matches: impl Fn(&Path<'p>) -> bool) -> Vec<Path<'p>> {
        let mut taken = Vec::new();
        let mut i = 0;
        while i < self.paths.len() {
            if matches(&self.paths[i]) {
                taken.push(self.paths.swap_remove(i));
            } else {
                i += 1;
            }
        }
        taken
    }

    /// Read the value of the member `key` of the object being read: its raw value,
    /// unless it was entered to find a pointer below it.
    fn member<A: MapAccess<'de>>(
        &mut self,
        key: &str,
        map: &mut A,
    ) -> Result<Option<&'de RawValue>, A::Error> {
        let paths = self.take(|path| path.step == key);
        // Entered only when every path here continues below it. A value wanted here
        // is kept whole; any path that also continues below (`/a` and `/a/b`) reads
        // it again. Rare; the pass still validates it once.
        if paths.is_empty() || paths.iter().any(|path| path.rest.is_empty()) {
            let value: &RawValue = map.next_value()?;
            self.keep(&paths, value);
            return Ok(Some(value));
        }
        map.next_value_seed(self.below(paths))?;
        Ok(None)
    }

    /// Each of `paths` ends at `value` or, below it, where a walk of it finds it.
    fn keep(&self, paths: &[Path<'_>], value: &'de RawValue) {
        if paths.is_empty() {
            return;
        }
        let mut found = self.found.borrow_mut();
        for path in paths {
            found[path.at] = if path.rest.is_empty() {
                Some(value.get())
            } else {
                walk(value.get(), path.rest)
            };
        }
    }

    /// A finder for the value these paths step into, each at its next step.
    fn below(&self, paths: Vec<Path<'p>>) -> Finder<'p, '_, 'de> {
        Finder {
            paths: paths
                .into_iter()
                .filter_map(|path| Path::new(path.at, path.rest))
                .collect(),
            found: self.found,
        }
    }
}

impl<'de> de::DeserializeSeed<'de> for Finder<'_, '_, 'de> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Finder<'_, '_, 'de> {
    type Value = ();

    fn expecting(&self, f: &mut core::fmt::Formatter) -> core::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<(), A::Error> {
        while let Some(key) = map.next_key_seed(KeyText)? {
            if self.paths.iter().any(|path| path.step == key) {
                self.member(&key, &mut map)?;
            } else {
                map.next_value::<IgnoredAny>()?;
            }
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<(), A::Error> {
        let mut at = 0usize;
        loop {
            let paths = self.take(|path| path.index == Some(at));
            at += 1;
            let more = if paths.is_empty() {
                seq.next_element::<IgnoredAny>()?.is_some()
            } else if paths.iter().any(|path| path.rest.is_empty()) {
                let value: Option<&RawValue> = seq.next_element()?;
                if let Some(value) = value {
                    self.keep(&paths, value);
                }
                value.is_some()
            } else {
                seq.next_element_seed(self.below(paths))?.is_some()
            };
            if !more {
                return Ok(());
            }
        }
    }

    scalars!(());
}

/// Where `part`, a view into `text`, lies in it; `None` when it is not in `text`.
fn span(text: &str, part: &str) -> Option<Range<usize>> {
    let start = (part.as_ptr() as usize).checked_sub(text.as_ptr() as usize)?;
    let at = start..start + part.len();
    text.get(at.clone()).map(|_| at)
}

/// A raw JSON value's kind, from its first byte (serde_json validated it).
fn kind(raw: &str) -> Kind {
    match raw.trim_start().as_bytes().first() {
        Some(b'{') => Kind::Object,
        Some(b'[') => Kind::Array,
        Some(b'"') => Kind::String,
        Some(b't') => Kind::True,
        Some(b'f') => Kind::False,
        Some(b'n') | None => Kind::Null,
        Some(_) => Kind::Number,
    }
}

/// A JSON Pointer token unescaped (`~1` is `/`, `~0` is `~`); only a token with an
/// escape allocates.
fn unescape(token: &str) -> Cow<'_, str> {
    if token.contains('~') {
        Cow::Owned(token.replace("~1", "/").replace("~0", "~"))
    } else {
        Cow::Borrowed(token)
    }
}

/// The text of a raw JSON string literal, unescaped only when it has escapes.
fn string(raw: &str) -> Option<Cow<'_, str>> {
    let inner = raw.strip_prefix('"')?.strip_suffix('"')?;
    if inner.contains('\\') {
        // Read as a `Value`: a `String`'s visitor would link the type error this
        // module keeps out (`scalars!`).
        match value(raw) {
            Ok(Value::String(text)) => Some(Cow::Owned(text)),
            _ => None,
        }
    } else {
        Some(Cow::Borrowed(inner))
    }
}

/// `text`, one JSON value, as a `serde_json::Value`: what `serde_json::from_str` gives,
/// read by this module's visitor. serde_json's own `Value` visitor, with the
/// `raw_value` feature, reads its raw-value marker as a `String` and so links the type
/// error that `scalars!` keeps out; a plugin reads `Value`s through this instead.
pub fn value(text: &str) -> serde_json::Result<Value> {
    whole(text, ValueReader)
}

/// `text` as a JSON string literal, quoted and escaped as serde_json writes it, for an
/// answer written as text. Writing a `Value` instead would link serde_json's float
/// formatter into the plugin's memory image (`scalars!`).
pub fn quote(text: &str) -> String {
    // Cannot fail: serde_json fails to write only a map key that is not a string, or a
    // value whose `Serialize` fails, and a string is neither.
    serde_json::to_string(text).unwrap_or_default()
}

/// Reads any JSON value into a `Value`. Nesting is bounded by serde_json's own limit
/// (128 levels), as for its `Value`.
struct ValueReader;

impl<'de> de::DeserializeSeed<'de> for ValueReader {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for ValueReader {
    type Value = Value;

    fn expecting(&self, f: &mut core::fmt::Formatter) -> core::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_bool<E>(self, b: bool) -> Result<Value, E> {
        Ok(Value::Bool(b))
    }

    fn visit_i64<E>(self, n: i64) -> Result<Value, E> {
        Ok(Value::from(n))
    }

    fn visit_u64<E>(self, n: u64) -> Result<Value, E> {
        Ok(Value::from(n))
    }

    fn visit_f64<E>(self, n: f64) -> Result<Value, E> {
        // serde_json reads no NaN or infinity from text; as its own visitor does.
        Ok(serde_json::Number::from_f64(n).map_or(Value::Null, Value::Number))
    }

    fn visit_str<E>(self, text: &str) -> Result<Value, E> {
        Ok(Value::String(text.to_owned()))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut elements = Vec::new();
        while let Some(element) = seq.next_element_seed(ValueReader)? {
            elements.push(element);
        }
        Ok(Value::Array(elements))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut members = serde_json::Map::new();
        while let Some(key) = map.next_key_seed(KeyText)? {
            let value = map.next_value_seed(ValueReader)?;
            members.insert(key.into_owned(), value);
        }
        Ok(Value::Object(members))
    }
}

/// The value at `pointer` (non-empty) within `within`, a value of a validated
/// document. One pass of serde_json, read only as far as the value: at each step the
/// first member of the name (as a reader of the document meets it), or the element at
/// the index, is entered and the rest skipped; at the last step the value is kept and
/// the reader stopped there (the "error" that stops it is not one).
fn walk<'a>(within: &'a str, pointer: &str) -> Option<&'a str> {
    let found = Cell::new(None);
    let seeker = Seeker::new(pointer, &found)?;
    let mut reader = serde_json::Deserializer::from_str(within);
    let _ = de::DeserializeSeed::deserialize(seeker, &mut reader);
    found.get().map(RawValue::get)
}

/// A JSON Pointer's first token, unescaped, and its remainder from the next `/` (`""`
/// when there is none); `None` when `pointer` does not start with `/`.
fn first_token(pointer: &str) -> Option<(Cow<'_, str>, &str)> {
    let path = pointer.strip_prefix('/')?;
    let (token, rest) = path.find('/').map_or((path, ""), |i| path.split_at(i));
    Some((unescape(token), rest))
}

/// An array index as RFC 6901 writes it: `0`, or digits without a leading zero.
fn index(token: &str) -> Option<usize> {
    let digits = token.bytes().all(|b| b.is_ascii_digit());
    (digits && (token == "0" || !token.starts_with('0')))
        .then(|| token.parse().ok())
        .flatten()
}

/// One step of [`walk`]: the member or element `token` names in the value it is given,
/// and the pointer's remainder (`""` at the last step).
struct Seeker<'p, 'f, 'de> {
    token: Cow<'p, str>,
    rest: &'p str,
    found: &'f Cell<Option<&'de RawValue>>,
}

impl<'p, 'f, 'de> Seeker<'p, 'f, 'de> {
    /// The first step of `pointer`; `None` when it is not a pointer (no leading `/`).
    fn new(pointer: &'p str, found: &'f Cell<Option<&'de RawValue>>) -> Option<Self> {
        let (token, rest) = first_token(pointer)?;
        Some(Seeker { token, rest, found })
    }

    /// The step after this one; `None` when this is the last.
    fn next(&self) -> Option<Self> {
        Seeker::new(self.rest, self.found)
    }
}

/// Stops the reader at the value a step named, whether or not it held the rest of
/// the pointer: only the first match counts.
fn stop<E: de::Error>() -> Result<(), E> {
    Err(E::custom("stop"))
}

impl<'de> de::DeserializeSeed<'de> for Seeker<'_, '_, 'de> {
    type Value = ();

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Seeker<'_, '_, 'de> {
    type Value = ();

    fn expecting(&self, f: &mut core::fmt::Formatter) -> core::fmt::Result {
        f.write_str("an object or an array")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        if self.token.is_empty() {
            return Ok(());
        }
        while let Some(key) = map.next_key_seed(KeyText)? {
            if key == self.token {
                match self.next() {
                    Some(next) => map.next_value_seed(next)?,
                    None => self.found.set(Some(map.next_value()?)),
                }
                return stop();
            }
            map.next_value::<IgnoredAny>()?;
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let Some(at) = index(&self.token) else {
            return Ok(());
        };
        for _ in 0..at {
            if seq.next_element::<IgnoredAny>()?.is_none() {
                return Ok(());
            }
        }
        match self.next() {
            Some(next) => drop(seq.next_element_seed(next)?),
            None => self.found.set(seq.next_element()?),
        }
        stop()
    }

    // A scalar has no members or elements: the pointer names nothing.
    scalars!(());
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::string::ToString as _;
    use alloc::vec;

    const DOC: &str = r#"{"id":"evt_1","n":42,"s":"7","esc":"a\"b","a/b":1,
        "data":{"object":{"id":"cus_1","list":[{"x":1},{"x":2}]}},"t":"1970-01-01T00:01:00Z"}"#;

    #[test]
    fn pointers_walk_objects_and_arrays() {
        let json = Json::parse(DOC.as_bytes()).expect("valid");
        assert_eq!(json.str("/id").as_deref(), Some("evt_1"));
        assert_eq!(json.str("/data/object/id").as_deref(), Some("cus_1"));
        assert_eq!(json.i64("/data/object/list/1/x"), Some(2));
        assert_eq!(json.i64("/n"), Some(42));
        assert_eq!(json.u64("/s"), Some(7));
        assert_eq!(json.id("/n").as_deref(), Some("42"));
        assert_eq!(json.str("/esc").as_deref(), Some("a\"b"));
        assert_eq!(json.i64("/a~1b"), Some(1));
        assert_eq!(json.rfc3339("/t"), Some(60));
        assert_eq!(json.str("/missing"), None);
        assert_eq!(json.str("/n"), None);
        assert_eq!(json.str("/data/object/list/9/x"), None);
        assert_eq!(json.str("/id/deeper"), None);
        assert_eq!(
            json.get("/data/object/list/0"),
            Some(serde_json::json!({"x": 1}))
        );
        assert_eq!(
            json.str("/data.object"),
            None,
            "a dot is part of the key, not a path step"
        );
        assert_eq!(json.raw(""), Some(DOC));
    }

    #[test]
    fn items_are_each_elements_text_as_written() {
        let list = Json::parse(br#"{"data": [ {"id": "a", "n": [1, 2]} ,"b",3 ], "x": {}}"#)
            .expect("valid");
        assert_eq!(
            list.items("/data"),
            Some(vec![r#"{"id": "a", "n": [1, 2]}"#, r#""b""#, "3"])
        );
        assert_eq!(list.items("/x"), None, "an object is not a list");
        assert_eq!(list.items("/missing"), None);
        let bare = Json::parse(b"[]").expect("valid");
        assert_eq!(bare.items(""), Some(vec![]));
    }

    #[test]
    fn elements_are_read_one_at_a_time_as_written() {
        let list = Json::parse(br#" [ {"id": "a", "n": [1, 2]} ,"b" , 3,[ ] , {"id": 7} ] "#)
            .expect("valid");
        let texts: Vec<&str> = list
            .elements("")
            .expect("an array")
            .map(RawJson::text)
            .collect();
        assert_eq!(
            texts,
            vec![
                r#"{"id": "a", "n": [1, 2]}"#,
                r#""b""#,
                "3",
                "[ ]",
                r#"{"id": 7}"#
            ]
        );
        let mut elements = list.elements("").expect("an array");
        let first = elements.next().expect("first");
        assert!(first.is_object());
        assert_eq!(first.str("/id").as_deref(), Some("a"));
        assert_eq!(first.i64("/n/1"), Some(2));
        assert_eq!(first.raw("/n"), Some("[1, 2]"));
        assert_eq!(first.at("/n").and_then(|n| n.i64("/0")), Some(1));
        assert_eq!(first.at("/missing"), None);
        let [id, n, missing] = first.members(["id", "n", "missing"]);
        assert_eq!(id.and_then(|id| id.str("")).as_deref(), Some("a"));
        assert_eq!(n.map(RawJson::text), Some("[1, 2]"));
        assert_eq!(missing, None);
        assert_eq!(first.elements("/n").map(Iterator::count), Some(2));
        let second = elements.next().expect("second");
        assert!(!second.is_object());
        assert_eq!(
            second.str("").as_deref(),
            Some("b"),
            "\"\" is the value itself"
        );
        assert_eq!(second.str("/id"), None);
        assert_eq!(second.members(["id"]), [None], "a string has no members");
        assert_eq!(elements.next().and_then(|n| n.u64("")), Some(3));
        assert_eq!(
            elements
                .next()
                .and_then(|e| e.elements(""))
                .map(Iterator::count),
            Some(0)
        );
        assert_eq!(
            elements.next().and_then(|e| e.id("/id")).as_deref(),
            Some("7")
        );
        assert_eq!(elements.next(), None);
        assert_eq!(elements.next(), None, "stays ended");
        assert!(
            Json::parse(b"[]")
                .expect("valid")
                .elements("")
                .expect("an array")
                .next()
                .is_none()
        );
        assert!(list.elements("/0").is_none(), "an object is not an array");
        assert!(Json::parse(b"{}").expect("valid").elements("").is_none());
    }

    #[test]
    fn members_are_the_first_of_each_name_as_a_walk_finds_them() {
        let object = RawJson(r#"{"a": 1, "b": {"a": 2}, "a": 3, "c\u0064": "x", "e": [] }"#);
        let [a, b, cd, e, z] = object.members(["a", "b", "cd", "e", "z"]);
        assert_eq!(a.map(RawJson::text), Some("1"), "the first of two");
        assert_eq!(b.and_then(|b| b.i64("/a")), Some(2));
        assert_eq!(
            cd.and_then(|cd| cd.str("")).as_deref(),
            Some("x"),
            "an escaped key"
        );
        assert_eq!(e.map(RawJson::text), Some("[]"));
        assert_eq!(z, None);
        for name in ["a", "b", "cd", "e", "z"] {
            let [picked] = object.members([name]);
            assert_eq!(
                picked.map(RawJson::text),
                object.raw(&format!("/{name}")),
                "{name}"
            );
        }
        // Once every name is found the rest is not read.
        let [first] = RawJson(r#"{"k": 1, "rest": ?"#).members(["k"]);
        assert_eq!(first.map(RawJson::text), Some("1"));
        assert_eq!(RawJson("[1, 2]").members(["0"]), [None]);
    }

    #[test]
    fn next_members_gives_each_element_and_its_members_as_two_readings_would() {
        let text = r#"[ {"a": 1, "b": {"a": 2}, "a": 3} , { } ,"s", {"b":[1,{"}":"}"}] ,"a":"x"},7,{"a" :  "y"   }]"#;
        let json = Json::parse(text.as_bytes()).expect("valid");
        let mut picked = json.elements("").expect("an array");
        let mut read = json.elements("").expect("an array");
        let mut count = 0;
        while let Some((element, [a, b])) = picked.next_members(["a", "b"]) {
            let plain = read.next().expect("as many");
            assert_eq!(element, plain, "element {count}");
            assert_eq!([a, b], plain.members(["a", "b"]), "element {count}");
            count += 1;
        }
        assert_eq!((count, read.next()), (6, None));
        let mut again = json.elements("").expect("an array");
        let (_, [a, b]) = again.next_members(["a", "b"]).expect("first");
        assert_eq!(
            (a.map(RawJson::text), b.and_then(|b| b.i64("/a"))),
            (Some("1"), Some(2))
        );
        assert_eq!(
            again.next_members(["a"]).map(|(e, _)| e.text()),
            Some("{ }")
        );
        assert_eq!(again.next_members(["a"]), Some((RawJson(r#""s""#), [None])));
        assert!(
            Json::parse(b"[]")
                .expect("valid")
                .elements("")
                .expect("an array")
                .next_members(["a"])
                .is_none()
        );
        // next_object: objects only, and an element that is not one is named by place.
        let mut objects = json.elements("").expect("an array");
        let first = objects.next_object(["a"]).expect("element 0");
        assert_eq!(first.map(|[a]| a.map(RawJson::text)), Ok(Some("1")));
        assert_eq!(objects.next_object(["a"]), Some(Ok([None])));
        assert_eq!(
            objects.next_object(["a"]),
            Some(Err(Rejection::MalformedBody(
                "element 2 of the array is not an object".into()
            )))
        );
        let fourth = objects.next_object(["a"]).expect("element 3");
        assert_eq!(fourth.map(|[a]| a.map(RawJson::text)), Ok(Some(r#""x""#)));
    }

    #[test]
    fn a_batch_is_read_element_by_element() {
        // A batch of 100,000 events, read element by element, field by field. (That
        // this fits a plugin's memory is checked against real guests in the host's
        // sandbox tests.)
        let events: Vec<String> = (0..100_000)
            .map(|i| format!(r#"{{"n":{i},"s":"x{i}"}}"#))
            .collect();
        let body = format!("[{}]", events.join(","));
        let json = Json::parse(body.as_bytes()).expect("valid");
        let (mut count, mut sum) = (0, 0);
        for event in json.elements("").expect("an array") {
            let [n, s] = event.members(["n", "s"]);
            sum += n.and_then(|n| n.i64("")).expect("n");
            assert_eq!(event.str("/s"), s.and_then(|s| s.str("")));
            assert_eq!(
                event.str("/s").as_deref(),
                Some(format!("x{count}").as_str())
            );
            count += 1;
        }
        assert_eq!((count, sum), (100_000, 99_999 * 100_000 / 2));
    }

    #[test]
    fn deep_nesting_is_read_without_recursion() {
        // Validation and lookups both skip nested values iteratively, so a hostile
        // "[[[[…" cannot exhaust a plugin's small stack.
        let deep = "[".repeat(100_000) + &"]".repeat(100_000);
        let json = Json::parse(deep.as_bytes()).expect("deep but valid");
        assert_eq!(json.str("/0/0/0"), None);
        assert!(json.raw("/0").is_some_and(|r| r.len() == deep.len() - 2));
        let mut elements = json.elements("").expect("an array");
        assert!(
            elements
                .next()
                .is_some_and(|e| e.text().len() == deep.len() - 2)
        );
        assert!(elements.next().is_none());
        let unbalanced = "[".repeat(100_000) + &"]".repeat(99_999);
        assert!(matches!(
            Json::parse(unbalanced.as_bytes()),
            Err(Rejection::MalformedBody(_))
        ));
    }

    #[test]
    fn members_are_found_as_a_scan_of_the_document_finds_them() {
        // Each pointer gives the same answer through the top-level index as a walk
        // from the start of the whole document does.
        let json = Json::parse(DOC.as_bytes()).expect("valid");
        for pointer in [
            "/id",
            "/n",
            "/s",
            "/esc",
            "/a~1b",
            "/data",
            "/data/object",
            "/data/object/id",
            "/data/object/list",
            "/data/object/list/1",
            "/data/object/list/1/x",
            "/t",
            "/missing",
            "/id/deeper",
            "/data/missing",
            "/data.object",
            "/",
            "//id",
        ] {
            let (indexed, scanned) = (json.lookup(pointer), json.scan(&json.text, pointer));
            assert_eq!(indexed.map(|f| f.0), scanned.map(|f| f.0), "{pointer}");
            assert!(
                indexed.map(|f| f.1) == scanned.map(|f| f.1),
                "{pointer}: another kind"
            );
        }
    }

    /// Documents and pointers where a one-pass find could part from a walk: first
    /// members of a name, indexes, escapes in keys and in pointers, a value wanted both
    /// whole and below, values that are not containers, and documents that are not
    /// objects.
    const FINDING: [(&str, &[&str]); 9] = [
        (
            DOC,
            &[
                "/id",
                "/data/object/id",
                "/data/object/list/1/x",
                "/a~1b",
                "/data/object/list/9",
            ],
        ),
        (
            r#"{"data": {"object": {"x": 1}}, "data": {"object": {"id": "second"}}}"#,
            &["/data/object/id", "/data/object/x"],
        ),
        (
            r#"{"data": {"object": {"id": "a", "id": "b"}, "object": {"id": "c"}}}"#,
            &["/data/object/id"],
        ),
        (
            r#"{"data": {"object": {"id": 1, "kind": "k"}}}"#,
            &["/data/object", "/data/object/id", "/data/object/kind"],
        ),
        (
            r#"{"list": [{"x": 1}, {"x": 2}, 3], "list2": []}"#,
            &[
                "/list/1/x",
                "/list/2/x",
                "/list/01/x",
                "/list/-",
                "/list2/0",
            ],
        ),
        (
            r#"{"a/b": {"c~d": 1}, "d\u0061ta": {"id": "escaped"}}"#,
            &["/a~1b/c~0d", "/data/id"],
        ),
        (r#"{"data": 5, "s": "text"}"#, &["/data/id", "/s/0"]),
        (r#"[{"id": 1}, {"id": 2}]"#, &["/1/id"]),
        (r#"{"data": {"": {"id": 1}}}"#, &["/data//id", "/", "/data"]),
    ];

    #[test]
    fn pointers_found_in_the_validating_pass_answer_as_lookups_do() {
        for (doc, pointers) in FINDING {
            let plain = Json::parse(doc.as_bytes()).expect("valid");
            let finding = Json::parse_finding(doc.as_bytes(), pointers).expect("valid");
            // Every wanted pointer, and the members and prefixes on the way to them,
            // which the pass may have entered without keeping.
            let extra = ["/data", "/data/object", "/list", "/list/1", "/a~1b", "/id"];
            for pointer in pointers.iter().chain(&extra) {
                assert_eq!(finding.raw(pointer), plain.raw(pointer), "{doc} {pointer}");
            }
            assert_eq!(finding.value(), plain.value(), "{doc}");
        }
    }

    #[test]
    fn the_validating_pass_finds_what_it_was_asked_for() {
        // Found in the pass, not by a walk afterwards: the spans are kept.
        let json = Json::parse_finding(
            DOC.as_bytes(),
            &["/data/object/id", "/data/object/list/1/x", "/missing"],
        )
        .expect("valid");
        let found: Vec<&str> = json.found.iter().map(|(pointer, _)| *pointer).collect();
        assert_eq!(found, ["/data/object/id", "/data/object/list/1/x"]);
        // The member entered to find them keeps no span; a lookup through it reads
        // the document again and still finds the first member of the name.
        let members = json.members.as_ref().expect("an object");
        assert!(members.iter().any(|(_, at)| at.is_none()));
        assert_eq!(json.str("/data/object/list/0/x"), None);
        assert_eq!(json.i64("/data/object/list/0/x"), Some(1));
    }

    #[test]
    fn the_validating_pass_still_validates_what_it_enters() {
        for bad in [
            r#"{"data": {"object": {"id": "a",}}}"#,
            r#"{"data": {"object": {"id": "a"}, "x": [1,]}}"#,
            r#"{"data": {"object": {"id": "a"}}} ?"#,
            r#"{"list": [{"x": 1}, {"x": 2,}]}"#,
        ] {
            assert!(
                Json::parse_finding(bad.as_bytes(), &["/data/object/id", "/list/1/x"]).is_err(),
                "{bad}"
            );
            assert!(Json::parse(bad.as_bytes()).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_walk_reads_only_up_to_the_value_it_names() {
        // Past the value there is text no reader could accept: a walk that read on
        // would fail. (Bodies are validated whole before any walk.)
        let text = r#"{"a": {"skip": [1, {"x": "}"}], "b": {"c": 7}}, "d": ?"#;
        assert_eq!(walk(text, "/a/b/c"), Some("7"));
        assert_eq!(walk(text, "/a/b"), Some(r#"{"c": 7}"#));
        assert_eq!(walk(r#"[0, [1, {"x": 2}]] ?"#, "/1/1/x"), Some("2"));
        // The first member of a name is the one entered, as a reader meets it.
        assert_eq!(walk(r#"{"a": {}, "a": {"b": 1}}"#, "/a/b"), None);
        assert_eq!(walk(r#"{"a": 1, "a": 2}"#, "/a"), Some("1"));
        // Indexes as RFC 6901 writes them; a member name is matched as text.
        assert_eq!(walk("[5, 6]", "/01"), None);
        assert_eq!(walk("[5, 6]", "/-"), None);
        assert_eq!(walk(r#"{"1": "one"}"#, "/1"), Some(r#""one""#));
        assert_eq!(walk("7", "/0"), None);
    }

    #[test]
    fn top_level_keys_match_unescaped_and_first_wins() {
        let json =
            Json::parse(br#"{"a\/b": 1, "k\u0065y": "x", "d": 1, "d": 2, "": 3}"#).expect("valid");
        assert_eq!(
            json.i64("/a~1b"),
            Some(1),
            "an escaped key matches its text"
        );
        assert_eq!(json.str("/key").as_deref(), Some("x"));
        assert_eq!(json.i64("/d"), Some(1), "the first of two equal keys");
        assert_eq!(json.raw("/"), None, "an empty token names no member");
        let array = Json::parse(br#"[{"x": 1}, 2]"#).expect("valid");
        assert_eq!(array.i64("/0/x"), Some(1));
        assert_eq!(array.i64("/1"), Some(2));
        let scalar = Json::parse(b" \"s\" ").expect("valid");
        assert_eq!(scalar.str("/x"), None);
    }

    #[test]
    fn a_deep_member_is_validated_without_recursion() {
        let deep = format!(
            r#"{{"id": "evt", "deep": {}{}, "type": "t"}}"#,
            "[".repeat(100_000),
            "]".repeat(100_000)
        );
        let json = Json::parse(deep.as_bytes()).expect("deep but valid");
        assert_eq!(json.str("/type").as_deref(), Some("t"));
        assert_eq!(json.str("/deep/0/0"), None);
        // Entering a member to find a pointer recurses only as deep as the pointer.
        let finding = Json::parse_finding(deep.as_bytes(), &["/deep/0/0", "/type"]).expect("valid");
        assert_eq!(finding.raw("/deep/0/0"), json.raw("/deep/0/0"));
        assert_eq!(finding.str("/type").as_deref(), Some("t"));
        let unbalanced = format!(r#"{{"deep": {}{}}}"#, "[".repeat(1000), "]".repeat(999));
        assert!(matches!(
            Json::parse(unbalanced.as_bytes()),
            Err(Rejection::MalformedBody(_))
        ));
    }

    #[test]
    fn invalid_json_is_malformed_body() {
        for bad in [
            "",
            "{",
            "{\"a\":1} trailing",
            "nope",
            "{\"a\":01}",
            "[1,]",
            "{'a':1}",
        ] {
            assert!(
                matches!(
                    Json::parse(bad.as_bytes()),
                    Err(Rejection::MalformedBody(_))
                ),
                "{bad}"
            );
        }
        assert!(matches!(
            Json::parse(b"{}").expect("valid").required_str("/id"),
            Err(Rejection::MalformedBody(_))
        ));
    }

    #[test]
    fn numeric_ids_are_the_integers_serde_json_reads() {
        for number in [
            "0",
            "42",
            "-7",
            "-0",
            "9223372036854775807",
            "-9223372036854775808",
            "-9223372036854775809",
            "18446744073709551615",
            "18446744073709551616",
            "1.0",
            "1e3",
            "-2E-1",
        ] {
            let doc = format!(r#"{{"id": {number} }}"#);
            let json = Json::parse(doc.as_bytes()).expect("valid");
            let number: serde_json::Number = serde_json::from_str(number).expect(number);
            let integer = (number.is_i64() || number.is_u64()).then(|| number.to_string());
            assert_eq!(json.id("/id"), integer, "{number}");
        }
    }

    #[test]
    fn quoted_text_is_the_json_string_serde_json_writes() {
        for text in [
            "",
            "plain",
            "a\"b\\c",
            "line\nbreak\ttab\u{1}",
            "é ☃ 🎉",
            "</script>",
        ] {
            assert_eq!(quote(text), Value::from(text).to_string(), "{text}");
            assert_eq!(value(&quote(text)).expect("valid"), Value::from(text));
        }
    }

    #[test]
    fn values_are_read_as_serde_json_reads_them() {
        let deep_ok = format!("{}1{}", "[".repeat(127), "]".repeat(127));
        let too_deep = format!("{}1{}", "[".repeat(129), "]".repeat(129));
        for text in [
            DOC,
            "null",
            " true ",
            "false",
            "0",
            "-0",
            "-9223372036854775808",
            "18446744073709551615",
            "18446744073709551616",
            "1.5e300",
            "-2.5E-3",
            r#""a\u00e9\n\"b""#,
            r#"{"k":1,"k":2,"\u006b":3}"#,
            r#"{"":[],"o":{},"n":[null,{"x":[1.0]}]}"#,
            deep_ok.as_str(),
        ] {
            let ours = value(text).expect(text);
            let theirs: Value = serde_json::from_str(text).expect(text);
            assert_eq!(ours, theirs, "{text}");
        }
        for bad in [
            "",
            "{",
            "[1,]",
            "{\"a\":01}",
            "1 2",
            "nope",
            "1e400",
            too_deep.as_str(),
        ] {
            assert!(value(bad).is_err(), "{bad}");
            assert!(serde_json::from_str::<Value>(bad).is_err(), "{bad}");
        }
    }
}
