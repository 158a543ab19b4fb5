# The second peer's side of `make bench-peers`: a pgqueuer QueueManager (asyncpg driver)
# running the same job as opgate's executor. Each `pay` job calls provider-sim's
# POST /v1/payments with the job's key as the Idempotency-Key and finishes when the
# payment is recorded; a failed call raises, so pgqueuer's DatabaseRetryEntrypointExecutor
# re-queues it (same key) with its exponential backoff.
#   python worker.py        (DATABASE_URL, SIM_URL, JOBS; BATCH_SIZE=N, pgqueuer's default 10)
# Prints "ready" once the manager is listening; stops on SIGTERM. HTTP by aiohttp: with
# httpx the worker spent five times the CPU per job and stalled near 300 jobs/s.
import asyncio
import json
import logging
import os
import signal
import sys
from datetime import timedelta

import aiohttp
import asyncpg
import uvloop
from pgqueuer import AsyncpgDriver, DatabaseRetryEntrypointExecutor, Job, Queries, QueueManager
from pgqueuer.errors import FailingListenerError

sim_url = os.environ["SIM_URL"]
concurrency = int(os.environ.get("JOBS", "32"))
batch_size = int(os.environ.get("BATCH_SIZE", "10"))


async def main() -> None:
    connection = await asyncpg.connect(os.environ["DATABASE_URL"])
    qm = QueueManager(Queries(AsyncpgDriver(connection)))
    client = aiohttp.ClientSession(
        base_url=sim_url,
        connector=aiohttp.TCPConnector(limit=concurrency),
        timeout=aiohttp.ClientTimeout(total=30),
    )

    # on_failure="hold": a job that exhausts its attempts stays in the queue table, as a
    # Graphile Worker job does, so the run waits on it instead of counting it done.
    @qm.entrypoint(
        "pay",
        on_failure="hold",
        executor_factory=lambda p: DatabaseRetryEntrypointExecutor(p, max_attempts=25),
    )
    async def pay(job: Job) -> None:
        payload = json.loads(job.payload)
        async with client.post(
            "/v1/payments",
            headers={"idempotency-key": payload["key"]},
            json={
                "customer_id": payload["customer_id"],
                "invoice_id": payload["invoice_id"],
                "amount": payload["amount"],
                "currency": payload["currency"],
                "metadata": {"operation_id": payload["key"]},
            },
        ) as res:
            body = await res.json()
        if not res.ok or body.get("status") != "succeeded":
            raise RuntimeError(f"provider answered {res.status} {body.get('status')}")

    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, qm.shutdown.set)
    running = asyncio.create_task(
        qm.run(batch_size=batch_size, max_concurrent_tasks=concurrency)
    )
    # Ready once a NOTIFY sent on pgqueuer's channel comes back through its listener.
    while not running.done():
        try:
            await qm.listener_healthy(timeout=timedelta(seconds=0.2))
            break
        except FailingListenerError:
            pass
    if not running.done():
        sys.stdout.write("ready\n")
        sys.stdout.flush()
    try:
        await running
    finally:
        await client.close()
        await connection.close()


if __name__ == "__main__":
    # Errors only: pgqueuer's per-job info lines (retries) would cost time opgate does not spend.
    logging.basicConfig(level=logging.ERROR, stream=sys.stderr)
    uvloop.run(main())
