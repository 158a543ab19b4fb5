//! Tests of the catalog as a user meets it: the example file, every load-time mistake
//! and its message, and bodies becoming requests with their hashes.

mod bodies;
mod load_errors;
mod provider_errors;
mod syntax_errors;

use std::path::{Path, PathBuf};

use crate::{Catalog, CatalogError, Classified};

/// The catalog this repository ships, as text.
const EXAMPLE: &str = include_str!("../../../../examples/catalog.toml");

fn no_env(_: &str) -> Option<String> {
    None
}

fn parse(text: &str) -> Result<Catalog, CatalogError> {
    Catalog::parse_with_env(text, "test.toml", Path::new("."), &no_env)
}

fn example() -> Catalog {
    Catalog::parse_with_env(EXAMPLE, "examples/catalog.toml", Path::new("."), &no_env)
        .unwrap_or_else(|error| panic!("{error}"))
}

fn example_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/catalog.toml")
}

#[test]
fn the_example_catalog_loads_from_its_file_with_the_fallback_url() {
    // This is the only test that reads the process's environment: without the
    // variable, the literal base_url applies.
    std::env::remove_var("OPGATE_SIM_URL");
    let catalog = Catalog::load(&example_path()).unwrap_or_else(|error| panic!("{error}"));

    let names: Vec<&str> = catalog.kinds().map(|kind| kind.name().as_str()).collect();
    assert_eq!(names, ["booking", "order", "provisioning"]);
    let sim = catalog.provider("sim").expect("the sim provider");
    assert_eq!(sim.base_url, "http://127.0.0.1:9090");
    assert!(sim.keyed_retries_safe);
    assert_eq!(catalog.providers().count(), 1);

    for (kind, collection) in [
        ("order", "orders"),
        ("booking", "bookings"),
        ("provisioning", "provisioning"),
    ] {
        let declared = catalog.kind(kind).expect(kind);
        assert_eq!(declared.provider(), "sim");
        assert!(
            declared.description().len() > 20,
            "{kind} needs a description"
        );
        assert_eq!(declared.schema()["type"], "object");
        assert_eq!(declared.execute().method, "POST");
        assert_eq!(
            declared.execute().path,
            format!("/v1/resources/{collection}")
        );
        assert_eq!(declared.execute().idempotency_header, "Idempotency-Key");
        assert_eq!(
            declared.lookup().path,
            format!("/v1/resources/{collection}?idempotency_key={{provider_key}}")
        );
        let answer = br#"{"id":"res_1","status":"succeeded","request":{}}"#;
        assert_eq!(
            declared.response().classify(answer),
            Classified::Succeeded {
                reference: "res_1".to_owned()
            }
        );
    }
    let money = catalog
        .kind("order")
        .unwrap()
        .money()
        .expect("order moves money");
    assert_eq!(
        (money.amount.as_str(), money.currency.as_str()),
        ("/total", "/currency")
    );
    assert!(catalog.kind("booking").unwrap().money().is_none());
    assert!(catalog.kind("payment").is_none());
}

#[test]
fn the_environment_variable_wins_over_the_literal_url() {
    let env = |name: &str| (name == "OPGATE_SIM_URL").then(|| "http://sim.test:8080/".to_owned());
    let catalog =
        Catalog::parse_with_env(EXAMPLE, "examples/catalog.toml", Path::new("."), &env).unwrap();
    assert_eq!(
        catalog.provider("sim").unwrap().base_url,
        "http://sim.test:8080"
    );
}

#[test]
fn no_catalog_is_an_empty_one() {
    let empty = Catalog::default();
    assert_eq!(empty.kinds().count(), 0);
    assert_eq!(empty.providers().count(), 0);
    assert!(empty.kind("order").is_none());
    let blank = parse("# nothing declared yet\n").unwrap();
    assert_eq!(blank.kinds().count(), 0);
}

#[test]
fn a_missing_file_is_named() {
    let error = Catalog::load(Path::new("/nonexistent/catalog.toml")).unwrap_err();
    assert!(matches!(error, CatalogError::Unreadable { .. }));
    assert!(
        error
            .to_string()
            .starts_with("catalog /nonexistent/catalog.toml: cannot read it:"),
        "{error}"
    );
}

#[test]
fn a_schema_file_is_read_relative_to_the_catalog() {
    let dir = std::env::temp_dir().join(format!("opgate-catalog-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("thing.schema.json"),
        r#"{"type":"object","required":["name"],"properties":{"name":{"type":"string"}}}"#,
    )
    .unwrap();
    let text = load_errors::MINIMAL.replace(
        load_errors::SCHEMA_LINE,
        r#"schema_file = "thing.schema.json""#,
    );
    std::fs::write(dir.join("catalog.toml"), &text).unwrap();

    let catalog =
        Catalog::load(&dir.join("catalog.toml")).unwrap_or_else(|error| panic!("{error}"));
    let thing = catalog.kind("thing").unwrap();
    assert_eq!(thing.schema()["required"][0], "name");
    assert!(thing.validate(&serde_json::json!({})).is_err());
    assert!(thing.validate(&serde_json::json!({"name": "x"})).is_ok());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_catalog_can_be_shared_across_threads() {
    // The services hold one catalog for all their workers and handlers.
    fn shared<T: Send + Sync + 'static>() {}
    shared::<Catalog>();
    shared::<crate::DeclaredKind>();
}

#[test]
fn the_format_documented_in_lib_rs_is_a_valid_catalog() {
    let lib = include_str!("../lib.rs");
    let block: String = lib
        .lines()
        .filter_map(|line| line.strip_prefix("//!"))
        .map(|line| line.strip_prefix(' ').unwrap_or(line))
        .skip_while(|line| *line != "```toml")
        .skip(1)
        .take_while(|line| *line != "```")
        .map(|line| format!("{line}\n"))
        .collect();
    assert!(
        block.contains("[kinds.order]"),
        "the documented example was not found"
    );
    let catalog = parse(&block).unwrap_or_else(|error| panic!("{error}"));
    let order = catalog.kind("order").unwrap();
    let body = serde_json::json!({"customer_id": "c", "sku": "s", "quantity": 1, "total": 5});
    assert_eq!(order.validate(&body).unwrap().fields()["total"], "5.00");
}
