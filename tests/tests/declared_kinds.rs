//! Kinds declared in a catalog (examples/catalog.toml), end to end: real intake,
//! executor, reconciler and provider-sim's generic resources on a real PostgreSQL. No
//! Rust was written for `order`; the catalog entry is all there is.

use std::time::Duration;

use opgate_e2e::api::post_operation;
use opgate_e2e::binaries::binary;
use opgate_e2e::{Executor, Intake, ProviderSim, Reconciler, TestDb};
use uuid::Uuid;

const SETTLE: Duration = Duration::from_secs(30);

fn example_catalog() -> String {
    format!("{}/../examples/catalog.toml", env!("CARGO_MANIFEST_DIR"))
}

/// A database, provider-sim, an intake serving the example catalog, and an agent
/// granted `order` (with a USD limit).
struct Declared {
    db: TestDb,
    sim: ProviderSim,
    intake: Intake,
    key: String,
    client: reqwest::Client,
    catalog: String,
}

impl Declared {
    async fn start(faults: &[&str]) -> Self {
        let db = TestDb::create().await;
        let catalog = example_catalog();
        let key = db.create_agent(
            "shop-agent",
            &[
                "--catalog",
                &catalog,
                "--allow",
                "order",
                "--allow",
                "booking",
                "--max-amount",
                "USD:500.00",
            ],
        );
        let sim = ProviderSim::start(faults).await;
        let intake = Intake::start_with(&db.url, &["--catalog", &catalog]).await;
        Self {
            db,
            sim,
            intake,
            key,
            client: reqwest::Client::new(),
            catalog,
        }
    }

    fn catalog_env(&self) -> [(&str, &str); 1] {
        [("OPGATE_SIM_URL", self.sim.base_url.as_str())]
    }

    async fn executor(&self, extra: &[&str]) -> Executor {
        let mut args = vec!["--catalog", self.catalog.as_str()];
        args.extend_from_slice(extra);
        Executor::start_with_env(&self.db.url, &self.sim.base_url, &args, &self.catalog_env()).await
    }

    async fn order(&self, key: &str, body: serde_json::Value) -> opgate_e2e::api::Reply {
        post_operation(
            &self.client,
            &self.intake.base_url,
            "order",
            &self.key,
            key,
            &body,
        )
        .await
    }

    async fn wait_for(&self, id: Uuid, status: &str) -> opgate_store::OperationRecord {
        opgate_e2e::eventually(SETTLE, &format!("{id} to be {status}"), || async {
            let op = self.db.store.find_operation(id).await.ok()??;
            (op.status.as_str() == status).then_some(op)
        })
        .await
    }

    /// provider-sim's resources this operation may have created, ledger-wide: under
    /// its provider key or under a key that names no operation of the database.
    async fn resources_for(&self, id: Uuid) -> Vec<serde_json::Value> {
        let ledger = self.sim.ledger().await;
        let resources = ledger["resources"].as_array().expect("resources");
        opgate_e2e::stack::ledger_wide(&self.db, id, resources, |_| false).await
    }
}

fn an_order() -> serde_json::Value {
    serde_json::json!({"customer_id": " cus_7 ", "sku": "SKU-1", "quantity": 2, "total": 49.9})
}

#[tokio::test]
async fn a_declared_order_whose_answer_was_lost_is_created_exactly_once() {
    let stack = Declared::start(&["drop-after-commit=1.0/1"]).await;
    let _executor = stack.executor(&[]).await;
    let reply = stack.order("order-7", an_order()).await;
    assert_eq!(reply.status, 202, "{}", reply.body);
    assert_eq!(reply.body["operation_type"], "order");
    let id: Uuid = reply.operation_id().parse().unwrap();
    let op = stack.wait_for(id, "SUCCEEDED").await;
    let resources = stack.resources_for(id).await;
    assert_eq!(resources.len(), 1, "exactly one order at the provider");
    assert_eq!(resources[0]["collection"], "orders");
    assert_eq!(
        op.provider_reference.as_deref(),
        resources[0]["resource_id"].as_str()
    );
    assert_eq!(op.provider, "sim");
    assert_eq!(op.amount, Some("49.90".parse().unwrap()));
    let requests = stack.sim.ledger().await["requests_by_key"][format!("opgate-{id}")].clone();
    assert_eq!(
        requests, 2,
        "the lost answer was followed by one re-send, same key"
    );

    // The same order again, written differently (trimmed, amount as text): a replay.
    let replay = stack
        .order(
            "order-7",
            serde_json::json!({"sku": "SKU-1", "customer_id": "cus_7", "quantity": 2, "total": "49.90", "currency": "usd"}),
        )
        .await;
    assert_eq!(replay.status, 200, "{}", replay.body);
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert_eq!(replay.operation_id(), id.to_string());
    let other = stack
        .order("order-7", serde_json::json!({"customer_id": "cus_7", "sku": "SKU-1", "quantity": 3, "total": "49.90"}))
        .await;
    other.assert_problem(422);
}

#[tokio::test]
async fn a_declared_kind_whose_outcome_is_unknown_is_reconciled_by_lookup() {
    let stack = Declared::start(&["drop-after-commit=1.0/1"]).await;
    let executor = stack.executor(&["--keyed-retries", "false"]).await;
    let reply = stack.order("order-lost", an_order()).await;
    let id: Uuid = reply.operation_id().parse().unwrap();
    stack.wait_for(id, "UNKNOWN").await;
    drop(executor);
    let _reconciler = Reconciler::start_reconciler_with_env(
        &stack.db.url,
        &stack.sim.base_url,
        &["--catalog", &stack.catalog, "--backoff-base", "20ms"],
        &stack.catalog_env(),
    )
    .await;
    let op = stack.wait_for(id, "SUCCEEDED").await;
    let resources = stack.resources_for(id).await;
    assert_eq!(resources.len(), 1);
    assert_eq!(
        op.provider_reference.as_deref(),
        resources[0]["resource_id"].as_str()
    );
}

#[tokio::test]
async fn an_invalid_body_is_refused_naming_the_field_and_nothing_is_written() {
    let stack = Declared::start(&[]).await;
    let before = stack.db.counts().await;
    let cases = [
        (
            serde_json::json!({"customer_id": "c", "sku": "s", "quantity": 0, "total": "1"}),
            "/quantity",
        ),
        (
            serde_json::json!({"customer_id": "c", "sku": "s", "quantity": 1}),
            "total",
        ),
        (
            serde_json::json!({"customer_id": "c", "sku": "s", "quantity": 1, "total": "1", "colour": "red"}),
            "colour",
        ),
        (
            serde_json::json!({"customer_id": "c", "sku": "s", "quantity": 1, "total": "1.001"}),
            "total",
        ),
        (
            serde_json::json!({"customer_id": "c", "sku": "s", "quantity": 1, "total": "1", "currency": "XYZ"}),
            "currency",
        ),
    ];
    for (i, (body, field)) in cases.into_iter().enumerate() {
        let reply = stack.order(&format!("bad-{i}"), body).await;
        reply.assert_problem(422);
        let detail = reply.body["detail"].as_str().unwrap();
        assert!(detail.contains(field), "{field} not named in {detail:?}");
    }
    for (i, raw) in [
        r#"{"customer_id":"c","sku":"s","quantity":1,"quantity":9,"total":"1"}"#,
        r#"[{"customer_id":"c","sku":"s","quantity":1,"total":"1"}]"#,
        // A number f64 cannot hold: refused rather than charged as 9007199254740994.
        r#"{"customer_id":"c","sku":"s","quantity":1,"total":9007199254740993.01}"#,
    ]
    .into_iter()
    .enumerate()
    {
        let reply = opgate_e2e::api::Reply::from(
            stack
                .client
                .post(stack.intake.url("/agent/operations/order"))
                .bearer_auth(&stack.key)
                .header("Idempotency-Key", format!("raw-{i}"))
                .header("content-type", "application/json")
                .body(raw)
                .send()
                .await
                .unwrap(),
        )
        .await;
        reply.assert_problem(422);
    }
    let over_limit = stack
        .order(
            "too-much",
            serde_json::json!({"customer_id": "c", "sku": "s", "quantity": 1, "total": "500.01"}),
        )
        .await;
    over_limit.assert_problem(403);
    let not_granted = post_operation(
        &stack.client,
        &stack.intake.base_url,
        "provisioning",
        &stack.key,
        "vm-1",
        &serde_json::json!({"project": "p", "resource_type": "vm", "region": "eu"}),
    )
    .await;
    not_granted.assert_problem(403);
    assert_eq!(stack.db.counts().await, before);
}

#[tokio::test]
async fn openapi_lists_each_declared_kind_with_its_schema() {
    let stack = Declared::start(&[]).await;
    let spec: serde_json::Value = stack
        .client
        .get(stack.intake.url("/openapi.json"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    for kind in ["order", "booking", "provisioning"] {
        let post = &spec["paths"][format!("/agent/operations/{kind}")]["post"];
        let schema = &post["requestBody"]["content"]["application/json"]["schema"];
        assert_eq!(schema["type"], "object", "{kind}");
        assert!(post["responses"]["202"].is_object(), "{kind}");
    }
    let order = &spec["paths"]["/agent/operations/order"]["post"];
    assert!(
        order["requestBody"]["content"]["application/json"]["schema"]["required"]
            .as_array()
            .unwrap()
            .contains(&"sku".into())
    );
}

#[tokio::test]
async fn a_broken_catalog_stops_every_service_at_start_naming_file_kind_and_field() {
    let dir = std::env::temp_dir().join(format!("opgate-catalog-{}", Uuid::new_v4()));
    std::fs::create_dir_all(&dir).unwrap();
    let broken = dir.join("broken.toml");
    let text = std::fs::read_to_string(example_catalog()).unwrap().replace(
        r#"path = "/v1/resources/bookings""#,
        r#"path = "v1/resources/bookings""#,
    );
    std::fs::write(&broken, text).unwrap();
    let broken = broken.to_str().unwrap();
    for service in ["intake", "executor", "reconciler"] {
        let output = std::process::Command::new(binary(service))
            .args(["--catalog", broken])
            .env("DATABASE_URL", "postgres://127.0.0.1:1/none")
            .env("INTAKE_LISTEN", "127.0.0.1:0")
            .output()
            .unwrap();
        assert!(
            !output.status.success(),
            "{service} started with a broken catalog"
        );
        let stderr = String::from_utf8_lossy(&output.stderr);
        for needle in [broken, "\"booking\"", "execute.path"] {
            assert!(
                stderr.contains(needle),
                "{service}: {needle} not in {stderr}"
            );
        }
        assert!(output.stdout.is_empty(), "{service} printed its ready line");
    }
    let cli = std::process::Command::new(binary("opgate"))
        .args([
            "--catalog",
            broken,
            "agents",
            "create",
            "x",
            "--allow",
            "order",
        ])
        .env("DATABASE_URL", "postgres://127.0.0.1:1/none")
        .output()
        .unwrap();
    assert!(!cli.status.success());
    std::fs::remove_dir_all(&dir).unwrap();
}
