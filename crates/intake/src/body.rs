//! Reading a JSON request body: content type first, then size (checked against
//! `Content-Length` before reading, and again while reading), then syntax. Bodies must
//! be JSON objects whose member names are each given once: a proxy that keeps the first
//! of two `amount`s and a service that keeps the last would disagree on the request.

use std::borrow::Cow;
use std::collections::HashSet;

use actix_web::http::header;
use actix_web::{web, HttpRequest};
use futures_util::StreamExt;
use serde::de::{DeserializeOwned, MapAccess, SeqAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::value::RawValue;

use crate::problem::Problem;

pub const MAX_BODY_BYTES: usize = 16 * 1024;

const DEFAULT_BODY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

pub fn require_json_content_type(request: &HttpRequest) -> Result<(), Problem> {
    let content_type = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|value| value.to_str().ok())
        .unwrap_or_default();
    let essence = content_type.split(';').next().unwrap_or_default().trim();
    if essence.eq_ignore_ascii_case("application/json") {
        Ok(())
    } else {
        Err(Problem::unsupported_media_type())
    }
}

/// Reads at most `MAX_BODY_BYTES`, all of it within `--body-timeout` of the headers
/// (else 408). Nothing is held meanwhile: authentication has already returned its
/// database connection to the pool.
pub async fn read_body(
    request: &HttpRequest,
    payload: web::Payload,
) -> Result<web::Bytes, Problem> {
    read_limited(request, payload, MAX_BODY_BYTES).await
}

/// `read_body` for any payload stream and limit (MCP's messages wrap a body).
pub async fn read_limited<S>(
    request: &HttpRequest,
    mut payload: S,
    limit: usize,
) -> Result<web::Bytes, Problem>
where
    S: futures_util::Stream<Item = Result<web::Bytes, actix_web::error::PayloadError>> + Unpin,
{
    let timeout = request
        .app_data::<web::Data<crate::AppState>>()
        .map(|state| state.body_timeout)
        .unwrap_or(DEFAULT_BODY_TIMEOUT);
    let declared = request
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.parse::<usize>().ok());
    if declared.is_some_and(|length| length > limit) {
        return Err(Problem::too_large(limit));
    }
    let read = async {
        let mut body = web::BytesMut::new();
        while let Some(chunk) = payload.next().await {
            let chunk =
                chunk.map_err(|e| Problem::malformed_json(format!("could not read body: {e}")))?;
            if body.len() + chunk.len() > limit {
                return Err(Problem::too_large(limit));
            }
            body.extend_from_slice(&chunk);
        }
        Ok(body.freeze())
    };
    tokio::time::timeout(timeout, read)
        .await
        .map_err(|_| Problem::request_timeout())?
}

/// Refuses JSON that names a member twice in any object (422); anything else, even
/// malformed JSON, is left for the reader to answer in its own terms.
pub fn require_unique_members(body: &[u8]) -> Result<(), Problem> {
    match serde_json::from_slice::<UniqueMembers>(body) {
        Err(error) if error.is_data() => Err(Problem::invalid_body(error.to_string())),
        _ => Ok(()),
    }
}

/// The body as one kind's type: a JSON object, each member once (serde's derived
/// structs refuse a repeated field), or the problem that refuses it.
pub fn parse_object<T: DeserializeOwned>(body: &[u8]) -> Result<T, Problem> {
    require_object(body)?;
    serde_json::from_slice(body).map_err(json_problem)
}

/// The body as a JSON object value (declared kinds), each member name once at every
/// depth.
pub fn parse_object_value(body: &[u8]) -> Result<serde_json::Value, Problem> {
    require_object(body)?;
    serde_json::from_slice::<UniqueMembers>(body).map_err(json_problem)?;
    serde_json::from_slice(body).map_err(json_problem)
}

/// A structurally valid body that is not an object (an array read by position, say)
/// is refused, not read.
fn require_object(body: &[u8]) -> Result<(), Problem> {
    match body.iter().find(|b| !b.is_ascii_whitespace()) {
        Some(b'{') => Ok(()),
        None => Err(Problem::malformed_json("the body is empty")),
        Some(_) => match serde_json::from_slice::<serde::de::IgnoredAny>(body) {
            Ok(_) => Err(Problem::invalid_body("the body must be a JSON object")),
            Err(error) => Err(json_problem(error)),
        },
    }
}

fn json_problem(error: serde_json::Error) -> Problem {
    if error.is_data() {
        Problem::invalid_body(error.to_string())
    } else {
        Problem::malformed_json(format!("body is not valid JSON: {error}"))
    }
}

/// Walks a JSON document and fails on the first object that names a member twice.
struct UniqueMembers;

impl<'de> Deserialize<'de> for UniqueMembers {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(UniqueMembersVisitor)
    }
}

struct UniqueMembersVisitor;

impl<'de> Visitor<'de> for UniqueMembersVisitor {
    type Value = UniqueMembers;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<UniqueMembers, A::Error> {
        let mut seen = SeenNames::default();
        while let Some(MemberName(name)) = map.next_key::<MemberName<'de>>()? {
            if !seen.insert(name.clone()) {
                return Err(serde::de::Error::custom(format!(
                    "member {name:?} is given more than once"
                )));
            }
            map.next_value::<UniqueMembers>()?;
        }
        Ok(UniqueMembers)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<UniqueMembers, A::Error> {
        while seq.next_element::<UniqueMembers>()?.is_some() {}
        Ok(UniqueMembers)
    }

    fn visit_bool<E>(self, _: bool) -> Result<UniqueMembers, E> {
        Ok(UniqueMembers)
    }

    fn visit_i64<E>(self, _: i64) -> Result<UniqueMembers, E> {
        Ok(UniqueMembers)
    }

    fn visit_u64<E>(self, _: u64) -> Result<UniqueMembers, E> {
        Ok(UniqueMembers)
    }

    fn visit_f64<E>(self, _: f64) -> Result<UniqueMembers, E> {
        Ok(UniqueMembers)
    }

    fn visit_str<E>(self, _: &str) -> Result<UniqueMembers, E> {
        Ok(UniqueMembers)
    }

    fn visit_unit<E>(self) -> Result<UniqueMembers, E> {
        Ok(UniqueMembers)
    }
}

/// The member names of one object seen so far. Objects are small (a JSON-RPC envelope,
/// a tool's arguments): compared in a list until there are enough for a set to pay.
#[derive(Default)]
struct SeenNames<'de> {
    few: Vec<Cow<'de, str>>,
    many: Option<HashSet<Cow<'de, str>>>,
}

impl<'de> SeenNames<'de> {
    const LIST_UP_TO: usize = 16;

    /// False when `name` was seen already.
    fn insert(&mut self, name: Cow<'de, str>) -> bool {
        if let Some(many) = &mut self.many {
            return many.insert(name);
        }
        if self.few.contains(&name) {
            return false;
        }
        self.few.push(name);
        if self.few.len() > Self::LIST_UP_TO {
            self.many = Some(self.few.drain(..).collect());
        }
        true
    }
}

/// A member name, borrowed from the body unless it had escapes to decode.
struct MemberName<'de>(Cow<'de, str>);

impl<'de> Deserialize<'de> for MemberName<'de> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct NameVisitor;
        impl<'de> Visitor<'de> for NameVisitor {
            type Value = MemberName<'de>;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a member name")
            }

            fn visit_borrowed_str<E>(self, name: &'de str) -> Result<MemberName<'de>, E> {
                Ok(MemberName(Cow::Borrowed(name)))
            }

            fn visit_str<E>(self, name: &str) -> Result<MemberName<'de>, E> {
                Ok(MemberName(Cow::Owned(name.to_owned())))
            }
        }
        deserializer.deserialize_str(NameVisitor)
    }
}

/// For a declared kind, whose body is read as a JSON value (numbers through f64): the
/// top-level member `name`, if it is a number, must survive that reading digit for
/// digit, or the amount charged would not be the amount sent. Strings always do.
pub fn require_exact_number(body: &[u8], name: &str) -> Result<(), Problem> {
    let members: std::collections::HashMap<String, Box<RawValue>> =
        serde_json::from_slice(body).map_err(json_problem)?;
    let Some(raw) = members.get(name) else {
        return Ok(());
    };
    let text = raw.get().trim();
    if !text.starts_with(|c: char| c == '-' || c.is_ascii_digit()) {
        return Ok(());
    }
    let as_read: serde_json::Number = serde_json::from_str(text).map_err(json_problem)?;
    let exact = |t: &str| {
        t.parse::<rust_decimal::Decimal>()
            .ok()
            .map(|d| d.normalize())
    };
    if exact(text).is_some() && exact(text) == exact(&as_read.to_string()) {
        Ok(())
    } else {
        Err(Problem::invalid_body(format!(
            "{name}: the number {text} cannot be read exactly; send it as a string (\"{text}\")"
        )))
    }
}

/// A JSON amount exactly as sent: a string's content, or a number's own digits (never
/// through a binary float: `9007199254740993.01` stays that).
pub fn amount_text(raw: &RawValue) -> Result<String, Problem> {
    let text = raw.get().trim();
    if text.starts_with('"') {
        return serde_json::from_str::<String>(text).map_err(json_problem);
    }
    if text.starts_with(|c: char| c == '-' || c.is_ascii_digit()) {
        return Ok(text.to_owned());
    }
    Err(Problem::invalid_body(
        "amount must be a decimal string (\"250.00\") or a number",
    ))
}

/// For routes that take `web::Json`: the same limit and the same problem answers as
/// the payment route.
pub fn json_config() -> web::JsonConfig {
    web::JsonConfig::default()
        .limit(MAX_BODY_BYTES)
        .error_handler(|error, _request| {
            use actix_web::error::JsonPayloadError;
            let problem = match &error {
                JsonPayloadError::ContentType => Problem::unsupported_media_type(),
                JsonPayloadError::Overflow { .. }
                | JsonPayloadError::OverflowKnownLength { .. } => {
                    Problem::too_large(MAX_BODY_BYTES)
                }
                JsonPayloadError::Deserialize(e) if e.is_data() => {
                    Problem::invalid_body(e.to_string())
                }
                other => Problem::malformed_json(other.to_string()),
            };
            problem.into()
        })
}

#[cfg(test)]
mod tests {
    use super::require_unique_members;

    fn refused(body: &str) -> bool {
        require_unique_members(body.as_bytes()).is_err()
    }

    #[test]
    fn a_member_named_twice_is_refused_at_any_depth() {
        assert!(!refused(r#"{"a":1,"b":{"a":2},"c":[{"a":3},{"a":4}]}"#));
        assert!(refused(r#"{"a":1,"a":2}"#));
        assert!(refused(r#"{"x":{"params":{"amount":"1","amount":"9"}}}"#));
        assert!(refused(r#"[{"ok":1},{"k":1,"k":2}]"#));
    }

    #[test]
    fn names_are_compared_as_decoded() {
        assert!(refused(r#"{"amount":"1","\u0061mount":"9"}"#));
        assert!(refused(r#"{"\u0061mount":"1","amount":"9"}"#));
        assert!(!refused(r#"{"amount":"1","\u0061mounts":"9"}"#));
    }

    #[test]
    fn large_objects_are_checked_whole() {
        let members = |n: usize| (0..n).map(|i| format!("\"m{i}\":{i}")).collect::<Vec<_>>();
        let object = |members: &[String]| format!("{{{}}}", members.join(","));
        let mut many = members(200);
        assert!(!refused(&object(&many)));
        many.push("\"m3\":0".to_owned());
        assert!(
            refused(&object(&many)),
            "a repeat after the list became a set"
        );
        let mut few = members(5);
        few.push("\"m0\":0".to_owned());
        assert!(refused(&object(&few)));
    }

    #[test]
    fn malformed_json_is_left_to_the_reader() {
        assert!(!refused(r#"{"a":"#));
    }
}
