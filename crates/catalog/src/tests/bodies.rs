//! Bodies of the example catalog's kinds becoming requests: what is refused and how it
//! is named, what is normalised, and which bodies hash alike.

use serde_json::{json, Value};

use super::{example, no_env, EXAMPLE};
use crate::{BodyError, Catalog};

fn order(body: Value) -> Result<opgate_domain::OperationRequest, BodyError> {
    example().kind("order").unwrap().validate(&body)
}

fn order_hash(body: Value) -> String {
    order(body)
        .unwrap_or_else(|error| panic!("{error}"))
        .request_hash()
        .to_string()
}

fn problems(kind: &str, body: Value) -> Vec<String> {
    example()
        .kind(kind)
        .unwrap()
        .validate(&body)
        .expect_err("the body must be refused")
        .problems
}

fn reference_order() -> Value {
    json!({"customer_id": "cus_1", "sku": "sku_42", "quantity": 2, "total": "250.00", "currency": "USD"})
}

#[test]
fn golden_hash_of_an_order() {
    // Independently computed with python3:
    //   body = {"customer_id":"cus_1","sku":"sku_42","quantity":2,"total":"250.00","currency":"USD"}
    //   s = json.dumps({"operation_type":"order","request":body}, sort_keys=True, separators=(",",":"))
    //   hashlib.sha256(s.encode()).hexdigest()
    // (for ASCII strings and integers that is exactly RFC 8785), checked with sha256sum.
    // If it changes, every stored hash of this kind changes: never edit it.
    let request = order(reference_order()).unwrap();
    assert_eq!(
        request.request_hash().as_str(),
        "09226bb603465f29fb5776314093a8ffc6efae7e712c86d50ae6efd58d60a64a"
    );
    assert_eq!(request.kind().as_str(), "order");
    assert_eq!(
        request.fields(),
        &reference_order(),
        "the stored payload is the normalised body"
    );
    let money = request.money().expect("an order moves money");
    assert_eq!(money.amount().to_string(), "250.00");
    assert_eq!(money.currency().code(), "USD");
}

#[test]
fn equal_amounts_hash_alike() {
    let reference = order_hash(reference_order());
    for total in [
        json!(250),
        json!("250"),
        json!(" 250 "),
        json!(250.0),
        json!("250.000"),
        json!(250.00),
    ] {
        let mut body = reference_order();
        body["total"] = total.clone();
        assert_eq!(order_hash(body), reference, "total {total}");
    }
}

#[test]
fn spelling_order_and_defaults_do_not_change_the_hash() {
    let reference = order_hash(reference_order());
    let reordered = json!({"total": "250.00", "currency": "USD", "quantity": 2, "sku": "sku_42", "customer_id": "cus_1"});
    assert_eq!(order_hash(reordered), reference, "keys in any order");
    let spaced = json!({"customer_id": "  cus_1", "sku": "sku_42 ", "quantity": 2, "total": "250", "currency": " usd "});
    assert_eq!(order_hash(spaced), reference, "spaces and case");
    let defaulted = json!({"customer_id": "cus_1", "sku": "sku_42", "quantity": 2, "total": "250"});
    assert_eq!(order_hash(defaulted), reference, "the default currency");
}

#[test]
fn different_requests_hash_apart() {
    let reference = order_hash(reference_order());
    for (field, value) in [
        ("customer_id", json!("cus_2")),
        ("sku", json!("sku_43")),
        ("quantity", json!(3)),
        ("total", json!("250.01")),
        ("currency", json!("EUR")),
    ] {
        let mut body = reference_order();
        body[field] = value;
        assert_ne!(order_hash(body), reference, "{field}");
    }
}

#[test]
fn the_same_body_for_another_kind_hashes_apart() {
    let renamed = EXAMPLE.replace("[kinds.order", "[kinds.purchase");
    let catalog =
        Catalog::parse_with_env(&renamed, "renamed.toml", std::path::Path::new("."), &no_env)
            .unwrap();
    let purchase = catalog
        .kind("purchase")
        .unwrap()
        .validate(&reference_order())
        .unwrap();
    assert_eq!(
        purchase.fields(),
        order(reference_order()).unwrap().fields()
    );
    assert_ne!(
        purchase.request_hash().to_string(),
        order_hash(reference_order())
    );
}

#[test]
fn defaults_are_applied_and_strings_trimmed_in_the_stored_body() {
    let request =
        order(json!({"customer_id": " cus_1 ", "sku": "sku_42", "quantity": 1, "total": 9.5}))
            .unwrap();
    assert_eq!(
        request.fields(),
        &json!({"customer_id": "cus_1", "sku": "sku_42", "quantity": 1, "total": "9.50", "currency": "USD"})
    );
    let yen = order(
        json!({"customer_id": "c", "sku": "s", "quantity": 1, "total": "1000", "currency": "jpy"}),
    )
    .unwrap();
    assert_eq!(yen.fields()["total"], "1000");
    assert_eq!(yen.fields()["currency"], "JPY");
}

#[test]
fn schema_problems_name_the_field() {
    let mut body = reference_order();
    body["quantity"] = json!(0);
    assert_eq!(
        problems("order", body),
        [r#""/quantity": 0 is less than the minimum of 1"#]
    );

    let mut blank = reference_order();
    blank["customer_id"] = json!("   ");
    let found = problems("order", blank);
    assert!(
        found[0].starts_with(r#""/customer_id": "" is shorter than 1 character"#),
        "{found:?}"
    );

    let missing = problems(
        "order",
        json!({"customer_id": "c", "quantity": 1, "total": "1"}),
    );
    assert_eq!(missing, [r#"body: "sku" is a required property"#]);
}

#[test]
fn unknown_fields_are_refused_when_the_schema_says_so() {
    let mut body = reference_order();
    body["coupon"] = json!("FREE");
    let found = problems("order", body);
    assert_eq!(found.len(), 1);
    assert!(
        found[0].starts_with("body: ") && found[0].contains("'coupon' was unexpected"),
        "{found:?}"
    );
}

#[test]
fn every_problem_is_reported_and_displayed_together() {
    let error =
        order(json!({"customer_id": "", "sku": 5, "quantity": 0, "total": "1"})).unwrap_err();
    assert_eq!(error.problems.len(), 3, "{error}");
    assert_eq!(error.to_string(), error.problems.join("; "));
    for field in ["/customer_id", "/sku", "/quantity"] {
        assert!(error.to_string().contains(&format!("{field:?}")), "{error}");
    }
}

#[test]
fn a_body_must_be_an_object() {
    for body in [json!([1]), json!("order"), json!(null), json!(3)] {
        assert_eq!(problems("order", body), ["body: must be a JSON object"]);
    }
}

#[test]
fn money_problems_name_the_pointer() {
    let with = |total: Value, currency: Value| {
        let mut body = reference_order();
        body["total"] = total;
        body["currency"] = currency;
        problems("order", body)
    };
    let bad_currency = with(json!("1"), json!("ABC"));
    assert!(
        bad_currency[0].starts_with(r#""/currency": "#),
        "{bad_currency:?}"
    );
    for total in [
        json!("abc"),
        json!("0"),
        json!("-5"),
        json!("1.001"),
        json!("1e3"),
    ] {
        let found = with(total.clone(), json!("USD"));
        assert!(found[0].starts_with(r#""/total": "#), "{total}: {found:?}");
    }
    let too_precise_yen = with(json!("10.5"), json!("JPY"));
    assert!(
        too_precise_yen[0].contains("more decimals than JPY allows"),
        "{too_precise_yen:?}"
    );
}

#[test]
fn a_booking_is_checked_by_its_schema() {
    let booking = example().kind("booking").unwrap().clone();
    let good = json!({"guest_name": "Ada Lovelace", "room_type": "double", "check_in": "2026-03-14", "nights": 2});
    let request = booking.validate(&good).unwrap();
    assert_eq!(request.money(), None);
    assert_eq!(request.kind().as_str(), "booking");

    let bad = |field: &str, value: Value| {
        let mut body = good.clone();
        body[field] = value;
        booking.validate(&body).expect_err(field).problems
    };
    assert!(bad("room_type", json!("penthouse"))[0].starts_with(r#""/room_type": "#));
    assert!(bad("check_in", json!("14/03/2026"))[0].starts_with(r#""/check_in": "#));
    assert!(
        bad("check_in", json!("2026-02-30"))[0].contains("is not a \"date\""),
        "formats are enforced"
    );
    assert!(bad("nights", json!(0))[0].starts_with(r#""/nights": "#));
    assert!(bad("nights", json!("2"))[0].starts_with(r#""/nights": "#));
}

#[test]
fn provisioning_takes_an_optional_size() {
    let provisioning = example().kind("provisioning").unwrap().clone();
    let without_size = json!({"project": "atlas", "resource_type": "vm", "region": "eu-west-1"});
    assert!(provisioning.validate(&without_size).is_ok());
    let mut sized = without_size.clone();
    sized["size"] = json!("large");
    let sized_request = provisioning.validate(&sized).unwrap();
    assert_ne!(
        sized_request.request_hash(),
        provisioning.validate(&without_size).unwrap().request_hash()
    );
    let mut gpu = without_size;
    gpu["resource_type"] = json!("gpu");
    assert!(
        provisioning.validate(&gpu).unwrap_err().problems[0].starts_with(r#""/resource_type": "#)
    );
}
