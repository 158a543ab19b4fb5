//! opgate reconciler: sweeps UNKNOWN operations (and RECONCILING ones whose
//! reconciler died), asks the provider what happened, and resolves them from that
//! evidence, keeps them UNKNOWN with backoff, or escalates to MANUAL_REVIEW. It never
//! pretends to know.

pub mod config;
pub mod decision;
mod sweeper;

pub use config::Config;
pub use sweeper::{run, Sweeper};
