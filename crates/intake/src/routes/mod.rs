//! HTTP routes of intake, one file per resource.

pub mod admin;
pub mod health;
pub mod operations;
pub mod payments;
