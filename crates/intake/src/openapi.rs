//! The OpenAPI document, generated from the handlers' annotations and served at
//! `/openapi.json`, with a path of its own for each kind, built in or declared, whose
//! request body is the kind's schema (for a declared kind, the catalog's: the same
//! schema that validates it).

use opgate_catalog::Catalog;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use crate::listing::OperationPage;
use crate::problem::Problem;
use crate::routes::{admin, approvals, create, health, operations, payments, refunds};
use crate::view::OperationView;

#[derive(OpenApi)]
#[openapi(
    info(title = "opgate intake", description = "Idempotent execution of agents' business operations.\n\n\
Every error is an RFC 9457 problem (`application/problem+json` with `type`, `title`, `status` and `detail`), and a \
refused request records nothing. Besides the answers listed for each operation, any request may get: 404 \
(`urn:opgate:problem:route-not-found`) for a path no route serves; 405 (`urn:opgate:problem:method-not-allowed`) \
for a path that is served but not with this method (HEAD and OPTIONS included), with `Allow` naming the methods \
it takes; 400 (`urn:opgate:problem:duplicate-header`) when `Authorization` or \
`Idempotency-Key` is sent more than once. Requests the HTTP parser itself refuses (a malformed request line or \
header, a control character in a header value, conflicting Content-Length/Transfer-Encoding) get 400, an over-large \
head 431, and a head that does not arrive in time 408, each with an empty body."),
    paths(
        create::create_operation,
        operations::list_operations,
        operations::get_operation,
        admin::list_operations,
        admin::show_operation,
        admin::resolve_operation,
        approvals::approve_operation,
        approvals::reject_operation,
        health::healthz,
        health::readyz,
    ),
    components(schemas(create::OperationBody, payments::PaymentBody, refunds::RefundBody, OperationView, OperationPage, Problem, admin::AdminOperation, admin::AdminOperationDetail, admin::ResolveBody, approvals::ApproveBody, approvals::RejectBody)),
    modifiers(&AgentKeyScheme),
)]
pub struct ApiDoc;

/// The generated document plus one `POST /agent/operations/<name>` per declared kind.
pub fn document(catalog: &Catalog) -> serde_json::Value {
    let mut document = serde_json::to_value(ApiDoc::openapi()).expect("OpenAPI serialises");
    let generic = document["paths"]["/agent/operations/{kind}"]["post"].clone();
    let builtin = [
        (
            "payment",
            "Charge a customer: one payment per invoice.",
            "PaymentBody",
        ),
        (
            "refund",
            "Give back all or part of one of this agent's SUCCEEDED payments.",
            "RefundBody",
        ),
    ]
    .map(|(name, summary, body)| {
        let schema = serde_json::json!({ "$ref": format!("#/components/schemas/{body}") });
        (name.to_owned(), summary.to_owned(), schema)
    });
    let declared = catalog.kinds().map(|kind| {
        let name = kind.name().to_string();
        (name, kind.description().to_owned(), kind.schema().clone())
    });
    for (name, summary, schema) in builtin.into_iter().chain(declared) {
        let mut post = generic.clone();
        if let Some(post) = post.as_object_mut() {
            post.insert("summary".into(), summary.into());
            post.insert("operationId".into(), format!("create_{name}").into());
            if let Some(parameters) = post.get_mut("parameters").and_then(|p| p.as_array_mut()) {
                parameters.retain(|p| p["name"] != "kind");
            }
        }
        post["requestBody"]["content"]["application/json"]["schema"] = schema;
        document["paths"][format!("/agent/operations/{name}")] =
            serde_json::json!({ "post": post });
    }
    document
}

struct AgentKeyScheme;

impl Modify for AgentKeyScheme {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        for scheme in ["agent_key", "operator_key"] {
            components.add_security_scheme(
                scheme,
                SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
            );
        }
    }
}
