//! What an agent may do: which operation types, and up to which amount per currency.

use std::collections::BTreeMap;

use rust_decimal::Decimal;

use crate::money::Money;
use crate::status::OperationType;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentPolicy {
    pub allowed_operations: Vec<OperationType>,
    /// Currency code to maximum amount. Empty means no limit; otherwise a currency
    /// that is not listed is refused, so that a limit in USD cannot be sidestepped by
    /// paying in another currency.
    pub max_amounts: BTreeMap<String, Decimal>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PolicyDenial {
    #[error("this agent is not permitted to request {0} operations")]
    OperationNotAllowed(&'static str),
    #[error("this agent is not permitted to pay in {0}")]
    CurrencyNotAllowed(&'static str),
    #[error("amount exceeds this agent's limit of {limit} {currency}")]
    OverLimit {
        limit: Decimal,
        currency: &'static str,
    },
}

impl AgentPolicy {
    pub fn permits_operation(&self, operation: OperationType) -> Result<(), PolicyDenial> {
        if self.allowed_operations.contains(&operation) {
            Ok(())
        } else {
            Err(PolicyDenial::OperationNotAllowed(operation.as_str()))
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
    use crate::money::Currency;

    fn policy(limits: &[(&str, &str)]) -> AgentPolicy {
        AgentPolicy {
            allowed_operations: vec![OperationType::Payment],
            max_amounts: limits
                .iter()
                .map(|(c, a)| (c.to_string(), a.parse().unwrap()))
                .collect(),
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
    fn operations_must_be_allowed() {
        let mut p = policy(&[]);
        assert!(p.permits_operation(OperationType::Payment).is_ok());
        p.allowed_operations.clear();
        assert!(p.permits_operation(OperationType::Payment).is_err());
    }
}
