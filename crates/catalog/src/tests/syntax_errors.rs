//! A file that is not TOML, or not of the catalog's shape (unknown or missing fields),
//! is refused with toml's own message, its line and column, and the entry at fault.

use super::load_errors::{edited, kind, MINIMAL};
use super::parse;
use crate::{CatalogError, Item};

/// A wrong shape is reported with toml's own message (line and column) and, when
/// it is inside one, the kind or provider.
fn syntax(text: &str) -> (Option<Item>, String) {
    match parse(text).expect_err("the catalog must be refused") {
        error @ CatalogError::Syntax { .. } => {
            let shown = error.to_string();
            let CatalogError::Syntax { item, .. } = error else {
                unreachable!()
            };
            assert!(shown.starts_with("catalog test.toml: "), "{shown}");
            assert!(shown.contains("line "), "{shown} should give the line");
            (item, shown)
        }
        other => panic!("expected a syntax error, got {other}"),
    }
}

#[test]
fn unknown_fields_are_refused_with_the_kind_and_line() {
    let (item, shown) = syntax(&edited(
        r#"description = "Do a thing.""#,
        "description = \"Do a thing.\"\ncolour = \"red\"",
    ));
    assert_eq!(item, Some(kind()));
    assert!(shown.contains("unknown field `colour`"), "{shown}");
    assert!(
        shown.starts_with("catalog test.toml: kind \"thing\": "),
        "{shown}"
    );

    let (item, shown) = syntax(&edited(
        r#"method = "POST""#,
        "method = \"POST\"\ntimeout = 3",
    ));
    assert_eq!(item, Some(kind()));
    assert!(shown.contains("unknown field `timeout`"), "{shown}");

    let (item, shown) = syntax(&edited("base_url =", "base_uri = \"x\"\nbase_url ="));
    assert_eq!(item, Some(Item::Provider("p".to_owned())));
    assert!(shown.contains("unknown field `base_uri`"), "{shown}");

    let (item, shown) = syntax(&format!("{MINIMAL}\n[kind.other]\nx = 1\n"));
    assert_eq!(item, None);
    assert!(shown.contains("unknown field `kind`"), "{shown}");
}

#[test]
fn missing_fields_and_broken_toml_are_refused_with_the_line() {
    let (item, shown) = syntax(&edited(
        "[kinds.thing.lookup]\npath = \"/v1/things?key={provider_key}\"\n",
        "",
    ));
    assert_eq!(item, Some(kind()));
    assert!(shown.contains("missing field `lookup`"), "{shown}");

    let (item, shown) = syntax(&edited(
        r#"description = "Do a thing.""#,
        r#"description = "Do a thing."#,
    ));
    assert_eq!(item, None);
    assert!(shown.contains("line 6"), "{shown}");
}
