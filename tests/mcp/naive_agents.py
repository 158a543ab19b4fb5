"""A soak of naive agents over MCP: each pays one invoice through request_payment and
does what the tool's description tells it, nothing cleverer. Its client gives up on
an answer far sooner than the provider takes, so answers are lost all the time; after a
lost answer or an error it calls request_payment again with the SAME key (the one the
description says to build from the invoice), at most 5 times, then follows next.action
with wait_for_operation until the operation is finished (after find_operation, if
every answer was lost).

Environment: MCP_URL, AGENT_KEYS (comma-separated; agents share them round-robin),
AGENTS (how many), CLIENT_TIMEOUT (seconds). Prints one JSON report on stdout:
{"agents": N, "gave_up": [...], "operations": {invoice: [operation ids seen]},
 "final": {invoice: status}, "retries": n}.
"""

import asyncio
import json
import os

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

MAX_ATTEMPTS = 5


async def agent(number, key, timeout, report):
    invoice = f"inv-soak-{number}"
    args = {
        "customer_id": f"cus_soak_{number}",
        "invoice_id": invoice,
        "amount": "10.00",
        # What the description says: from the business identifiers, the same every time.
        "idempotency_key": f"payment-{invoice}",
    }
    seen = report["operations"].setdefault(invoice, [])
    headers = {"Authorization": f"Bearer {key}"}
    operation_id = None
    async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
        async with Client(streamable_http_client(os.environ["MCP_URL"], http_client=http)) as client:
            for attempt in range(MAX_ATTEMPTS):
                if attempt:
                    report["retries"] += 1
                try:
                    result = await client.call_tool("request_payment", args, read_timeout_seconds=timeout)
                    if result.is_error:
                        continue
                    operation_id = result.structured_content["operation_id"]
                    seen.append(operation_id)
                    if result.structured_content["next"]["action"] in ("done", "new_key_required"):
                        break
                    waited = await client.call_tool(
                        "wait_for_operation",
                        {"operation_id": operation_id, "timeout_seconds": 1},
                        read_timeout_seconds=timeout,
                    )
                    if not waited.is_error and waited.structured_content["next"]["action"] == "done":
                        break
                except Exception:  # a lost answer: the client timed out or the call failed
                    continue
            if operation_id is None:
                # Every answer was lost: find_operation, as its description says.
                found = await client.call_tool("find_operation", {"idempotency_key": args["idempotency_key"]})
                if found.is_error:
                    report["gave_up"].append(invoice)
                    return
                operation_id = found.structured_content["operation_id"]
                seen.append(operation_id)
            # Follow next.action until finished, with patience this time.
            for _ in range(120):
                try:
                    waited = await client.call_tool(
                        "wait_for_operation", {"operation_id": operation_id, "timeout_seconds": 5}
                    )
                except Exception:
                    continue
                status = waited.structured_content["status"]
                if waited.structured_content["next"]["action"] in ("done", "new_key_required"):
                    report["final"][invoice] = status
                    return
            report["final"][invoice] = status


async def main():
    keys = os.environ["AGENT_KEYS"].split(",")
    agents = int(os.environ.get("AGENTS", "200"))
    timeout = float(os.environ.get("CLIENT_TIMEOUT", "0.05"))
    report = {"agents": agents, "gave_up": [], "operations": {}, "final": {}, "retries": 0}
    await asyncio.gather(*(agent(n, keys[n % len(keys)], timeout, report) for n in range(agents)))
    print(json.dumps(report))


if __name__ == "__main__":
    asyncio.run(main())
