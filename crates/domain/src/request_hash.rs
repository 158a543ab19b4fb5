//! The canonical request hash: SHA-256, lowercase hex, of the request's canonical JSON
//! (compact, keys sorted, every business field normalised). Two requests are the same
//! logical operation exactly when their hashes are equal.

use std::fmt;

use crate::sha256_hex::sha256_hex;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RequestHash(String);

impl RequestHash {
    pub fn of_canonical_json(canonical_json: &str) -> Self {
        Self(sha256_hex(canonical_json.as_bytes()))
    }

    /// Wraps a hash read back from storage.
    pub fn from_stored(hex: String) -> Self {
        Self(hex)
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for RequestHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod golden_vectors {
    use crate::PaymentRequest;

    fn hash(customer: &str, invoice: &str, amount: &str, currency: Option<&str>) -> String {
        PaymentRequest::parse(customer, invoice, amount, currency)
            .unwrap()
            .request_hash()
            .to_string()
    }

    /// Fixed vectors: if one of these changes, every stored request hash changes with it
    /// and every retry in flight during a deploy would be answered 409. Never edit them;
    /// version the hash instead.
    #[test]
    fn golden_vectors_are_stable() {
        let vectors = [
            (
                ("cus_1", "inv_1", "250.00", Some("USD")),
                "991c3105c2e27a2e5d9a241dc3e226871fc747505498baa11adb1b4c153f4d13",
            ),
            (
                ("cus_1", "inv_1", "1000", Some("JPY")),
                "b44702717b22253fa5cdbc252cf1f3e7e7a8bd0f7f59deb5443cf6d8735e9012",
            ),
            (
                ("cus_1", "inv_1", "1.5", Some("BHD")),
                "fc3188daf78476a126154966e156b80714bda8d6f9cd531e13f8953d748e99d8",
            ),
        ];
        for ((customer, invoice, amount, currency), expected) in vectors {
            assert_eq!(
                hash(customer, invoice, amount, currency),
                expected,
                "{customer} {invoice} {amount} {currency:?}"
            );
        }
    }

    #[test]
    fn hash_is_the_sha256_of_the_canonical_json() {
        let request = PaymentRequest::parse("cus_1", "inv_1", "250", None).unwrap();
        let canonical = r#"{"amount":"250.00","currency":"USD","customer_id":"cus_1","invoice_id":"inv_1","operation_type":"payment"}"#;
        assert_eq!(request.canonical_json(), canonical);
        // Independently computed: printf '%s' "$canonical" | sha256sum
        assert_eq!(request.request_hash().as_str(), SHA256_OF_CANONICAL);
    }

    const SHA256_OF_CANONICAL: &str =
        "991c3105c2e27a2e5d9a241dc3e226871fc747505498baa11adb1b4c153f4d13";

    #[test]
    fn equivalent_requests_hash_alike() {
        let reference = hash("cus_1", "inv_1", "250.00", Some("USD"));
        assert_eq!(hash("cus_1", "inv_1", "250", Some("USD")), reference);
        assert_eq!(hash("cus_1", "inv_1", "250.0", None), reference);
        assert_eq!(
            hash("  cus_1", "inv_1 ", "250.000", Some(" usd")),
            reference
        );
    }

    #[test]
    fn different_requests_hash_apart() {
        let reference = hash("cus_1", "inv_1", "250.00", Some("USD"));
        assert_ne!(hash("cus_2", "inv_1", "250.00", Some("USD")), reference);
        assert_ne!(hash("cus_1", "inv_2", "250.00", Some("USD")), reference);
        assert_ne!(hash("cus_1", "inv_1", "250.01", Some("USD")), reference);
        assert_ne!(hash("cus_1", "inv_1", "250.00", Some("EUR")), reference);
    }
}
