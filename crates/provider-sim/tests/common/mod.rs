//! Test helpers: start the simulator in-process on 127.0.0.1:0 and talk to it with a
//! minimal hyper client (one connection per request, so a dropped connection shows up
//! as an error of exactly that request).

#![allow(dead_code)]

use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::rt::TokioIo;
use opgate_provider_sim::{run, FaultSet, SimState};
use serde_json::{json, Value};
use tokio::net::{TcpListener, TcpStream};

pub async fn start(faults: FaultSet) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(run(listener, SimState::new(faults), std::future::pending()));
    addr
}

#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub body: Value,
}

/// One request on a fresh connection; `Err` when no HTTP response came back.
pub async fn send(
    addr: SocketAddr,
    method: &str,
    path: &str,
    key: Option<&str>,
    body: Option<&Value>,
) -> Result<Reply, hyper::Error> {
    let headers: Vec<(&str, &str)> = key.map(|k| ("idempotency-key", k)).into_iter().collect();
    send_with(addr, method, path, &headers, body).await
}

/// `send` with any extra headers.
pub async fn send_with(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&Value>,
) -> Result<Reply, hyper::Error> {
    let stream = TcpStream::connect(addr).await.unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(conn);
    let mut request = Request::builder()
        .method(method)
        .uri(path)
        .header("host", addr.to_string());
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    let body = match body {
        Some(body) => {
            request = request.header("content-type", "application/json");
            body.to_string()
        }
        None => String::new(),
    };
    let response = sender
        .send_request(request.body(Full::new(Bytes::from(body))).unwrap())
        .await?;
    let status = response.status().as_u16();
    assert_eq!(
        response.headers().get("content-type").unwrap(),
        "application/json"
    );
    let bytes = response.into_body().collect().await?.to_bytes();
    let body = serde_json::from_slice(&bytes).expect("response body is JSON");
    Ok(Reply { status, body })
}

pub fn payment_body(customer: &str, amount: &str) -> Value {
    json!({
        "customer_id": customer,
        "invoice_id": "inv_1",
        "amount": amount,
        "currency": "USD",
        "metadata": {"operation_id": "00000000-0000-0000-0000-000000000001"}
    })
}

pub async fn try_pay(
    addr: SocketAddr,
    key: &str,
    customer: &str,
    amount: &str,
) -> Result<Reply, hyper::Error> {
    let body = payment_body(customer, amount);
    send(addr, "POST", "/v1/payments", Some(key), Some(&body)).await
}

pub async fn pay(addr: SocketAddr, key: &str, customer: &str, amount: &str) -> Reply {
    try_pay(addr, key, customer, amount)
        .await
        .expect("an HTTP response")
}

pub fn refund_body(payment_id: &str, amount: &str) -> Value {
    json!({
        "payment_id": payment_id,
        "amount": amount,
        "currency": "USD",
        "metadata": {"operation_id": "00000000-0000-0000-0000-000000000002"}
    })
}

pub async fn try_refund(
    addr: SocketAddr,
    key: &str,
    payment_id: &str,
    amount: &str,
) -> Result<Reply, hyper::Error> {
    let body = refund_body(payment_id, amount);
    send(addr, "POST", "/v1/refunds", Some(key), Some(&body)).await
}

pub async fn refund(addr: SocketAddr, key: &str, payment_id: &str, amount: &str) -> Reply {
    try_refund(addr, key, payment_id, amount)
        .await
        .expect("an HTTP response")
}

/// A succeeded payment of `amount` USD under `key`; its id.
pub async fn paid(addr: SocketAddr, key: &str, amount: &str) -> String {
    let reply = pay(addr, key, "cus_1", amount).await;
    assert_eq!(reply.body["status"], "succeeded", "{:?}", reply.body);
    reply.body["id"].as_str().unwrap().to_owned()
}

pub async fn try_create(
    addr: SocketAddr,
    collection: &str,
    key: &str,
    body: &Value,
) -> Result<Reply, hyper::Error> {
    let path = format!("/v1/resources/{collection}");
    send(addr, "POST", &path, Some(key), Some(body)).await
}

pub async fn create(addr: SocketAddr, collection: &str, key: &str, body: &Value) -> Reply {
    try_create(addr, collection, key, body)
        .await
        .expect("an HTTP response")
}

pub async fn get(addr: SocketAddr, path: &str) -> Reply {
    send(addr, "GET", path, None, None).await.unwrap()
}

pub async fn post(addr: SocketAddr, path: &str, body: Value) -> Reply {
    send(addr, "POST", path, None, Some(&body)).await.unwrap()
}

pub async fn ledger(addr: SocketAddr) -> Value {
    let reply = get(addr, "/_sim/ledger").await;
    assert_eq!(reply.status, 200);
    reply.body
}

/// `application/x-www-form-urlencoded` escaping for query values in tests.
pub fn encode(value: &str) -> String {
    value
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}
