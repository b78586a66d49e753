"""One TaskCreate through `todoctl mcp`, driven by the official Python MCP
client, against a daemon behind a proxy that loses the first CreateTask
answer. Run by tests/e2e/idempotency.rs:

    python mcp_lost_answer.py TODOCTL ADDR PROJECT_DIR

The tool call must succeed (the MCP server sends the call again with the
same request id); the last stdout line is its structured answer.
"""
import asyncio
import json
import sys

from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client

TODOCTL, ADDR, PROJECT = sys.argv[1], sys.argv[2], sys.argv[3]


async def main():
    server = StdioServerParameters(
        command=TODOCTL,
        args=["--addr", ADDR, "mcp"],
        env={"HOME": "/nonexistent", "TODOD_PLAN": "", "TODOD_TOKEN": ""},
        cwd=PROJECT,
    )
    agent = types.Implementation(name="lost-answer-test", version="1.0")
    async with stdio_client(server) as (read, write):
        async with ClientSession(read, write, client_info=agent) as s:
            await s.initialize()
            r = await s.call_tool("TaskCreate", {"subject": "made once"})
            text = r.content[0].text if r.content else ""
            assert not r.is_error, f"TaskCreate failed: {text}"
            print(json.dumps(r.structured_content))


asyncio.run(main())
