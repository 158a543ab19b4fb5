-- Operation kinds, the provider that executes each operation, the money it moves, and
-- refunds whose sum the database keeps within the payment's amount.
--
-- Every existing operation stays valid and keeps its request hash: existing rows are
-- payments executed by the opgate HTTP provider, and their amount and currency are
-- copied out of the payload they were registered with. Constraints are added by
-- separate statements (not inline with ADD COLUMN) so that the same file can later run
-- on distributed tables.

-- Any kind: built in (payment, refund) or declared in a catalog. The name is what the
-- route, the agent's grants and the MCP tool use.
ALTER TABLE operations DROP CONSTRAINT operations_operation_type_check;
ALTER TABLE operations ADD CONSTRAINT operations_operation_type_name
    CHECK (operation_type ~ '^[a-z][a-z0-9_]{0,62}$');

-- Which provider executes the operation, recorded at registration, so that every
-- attempt and every lookup goes to the provider that executed it whatever the
-- configuration says later.
ALTER TABLE operations ADD COLUMN provider TEXT;
UPDATE operations SET provider = 'opgate-http' WHERE provider IS NULL;
ALTER TABLE operations ALTER COLUMN provider SET NOT NULL;

-- The money the operation moves, for kinds that move money (limits, budgets, refunds).
ALTER TABLE operations ADD COLUMN amount NUMERIC;
ALTER TABLE operations ADD COLUMN currency TEXT;
UPDATE operations
SET amount = (request_payload->>'amount')::numeric,
    currency = request_payload->>'currency'
WHERE operation_type = 'payment' AND amount IS NULL;
ALTER TABLE operations ADD CONSTRAINT operations_money_complete
    CHECK ((amount IS NULL) = (currency IS NULL));
ALTER TABLE operations ADD CONSTRAINT operations_amount_positive
    CHECK (amount > 0);

-- customer_id belongs to payments; other kinds have none (the payload keeps it anyway).
ALTER TABLE operations ALTER COLUMN customer_id DROP NOT NULL;

-- A refund names the payment it returns money from (same agent: refunds are looked up
-- and reserved within one agent's operations, so they co-locate when distributed).
ALTER TABLE operations ADD COLUMN parent_operation_id UUID;
ALTER TABLE operations ADD CONSTRAINT operations_refund_has_parent
    CHECK ((operation_type = 'refund') = (parent_operation_id IS NOT NULL));

-- The sum of the amounts of this payment's refunds that are not FAILED. A refund is
-- registered only by a conditional UPDATE that keeps it within the amount (under the
-- payment's row lock, so concurrent refunds queue on it), and a refund that fails
-- gives its amount back (the trigger below). The CHECK is the last line of defence.
ALTER TABLE operations ADD COLUMN refunded_amount NUMERIC NOT NULL DEFAULT 0;
ALTER TABLE operations ADD CONSTRAINT operations_refunds_within_amount
    CHECK (refunded_amount >= 0 AND (amount IS NULL OR refunded_amount <= amount));

CREATE INDEX operations_refunds_of_payment ON operations (parent_operation_id)
    WHERE parent_operation_id IS NOT NULL;

-- Every path that fails a refund (the executor, the reconciler, an operator, and later
-- an approval that is rejected or expires) releases its reservation, because the
-- database does it rather than each path.
CREATE FUNCTION release_failed_refund() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE operations
    SET refunded_amount = refunded_amount - NEW.amount
    WHERE operation_id = NEW.parent_operation_id AND agent_id = NEW.agent_id;
    RETURN NULL;
END
$$;

CREATE TRIGGER refund_failed_releases_reservation
    AFTER UPDATE OF status ON operations
    FOR EACH ROW
    WHEN (NEW.operation_type = 'refund' AND NEW.status = 'FAILED' AND OLD.status <> 'FAILED')
    EXECUTE FUNCTION release_failed_refund();
