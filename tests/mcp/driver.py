"""Drives opgate's /mcp with the official Python MCP client, as an agent framework would.

Reads a JSON list of steps on stdin and prints one JSON line per step on stdout:
  {"list_tools": true}                          -> {"tools": [{name, description, annotations, input_schema}]}
  {"tool": NAME, "args": {...}, "traceparent"?} -> {"is_error", "structured", "text", "meta"}
Environment: MCP_URL, AGENT_KEY, MCP_MODE (auto | legacy | a protocol version).
"""

import asyncio
import json
import os
import sys

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client


def tool_json(tool):
    annotations = tool.annotations.model_dump(by_alias=True, exclude_none=True) if tool.annotations else {}
    return {
        "name": tool.name,
        "description": tool.description,
        "annotations": annotations,
        "input_schema": tool.input_schema,
    }


def result_json(result):
    return {
        "is_error": bool(result.is_error),
        "structured": result.structured_content,
        "text": [block.text for block in result.content if getattr(block, "text", None) is not None],
        "meta": result.meta,
    }


async def run(steps):
    headers = {"Authorization": f"Bearer {os.environ['AGENT_KEY']}"}
    mode = os.environ.get("MCP_MODE", "auto")
    async with httpx2.AsyncClient(headers=headers, timeout=60) as http:
        transport = streamable_http_client(os.environ["MCP_URL"], http_client=http)
        async with Client(transport, mode=mode) as client:
            for step in steps:
                if step.get("list_tools"):
                    tools = await client.list_tools()
                    out = {"tools": [tool_json(t) for t in tools.tools]}
                else:
                    meta = {"traceparent": step["traceparent"]} if "traceparent" in step else None
                    result = await client.call_tool(step["tool"], step.get("args", {}), meta=meta)
                    out = result_json(result)
                print(json.dumps(out), flush=True)


if __name__ == "__main__":
    asyncio.run(run(json.load(sys.stdin)))
