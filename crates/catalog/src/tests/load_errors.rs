//! Every mistake a kind can hold stops the load with a message naming the file, the
//! kind and the field. Each case edits one line of a valid catalog, `MINIMAL`.

use super::parse;
use crate::{CatalogError, Classified, Item};

pub(super) const SCHEMA_LINE: &str = r#"schema = { type = "object", properties = { name = { type = "string" }, amount = { type = "string" }, currency = { type = "string" } } }"#;

pub(super) const MINIMAL: &str = r#"
[providers.p]
base_url = "http://127.0.0.1:9090/"

[kinds.thing]
description = "Do a thing."
provider = "p"
schema = { type = "object", properties = { name = { type = "string" }, amount = { type = "string" }, currency = { type = "string" } } }

[kinds.thing.execute]
method = "POST"
path = "/v1/things"

[kinds.thing.lookup]
path = "/v1/things?key={provider_key}"

[kinds.thing.response]
reference = "/id"
status = "/status"
succeeded = ["ok"]
failed = ["no"]
pending = ["wait"]
"#;

pub(super) fn edited(from: &str, to: &str) -> String {
    assert!(MINIMAL.contains(from), "{from:?} is not in the catalog");
    MINIMAL.replace(from, to)
}

/// Asserts that `text` is refused for `item`'s `field`, with a message containing
/// `says`, and that the whole message reads as the operator will see it.
pub(super) fn refused(text: &str, item: Item, field: &str, says: &str) {
    let error = parse(text).expect_err("the catalog must be refused");
    let expected_start = format!("catalog test.toml: {item}: field {field:?}: ");
    let shown = error.to_string();
    assert!(
        shown.starts_with(&expected_start),
        "{shown:?} should start with {expected_start:?}"
    );
    assert!(shown.contains(says), "{shown:?} should say {says:?}");
    assert!(
        matches!(error, CatalogError::Invalid { item: ref i, field: ref f, .. } if *i == item && f == field)
    );
}

pub(super) fn kind() -> Item {
    Item::Kind("thing".to_owned())
}

#[test]
fn the_minimal_catalog_is_valid() {
    let catalog = parse(MINIMAL).unwrap_or_else(|error| panic!("{error}"));
    let thing = catalog.kind("thing").unwrap();
    assert_eq!(
        thing.execute().idempotency_header,
        "Idempotency-Key",
        "the default header"
    );
    assert_eq!(
        catalog.provider("p").unwrap().base_url,
        "http://127.0.0.1:9090"
    );
}

#[test]
fn kind_names_must_be_valid_and_not_built_in() {
    let upper = MINIMAL.replace("kinds.thing", "kinds.Thing");
    refused(
        &upper,
        Item::Kind("Thing".to_owned()),
        "name",
        "is not a kind name",
    );
    for builtin in ["payment", "refund"] {
        let text = MINIMAL.replace("kinds.thing", &format!("kinds.{builtin}"));
        refused(
            &text,
            Item::Kind(builtin.to_owned()),
            "name",
            "is a built-in kind",
        );
    }
}

#[test]
fn description_and_provider_are_checked() {
    refused(
        &edited(r#""Do a thing.""#, r#""  ""#),
        kind(),
        "description",
        "must say",
    );
    refused(
        &edited(r#"provider = "p""#, r#"provider = "q""#),
        kind(),
        "provider",
        "no [providers.q]",
    );
}

#[test]
fn the_schema_is_given_once_valid_and_an_object() {
    let both = edited(
        SCHEMA_LINE,
        &format!("{SCHEMA_LINE}\nschema_file = \"x.json\""),
    );
    refused(&both, kind(), "schema", "not both");
    refused(&edited(SCHEMA_LINE, ""), kind(), "schema", "is required");
    let invalid = edited(
        r#"name = { type = "string" }"#,
        r#"name = { type = "text" }"#,
    );
    refused(&invalid, kind(), "schema", "at /properties/name/type");
    refused(
        &edited(r#"{ type = "object","#, r#"{ type = "array","#),
        kind(),
        "schema",
        "\"type\": \"object\"",
    );
    let missing = edited(SCHEMA_LINE, r#"schema_file = "no-such.schema.json""#);
    refused(&missing, kind(), "schema_file", "cannot read");
    // A schema is compiled offline: a remote reference is refused, never fetched.
    let remote = edited(
        r#"name = { type = "string" }"#,
        r#"name = { "$ref" = "https://example.com/s.json" }"#,
    );
    refused(&remote, kind(), "schema", "");
}

#[test]
fn money_pointers_name_top_level_properties() {
    let with = |money: &str| edited(SCHEMA_LINE, &format!("{SCHEMA_LINE}\nmoney = {money}"));
    assert!(parse(&with(r#"{ amount = "/amount", currency = "/currency" }"#)).is_ok());
    refused(
        &with(r#"{ amount = "amount", currency = "/currency" }"#),
        kind(),
        "money.amount",
        "not a JSON pointer",
    );
    refused(
        &with(r#"{ amount = "/price", currency = "/currency" }"#),
        kind(),
        "money.amount",
        "top-level properties",
    );
    refused(
        &with(r#"{ amount = "/amount/x", currency = "/currency" }"#),
        kind(),
        "money.amount",
        "top-level property",
    );
    refused(
        &with(r#"{ amount = "/amount", currency = "/cur" }"#),
        kind(),
        "money.currency",
        "top-level properties",
    );
}

#[test]
fn the_execute_request_is_checked() {
    refused(
        &edited(r#"method = "POST""#, r#"method = "GET""#),
        kind(),
        "execute.method",
        "POST or PUT",
    );
    let put = parse(&edited(r#"method = "POST""#, r#"method = "put""#)).unwrap();
    assert_eq!(put.kind("thing").unwrap().execute().method, "PUT");
    refused(
        &edited(r#"path = "/v1/things""#, r#"path = "v1/things""#),
        kind(),
        "execute.path",
        "must start with '/'",
    );
    refused(
        &edited(r#"path = "/v1/things""#, r#"path = "/v1/{customer}""#),
        kind(),
        "execute.path",
        "{customer} is not a placeholder",
    );
    refused(
        &edited(
            r#"path = "/v1/things""#,
            r#"path = "/v1/{provider_reference}""#,
        ),
        kind(),
        "execute.path",
        "not known before",
    );
    refused(
        &edited(r#"path = "/v1/things""#, r#"path = "/v1/{provider_key""#),
        kind(),
        "execute.path",
        "never closed",
    );
    let header = edited(
        r#"path = "/v1/things""#,
        "path = \"/v1/things/{operation_id}\"\nidempotency_header = \"Idempotency Key\"",
    );
    refused(
        &header,
        kind(),
        "execute.idempotency_header",
        "not an HTTP header name",
    );
}

#[test]
fn the_lookup_must_find_the_object() {
    let path = r#"path = "/v1/things?key={provider_key}""#;
    refused(
        &edited(path, r#"path = "/v1/things/{operation_id}""#),
        kind(),
        "lookup.path",
        "must contain {provider_key} or {provider_reference}",
    );
    refused(
        &edited(path, r#"path = "/v1/things/{id}""#),
        kind(),
        "lookup.path",
        "{id} is not a placeholder",
    );
    refused(
        &edited(path, r#"path = "v1/things/{provider_key}""#),
        kind(),
        "lookup.path",
        "must start with '/'",
    );
    assert!(parse(&edited(path, r#"path = "/v1/things/{provider_reference}""#)).is_ok());
}

#[test]
fn the_response_mapping_is_checked() {
    refused(
        &edited(r#"reference = "/id""#, r#"reference = "id""#),
        kind(),
        "response.reference",
        "not a JSON pointer",
    );
    refused(
        &edited(r#"status = "/status""#, r#"status = "/st~2""#),
        kind(),
        "response.status",
        "not a JSON pointer",
    );
    let code = edited(
        r#"pending = ["wait"]"#,
        "pending = [\"wait\"]\nfailure_code = \"code\"",
    );
    refused(&code, kind(), "response.failure_code", "not a JSON pointer");
    refused(
        &edited(r#"succeeded = ["ok"]"#, "succeeded = []"),
        kind(),
        "response.succeeded",
        "at least one",
    );
    refused(
        &edited(r#"failed = ["no"]"#, r#"failed = ["no", "ok"]"#),
        kind(),
        "response.failed",
        "\"ok\" is also in response.succeeded",
    );
    refused(
        &edited(r#"pending = ["wait"]"#, r#"pending = ["no"]"#),
        kind(),
        "response.pending",
        "also in response.failed",
    );
}

#[test]
fn status_values_may_be_written_as_numbers_and_bools() {
    let text = edited(r#"succeeded = ["ok"]"#, "succeeded = [200, true]");
    let catalog = parse(&text).unwrap();
    let response = catalog.kind("thing").unwrap().response();
    assert_eq!(response.succeeded, ["200", "true"]);
    assert!(matches!(
        response.classify(br#"{"id":"r","status":200}"#),
        Classified::Succeeded { .. }
    ));
}
