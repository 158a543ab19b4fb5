//! How a declared kind reads its provider's answer: where the provider's id and state
//! of the object are (JSON pointers) and which states mean succeeded, failed or still
//! pending. Anything it cannot place is `Unreadable`, never a guess.

use serde_json::Value;

/// Where to read the outcome in a provider's 2xx body. Built by the catalog, which
/// checks the pointers and that the three lists are disjoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResponseMapping {
    /// JSON pointer to the provider's id of the object.
    pub reference: String,
    /// JSON pointer to the object's state.
    pub status: String,
    /// State values (as JSON text, strings without quotes) meaning each outcome.
    pub succeeded: Vec<String>,
    pub failed: Vec<String>,
    pub pending: Vec<String>,
    /// JSON pointer to why it failed; without it, the failed state itself is the code.
    pub failure_code: Option<String>,
}

/// What a provider's 2xx answer says happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Classified {
    Succeeded {
        reference: String,
    },
    Failed {
        reference: Option<String>,
        code: String,
    },
    Pending {
        reference: Option<String>,
    },
    /// Not JSON, no state, or a state the catalog does not list: the caller must treat
    /// the outcome as unknown.
    Unreadable {
        cause: String,
    },
}

/// The text a scalar is compared by: strings without their quotes, numbers and bools
/// as JSON writes them. Objects, arrays and null have none.
fn scalar_text(value: &Value) -> Option<String> {
    match value {
        Value::String(text) => Some(text.clone()),
        Value::Number(number) => Some(number.to_string()),
        Value::Bool(flag) => Some(flag.to_string()),
        Value::Null | Value::Array(_) | Value::Object(_) => None,
    }
}

impl ResponseMapping {
    /// Classifies a 2xx body (see [`Classified`]).
    pub fn classify(&self, body: &[u8]) -> Classified {
        let unreadable = |cause: String| Classified::Unreadable { cause };
        let json: Value = match serde_json::from_slice(body) {
            Ok(json) => json,
            Err(error) => return unreadable(format!("the answer is not JSON: {error}")),
        };
        let Some(status) = json.pointer(&self.status).and_then(scalar_text) else {
            return unreadable(format!("the answer has no status at {:?}", self.status));
        };
        let reference = json
            .pointer(&self.reference)
            .and_then(scalar_text)
            .filter(|reference| !reference.is_empty());
        if self.succeeded.contains(&status) {
            match reference {
                Some(reference) => Classified::Succeeded { reference },
                None => unreadable(format!(
                    "status {status:?} means succeeded but the answer has no reference at {:?}",
                    self.reference
                )),
            }
        } else if self.failed.contains(&status) {
            let code = self
                .failure_code
                .as_deref()
                .and_then(|pointer| json.pointer(pointer))
                .and_then(scalar_text)
                .filter(|code| !code.is_empty())
                .unwrap_or(status);
            Classified::Failed { reference, code }
        } else if self.pending.contains(&status) {
            Classified::Pending { reference }
        } else {
            unreadable(format!("status {status:?} is not one the catalog lists"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mapping() -> ResponseMapping {
        ResponseMapping {
            reference: "/id".to_owned(),
            status: "/status".to_owned(),
            succeeded: vec!["succeeded".to_owned(), "200".to_owned()],
            failed: vec!["failed".to_owned(), "false".to_owned()],
            pending: vec!["pending".to_owned()],
            failure_code: Some("/failure_code".to_owned()),
        }
    }

    fn classify(body: &str) -> Classified {
        mapping().classify(body.as_bytes())
    }

    #[test]
    fn succeeded_needs_a_reference() {
        assert_eq!(
            classify(r#"{"id":"res_1","status":"succeeded"}"#),
            Classified::Succeeded {
                reference: "res_1".to_owned()
            }
        );
        for body in [
            r#"{"status":"succeeded"}"#,
            r#"{"id":"","status":"succeeded"}"#,
            r#"{"id":null,"status":"succeeded"}"#,
        ] {
            assert!(
                matches!(classify(body), Classified::Unreadable { cause } if cause.contains("no reference")),
                "{body}"
            );
        }
    }

    #[test]
    fn failed_reads_the_failure_code_or_falls_back_to_the_status() {
        assert_eq!(
            classify(r#"{"id":"res_1","status":"failed","failure_code":"out_of_stock"}"#),
            Classified::Failed {
                reference: Some("res_1".to_owned()),
                code: "out_of_stock".to_owned()
            }
        );
        assert_eq!(
            classify(r#"{"status":"failed"}"#),
            Classified::Failed {
                reference: None,
                code: "failed".to_owned()
            }
        );
        let without_pointer = ResponseMapping {
            failure_code: None,
            ..mapping()
        };
        assert_eq!(
            without_pointer.classify(br#"{"id":"r","status":"failed","failure_code":"x"}"#),
            Classified::Failed {
                reference: Some("r".to_owned()),
                code: "failed".to_owned()
            }
        );
    }

    #[test]
    fn pending_keeps_the_reference_when_there_is_one() {
        assert_eq!(
            classify(r#"{"id":"res_1","status":"pending"}"#),
            Classified::Pending {
                reference: Some("res_1".to_owned())
            }
        );
        assert_eq!(
            classify(r#"{"status":"pending"}"#),
            Classified::Pending { reference: None }
        );
    }

    #[test]
    fn numbers_and_bools_are_compared_by_their_json_text() {
        assert_eq!(
            classify(r#"{"id":7,"status":200}"#),
            Classified::Succeeded {
                reference: "7".to_owned()
            }
        );
        assert!(matches!(
            classify(r#"{"id":"r","status":false}"#),
            Classified::Failed { code, .. } if code == "false"
        ));
        // The string "200" and the number 200 are the same text.
        assert!(matches!(
            classify(r#"{"id":"r","status":"200"}"#),
            Classified::Succeeded { .. }
        ));
    }

    #[test]
    fn anything_else_is_unreadable() {
        for body in [
            "not json",
            "",
            r#"{"id":"r"}"#,
            r#"{"id":"r","status":null}"#,
            r#"{"id":"r","status":["succeeded"]}"#,
            r#"{"id":"r","status":"SUCCEEDED"}"#,
            r#"{"id":"r","status":"refunded"}"#,
            r#"["succeeded"]"#,
        ] {
            assert!(
                matches!(classify(body), Classified::Unreadable { .. }),
                "{body:?}"
            );
        }
    }
}
