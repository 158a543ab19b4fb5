//! Outcome classification: every provider answer (or the lack of one) becomes exactly
//! one outcome, and the executor maps outcomes to state transitions.
//!
//! | what happened                                   | outcome      | executor does            |
//! |-------------------------------------------------|--------------|--------------------------|
//! | 2xx `status: succeeded`                          | `Succeeded`  | SUCCEEDED, reference     |
//! | 2xx `status: failed` (a decline)                 | `Declined`   | FAILED, failure code     |
//! | 2xx `status: pending`                            | `Pending`    | UNKNOWN (reconciler)     |
//! | 2xx with a body it cannot read                   | `Uncertain`  | keyed retry, else UNKNOWN|
//! | 400, 402, 403, 404, 422 (definitive refusal)     | `Rejected`   | FAILED, status + error   |
//! | 429 (rate limited; `Retry-After` read)           | `Throttled`  | requeue after the wait, not counted |
//! | 408, 409, 425 (try again)                        | `Uncertain`  | keyed retry, else UNKNOWN|
//! | 5xx                                             | `Uncertain`  | keyed retry, else UNKNOWN|
//! | connect failed (refused, DNS, connect timeout)   | `NotSent`    | retry later; then FAILED |
//! | no complete answer within the response timeout   | `TimedOut`   | keyed retry, else UNKNOWN|
//! | reset or closed after the request was sent       | `Uncertain`  | keyed retry, else UNKNOWN|
//!
//! Nothing becomes FAILED without evidence: a refusal from the provider, or proof that
//! the request never left. A 429 is the provider saying it did not take the request on
//! (it refused it for its rate, not for its content): waiting and sending the same key
//! again is safe. A 503 is not read that way, even with `Retry-After`: a gateway may
//! answer it after the request reached the provider behind it.

use std::time::Duration;

use serde::Deserialize;

use crate::retry_after::DEFAULT_RETRY_AFTER;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProviderOutcome {
    Succeeded {
        reference: String,
    },
    Declined {
        reference: Option<String>,
        code: String,
    },
    Pending {
        reference: Option<String>,
    },
    Rejected {
        status: u16,
        detail: String,
    },
    NotSent {
        cause: String,
    },
    Uncertain {
        cause: String,
    },
    /// Sent, and no complete answer arrived within the response timeout: as uncertain
    /// as `Uncertain` (the provider may well have done it), told apart so that
    /// timeouts can be counted as such.
    TimedOut {
        cause: String,
    },
    /// Sent, outcome unknown, and the provider says that sending it again would not
    /// help (Stripe's `Stripe-Should-Retry: false`): the reconciler takes over at once.
    UncertainFinal {
        cause: String,
    },
    /// Not taken on: the provider is rate limiting us (HTTP 429) and asks for this wait
    /// (its `Retry-After`, bounded) before the same request is sent again.
    Throttled {
        retry_after: Duration,
    },
}

/// What a lookup by key says about an operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LookupOutcome {
    Found(ProviderOutcome),
    NotFound,
    Unavailable { cause: String },
}

#[derive(Deserialize)]
struct PaymentBody {
    id: Option<String>,
    status: String,
    failure_code: Option<String>,
}

/// Classifies a complete HTTP answer from the provider.
pub fn classify_response(status: u16, body: &[u8]) -> ProviderOutcome {
    match status {
        200..=299 => classify_payment(body),
        _ => classify_status(status, body),
    }
}

/// Classifies an answer that is not a 2xx, the same for every HTTP provider.
pub fn classify_status(status: u16, body: &[u8]) -> ProviderOutcome {
    match status {
        200..=299 => ProviderOutcome::Uncertain {
            cause: format!("provider answered {status} where no success was expected"),
        },
        // The wait is the default here: the header is read where the answer's headers
        // are (`http_client::Exchange::executed`).
        429 => ProviderOutcome::Throttled {
            retry_after: DEFAULT_RETRY_AFTER,
        },
        408 | 409 | 425 => ProviderOutcome::Uncertain {
            cause: format!("provider asked to retry (HTTP {status})"),
        },
        400..=499 => ProviderOutcome::Rejected {
            status,
            detail: error_text(body),
        },
        _ => ProviderOutcome::Uncertain {
            cause: format!("provider error (HTTP {status})"),
        },
    }
}

fn classify_payment(body: &[u8]) -> ProviderOutcome {
    let Ok(payment) = serde_json::from_slice::<PaymentBody>(body) else {
        return ProviderOutcome::Uncertain {
            cause: "provider answered 2xx with an unreadable body".into(),
        };
    };
    match (payment.status.as_str(), payment.id) {
        ("succeeded", Some(reference)) => ProviderOutcome::Succeeded { reference },
        ("failed", reference) => ProviderOutcome::Declined {
            reference,
            code: payment.failure_code.unwrap_or_else(|| "declined".into()),
        },
        ("pending", reference) => ProviderOutcome::Pending { reference },
        (other, _) => ProviderOutcome::Uncertain {
            cause: format!("provider answered an unexpected payment status {other:?}"),
        },
    }
}

/// The provider's own error message, short, for the audit trail.
fn error_text(body: &[u8]) -> String {
    let message = serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|v| v.get("error").and_then(|e| e.as_str()).map(str::to_owned))
        .unwrap_or_else(|| String::from_utf8_lossy(body).into_owned());
    message.chars().take(200).collect()
}

#[cfg(test)]
mod tests {
    use super::ProviderOutcome::*;
    use super::*;

    fn json(status: u16, body: &str) -> ProviderOutcome {
        classify_response(status, body.as_bytes())
    }

    #[test]
    fn success_carries_the_reference() {
        assert_eq!(
            json(200, r#"{"id":"pay_1","status":"succeeded"}"#),
            Succeeded {
                reference: "pay_1".into()
            }
        );
        assert_eq!(
            json(201, r#"{"id":"pay_1","status":"succeeded","extra":1}"#),
            Succeeded {
                reference: "pay_1".into()
            }
        );
    }

    #[test]
    fn a_decline_is_a_failure_with_its_code() {
        assert_eq!(
            json(
                200,
                r#"{"id":"pay_2","status":"failed","failure_code":"card_declined"}"#
            ),
            Declined {
                reference: Some("pay_2".into()),
                code: "card_declined".into()
            }
        );
    }

    #[test]
    fn pending_is_left_to_the_reconciler() {
        assert_eq!(
            json(200, r#"{"id":"pay_3","status":"pending"}"#),
            Pending {
                reference: Some("pay_3".into())
            }
        );
    }

    #[test]
    fn definitive_client_errors_are_rejections_with_evidence() {
        for status in [400, 402, 403, 404, 422] {
            assert_eq!(
                json(status, r#"{"error":"invalid amount"}"#),
                Rejected {
                    status,
                    detail: "invalid amount".into()
                }
            );
        }
    }

    #[test]
    fn retryable_and_server_errors_are_uncertain_never_failed() {
        for status in [408, 409, 425, 500, 502, 503, 504] {
            assert!(matches!(json(status, "{}"), Uncertain { .. }), "{status}");
        }
    }

    #[test]
    fn a_429_is_throttled_with_the_default_wait_until_its_header_is_read() {
        assert_eq!(
            json(429, r#"{"error":"slow down"}"#),
            Throttled {
                retry_after: DEFAULT_RETRY_AFTER
            }
        );
    }

    #[test]
    fn a_success_status_where_none_was_expected_is_uncertain_and_says_so() {
        assert_eq!(
            classify_status(204, b""),
            Uncertain {
                cause: "provider answered 204 where no success was expected".into()
            }
        );
        assert_eq!(
            classify_status(503, b""),
            Uncertain {
                cause: "provider error (HTTP 503)".into()
            }
        );
        assert_eq!(
            classify_status(425, b""),
            Uncertain {
                cause: "provider asked to retry (HTTP 425)".into()
            }
        );
    }

    #[test]
    fn an_unreadable_success_is_uncertain() {
        assert!(matches!(json(200, "<html>"), Uncertain { .. }));
        assert!(matches!(
            json(200, r#"{"status":"succeeded"}"#),
            Uncertain { .. }
        ));
        assert!(matches!(
            json(200, r#"{"id":"x","status":"weird"}"#),
            Uncertain { .. }
        ));
    }
}
