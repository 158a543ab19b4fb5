//! On Citus, every statement that changes one operation names its agent
//! (docs/scale-out.md). The executor's and the reconciler's claims, the writes that
//! follow them (heartbeat, attempt counting, requeue, completion, stale-write audit,
//! release) and operators' decisions commit on the agent's node alone: a statement
//! that filtered on the operation alone would run on every shard, and one that audits
//! with an `INSERT … SELECT` from its own update would send the rows to every worker;
//! Citus would commit either on both workers in two phases, which the record of
//! prepared transactions shows (so the coordinator must run with
//! `citus.recover_2pc_interval = -1`; `make test-citus`).

use std::time::Duration;

use opgate_domain::IdempotencyKey;
use opgate_domain::{OperationStatus, Transition};
use opgate_e2e::api::{payment_body, post_payment};
use opgate_e2e::citus::{agents_on_every_worker, prepared_transactions, CitusDb};
use opgate_e2e::db::{new_operation, payment_request, register_payment};
use opgate_e2e::Intake;
use opgate_store::{
    BatchAnswer, FencedTransition, FencedWrite, OperatorAction, PendingRegistration, Registration,
};

const LEASE: Duration = Duration::from_secs(30);
const OWNER: &str = "routing-test";

async fn status(sql: &tokio_postgres::Client, id: uuid::Uuid) -> String {
    sql.query_one(
        "SELECT status FROM operations WHERE operation_id = $1",
        &[&id],
    )
    .await
    .unwrap()
    .get(0)
}

#[tokio::test]
async fn claims_and_every_write_after_them_commit_on_the_agents_node() {
    let Some((cluster, db)) = CitusDb::migrated(
        "claims_and_every_write_after_them_commit_on_the_agents_node",
        8,
    )
    .await
    else {
        return;
    };
    let sql = db.sql().await;
    // One agent on each worker, three payments each, claimed agent by agent.
    let agents = agents_on_every_worker(&sql, 1).await;
    for agent in &agents {
        db.create_agent(agent, &["--allow", "payment"]);
        for i in 0..3 {
            register_payment(&db.store, agent, &format!("{agent}-{i}"), "10.00").await;
        }
    }
    let before = prepared_transactions(&sql).await;
    let mut claimed = Vec::new();
    for agent in &agents {
        let ops = db
            .store
            .claim_due_operations_of_agent(OWNER, LEASE, 10, agent)
            .await
            .unwrap();
        assert_eq!(ops.len(), 3, "{agent}'s three payments");
        claimed.push(ops);
    }

    let mut completions = Vec::new();
    for ops in &claimed {
        let (done, requeued, released) = (&ops[0], &ops[1], &ops[2]);
        assert!(db.store.heartbeat(&done.lease(), LEASE).await.unwrap());
        assert!(db.store.count_attempt(&done.lease()).await.unwrap());
        let requeue = db
            .store
            .requeue_with_fence(&requeued.lease(), OWNER, Duration::ZERO, "connect refused")
            .await
            .unwrap();
        assert_eq!(requeue, FencedWrite::Applied);
        db.store.release_lease(&released.lease()).await.unwrap();
        db.store
            .record_lease_lost(&released.lease(), OWNER)
            .await
            .unwrap();
        completions.push(FencedTransition {
            lease: done.lease(),
            from: OperationStatus::InProgress,
            transition: Transition::to(OperationStatus::Succeeded, "provider confirmed"),
        });
    }
    // Both agents' completions in one batch, as the executor's group commit sends them,
    // and a stale one (a lease older than the current one) that is refused and audited.
    let mut stale = completions[0].clone();
    stale.lease = claimed[1][2].lease();
    stale.lease.fencing_token -= 1;
    completions.push(stale);
    let uncertain: Vec<FencedTransition> = claimed
        .iter()
        .map(|ops| FencedTransition {
            lease: ops[2].lease(),
            from: OperationStatus::InProgress,
            transition: Transition::to(OperationStatus::Unknown, "answer lost"),
        })
        .collect();
    let writes = db
        .store
        .transition_batch_with_fence(OWNER, &completions)
        .await
        .unwrap();
    assert_eq!(
        writes,
        [
            FencedWrite::Applied,
            FencedWrite::Applied,
            FencedWrite::RejectedStale
        ]
    );
    // Two operations UNKNOWN, then claimed by the reconciler, agent by agent.
    let writes = db
        .store
        .transition_batch_with_fence(OWNER, &uncertain)
        .await
        .unwrap();
    assert_eq!(writes, [FencedWrite::Applied, FencedWrite::Applied]);
    let reconciling = db
        .store
        .claim_due_reconciliations("reconciler-test", LEASE, 10)
        .await
        .unwrap();
    assert_eq!(reconciling.len(), 2, "one UNKNOWN payment of each agent");
    // One goes to review, and an operator resolves it.
    let review = FencedTransition {
        lease: reconciling[0].lease(),
        from: OperationStatus::Reconciling,
        transition: Transition::to(OperationStatus::ManualReview, "not found in time"),
    };
    let write = db
        .store
        .transition_with_fence("reconciler-test", review)
        .await;
    assert_eq!(write.unwrap(), FencedWrite::Applied);
    let resolved = db
        .store
        .resolve_manual_review(
            reconciling[0].operation_id,
            OperationStatus::Succeeded,
            Some("pay_found"),
            "found in the provider's dashboard",
            "operator:carol",
        )
        .await;
    assert!(
        matches!(resolved, Ok(OperatorAction::Applied(_))),
        "{resolved:?}"
    );

    assert_eq!(
        prepared_transactions(&sql).await,
        before,
        "a claim or a write after it was committed on more than one node"
    );
    for ops in &claimed {
        assert_eq!(status(&sql, ops[0].operation_id).await, "SUCCEEDED");
        assert_eq!(status(&sql, ops[1].operation_id).await, "PENDING");
    }
    assert_eq!(status(&sql, reconciling[0].operation_id).await, "SUCCEEDED");
    assert_eq!(
        status(&sql, reconciling[1].operation_id).await,
        "RECONCILING"
    );
    let claims: i64 = sql
        .query_one(
            "SELECT count(*) FROM operation_events
             WHERE reason IN ('claimed', 'provider lookup (check 1)')",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(
        claims, 8,
        "every claim audited: 6 by the executor, 2 by the reconciler"
    );
    let refusals: i64 = sql
        .query_one(
            "SELECT count(*) FROM operation_events WHERE outcome = 'rejected_stale'",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(refusals, 3, "two lost leases and one stale completion");
    drop(sql);
    cluster.drop_everywhere().await;
}

/// Payments above the agents' approval threshold, through intake, wait for an
/// operator; approving one queues it (one outbox event), rejecting another fails it,
/// and a second decision is refused with the status the first left, each on the
/// agent's node.
#[tokio::test]
async fn operator_decisions_commit_on_the_agents_node() {
    let Some((cluster, db)) =
        CitusDb::migrated("operator_decisions_commit_on_the_agents_node", 8).await
    else {
        return;
    };
    let sql = db.sql().await;
    let intake = Intake::start(&db.url).await;
    let http = reqwest::Client::new();
    let mut waiting = Vec::new();
    for agent in agents_on_every_worker(&sql, 1).await {
        let flags = ["--allow", "payment", "--approval-above", "USD:100.00"];
        let key = db.create_agent(&agent, &flags);
        for decision in ["approve", "reject"] {
            let idempotency_key = format!("{agent}-{decision}");
            let body = payment_body("cus_big", &idempotency_key, "500.00");
            let reply = post_payment(
                &http,
                &intake.base_url,
                Some(&key),
                Some(&idempotency_key),
                &body,
            )
            .await;
            assert_eq!(reply.status, 202, "{}", reply.body);
            assert_eq!(reply.body["status"], "AWAITING_APPROVAL", "{}", reply.body);
            waiting.push(reply.operation_id().parse::<uuid::Uuid>().unwrap());
        }
    }
    let before = prepared_transactions(&sql).await;
    for pair in waiting.chunks(2) {
        let approved = db.store.approve_operation(pair[0], "carol", None).await;
        assert!(matches!(approved, Ok(OperatorAction::Applied(_))));
        let rejected = db.store.reject_operation(pair[1], "carol", "too big").await;
        assert!(matches!(rejected, Ok(OperatorAction::Applied(_))));
        let again = db.store.reject_operation(pair[0], "carol", "late").await;
        assert!(
            matches!(
                again,
                Ok(OperatorAction::NotAwaitingApproval(
                    OperationStatus::Pending
                ))
            ),
            "{again:?}"
        );
    }
    assert_eq!(
        prepared_transactions(&sql).await,
        before,
        "an operator's decision was committed on more than one node"
    );
    let queued: i64 = sql
        .query_one("SELECT count(*) FROM outbox", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(queued, 2, "one outbox event per approved payment");
    for pair in waiting.chunks(2) {
        assert_eq!(status(&sql, pair[0]).await, "PENDING");
        assert_eq!(status(&sql, pair[1]).await, "FAILED");
    }
    drop(sql);
    cluster.drop_everywhere().await;
}

/// One group-commit batch of four agents on both workers, with a key twice in it and a
/// key taken before it, once with the same request and once with another: it commits
/// shard by shard without two phases, and answers each registration as one
/// PostgreSQL does.
#[tokio::test]
async fn a_group_commit_batch_commits_shard_by_shard() {
    let Some((cluster, db)) =
        CitusDb::migrated("a_group_commit_batch_commits_shard_by_shard", 8).await
    else {
        return;
    };
    let sql = db.sql().await;
    let agents = agents_on_every_worker(&sql, 2).await;
    for agent in &agents {
        db.create_agent(agent, &["--allow", "payment"]);
    }
    register_payment(&db.store, &agents[0], "taken", "10.00").await;
    let pending = |agent: &str, key: &str, amount: &str| {
        let request = payment_request(key, amount);
        let key = IdempotencyKey::parse(key).unwrap();
        PendingRegistration::from_new(&new_operation(agent, &key, &request))
    };
    let mut batch: Vec<PendingRegistration> = agents
        .iter()
        .flat_map(|agent| (0..3).map(move |i| (agent.clone(), format!("batch-{i}"))))
        .map(|(agent, key)| pending(&agent, &key, "10.00"))
        .collect();
    batch.push(pending(&agents[1], "batch-0", "10.00"));
    // "taken" was registered with invoice inv_taken and 10.00 (register_payment).
    batch.push(pending(&agents[0], "taken", "10.00"));
    batch.push(pending(&agents[0], "taken", "99.00"));

    let before = prepared_transactions(&sql).await;
    let answers: Vec<Registration> = db
        .store
        .register_batch(&batch)
        .await
        .unwrap()
        .into_iter()
        .map(|answer| match answer {
            BatchAnswer::Registered(registration) => registration,
            BatchAnswer::Unconfirmed => panic!("a registration without a check was unconfirmed"),
        })
        .collect();
    assert_eq!(
        prepared_transactions(&sql).await,
        before,
        "a part of the batch was committed on more than one node"
    );
    let created = answers
        .iter()
        .filter(|a| matches!(a, Registration::Created(_)))
        .count();
    assert_eq!(created, 12, "three new keys for each of four agents");
    let duplicate = (&answers[3], &answers[12]);
    assert!(
        matches!(duplicate, (Registration::Created(first), Registration::Replayed(again)) if first.operation_id == again.operation_id),
        "{duplicate:?}"
    );
    assert!(
        matches!(answers[13], Registration::Replayed(_)),
        "{:?}",
        answers[13]
    );
    assert!(
        matches!(answers[14], Registration::KeyReused),
        "{:?}",
        answers[14]
    );
    let counts = db.counts().await;
    assert_eq!((counts.operations, counts.outbox), (13, 13));
    drop(sql);
    cluster.drop_everywhere().await;
}
