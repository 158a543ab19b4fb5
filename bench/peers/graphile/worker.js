// The peer's side of `make bench-peers`: a Graphile Worker pool running the same job as
// opgate's executor. Each `pay` job calls provider-sim's POST /v1/payments with the
// job's key as the Idempotency-Key and finishes when the payment is recorded; a failed
// call throws, so Graphile Worker retries it with the same key.
//   node worker.js          (DATABASE_URL, SIM_URL, JOBS; LOCAL_QUEUE=N to batch fetches)
// Prints "ready" once the pool is running; stops on SIGTERM.
"use strict";
const { Logger, run } = require("graphile-worker");

const simUrl = process.env.SIM_URL;
const concurrency = Number(process.env.JOBS || 32);
const localQueue = Number(process.env.LOCAL_QUEUE || 0);

async function pay(payload) {
  const res = await fetch(`${simUrl}/v1/payments`, {
    method: "POST",
    headers: { "content-type": "application/json", "idempotency-key": payload.key },
    body: JSON.stringify({
      customer_id: payload.customer_id,
      invoice_id: payload.invoice_id,
      amount: payload.amount,
      currency: payload.currency,
      metadata: { operation_id: payload.key },
    }),
  });
  const body = await res.json();
  if (!res.ok || body.status !== "succeeded") {
    throw new Error(`provider answered ${res.status} ${body.status}`);
  }
}

async function main() {
  const preset = { worker: {} };
  if (localQueue > 0) {
    preset.worker.localQueue = { size: localQueue };
    preset.worker.completeJobBatchDelay = 0;
  }
  const runner = await run({
    connectionString: process.env.DATABASE_URL,
    concurrency,
    maxPoolSize: concurrency + 2,
    noHandleSignals: true,
    pollInterval: 100,
    taskList: { pay },
    // Errors only: per-job info lines would cost the peer time opgate does not spend.
    logger: new Logger(() => (level, message) => {
      if (level === "error") process.stderr.write(`${message}\n`);
    }),
    preset,
  });
  process.stdout.write("ready\n");
  process.on("SIGTERM", () => runner.stop().then(() => process.exit(0)));
  await runner.promise;
}

main().catch((err) => {
  process.stderr.write(`${err.stack}\n`);
  process.exit(1);
});
