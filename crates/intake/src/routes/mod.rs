//! HTTP routes of intake, one file per resource.

pub mod admin;
pub mod approvals;
pub mod create;
pub mod health;
pub mod operations;
pub mod payments;
pub mod refunds;
