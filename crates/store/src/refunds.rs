//! Registering a refund: in one transaction, lock the payment's row (so that refunds of
//! one payment queue behind each other), write the refund with its outbox and audit
//! rows, and reserve its amount on the payment with a conditional UPDATE that keeps the
//! sum of the payment's refunds that are not FAILED within the amount paid. The
//! database has the last word: the UPDATE's condition and a CHECK constraint, and a
//! trigger that gives a failed refund's amount back (migration V5).

use deadpool_postgres::Transaction;
use opgate_domain::{IdempotencyKey, OperationRequest, OperationStatus};
use rust_decimal::Decimal;
use uuid::Uuid;

use crate::error::StoreError;
use crate::operations::{
    insert_operation, operation_from_row, Layout, NewOperation, OperationRecord, Registration,
    FIND_BY_IDEMPOTENCY_KEY,
};
use crate::pool::Store;

pub struct NewRefund<'a> {
    pub operation_id: Uuid,
    pub agent_id: &'a str,
    pub idempotency_key: &'a IdempotencyKey,
    /// The refund as requested; without money it refunds whatever remains.
    pub request: &'a OperationRequest,
    pub payment_operation_id: Uuid,
    pub trace_context: Option<&'a str>,
}

#[derive(Debug, Clone, PartialEq)]
// One answer per request, moved once: boxing the record would buy nothing.
#[allow(clippy::large_enum_variant)]
pub enum RefundRegistration {
    /// Created, replayed, or the key names a different request.
    Registered(Registration),
    /// No payment of this agent has that id.
    PaymentNotFound,
    /// The payment has not succeeded (or has not yet).
    PaymentNotRefundable(OperationStatus),
    /// More than remains refundable; nothing written.
    ExceedsPayment { refundable: Decimal },
}

/// Locks the payment for the rest of the transaction; its values are the latest
/// committed ones (a refund committed while this waited is counted).
const LOCK_PAYMENT: &str = "
SELECT status, amount, currency, refunded_amount, provider, provider_reference
FROM operations
WHERE operation_id = $1 AND agent_id = $2 AND operation_type = 'payment'
FOR UPDATE";

/// The reservation itself: applied only while it fits.
const RESERVE_REFUND: &str = "
UPDATE operations SET refunded_amount = refunded_amount + $3
WHERE operation_id = $1 AND agent_id = $2 AND status = 'SUCCEEDED'
  AND refunded_amount + $3 <= amount";

impl Store {
    #[tracing::instrument(name = "INSERT operations", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "INSERT", db.collection.name = "operations", opgate.kind = "refund"))]
    pub async fn register_refund(
        &self,
        refund: &NewRefund<'_>,
    ) -> Result<RefundRegistration, StoreError> {
        let layout = self.layout().await?;
        let mut client = self.client().await?;
        let transaction = client.transaction().await?;
        let answer = register_in(&transaction, refund, layout).await?;
        match &answer {
            RefundRegistration::Registered(Registration::Created(_)) => {
                transaction.commit().await?
            }
            _ => transaction.rollback().await?,
        }
        Ok(answer)
    }
}

async fn register_in(
    transaction: &Transaction<'_>,
    refund: &NewRefund<'_>,
    layout: Layout,
) -> Result<RefundRegistration, StoreError> {
    let Some(payment) = transaction
        .query_opt(
            LOCK_PAYMENT,
            &[&refund.payment_operation_id, &refund.agent_id],
        )
        .await?
    else {
        return Ok(RefundRegistration::PaymentNotFound);
    };
    // With the payment locked, any refund of it under this key has committed.
    if let Some(existing) = find_by_key(transaction, refund).await? {
        return Ok(RefundRegistration::Registered(replay_or_reuse(
            existing,
            refund.request,
        )));
    }
    let status: String = payment.get("status");
    let status: OperationStatus = status.parse()?;
    if status != OperationStatus::Succeeded {
        return Ok(RefundRegistration::PaymentNotRefundable(status));
    }
    // Every payment carries its money (V5 copied it onto older rows).
    let money_missing = || StoreError::Corrupt("a payment without amount or currency".into());
    let paid: Decimal = payment
        .get::<_, Option<Decimal>>("amount")
        .ok_or_else(money_missing)?;
    let refunded: Decimal = payment.get("refunded_amount");
    let refundable = paid - refunded;
    let amount = match refund.request.money() {
        Some(money) => money.amount(),
        None => refundable,
    };
    if amount <= Decimal::ZERO || amount > refundable {
        return Ok(RefundRegistration::ExceedsPayment { refundable });
    }
    let currency: String = payment
        .get::<_, Option<String>>("currency")
        .ok_or_else(money_missing)?;
    let provider: String = payment.get("provider");
    let payment_reference: Option<String> = payment.get("provider_reference");
    // What the executor sends: the request as made, plus the amount it resolved to and
    // the provider's id of the payment (the hash covers only the request).
    let mut payload = refund.request.fields().clone();
    if let Some(fields) = payload.as_object_mut() {
        fields.insert("amount".into(), amount.to_string().into());
        fields.insert(
            "payment_provider_reference".into(),
            payment_reference.into(),
        );
    }
    let new = NewOperation {
        operation_id: refund.operation_id,
        agent_id: refund.agent_id,
        idempotency_key: refund.idempotency_key,
        request: refund.request,
        provider: &provider,
        awaiting_approval_for: None,
        trace_context: refund.trace_context,
    };
    let money = Some((amount, currency));
    let parent = Some(refund.payment_operation_id);
    let inserted = insert_operation(
        transaction,
        &new,
        &payload,
        &provider,
        money,
        parent,
        layout,
    )
    .await?;
    let Some(row) = inserted else {
        // The key was taken meanwhile by something other than a refund of this payment.
        let existing = find_by_key(transaction, refund)
            .await?
            .ok_or_else(|| StoreError::Corrupt("a conflicting key vanished".into()))?;
        return Ok(RefundRegistration::Registered(replay_or_reuse(
            existing,
            refund.request,
        )));
    };
    let reserved = transaction
        .execute(
            RESERVE_REFUND,
            &[&refund.payment_operation_id, &refund.agent_id, &amount],
        )
        .await?;
    if reserved != 1 {
        return Ok(RefundRegistration::ExceedsPayment { refundable });
    }
    Ok(RefundRegistration::Registered(Registration::Created(
        operation_from_row(&row)?,
    )))
}

async fn find_by_key(
    transaction: &Transaction<'_>,
    refund: &NewRefund<'_>,
) -> Result<Option<OperationRecord>, StoreError> {
    transaction
        .query_opt(
            FIND_BY_IDEMPOTENCY_KEY,
            &[&refund.agent_id, &refund.idempotency_key.as_str()],
        )
        .await?
        .map(|row| operation_from_row(&row))
        .transpose()
}

fn replay_or_reuse(existing: OperationRecord, request: &OperationRequest) -> Registration {
    if existing.request_hash == *request.request_hash() {
        Registration::Replayed(existing)
    } else {
        Registration::KeyReused
    }
}
