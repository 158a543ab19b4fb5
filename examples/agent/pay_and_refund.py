"""An agent that pays an invoice over MCP, loses the answer, retries, and refunds.

It uses only the official Python MCP client (PyPI `mcp`) and does what opgate's tool
descriptions tell a model to do:
  1. request_payment with a key built from the invoice: payment-<invoice_id>;
  2. the answer is lost (here: the client gives up after 1 ms), so it calls again
     with the SAME key and the same arguments, and gets the one operation back;
  3. wait_for_operation until it has finished;
  4. request_refund of part of it, keyed refund-<payment operation id>-1, and waits.

    OPGATE_MCP_URL=http://127.0.0.1:8080/mcp OPGATE_AGENT_KEY=opg_… \\
        python examples/agent/pay_and_refund.py [invoice_id]

The agent needs the payment and refund kinds (`opgate agents create A --allow payment
--allow refund`). It prints what it did, one line per step, and exits non-zero if
anything went other than described.
"""

import asyncio
import os
import sys

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client


def show(step, result):
    body = result.structured_content or {}
    print(f"{step}: {body.get('status', body.get('title'))} - {result.content[0].text}")
    return body


async def wait_until_done(client, operation_id):
    while True:
        result = await client.call_tool(
            "wait_for_operation", {"operation_id": operation_id, "timeout_seconds": 30}
        )
        body = show("wait_for_operation", result)
        if body["next"]["action"] in ("done", "new_key_required"):
            return body


async def main(invoice_id):
    headers = {"Authorization": f"Bearer {os.environ['OPGATE_AGENT_KEY']}"}
    async with httpx2.AsyncClient(headers=headers, timeout=60) as http:
        transport = streamable_http_client(os.environ["OPGATE_MCP_URL"], http_client=http)
        async with Client(transport) as client:
            tools = await client.list_tools()
            print("tools:", ", ".join(tool.name for tool in tools.tools))

            payment = {
                "customer_id": "cus_example",
                "invoice_id": invoice_id,
                "amount": "120.00",
                "currency": "USD",
                "idempotency_key": f"payment-{invoice_id}",
            }
            try:
                # The answer is lost: the request reached opgate, the client gave up.
                await client.call_tool("request_payment", payment, read_timeout_seconds=0.001)
                print("request_payment: answered (this time the answer was not lost)")
            except Exception as lost:  # noqa: BLE001 - any failure is a lost answer here
                print(f"request_payment: no answer ({type(lost).__name__}); retrying with the same key")
            retry = await client.call_tool("request_payment", payment)
            body = show("request_payment (retry)", retry)
            if retry.is_error:
                sys.exit("the retry was refused")
            payment_id = body["operation_id"]

            paid = await wait_until_done(client, payment_id)
            if paid["status"] != "SUCCEEDED":
                sys.exit(f"the payment ended {paid['status']}")

            refund = await client.call_tool(
                "request_refund",
                {
                    "payment_operation_id": payment_id,
                    "amount": "20.00",
                    "reason": "requested by customer",
                    "idempotency_key": f"refund-{payment_id}-1",
                },
            )
            body = show("request_refund", refund)
            if refund.is_error:
                sys.exit("the refund was refused")
            refunded = await wait_until_done(client, body["operation_id"])
            if refunded["status"] != "SUCCEEDED":
                sys.exit(f"the refund ended {refunded['status']}")
            print(f"done: payment {payment_id} charged once, 20.00 refunded")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "inv-example-1"))
