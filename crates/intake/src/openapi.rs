//! The OpenAPI document, generated from the handlers' annotations and served at
//! `/openapi.json`.

use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use crate::problem::Problem;
use crate::routes::{admin, create, health, operations, payments, refunds};
use crate::view::OperationView;

#[derive(OpenApi)]
#[openapi(
    info(title = "opgate intake", description = "Idempotent execution of agents' business operations."),
    paths(
        create::create_operation,
        operations::get_operation,
        admin::list_operations,
        admin::show_operation,
        admin::resolve_operation,
        health::healthz,
        health::readyz,
    ),
    components(schemas(create::OperationBody, payments::PaymentBody, refunds::RefundBody, OperationView, Problem, admin::AdminOperation, admin::AdminOperationDetail, admin::ResolveBody)),
    modifiers(&AgentKeyScheme),
)]
pub struct ApiDoc;

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
