//! Registering a refund: in one transaction, lock the payment's row (so that refunds of
//! one payment queue behind each other), write the refund with its outbox and audit
//! rows, and reserve its amount on the payment with a conditional UPDATE that keeps the
//! sum of the payment's refunds that are not FAILED within the amount paid. The
//! database has the last word: the UPDATE's condition and a CHECK constraint, and a
//! trigger that gives a failed refund's amount back (migration V5).
//!
//! The refund is parsed here, from the agent's text, once the payment's row is locked:
//! its amount is read in the payment's currency, and the request's hash covers that
//! currency. So a registration reads the payment once, under its lock.
//!
//! A refund may carry an `AgentCheck` (intake remembered its agent instead of reading
//! it): the transaction's first round trip then confirms the agent's row as the
//! batches do, and an unconfirmed refund is answered `Unconfirmed` with nothing
//! written and nothing about the payment said.

use deadpool_postgres::Transaction;
use opgate_domain::{
    Currency, IdempotencyKey, OperationRequest, OperationStatus, RefundRequest, RefundRequestError,
};
use rust_decimal::Decimal;
use tokio_postgres::types::ToSql;
use tokio_postgres::Row;
use uuid::Uuid;

use crate::agents::key_id_accepted;
use crate::error::StoreError;
use crate::operations::{
    insert_operation, insert_operation_row, operation_columns, operation_from_row,
    registered_events, Layout, NewOperation, OperationRecord, Registration, RowValues,
    FIND_BY_IDEMPOTENCY_KEY,
};
use crate::pool::Store;
use crate::registration_batch::AgentCheck;

/// A refund as the agent asked for it; its amount and reason are parsed against the
/// payment (`RefundRequest::parse`) once the payment is locked.
pub struct NewRefund<'a> {
    pub operation_id: Uuid,
    pub agent_id: &'a str,
    pub idempotency_key: &'a IdempotencyKey,
    pub payment_operation_id: Uuid,
    /// As sent (a JSON number's text or a string's value); `None` refunds whatever
    /// remains refundable.
    pub amount: Option<&'a str>,
    pub reason: Option<&'a str>,
    pub trace_context: Option<&'a str>,
    /// The remembered agent row to confirm (see the module); `None` when intake read
    /// the agent for this request.
    pub agent_check: Option<&'a AgentCheck>,
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
    /// The amount or reason does not parse (in the payment's currency).
    Invalid(RefundRequestError),
    /// Carried an `AgentCheck` that the agent's row did not confirm: nothing written;
    /// read the agent again.
    Unconfirmed,
}

/// Locks the payment for the rest of the transaction; its values are the latest
/// committed ones (a refund committed while this waited is counted).
const LOCK_PAYMENT: &str = "
SELECT status, amount, currency, refunded_amount, provider, provider_reference
FROM operations
WHERE operation_id = $1 AND agent_id = $2 AND operation_type = 'payment'
FOR UPDATE";

/// Whether the agent's row ($1) is still the version intake read ($2) and accepts the
/// key id ($3): one row if so.
const CONFIRM_AGENT: &str = concat!(
    "SELECT 1 FROM agents a WHERE a.agent_id = $1 AND a.xmin::text::bigint = $2 AND ",
    key_id_accepted!("a.", "$3")
);

/// The reservation itself: applied only while it fits.
const RESERVE_REFUND: &str = "
UPDATE operations SET refunded_amount = refunded_amount + $3
WHERE operation_id = $1 AND agent_id = $2 AND status = 'SUCCEEDED'
  AND refunded_amount + $3 <= amount";

/// On one node, the refund, its outbox and audit events and the reservation of its
/// amount on the payment as one statement ($1..$12 as `insert_operation`), sent with
/// the COMMIT. It runs with the payment locked and its status seen SUCCEEDED, and adds
/// the refund's amount to the payment's `refunded_amount` only for a refund it
/// inserted; the CHECK on `refunded_amount` (V5) fails the statement, and with it the
/// transaction, if the sum would pass the amount paid.
const REGISTER_AND_RESERVE: &str = concat!(
    "WITH inserted AS (",
    insert_operation_row!(),
    operation_columns!(),
    ", trace_context, parent_operation_id
    ), ",
    registered_events!(),
    ", reserved AS (
        UPDATE operations SET refunded_amount = operations.refunded_amount + inserted.amount
        FROM inserted
        WHERE operations.operation_id = inserted.parent_operation_id
          AND operations.agent_id = inserted.agent_id
    )
    SELECT ",
    operation_columns!(),
    " FROM inserted"
);

impl Store {
    #[tracing::instrument(name = "INSERT operations", skip_all, fields(otel.kind = "client", db.system.name = "postgresql", db.operation.name = "INSERT", db.collection.name = "operations", opgate.kind = "refund"))]
    pub async fn register_refund(
        &self,
        refund: &NewRefund<'_>,
    ) -> Result<RefundRegistration, StoreError> {
        let layout = self.layout().await?;
        if layout == Layout::Single {
            return self.register_refund_pipelined(refund).await;
        }
        let mut client = self.client().await?;
        let transaction = client.transaction().await?;
        let answer = register_in_steps(&transaction, refund, layout).await?;
        match &answer {
            RefundRegistration::Registered(Registration::Created(_)) => {
                transaction.commit().await?
            }
            _ => transaction.rollback().await?,
        }
        Ok(answer)
    }

    /// Two round trips: BEGIN, the agent's check (for a remembered agent), the
    /// payment's lock and the key's lookup; then the registering statement with the
    /// COMMIT (or a ROLLBACK, when the answer is a refusal or a replay). Between them
    /// the connection is held by a guard that closes it, rather than return it to the
    /// pool inside the transaction, if the request is dropped or fails there.
    async fn register_refund_pipelined(
        &self,
        refund: &NewRefund<'_>,
    ) -> Result<RefundRegistration, StoreError> {
        let open = OpenTransaction(Some(self.client().await?));
        let client = open.client();
        // The agent's row check, when intake authenticated from a remembered read: the
        // statement and its parameters.
        let confirm = match refund.agent_check {
            Some(check) => {
                let params: [&(dyn ToSql + Sync); 3] =
                    [&refund.agent_id, &check.row_version, &check.key_id];
                Some((client.prepare_cached(CONFIRM_AGENT).await?, params))
            }
            None => None,
        };
        let lock = client.prepare_cached(LOCK_PAYMENT).await?;
        let find = client.prepare_cached(FIND_BY_IDEMPOTENCY_KEY).await?;
        let register = client.prepare_cached(REGISTER_AND_RESERVE).await?;
        let payment_params: [&(dyn ToSql + Sync); 2] =
            [&refund.payment_operation_id, &refund.agent_id];
        let key_params: [&(dyn ToSql + Sync); 2] =
            [&refund.agent_id, &refund.idempotency_key.as_str()];
        // Polled in order, so sent in order, each on its first poll. The lookup runs
        // after the lock, so any refund of this payment under this key has committed
        // by then.
        let (begin, confirmed, payment, existing) = tokio::join!(
            client.batch_execute("BEGIN"),
            async {
                match &confirm {
                    Some((statement, params)) => client
                        .query_opt(statement, params)
                        .await
                        .map(|row| row.is_some()),
                    None => Ok(true),
                }
            },
            client.query_opt(&lock, &payment_params),
            client.query_opt(&find, &key_params),
        );
        begin?;
        let (confirmed, payment, existing) = (confirmed?, payment?, existing?);
        let write = match decide(confirmed, payment, existing, refund)? {
            Decision::Answer(answer) => {
                client.batch_execute("ROLLBACK").await?;
                open.finish();
                return Ok(answer);
            }
            Decision::Write(write) => write,
        };
        let new = write.new_operation(refund);
        let money = Some((write.amount, write.currency.clone()));
        let values = RowValues::new(&new, &write.payload, &write.provider, money);
        // `insert_operation`'s parameters, $1..$12.
        let parent: [&(dyn ToSql + Sync); 1] = [&refund.payment_operation_id];
        let params = values.params_with(&parent);
        let (inserted, commit) = tokio::join!(
            client.query_opt(&register, &params),
            client.batch_execute("COMMIT"),
        );
        // Both answered: the transaction has ended, committed or (after a failed
        // statement) rolled back.
        open.finish();
        let inserted = inserted?;
        commit?;
        match inserted {
            Some(row) => Ok(RefundRegistration::Registered(Registration::Created(
                operation_from_row(&row)?,
            ))),
            // The key was taken meanwhile by something other than a refund of this
            // payment (the COMMIT committed nothing): answered from it.
            None => answer_taken_key(&self.client().await?, refund, &write.request).await,
        }
    }
}

/// The answer for a key that a registration other than a refund of this payment took
/// after the lookup: a replay or a reused key, read from what took it.
async fn answer_taken_key<C: deadpool_postgres::GenericClient>(
    client: &C,
    refund: &NewRefund<'_>,
    request: &OperationRequest,
) -> Result<RefundRegistration, StoreError> {
    let existing = find_by_key(client, refund)
        .await?
        .ok_or_else(|| StoreError::Corrupt("a conflicting key vanished".into()))?;
    Ok(RefundRegistration::Registered(replay_or_reuse(
        existing, request,
    )))
}

/// A connection inside a transaction driven by hand. Dropped before `finish`, it takes
/// the connection out of the pool and closes it, so that the server rolls the
/// transaction back and no later checkout finds it open.
struct OpenTransaction(Option<deadpool_postgres::Object>);

impl OpenTransaction {
    fn client(&self) -> &deadpool_postgres::Object {
        self.0.as_ref().expect("a connection until finished")
    }

    /// The transaction has ended (committed or rolled back): the connection goes back.
    fn finish(mut self) {
        self.0.take();
    }
}

impl Drop for OpenTransaction {
    fn drop(&mut self) {
        if let Some(client) = self.0.take() {
            drop(deadpool_postgres::Object::take(client));
        }
    }
}

/// What the locked payment and the key's lookup leave to do.
enum Decision {
    /// Nothing to write: a refusal, or what the key already names.
    Answer(RefundRegistration),
    Write(RefundWrite),
}

/// The refund as the executor will send it: the request as made, plus the amount it
/// resolved to and the provider's id of the payment (the hash covers only the request).
struct RefundWrite {
    request: OperationRequest,
    payload: serde_json::Value,
    provider: String,
    amount: Decimal,
    currency: String,
    refundable: Decimal,
}

impl RefundWrite {
    fn new_operation<'a>(&'a self, refund: &'a NewRefund<'_>) -> NewOperation<'a> {
        NewOperation {
            operation_id: refund.operation_id,
            agent_id: refund.agent_id,
            idempotency_key: refund.idempotency_key,
            request: &self.request,
            provider: &self.provider,
            awaiting_approval_for: None,
            trace_context: refund.trace_context,
        }
    }
}

/// In the order a refund is judged: its agent (when remembered), its payment, its
/// request in the payment's currency, its key, then what the payment has left.
fn decide(
    confirmed: bool,
    payment: Option<Row>,
    existing: Option<Row>,
    refund: &NewRefund<'_>,
) -> Result<Decision, StoreError> {
    let answer = |answer| Ok(Decision::Answer(answer));
    if !confirmed {
        return answer(RefundRegistration::Unconfirmed);
    }
    let Some(payment) = payment else {
        return answer(RefundRegistration::PaymentNotFound);
    };
    // Every payment carries its money (V5 copied it onto older rows).
    let money_missing = || StoreError::Corrupt("a payment without amount or currency".into());
    let currency: String = payment
        .get::<_, Option<String>>("currency")
        .ok_or_else(money_missing)?;
    let code = Currency::parse(&currency)
        .map_err(|_| StoreError::Corrupt(format!("a payment in currency {currency:?}")))?;
    let request = match RefundRequest::parse(
        refund.payment_operation_id,
        refund.amount,
        refund.reason,
        code,
    ) {
        Ok(request) => request.to_operation_request(),
        Err(invalid) => return answer(RefundRegistration::Invalid(invalid)),
    };
    if let Some(existing) = existing {
        let existing = operation_from_row(&existing)?;
        return answer(RefundRegistration::Registered(replay_or_reuse(
            existing, &request,
        )));
    }
    let status: String = payment.get("status");
    let status: OperationStatus = status.parse()?;
    if status != OperationStatus::Succeeded {
        return answer(RefundRegistration::PaymentNotRefundable(status));
    }
    let paid: Decimal = payment
        .get::<_, Option<Decimal>>("amount")
        .ok_or_else(money_missing)?;
    let refunded: Decimal = payment.get("refunded_amount");
    let refundable = paid - refunded;
    let amount = match request.money() {
        Some(money) => money.amount(),
        None => refundable,
    };
    if amount <= Decimal::ZERO || amount > refundable {
        return answer(RefundRegistration::ExceedsPayment { refundable });
    }
    let payment_reference: Option<String> = payment.get("provider_reference");
    let mut payload = request.fields().clone();
    if let Some(fields) = payload.as_object_mut() {
        fields.insert("amount".into(), amount.to_string().into());
        fields.insert(
            "payment_provider_reference".into(),
            payment_reference.into(),
        );
    }
    Ok(Decision::Write(RefundWrite {
        request,
        payload,
        provider: payment.get("provider"),
        amount,
        currency,
        refundable,
    }))
}

/// On Citus: each step its own statement, in the caller's transaction.
async fn register_in_steps(
    transaction: &Transaction<'_>,
    refund: &NewRefund<'_>,
    layout: Layout,
) -> Result<RefundRegistration, StoreError> {
    // Intake remembers agents only on one node (their rows' versions are not read on
    // Citus), so a check here cannot be confirmed: the agent is read again.
    if refund.agent_check.is_some() {
        return Ok(RefundRegistration::Unconfirmed);
    }
    let payment = transaction
        .query_opt(
            LOCK_PAYMENT,
            &[&refund.payment_operation_id, &refund.agent_id],
        )
        .await?;
    let existing = match payment {
        Some(_) => {
            transaction
                .query_opt(
                    FIND_BY_IDEMPOTENCY_KEY,
                    &[&refund.agent_id, &refund.idempotency_key.as_str()],
                )
                .await?
        }
        None => None,
    };
    let write = match decide(true, payment, existing, refund)? {
        Decision::Answer(answer) => return Ok(answer),
        Decision::Write(write) => write,
    };
    let new = write.new_operation(refund);
    let money = Some((write.amount, write.currency.clone()));
    let parent = Some(refund.payment_operation_id);
    let inserted = insert_operation(
        transaction,
        &new,
        &write.payload,
        &write.provider,
        money,
        parent,
        layout,
    )
    .await?;
    let Some(row) = inserted else {
        return answer_taken_key(transaction, refund, &write.request).await;
    };
    let reserved = transaction
        .execute(
            RESERVE_REFUND,
            &[
                &refund.payment_operation_id,
                &refund.agent_id,
                &write.amount,
            ],
        )
        .await?;
    if reserved != 1 {
        return Ok(RefundRegistration::ExceedsPayment {
            refundable: write.refundable,
        });
    }
    Ok(RefundRegistration::Registered(Registration::Created(
        operation_from_row(&row)?,
    )))
}

async fn find_by_key<C: deadpool_postgres::GenericClient>(
    client: &C,
    refund: &NewRefund<'_>,
) -> Result<Option<OperationRecord>, StoreError> {
    client
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
