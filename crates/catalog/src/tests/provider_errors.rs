//! Providers whose base URL cannot be resolved, or whose name is not usable, stop the
//! load with a message naming the file, the provider and the field.

use super::load_errors::{edited, refused, MINIMAL};
use super::parse;
use crate::Item;

#[test]
fn providers_need_a_usable_base_url() {
    let provider = Item::Provider("p".to_owned());
    let url = r#"base_url = "http://127.0.0.1:9090/""#;
    refused(
        &edited(url, ""),
        provider.clone(),
        "base_url",
        "give base_url or base_url_env",
    );
    refused(
        &edited(url, r#"base_url_env = "NOT_SET_ANYWHERE""#),
        provider.clone(),
        "base_url_env",
        "NOT_SET_ANYWHERE is not set",
    );
    refused(
        &edited(url, r#"base_url = "ftp://host""#),
        provider.clone(),
        "base_url",
        "not an http:// or https:// base URL",
    );
    refused(
        &edited(url, r#"base_url = "http://host/x?y=1""#),
        provider.clone(),
        "base_url",
        "without query",
    );
    let fallback = parse(&edited(
        url,
        &format!("base_url_env = \"NOT_SET_ANYWHERE\"\n{url}"),
    ))
    .unwrap();
    assert_eq!(
        fallback.provider("p").unwrap().base_url,
        "http://127.0.0.1:9090"
    );
    let unsafe_retries =
        parse(&edited(url, &format!("{url}\nkeyed_retries_safe = false"))).unwrap();
    assert!(!unsafe_retries.provider("p").unwrap().keyed_retries_safe);
}

#[test]
fn provider_names_are_words_and_not_the_built_in_one() {
    let renamed = |name: &str| {
        MINIMAL
            .replace("[providers.p]", &format!("[providers.{name}]"))
            .replace(r#"provider = "p""#, &format!("provider = {name:?}"))
    };
    refused(
        &renamed("\"opgate-http\""),
        Item::Provider("opgate-http".to_owned()),
        "name",
        "built-in provider",
    );
    refused(
        &renamed("\"Sim Two\""),
        Item::Provider("Sim Two".to_owned()),
        "name",
        "starting with a letter",
    );
    assert!(parse(&renamed("fulfilment-eu_2")).is_ok());
}
