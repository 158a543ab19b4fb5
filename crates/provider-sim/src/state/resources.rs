//! Generic resources by collection and idempotency key (keys are scoped per
//! collection, as separate providers would scope them): `POST
//! /v1/resources/{collection}`, its lookups and settlement.

use std::collections::HashMap;

use super::{new_id, settle_status, CreateOutcome, SettleError, SimState};
use crate::faults::Fault;
use crate::model::{LedgerResource, NewResource, Resource, Settlement, Status};
use crate::time::now_rfc3339;

#[derive(Debug, Default)]
pub(super) struct Resources {
    /// collection → key → resource.
    by_key: HashMap<String, HashMap<String, Resource>>,
    /// id → (collection, key).
    keys_by_id: HashMap<String, (String, String)>,
    pub(super) ledger: Vec<LedgerResource>,
}

impl Resources {
    fn by_id(&self, id: &str) -> Option<&Resource> {
        let (collection, key) = self.keys_by_id.get(id)?;
        self.by_key.get(collection)?.get(key)
    }

    fn by_id_mut(&mut self, id: &str) -> Option<&mut Resource> {
        let (collection, key) = self.keys_by_id.get(id)?;
        self.by_key.get_mut(collection)?.get_mut(key)
    }
}

impl SimState {
    /// Creates a resource holding `request.body`; `"simulate": "failed"` or
    /// `"pending"` in the body decides its status instead of success.
    pub fn create_resource(&self, key: &str, request: NewResource) -> CreateOutcome<Resource> {
        let mut rng = rand::thread_rng();
        let mut inner = self.lock();
        let inner = &mut *inner;
        if inner.faults.fire(Fault::ErrorBeforeCommit, &mut rng) {
            return CreateOutcome::InjectedErrorBeforeCommit;
        }
        let existing = inner
            .resources
            .by_key
            .get(&request.collection)
            .and_then(|keys| keys.get(key));
        if let Some(existing) = existing {
            return if request.body == existing.request {
                CreateOutcome::Replayed(existing.clone())
            } else {
                CreateOutcome::KeyConflict
            };
        }

        let start = inner.faults.start(request.simulate, "rejected", &mut rng);
        let resource = Resource {
            id: new_id("res", &mut rng),
            status: start.status,
            failure_code: start.failure_code,
            collection: request.collection,
            idempotency_key: key.to_owned(),
            created_at: now_rfc3339(),
            request: request.body,
        };
        let resources = &mut inner.resources;
        if resource.status == Status::Succeeded {
            resources.ledger.push(LedgerResource::of(&resource));
        }
        resources.keys_by_id.insert(
            resource.id.clone(),
            (resource.collection.clone(), key.to_owned()),
        );
        resources
            .by_key
            .entry(resource.collection.clone())
            .or_default()
            .insert(key.to_owned(), resource.clone());

        CreateOutcome::Created {
            record: resource,
            pending_injected: start.pending_injected,
            after_commit: inner.faults.after_commit(&mut rng),
        }
    }

    pub fn resource_by_key(&self, collection: &str, key: &str) -> Option<Resource> {
        let inner = self.lock();
        inner.resources.by_key.get(collection)?.get(key).cloned()
    }

    /// The resource with this id, if it is in `collection`.
    pub fn resource_by_id(&self, collection: &str, id: &str) -> Option<Resource> {
        let inner = self.lock();
        let resource = inner.resources.by_id(id)?;
        (resource.collection == collection).then(|| resource.clone())
    }

    /// Ends a pending resource; a success enters the ledger now (with the
    /// resource's own `created_at`).
    pub fn settle_resource(
        &self,
        resource_id: &str,
        settlement: Settlement,
    ) -> Result<Resource, SettleError> {
        let mut inner = self.lock();
        let resources = &mut inner.resources;
        let resource = resources
            .by_id_mut(resource_id)
            .ok_or(SettleError::NotFound)?;
        let succeeded =
            settle_status(&mut resource.status, &mut resource.failure_code, settlement)?;
        let resource = resource.clone();
        if succeeded {
            resources.ledger.push(LedgerResource::of(&resource));
        }
        Ok(resource)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    fn new(collection: &str, body: Value) -> NewResource {
        NewResource::new(collection, body).unwrap()
    }

    fn created(outcome: CreateOutcome<Resource>) -> Resource {
        match outcome {
            CreateOutcome::Created { record, .. } => record,
            other => panic!("expected a new resource, got {other:?}"),
        }
    }

    #[test]
    fn keys_are_scoped_per_collection() {
        let state = SimState::default();
        let order = created(state.create_resource("k", new("orders", json!({"sku": "A"}))));
        assert!(order.id.starts_with("res_"));
        assert_eq!(order.status, Status::Succeeded);
        assert_eq!(
            state.create_resource("k", new("orders", json!({"sku": "A"}))),
            CreateOutcome::Replayed(order.clone())
        );
        assert_eq!(
            state.create_resource("k", new("orders", json!({"sku": "B"}))),
            CreateOutcome::KeyConflict
        );
        let booking = created(state.create_resource("k", new("bookings", json!({"sku": "B"}))));
        assert_ne!(booking.id, order.id);
        assert_eq!(state.resource_by_key("orders", "k"), Some(order.clone()));
        assert_eq!(state.resource_by_id("orders", &order.id), Some(order));
        assert_eq!(state.resource_by_id("orders", &booking.id), None);
        assert_eq!(state.resource_by_key("shipments", "k"), None);
        let ledger = state.ledger();
        assert_eq!(ledger.resource_count, 2);
        assert_eq!(ledger.resources[1].collection, "bookings");
        assert_eq!(ledger.count, 0);
    }

    #[test]
    fn simulated_outcomes_and_settlement() {
        let state = SimState::default();
        let failed =
            created(state.create_resource("f", new("orders", json!({"simulate": "failed"}))));
        assert_eq!(failed.status, Status::Failed);
        assert_eq!(failed.failure_code.as_deref(), Some("rejected"));
        let pending =
            created(state.create_resource("p", new("orders", json!({"simulate": "pending"}))));
        assert_eq!(pending.status, Status::Pending);
        assert_eq!(state.ledger().resource_count, 0);
        let settled = state.settle_resource(&pending.id, Settlement::Succeeded);
        assert_eq!(settled.map(|r| r.status), Ok(Status::Succeeded));
        assert_eq!(state.ledger().resources[0].resource_id, pending.id);
        assert_eq!(
            state.settle_resource(&failed.id, Settlement::Succeeded),
            Err(SettleError::NotPending)
        );
        assert_eq!(
            state.settle_resource("res_nope", Settlement::Succeeded),
            Err(SettleError::NotFound)
        );
    }
}
