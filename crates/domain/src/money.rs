//! Money: an ISO 4217 currency with its minor units, and a positive amount that never
//! carries more decimals than that currency allows.

use std::fmt;
use std::str::FromStr;

use rust_decimal::Decimal;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MoneyError {
    #[error("currency {0:?} is not an ISO 4217 currency code")]
    UnknownCurrency(String),
    #[error("currency {0} has no minor unit and cannot be used for payments")]
    NotPayable(String),
    #[error("amount {0:?} is not a decimal number")]
    NotANumber(String),
    #[error("amount must be greater than zero")]
    NotPositive,
    #[error("amount has more than {0} significant digits")]
    TooManyDigits(usize),
    #[error("amount has more decimals than {currency} allows ({minor_units})")]
    TooPrecise {
        currency: &'static str,
        minor_units: u32,
    },
}

/// An ISO 4217 currency that payments can use (it has a defined minor unit).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Currency {
    code: &'static str,
    minor_units: u32,
}

impl Currency {
    pub const USD: Currency = Currency {
        code: "USD",
        minor_units: 2,
    };

    /// Parses a code case-insensitively, after trimming (`" usd"` is USD).
    pub fn parse(raw: &str) -> Result<Self, MoneyError> {
        let upper = raw.trim().to_ascii_uppercase();
        let iso = iso_currency::Currency::from_code(&upper)
            .ok_or_else(|| MoneyError::UnknownCurrency(raw.to_owned()))?;
        let minor_units = iso
            .exponent()
            .ok_or_else(|| MoneyError::NotPayable(upper.clone()))?;
        Ok(Self {
            code: iso.code(),
            minor_units: u32::from(minor_units),
        })
    }

    pub fn code(&self) -> &'static str {
        self.code
    }

    pub fn minor_units(&self) -> u32 {
        self.minor_units
    }
}

impl fmt::Display for Currency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code)
    }
}

/// A positive amount in a currency, held at exactly the currency's minor-unit scale
/// (`250` USD is held as `250.00`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Money {
    amount: Decimal,
    currency: Currency,
}

impl Money {
    pub const MAX_SIGNIFICANT_DIGITS: usize = 28;

    /// Trailing zeros do not count as decimals: `250.100` USD is `250.10`.
    pub fn new(amount: Decimal, currency: Currency) -> Result<Self, MoneyError> {
        if amount <= Decimal::ZERO {
            return Err(MoneyError::NotPositive);
        }
        let mut amount = amount.normalize();
        if amount.scale() > currency.minor_units {
            return Err(MoneyError::TooPrecise {
                currency: currency.code,
                minor_units: currency.minor_units,
            });
        }
        amount.rescale(currency.minor_units);
        Ok(Self { amount, currency })
    }

    /// Parses plain decimal text (`"250"`, `"250.00"`, `"-1"`); exponents, separators
    /// and other notations are refused rather than guessed at.
    pub fn parse(amount: &str, currency: Currency) -> Result<Self, MoneyError> {
        let text = amount.trim();
        let digits = text.strip_prefix(['-', '+']).unwrap_or(text);
        let (whole, fraction) = digits.split_once('.').unwrap_or((digits, "0"));
        let all_digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        if !all_digits(whole) || !all_digits(fraction) {
            return Err(MoneyError::NotANumber(amount.to_owned()));
        }
        // A decimal holds 28 significant digits; parsing more would round, and the
        // amount charged would not be the amount sent.
        let digits = format!("{whole}{}", fraction.trim_end_matches('0'));
        let significant = digits.trim_start_matches('0').len();
        if significant > Self::MAX_SIGNIFICANT_DIGITS {
            return Err(MoneyError::TooManyDigits(Self::MAX_SIGNIFICANT_DIGITS));
        }
        let decimal =
            Decimal::from_str(text).map_err(|_| MoneyError::NotANumber(amount.to_owned()))?;
        Self::new(decimal, currency)
    }

    pub fn amount(&self) -> Decimal {
        self.amount
    }

    pub fn currency(&self) -> Currency {
        self.currency
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usd(amount: &str) -> Result<Money, MoneyError> {
        Money::parse(amount, Currency::USD)
    }

    #[test]
    fn currencies_carry_their_minor_units() {
        assert_eq!(Currency::parse("USD").unwrap().minor_units(), 2);
        assert_eq!(Currency::parse("jpy").unwrap().minor_units(), 0);
        assert_eq!(Currency::parse(" BHD ").unwrap().minor_units(), 3);
        assert_eq!(Currency::parse("eur").unwrap().code(), "EUR");
    }

    #[test]
    fn unknown_and_unpayable_currencies_are_rejected() {
        assert!(matches!(
            Currency::parse("ABC"),
            Err(MoneyError::UnknownCurrency(_))
        ));
        assert!(matches!(
            Currency::parse(""),
            Err(MoneyError::UnknownCurrency(_))
        ));
        assert!(matches!(
            Currency::parse("XAU"),
            Err(MoneyError::NotPayable(_))
        ));
    }

    #[test]
    fn amounts_are_rescaled_to_minor_units() {
        assert_eq!(usd("250").unwrap().amount().to_string(), "250.00");
        assert_eq!(usd("250.5").unwrap().amount().to_string(), "250.50");
        assert_eq!(usd("250.100").unwrap().amount().to_string(), "250.10");
        let yen = Money::parse("1000", Currency::parse("JPY").unwrap()).unwrap();
        assert_eq!(yen.amount().to_string(), "1000");
    }

    #[test]
    fn zero_negative_and_over_precise_amounts_are_rejected() {
        assert_eq!(usd("0"), Err(MoneyError::NotPositive));
        assert_eq!(usd("0.00"), Err(MoneyError::NotPositive));
        assert_eq!(usd("-1.00"), Err(MoneyError::NotPositive));
        assert!(matches!(usd("1.001"), Err(MoneyError::TooPrecise { .. })));
        let jpy = Currency::parse("JPY").unwrap();
        assert!(matches!(
            Money::parse("10.5", jpy),
            Err(MoneyError::TooPrecise { minor_units: 0, .. })
        ));
        let bhd = Currency::parse("BHD").unwrap();
        assert!(Money::parse("1.234", bhd).is_ok());
        assert!(Money::parse("1.2345", bhd).is_err());
    }

    #[test]
    fn more_significant_digits_than_a_decimal_holds_are_refused_not_rounded() {
        assert_eq!(
            usd("1000.0000000000000000000000000001"),
            Err(MoneyError::TooManyDigits(28))
        );
        assert_eq!(
            usd("12345678901234567890123456789"),
            Err(MoneyError::TooManyDigits(28))
        );
        assert!(usd("1234567890123456789012345.67").is_ok(), "28 digits fit");
        assert!(usd("0000000000000000000000000000000001.00").is_ok());
        assert!(usd("5.000000000000000000000000000000").is_ok());
    }

    #[test]
    fn text_that_is_not_a_decimal_is_rejected() {
        for bad in ["", "abc", "1,00", "1e3", "NaN", "12..3", ".5", "5.", "0x10"] {
            assert!(
                matches!(usd(bad), Err(MoneyError::NotANumber(_))),
                "{bad:?} must be rejected"
            );
        }
    }
}
