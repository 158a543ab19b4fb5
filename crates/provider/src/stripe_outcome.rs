//! What Stripe's answers mean. An object in a 2xx answer by its `status`; an error by
//! its type: `card_error` (or 402) is a decline with its code, `rate_limit_error`,
//! `api_error`, 409 and 5xx are uncertain (and final when `Stripe-Should-Retry: false`
//! says a retry would not help), any other 4xx is a definitive refusal with Stripe's
//! message.

use serde_json::Value;

use crate::http_client::Exchange;
use crate::outcome::{LookupOutcome, ProviderOutcome};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Object {
    PaymentIntent,
    Refund,
    Customer,
}

impl Object {
    pub(crate) fn path(self) -> &'static str {
        match self {
            Self::PaymentIntent => "/v1/payment_intents",
            Self::Refund => "/v1/refunds",
            Self::Customer => "/v1/customers",
        }
    }
}

pub(crate) fn classify(object: Object, exchange: Exchange) -> ProviderOutcome {
    match exchange {
        Exchange::Answered { status, body, .. } if (200..=299).contains(&status) => {
            match serde_json::from_slice::<Value>(&body) {
                Ok(value) => classify_object(object, &value),
                Err(_) => ProviderOutcome::Uncertain {
                    cause: format!("Stripe answered {status} with an unreadable body"),
                },
            }
        }
        Exchange::Answered {
            status,
            headers,
            body,
        } => {
            let should_retry = headers
                .get("stripe-should-retry")
                .and_then(|v| v.to_str().ok())
                .map(|v| v.eq_ignore_ascii_case("true"));
            classify_error(status, should_retry, &body)
        }
        Exchange::NotSent(cause) => ProviderOutcome::NotSent { cause },
        Exchange::Uncertain(cause) => ProviderOutcome::Uncertain { cause },
        Exchange::TimedOut(cause) => ProviderOutcome::TimedOut { cause },
    }
}

fn classify_object(object: Object, value: &Value) -> ProviderOutcome {
    let id = value["id"].as_str().map(str::to_owned);
    let status = value["status"].as_str().unwrap_or_default();
    match (object, status, id) {
        (_, "succeeded", Some(reference)) => ProviderOutcome::Succeeded { reference },
        (
            Object::PaymentIntent,
            "processing" | "requires_capture" | "requires_action" | "requires_confirmation",
            reference,
        )
        | (Object::Refund, "pending" | "requires_action", reference) => {
            ProviderOutcome::Pending { reference }
        }
        (Object::PaymentIntent, "requires_payment_method", reference) => {
            let error = &value["last_payment_error"];
            ProviderOutcome::Declined {
                reference,
                code: decline_code(error).unwrap_or_else(|| "payment_failed".into()),
            }
        }
        (_, "canceled" | "failed", reference) => ProviderOutcome::Declined {
            reference,
            code: value["failure_reason"]
                .as_str()
                .unwrap_or(status)
                .to_owned(),
        },
        (_, other, _) => ProviderOutcome::Uncertain {
            cause: format!("Stripe answered an unexpected status {other:?}"),
        },
    }
}

fn decline_code(error: &Value) -> Option<String> {
    error["decline_code"]
        .as_str()
        .or_else(|| error["code"].as_str())
        .map(str::to_owned)
}

fn classify_error(status: u16, should_retry: Option<bool>, body: &[u8]) -> ProviderOutcome {
    let value: Value = serde_json::from_slice(body).unwrap_or_default();
    let error = &value["error"];
    let kind = error["type"].as_str().unwrap_or_default();
    let message: String = error["message"]
        .as_str()
        .unwrap_or("no message")
        .chars()
        .take(200)
        .collect();
    if kind == "card_error" || status == 402 {
        return ProviderOutcome::Declined {
            reference: error["payment_intent"]["id"].as_str().map(str::to_owned),
            code: decline_code(error).unwrap_or_else(|| "card_declined".into()),
        };
    }
    let transient = matches!(kind, "rate_limit_error" | "api_error")
        || matches!(status, 408 | 409 | 425 | 429)
        || status >= 500;
    match (transient, should_retry) {
        (_, Some(true)) | (true, None) => ProviderOutcome::Uncertain {
            cause: format!("Stripe {kind} (HTTP {status}): {message}"),
        },
        (true, Some(false)) => ProviderOutcome::UncertainFinal {
            cause: format!("Stripe {kind} (HTTP {status}), not to be retried: {message}"),
        },
        (false, _) => ProviderOutcome::Rejected {
            status,
            detail: format!("Stripe {kind}: {message}"),
        },
    }
}

/// The object of a list (or search) answer whose metadata names this operation, and
/// the id of the list's last object (to read the next page from).
pub(crate) fn found_in_list(
    object: Object,
    body: &[u8],
    operation_id: &str,
) -> (LookupOutcome, Option<String>) {
    let Ok(list) = serde_json::from_slice::<Value>(body) else {
        let cause = "Stripe answered a list with an unreadable body".to_owned();
        return (LookupOutcome::Unavailable { cause }, None);
    };
    let data = list["data"].as_array().cloned().unwrap_or_default();
    let found = data
        .iter()
        .find(|item| item["metadata"]["opgate_operation_id"] == operation_id);
    let last = match list["has_more"].as_bool() {
        Some(true) => data
            .last()
            .and_then(|item| item["id"].as_str())
            .map(str::to_owned),
        _ => None,
    };
    match found {
        Some(item) => (LookupOutcome::Found(classify_object(object, item)), None),
        None => (LookupOutcome::NotFound, last),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(status: u16, should_retry: Option<bool>, body: &str) -> ProviderOutcome {
        classify_error(status, should_retry, body.as_bytes())
    }

    fn answered(status: u16, should_retry: Option<&str>, body: &str) -> Exchange {
        let mut headers = hyper::HeaderMap::new();
        if let Some(value) = should_retry {
            headers.insert("stripe-should-retry", value.parse().unwrap());
        }
        Exchange::Answered {
            status,
            headers,
            body: bytes::Bytes::copy_from_slice(body.as_bytes()),
        }
    }

    #[test]
    fn a_whole_exchange_is_read_as_an_object_only_when_it_succeeded() {
        let intent = r#"{"id": "pi_1", "status": "succeeded"}"#;
        assert_eq!(
            classify(Object::PaymentIntent, answered(200, None, intent)),
            ProviderOutcome::Succeeded {
                reference: "pi_1".into()
            }
        );
        assert!(matches!(
            classify(Object::PaymentIntent, answered(200, None, "<html>")),
            ProviderOutcome::Uncertain { .. }
        ));
        let declined = r#"{"error":{"type":"card_error","code":"card_declined","decline_code":"stolen_card","payment_intent":{"id":"pi_9"}}}"#;
        assert_eq!(
            classify(Object::PaymentIntent, answered(402, None, declined)),
            ProviderOutcome::Declined {
                reference: Some("pi_9".into()),
                code: "stolen_card".into()
            }
        );
        let api_error = r#"{"error":{"type":"api_error","message":"m"}}"#;
        assert!(matches!(
            classify(Object::Refund, answered(500, Some("false"), api_error)),
            ProviderOutcome::UncertainFinal { .. }
        ));
        assert!(matches!(
            classify(Object::Refund, answered(500, Some("TRUE"), api_error)),
            ProviderOutcome::Uncertain { .. }
        ));
        assert_eq!(
            classify(Object::Customer, Exchange::TimedOut("slow".into())),
            ProviderOutcome::TimedOut {
                cause: "slow".into()
            }
        );
        assert_eq!(
            classify(Object::Customer, Exchange::NotSent("refused".into())),
            ProviderOutcome::NotSent {
                cause: "refused".into()
            }
        );
        assert_eq!(
            classify(Object::Customer, Exchange::Uncertain("reset".into())),
            ProviderOutcome::Uncertain {
                cause: "reset".into()
            }
        );
    }

    #[test]
    fn each_object_lives_at_its_path() {
        assert_eq!(Object::PaymentIntent.path(), "/v1/payment_intents");
        assert_eq!(Object::Refund.path(), "/v1/refunds");
        assert_eq!(Object::Customer.path(), "/v1/customers");
    }

    #[test]
    fn intents_by_status() {
        let intent = |status: &str| {
            classify_object(
                Object::PaymentIntent,
                &serde_json::json!({"id": "pi_1", "status": status,
                    "last_payment_error": {"code": "card_declined", "decline_code": "insufficient_funds"}}),
            )
        };
        assert_eq!(
            intent("succeeded"),
            ProviderOutcome::Succeeded {
                reference: "pi_1".into()
            }
        );
        assert!(matches!(
            intent("processing"),
            ProviderOutcome::Pending { .. }
        ));
        assert_eq!(
            intent("requires_payment_method"),
            ProviderOutcome::Declined {
                reference: Some("pi_1".into()),
                code: "insufficient_funds".into()
            }
        );
        assert!(matches!(
            intent("canceled"),
            ProviderOutcome::Declined { .. }
        ));
        assert!(matches!(intent("weird"), ProviderOutcome::Uncertain { .. }));
    }

    #[test]
    fn refunds_by_status() {
        let refund = |status: &str| {
            classify_object(
                Object::Refund,
                &serde_json::json!({"id": "re_1", "status": status, "failure_reason": "expired_or_canceled_card"}),
            )
        };
        assert_eq!(
            refund("succeeded"),
            ProviderOutcome::Succeeded {
                reference: "re_1".into()
            }
        );
        assert!(matches!(refund("pending"), ProviderOutcome::Pending { .. }));
        assert_eq!(
            refund("failed"),
            ProviderOutcome::Declined {
                reference: Some("re_1".into()),
                code: "expired_or_canceled_card".into()
            }
        );
    }

    #[test]
    fn a_card_error_is_a_decline_with_its_code() {
        let body = r#"{"error":{"type":"card_error","code":"card_declined","decline_code":"stolen_card","payment_intent":{"id":"pi_9"}}}"#;
        assert_eq!(
            error(402, None, body),
            ProviderOutcome::Declined {
                reference: Some("pi_9".into()),
                code: "stolen_card".into()
            }
        );
        // localstripe answers 402 with another type.
        let fake = r#"{"error":{"type":"invalid_request_error","code":"card_declined"}}"#;
        assert!(
            matches!(error(402, None, fake), ProviderOutcome::Declined { code, .. } if code == "card_declined")
        );
    }

    #[test]
    fn transient_errors_are_uncertain_and_honour_should_retry() {
        for (status, kind) in [
            (429, "rate_limit_error"),
            (500, "api_error"),
            (503, ""),
            (409, "idempotency_error"),
        ] {
            let body = format!(r#"{{"error":{{"type":"{kind}","message":"m"}}}}"#);
            assert!(
                matches!(
                    error(status, None, &body),
                    ProviderOutcome::Uncertain { .. }
                ),
                "{status}"
            );
            assert!(matches!(
                error(status, Some(true), &body),
                ProviderOutcome::Uncertain { .. }
            ));
            assert!(matches!(
                error(status, Some(false), &body),
                ProviderOutcome::UncertainFinal { .. }
            ));
        }
    }

    #[test]
    fn an_invalid_request_is_refused_with_stripes_message() {
        let body = r#"{"error":{"type":"invalid_request_error","message":"Amount must be at least 50 cents"}}"#;
        assert_eq!(
            error(400, None, body),
            ProviderOutcome::Rejected {
                status: 400,
                detail: "Stripe invalid_request_error: Amount must be at least 50 cents".into()
            }
        );
        // Stripe says a retry could succeed (a lock timeout, say): not a refusal.
        assert!(matches!(
            error(400, Some(true), body),
            ProviderOutcome::Uncertain { .. }
        ));
    }

    #[test]
    fn lists_are_searched_by_metadata_and_paged() {
        let page = br#"{"has_more": true, "data": [{"id": "pi_a", "status": "succeeded", "metadata": {"opgate_operation_id": "x"}}, {"id": "pi_b", "status": "succeeded", "metadata": {}}]}"#;
        let (found, _) = found_in_list(Object::PaymentIntent, page, "x");
        assert_eq!(
            found,
            LookupOutcome::Found(ProviderOutcome::Succeeded {
                reference: "pi_a".into()
            })
        );
        let (missing, next) = found_in_list(Object::PaymentIntent, page, "y");
        assert_eq!(
            (missing, next.as_deref()),
            (LookupOutcome::NotFound, Some("pi_b"))
        );
        let last = br#"{"has_more": false, "data": []}"#;
        assert_eq!(
            found_in_list(Object::PaymentIntent, last, "y"),
            (LookupOutcome::NotFound, None)
        );
    }
}
