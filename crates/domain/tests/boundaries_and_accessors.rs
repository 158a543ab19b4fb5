//! What callers read back from the domain's types, and each limit at its value:
//! the cases cargo-mutants (`make mutants`) found no unit test deciding.

use std::collections::BTreeMap;
use std::str::FromStr;

use opgate_domain::{
    AgentId, AgentPolicy, ApiKey, Currency, IdempotencyKey, KindName, Money, MoneyError, RateLimit,
    RefundRequest,
};
use rust_decimal::Decimal;
use uuid::Uuid;

fn usd(amount: &str) -> Money {
    Money::parse(amount, Currency::USD).unwrap()
}

#[test]
fn identifiers_read_back_as_given() {
    let key = IdempotencyKey::parse("invoice-42-payment").unwrap();
    assert_eq!(key.as_str(), "invoice-42-payment");
    let agent = AgentId::parse("billing-agent.v2").unwrap();
    assert_eq!(agent.as_str(), "billing-agent.v2");
    assert_eq!(agent.to_string(), "billing-agent.v2");
    let kind = KindName::parse("order").unwrap();
    assert_eq!(kind.to_string(), "order");
    let eur = Currency::parse("EUR").unwrap();
    assert_eq!(eur.to_string(), "EUR");
}

#[test]
fn an_agent_id_may_be_exactly_its_maximum_length() {
    assert!(AgentId::parse(&"a".repeat(AgentId::MAX_LEN)).is_ok());
    assert!(AgentId::parse(&"a".repeat(AgentId::MAX_LEN + 1)).is_err());
}

#[test]
fn an_api_key_needs_both_the_right_length_and_lower_case_hex() {
    let id = "0123456789abcdef";
    let secret = "ab".repeat(32);
    assert!(ApiKey::parse(&format!("opg_{id}_{secret}")).is_ok());
    // The right length, but not lower-case hex.
    assert!(ApiKey::parse(&format!("opg_0123456789ABCDEF_{secret}")).is_err());
    assert!(ApiKey::parse(&format!("opg_0123456789abcdeg_{secret}")).is_err());
    assert!(ApiKey::parse(&format!("opg_{id}_{}", "AB".repeat(32))).is_err());
    // Lower-case hex, but the wrong length.
    assert!(ApiKey::parse(&format!("opg_0123456789abcde_{secret}")).is_err());
    assert!(ApiKey::parse(&format!("opg_{id}_{}", "ab".repeat(31))).is_err());
}

#[test]
fn an_amount_may_have_exactly_28_significant_digits() {
    let most = "12345678901234567890123456.78";
    assert_eq!(usd(most).amount(), Decimal::from_str(most).unwrap());
    assert_eq!(
        Money::parse("123456789012345678901234567.89", Currency::USD),
        Err(MoneyError::TooManyDigits(28))
    );
}

#[test]
fn a_rate_limit_and_its_burst_may_be_exactly_the_maximum() {
    let max = RateLimit::MAX_COUNT;
    let limit = RateLimit::parse(&format!("{max}/s"), Some(max)).unwrap();
    assert_eq!((limit.count(), limit.burst()), (max, max));
    assert!(RateLimit::parse(&format!("{}/s", max + 1), None).is_err());
    assert!(RateLimit::parse("5/s", Some(max + 1)).is_err());
    assert!(RateLimit::parse("5/s", Some(0)).is_err());
    let ordinary = RateLimit::parse("50/m", Some(7)).unwrap();
    assert_eq!((ordinary.count(), ordinary.burst()), (50, 7));
    assert_eq!(RateLimit::parse("3/s", None).unwrap().count(), 3);
}

#[test]
fn a_daily_budget_is_found_by_the_currency_spent() {
    let policy = AgentPolicy {
        allowed_operations: Vec::new(),
        max_amounts: BTreeMap::new(),
        rate_limit: None,
        daily_budgets: BTreeMap::from([("USD".to_owned(), Decimal::new(500_000, 2))]),
        approval_above: BTreeMap::new(),
    };
    assert_eq!(
        policy.daily_budget_for(usd("1.00")),
        Some(Decimal::new(500_000, 2))
    );
    let eur = Money::parse("1.00", Currency::parse("EUR").unwrap()).unwrap();
    assert_eq!(policy.daily_budget_for(eur), None);
}

#[test]
fn a_refund_request_reads_back_its_payment_and_amount() {
    let payment = Uuid::new_v4();
    let refund = RefundRequest::parse(payment, Some("12.5"), None, Currency::USD).unwrap();
    assert_eq!(refund.payment_operation_id(), payment);
    assert_eq!(refund.money(), Some(usd("12.50")));
    let whole = RefundRequest::parse(payment, None, None, Currency::USD).unwrap();
    assert_eq!(whole.money(), None);
}
