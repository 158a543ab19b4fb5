//! An agent's body for a declared kind becomes an `OperationRequest` here: defaults,
//! trimming, the kind's JSON Schema, money normalisation, then the RFC 8785 canonical
//! hash. Equal requests written differently (key order, `250` or `"250.00"`, stray
//! spaces) must hash alike, so that a retry is recognised as the same operation.

use opgate_domain::{Currency, Money, OperationRequest};
use serde_json::Value;

use crate::error::BodyError;
use crate::kind::DeclaredKind;

/// How a problem names its place: the JSON pointer, or `body` for the whole body.
fn at(pointer: &str) -> String {
    if pointer.is_empty() {
        "body".to_owned()
    } else {
        format!("{pointer:?}")
    }
}

/// Trims every string, however deep: leading and trailing spaces never carry meaning
/// in a business field, and trimming before the schema makes `"  "` fail `minLength`.
fn trim_strings(value: &mut Value) {
    match value {
        Value::String(text) => {
            let trimmed = text.trim();
            if trimmed.len() != text.len() {
                *text = trimmed.to_owned();
            }
        }
        Value::Array(items) => items.iter_mut().for_each(trim_strings),
        Value::Object(members) => members.values_mut().for_each(trim_strings),
        Value::Null | Value::Bool(_) | Value::Number(_) => {}
    }
}

impl DeclaredKind {
    /// Validates and normalises an agent's body into the request opgate registers: the
    /// normalised body is both what is stored and what is hashed.
    pub fn validate(&self, body: &Value) -> Result<OperationRequest, BodyError> {
        let Value::Object(members) = body else {
            return Err(BodyError::one("body: must be a JSON object".to_owned()));
        };
        let mut members = members.clone();
        for (name, default) in &self.defaults {
            if !members.contains_key(name) {
                members.insert(name.clone(), default.clone());
            }
        }
        let mut body = Value::Object(members);
        trim_strings(&mut body);

        let problems: Vec<String> = self
            .validator
            .iter_errors(&body)
            .map(|error| format!("{}: {error}", at(error.instance_path().as_str())))
            .collect();
        if !problems.is_empty() {
            return Err(BodyError { problems });
        }

        let money = match &self.money {
            Some(fields) => Some(normalise_money(
                &mut body,
                &fields.amount,
                &fields.currency,
            )?),
            None => None,
        };

        let canonical = serde_jcs::to_string(&serde_json::json!({
            "operation_type": self.name.as_str(),
            "request": &body,
        }))
        .map_err(|error| BodyError::one(format!("body: cannot be canonicalised: {error}")))?;
        Ok(OperationRequest::from_canonical(
            self.name.clone(),
            body,
            &canonical,
            money,
        ))
    }
}

/// Reads the money at the two pointers and writes it back normalised: the currency as
/// its ISO code, the amount as a string at the currency's minor-unit scale.
fn normalise_money(
    body: &mut Value,
    amount_at: &str,
    currency_at: &str,
) -> Result<Money, BodyError> {
    let required = |pointer: &str, what: &str| {
        BodyError::one(format!(
            "{}: is required: it is the {what} of the money this operation moves",
            at(pointer)
        ))
    };
    let currency = match body.pointer(currency_at) {
        None | Some(Value::Null) => return Err(required(currency_at, "currency")),
        Some(Value::String(code)) => Currency::parse(code)
            .map_err(|error| BodyError::one(format!("{}: {error}", at(currency_at))))?,
        Some(other) => {
            return Err(BodyError::one(format!(
                "{}: {other} is not a currency code",
                at(currency_at)
            )))
        }
    };
    let amount_text = match body.pointer(amount_at) {
        None | Some(Value::Null) => return Err(required(amount_at, "amount")),
        Some(Value::String(text)) => text.clone(),
        // A number is taken by its JSON text, so `250` reads as `"250"`.
        Some(Value::Number(number)) => number.to_string(),
        Some(other) => {
            return Err(BodyError::one(format!(
                "{}: {other} is not an amount",
                at(amount_at)
            )))
        }
    };
    let money = Money::parse(&amount_text, currency)
        .map_err(|error| BodyError::one(format!("{}: {error}", at(amount_at))))?;
    if let Some(slot) = body.pointer_mut(currency_at) {
        *slot = Value::String(currency.code().to_owned());
    }
    if let Some(slot) = body.pointer_mut(amount_at) {
        *slot = Value::String(money.amount().to_string());
    }
    Ok(money)
}
