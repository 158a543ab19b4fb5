//! What an agent may do: which operation kinds, and up to which amount per currency.

use std::collections::BTreeMap;

use rust_decimal::Decimal;

use crate::kind::KindName;
use crate::money::Money;
use crate::rate_limit::RateLimit;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentPolicy {
    /// The kinds this agent may request (granted by name; a grant of a kind that no
    /// longer exists grants nothing).
    pub allowed_operations: Vec<KindName>,
    /// Currency code to maximum amount. Empty means no limit; otherwise a currency
    /// that is not listed is refused, so that a limit in USD cannot be sidestepped by
    /// paying in another currency.
    pub max_amounts: BTreeMap<String, Decimal>,
    /// Requests per second or minute, enforced by each intake replica; `None`: no limit.
    pub rate_limit: Option<RateLimit>,
    /// Currency code to the most the agent may spend in it over any 24 hours (refunds
    /// and FAILED operations do not count). A currency not listed has no budget.
    pub daily_budgets: BTreeMap<String, Decimal>,
    /// Currency code to the amount above which an operation waits for an operator's
    /// approval before anything is sent.
    pub approval_above: BTreeMap<String, Decimal>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyDenial {
    #[error("this agent is not permitted to request {0} operations")]
    OperationNotAllowed(String),
    #[error("this agent is not permitted to pay in {0}")]
    CurrencyNotAllowed(&'static str),
    #[error("amount exceeds this agent's limit of {limit} {currency}")]
    OverLimit {
        limit: Decimal,
        currency: &'static str,
    },
}

impl AgentPolicy {
    /// Whether an operation moving `money` must wait for an operator's approval.
    pub fn needs_approval(&self, money: Money) -> bool {
        self.approval_above
            .get(money.currency().code())
            .is_some_and(|threshold| money.amount() > *threshold)
    }

    /// The 24-hour budget that `money` is spent against, if the agent has one.
    pub fn daily_budget_for(&self, money: Money) -> Option<Decimal> {
        self.daily_budgets.get(money.currency().code()).copied()
    }

    pub fn permits_operation(&self, kind: &str) -> Result<(), PolicyDenial> {
        if self
            .allowed_operations
            .iter()
            .any(|granted| granted.as_str() == kind)
        {
            Ok(())
        } else {
            Err(PolicyDenial::OperationNotAllowed(kind.to_string()))
        }
    }

    pub fn permits_amount(&self, money: Money) -> Result<(), PolicyDenial> {
        if self.max_amounts.is_empty() {
            return Ok(());
        }
        let currency = money.currency().code();
        match self.max_amounts.get(currency) {
            None => Err(PolicyDenial::CurrencyNotAllowed(currency)),
            Some(limit) if money.amount() > *limit => Err(PolicyDenial::OverLimit {
                limit: *limit,
                currency,
            }),
            Some(_) => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kind::BuiltinKind;
    use crate::money::Currency;

    fn policy(limits: &[(&str, &str)]) -> AgentPolicy {
        AgentPolicy {
            allowed_operations: vec![BuiltinKind::Payment.name()],
            max_amounts: limits
                .iter()
                .map(|(c, a)| (c.to_string(), a.parse().unwrap()))
                .collect(),
            rate_limit: None,
            daily_budgets: BTreeMap::new(),
            approval_above: BTreeMap::new(),
        }
    }

    fn usd(amount: &str) -> Money {
        Money::parse(amount, Currency::USD).unwrap()
    }

    #[test]
    fn no_limits_means_any_amount() {
        assert!(policy(&[]).permits_amount(usd("1000000")).is_ok());
    }

    #[test]
    fn the_limit_is_inclusive() {
        let p = policy(&[("USD", "1000.00")]);
        assert!(p.permits_amount(usd("1000")).is_ok());
        assert!(matches!(
            p.permits_amount(usd("1000.01")),
            Err(PolicyDenial::OverLimit { .. })
        ));
    }

    #[test]
    fn unlisted_currencies_are_refused_once_any_limit_exists() {
        let p = policy(&[("USD", "1000.00")]);
        let eur = Money::parse("1", Currency::parse("EUR").unwrap()).unwrap();
        assert_eq!(
            p.permits_amount(eur),
            Err(PolicyDenial::CurrencyNotAllowed("EUR"))
        );
    }

    #[test]
    fn approval_is_needed_strictly_above_the_threshold_in_its_currency() {
        let mut p = policy(&[]);
        p.approval_above
            .insert("USD".into(), "500.00".parse().unwrap());
        assert!(!p.needs_approval(usd("500")));
        assert!(p.needs_approval(usd("500.01")));
        let eur = Money::parse("9999", Currency::parse("EUR").unwrap()).unwrap();
        assert!(!p.needs_approval(eur));
    }

    #[test]
    fn operations_must_be_allowed() {
        let mut p = policy(&[]);
        assert!(p.permits_operation("payment").is_ok());
        assert!(p.permits_operation("refund").is_err());
        p.allowed_operations.clear();
        assert!(p.permits_operation("payment").is_err());
    }
}
