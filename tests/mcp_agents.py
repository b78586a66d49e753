"""Drives `todoctl mcp` with the official Python MCP client, as the agents
people run would: over stdio, against a real daemon. Run by tests/e2e/mcp.rs:

    python mcp_agents.py TODOCTL ADDR PROJECT_DIR TODOD

Each check asserts; at the end one JSON line on stdout says what the daemon
should now hold, which tests/e2e/mcp.rs checks over gRPC.
"""
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import traceback
from contextlib import AsyncExitStack

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError
from mcp import types

TODOCTL, ADDR, PROJECT, TODOD = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
ALL_TOOLS = {
    "todowrite", "todoread", "TodoWrite", "TaskCreate", "TaskUpdate", "TaskList",
    "TaskGet", "update_plan", "write_todos", "plan", "plan_status", "task_history",
}


def server(*extra, addr=ADDR, cwd=PROJECT):
    return StdioServerParameters(
        command=TODOCTL,
        args=["--addr", addr, "mcp", *extra],
        # No token file or variables of the machine's own daemon.
        env={"HOME": "/nonexistent", "TODOD_PLAN": "", "TODOD_TOKEN": ""},
        cwd=cwd,
    )


AGENT = types.Implementation(name="agents-test", version="1.0")


async def session(stack, *extra, **kw):
    read, write = await stack.enter_async_context(stdio_client(server(*extra, **kw)))
    # The client's name is the actor of its changes (mcp:agents-test).
    s = await stack.enter_async_context(ClientSession(read, write, client_info=AGENT))
    await s.initialize()
    return s


async def ok(s, tool, args):
    r = await s.call_tool(tool, args)
    text = r.content[0].text if r.content else ""
    assert not r.is_error, f"{tool}({args}) failed: {text}"
    return r.structured_content, text


async def refused(s, tool, args, *words):
    r = await s.call_tool(tool, args)
    text = r.content[0].text if r.content else ""
    assert r.is_error, f"{tool}({args}) should be refused, got: {text}"
    for w in words:
        assert w in text, f"{tool}({args}): {w!r} not in {text!r}"
    return r, text


async def tools_are_listed(s):
    tools = (await s.list_tools()).tools
    names = {t.name for t in tools}
    assert names == ALL_TOOLS, names
    for t in tools:
        assert t.description and len(t.description) > 40, t.name
        assert t.input_schema.get("type") == "object", (t.name, t.input_schema)
    schema = next(t for t in tools if t.name == "todowrite").input_schema
    item = schema["properties"]["todos"]["items"]
    if "$ref" in item:
        item = schema["$defs"][item["$ref"].split("/")[-1]]
    assert {"content", "status"} <= set(item.get("required", [])), item


async def each_shape_writes_and_reads(s, out):
    # opencode, in the project's own plan (named after its directory).
    data, text = await ok(s, "todowrite", {"todos": [
        {"content": "Read the code", "status": "in_progress", "priority": "high"},
        {"content": "Write the fix", "status": "pending", "priority": "medium"},
    ]})
    plan = data["plan"]
    assert plan == "agents-project", plan
    ids = [t["id"] for t in data["todos"]]
    assert all(i.startswith("t") for i in ids), ids
    assert "todoctl status agents-project" in text
    # Ids are stable: the same items, new statuses, one added, given by id.
    data, _ = await ok(s, "todowrite", {"todos": [
        {"id": ids[0], "content": "Read the code", "status": "completed", "priority": "high"},
        {"content": "Write the fix", "status": "in_progress", "priority": "medium"},
        {"content": "Run the tests", "status": "pending", "priority": "low"},
    ]})
    again = [t["id"] for t in data["todos"]]
    assert again[:2] == ids, (again, ids)
    read, _ = await ok(s, "todoread", {})
    assert [t["id"] for t in read["todos"]] == again
    assert [t["status"] for t in read["todos"]] == ["completed", "in_progress", "pending"]
    assert read["todos"][2]["priority"] == "low"
    out["opencode"] = {"plan": plan, "ids": again}

    # Claude Code's TodoWrite keeps activeForm.
    data, _ = await ok(s, "TodoWrite", {"plan": "claude-list", "todos": [
        {"content": "Run the tests", "status": "in_progress", "activeForm": "Running the tests"},
        {"content": "Fix failures", "status": "pending", "activeForm": "Fixing failures"},
    ]})
    first = [t["id"] for t in data["todos"]]
    assert data["todos"][0]["activeForm"] == "Running the tests", data
    data, _ = await ok(s, "TodoWrite", {"plan": "claude-list", "todos": [
        {"content": "Run the tests", "status": "completed", "activeForm": "Running the tests"},
        {"content": "Fix failures", "status": "in_progress", "activeForm": "Fixing failures"},
    ]})
    assert [t["id"] for t in data["todos"]] == first, "ids follow the content"
    out["claude"] = {"plan": "claude-list", "ids": first}

    # Codex CLI's update_plan: steps, and the explanation recorded.
    data, _ = await ok(s, "update_plan", {
        "plan_name": "codex-list",
        "explanation": "split the work",
        "plan": [{"step": "Parse the input", "status": "in_progress"},
                 {"step": "Emit the output", "status": "pending"}],
    })
    assert data["plan"] == [
        {"id": data["plan"][0]["id"], "step": "Parse the input", "status": "in_progress"},
        {"id": data["plan"][1]["id"], "step": "Emit the output", "status": "pending"},
    ], data
    first = [t["id"] for t in data["plan"]]
    # Reworded, with the id it was given: the same task.
    data, _ = await ok(s, "update_plan", {
        "plan_name": "codex-list",
        "plan": [{"id": first[0], "step": "Parse the input files", "status": "completed"},
                 {"id": first[1], "step": "Emit the output", "status": "in_progress"}],
    })
    assert [t["id"] for t in data["plan"]] == first, data
    assert data["plan"][0]["step"] == "Parse the input files"
    out["codex"] = {"plan": "codex-list", "ids": first}

    # Gemini CLI's write_todos, in its own plan.
    data, _ = await ok(s, "write_todos", {"plan": "gemini-list", "todos": [
        {"description": "Survey the data", "status": "completed"},
        {"description": "Drop duplicates", "status": "cancelled"},
        {"description": "Write the report", "status": "pending"},
    ]})
    assert [t["status"] for t in data["todos"]] == ["completed", "cancelled", "pending"], data
    out["gemini"] = {"plan": "gemini-list", "ids": [t["id"] for t in data["todos"]]}


async def dependencies_block_then_unblock(s, out):
    plan = "claude-tasks"
    a, _ = await ok(s, "TaskCreate", {"plan": plan, "subject": "Build the index",
                                      "description": "over all shards", "activeForm": "Building"})
    b, _ = await ok(s, "TaskCreate", {"plan": plan, "subject": "Query the index"})
    a, b = a["task"]["id"], b["task"]["id"]
    await ok(s, "TaskUpdate", {"taskId": b, "addBlockedBy": [a], "owner": "subagent-1"})
    got, _ = await ok(s, "TaskGet", {"taskId": b})
    assert got["task"]["blockedBy"] == [a] and got["task"]["owner"] == "subagent-1", got
    got, _ = await ok(s, "TaskGet", {"taskId": a})
    assert got["task"]["blocks"] == [b] and got["task"]["description"] == "over all shards", got
    await refused(s, "TaskUpdate", {"taskId": b, "status": "in_progress"}, "blocked by", a)
    await ok(s, "TaskUpdate", {"taskId": a, "status": "in_progress"})
    done, text = await ok(s, "TaskUpdate", {"taskId": a, "status": "completed"})
    assert done["unblocked"] == [b], done
    assert "Now ready: " + b in text
    await ok(s, "TaskUpdate", {"taskId": b, "status": "in_progress",
                               "metadata": {"ticket": "DATA-7"}})
    listed, _ = await ok(s, "TaskList", {"plan": plan})
    assert [(t["id"], t["status"]) for t in listed["tasks"]] == [(a, "completed"), (b, "in_progress")]
    # addBlocks: c waits for b; deleting c cancels it and hides it.
    c, _ = await ok(s, "TaskCreate", {"plan": plan, "subject": "Ship it"})
    c = c["task"]["id"]
    await ok(s, "TaskUpdate", {"taskId": b, "addBlocks": [c]})
    got, _ = await ok(s, "TaskGet", {"taskId": c})
    assert got["task"]["blockedBy"] == [b], got
    d, _ = await ok(s, "TaskCreate", {"plan": plan, "subject": "Announce it"})
    d = d["task"]["id"]
    await ok(s, "TaskUpdate", {"taskId": d, "addBlockedBy": [c]})
    await ok(s, "TaskUpdate", {"taskId": c, "status": "deleted"})
    listed, _ = await ok(s, "TaskList", {"plan": plan})
    assert c not in [t["id"] for t in listed["tasks"]]
    got, _ = await ok(s, "TaskGet", {"taskId": d})
    assert got["task"]["blockedBy"] == [] and got["task"]["dependsOn"] == [], got
    await ok(s, "TaskUpdate", {"taskId": d, "status": "in_progress"})
    history, text = await ok(s, "task_history", {"taskId": b})
    kinds = [e["type"] for e in history["events"]]
    assert "dependency_added" in kinds and "owner_changed" in kinds, kinds
    out["tasks"] = {"plan": plan, "a": a, "b": b, "c": c}


async def two_writers_lose_no_update(stack, out):
    """Two agents (two MCP servers) each add items to one plan, at the same
    time, by read-modify-write of the whole list. A refused write comes back
    with the fresh list, which the agent merges into and writes again."""
    plan = "shared-list"
    one = await session(stack, "--plan", plan)
    two = await session(stack, "--plan", plan)
    conflicts = 0

    async def agent(s, name, rounds):
        nonlocal conflicts
        read, _ = await ok(s, "todoread", {})
        todos, revision = read["todos"], read["revision"]
        for n in range(rounds):
            while True:
                mine = [{"id": t["id"], "content": t["content"], "status": t["status"],
                         "priority": t["priority"]} for t in todos]
                mine.append({"content": f"{name} item {n}", "status": "pending"})
                r = await s.call_tool("todowrite", {"todos": mine, "revision": revision})
                data = r.structured_content
                if not r.is_error:
                    todos, revision = data["todos"], data["revision"]
                    break
                assert "conflict" in data and "merge" in r.content[0].text, r.content[0].text
                conflicts += 1
                todos, revision = data["todos"], data["revision"]
            await asyncio.sleep(0)

    rounds = 6
    await asyncio.gather(agent(one, "alpha", rounds), agent(two, "beta", rounds))
    final, _ = await ok(one, "todoread", {})
    contents = sorted(t["content"] for t in final["todos"])
    expected = sorted([f"alpha item {n}" for n in range(rounds)] + [f"beta item {n}" for n in range(rounds)])
    assert contents == expected, contents
    out["shared"] = {"plan": plan, "contents": expected, "conflicts": conflicts}


async def a_stale_write_without_a_revision_is_refused(stack):
    """Agents rarely pass `revision`: the session's own memory of what it
    showed must stop a stale write, and the same stale list sent again."""
    plan = "stale-list"
    one = await session(stack, "--plan", plan)
    two = await session(stack, "--plan", plan)
    await ok(one, "todoread", {})
    await ok(two, "todoread", {})
    await ok(two, "todowrite", {"todos": [{"content": "from two", "status": "in_progress"}]})
    mine = {"todos": [{"content": "from one", "status": "pending"}]}
    r, text = await refused(one, "todowrite", mine, "changed since", "from two")
    assert r.structured_content["todos"][0]["content"] == "from two", r.structured_content
    await refused(one, "todowrite", mine, "same list that was just refused")
    current, _ = await ok(two, "todoread", {})
    assert [t["content"] for t in current["todos"]] == ["from two"], "refusals changed nothing"
    merged = {"todos": [{"content": "from two", "status": "in_progress"},
                        {"content": "from one", "status": "pending"}]}
    data, _ = await ok(one, "todowrite", merged)
    assert [t["content"] for t in data["todos"]] == ["from two", "from one"]
    # A new session has read nothing: it may not replace the list, even
    # naming every item (its statuses could be stale), until it has.
    three = await session(stack, "--plan", plan)
    stale = {"todos": [{"content": "from two", "status": "pending"},
                       {"content": "from one", "status": "pending"}]}
    await refused(three, "todowrite", stale, "already holds 2 item(s)", "has not read")
    await refused(three, "todowrite", stale, "same list that was just refused")
    after, _ = await ok(two, "todoread", {})
    assert after["todos"][0]["status"] == "in_progress", "the stale status was not written"
    await ok(three, "todowrite", stale | {"revision": after["revision"]})


async def bad_arguments_are_tool_errors(s):
    cases = [
        ("todowrite", {}, ["todos"]),
        ("todowrite", {"todos": [{"content": "x", "status": "done"}]}, ["todos[0].status", "unknown variant"]),
        ("todowrite", {"todos": [{"content": "  ", "status": "pending"}]}, ["content", "empty"]),
        ("todowrite", {"todos": "not a list"}, ["todos"]),
        ("update_plan", {"plan": [{"step": "", "status": "pending"}]}, ["plan[0].step"]),
        ("TaskUpdate", {"taskId": "1", "status": "completed"}, ["taskId", "t42"]),
        ("TaskUpdate", {"taskId": "t999999", "status": "completed"}, ["not found"]),
        ("TaskGet", {"taskId": 7}, ["taskId"]),
        ("TaskCreate", {"subject": "x", "metadata": [1]}, ["metadata"]),
        ("TaskCreate", {"plan": "bad plan name", "subject": "x"}, ["invalid argument: plan:"]),
        ("todoread", {"plan": "no/such"}, ["invalid argument: plan:"]),
        ("task_history", {"taskId": "t0"}, ["taskId"]),
    ]
    for tool, args, words in cases:
        await refused(s, tool, args, *words)
        # ... and the server keeps serving.
        await ok(s, "plan", {})
    try:
        await s.call_tool("no_such_tool", {})
    except MCPError as e:
        assert "not found" in e.message.lower(), e.message
    else:
        raise AssertionError("an unknown tool should be a protocol error")
    await ok(s, "todoread", {})


async def tool_groups_and_a_dead_daemon(stack):
    some = await session(stack, "--tools", "opencode,plan")
    names = {t.name for t in (await some.list_tools()).tools}
    assert names == {"todowrite", "todoread", "plan", "plan_status", "task_history"}, names
    dead = await session(stack, addr="http://127.0.0.1:1")
    _, text = await refused(dead, "todoread", {}, "cannot reach todod")
    _, text = await refused(dead, "todowrite", {"todos": []}, "cannot reach todod")
    assert "Traceback" not in text


async def a_daemon_restart_is_survived(stack):
    """The daemon killed under a running MCP server: a tool error saying so,
    then, once it is back, the same list (it was committed) and a working
    server, without restarting the MCP server."""
    state = tempfile.mkdtemp()
    socket = os.path.join(state, "todod.sock")

    def start():
        daemon = subprocess.Popen(
            [TODOD, "--state-dir", state, "--listen", "none", "--socket", socket],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        daemon.stdout.readline()  # its readiness line: listening
        return daemon

    daemon = start()
    try:
        s = await session(stack, "--plan", "restart", addr=f"unix:{socket}")
        await ok(s, "todoread", {})
        await ok(s, "todowrite", {"todos": [{"content": "kept", "status": "in_progress"}]})
        daemon.kill()
        daemon.wait()
        await refused(s, "todoread", {}, "not reachable")
        daemon = start()
        back, _ = await ok(s, "todoread", {})
        assert [(t["content"], t["status"]) for t in back["todos"]] == [("kept", "in_progress")], back
        await ok(s, "todowrite", {"todos": back["todos"] + [{"content": "after", "status": "pending"}]})
    finally:
        daemon.kill()
        daemon.wait()


async def main():
    out = {}
    async with AsyncExitStack() as stack:
        s = await session(stack)
        await tools_are_listed(s)
        await each_shape_writes_and_reads(s, out)
        await dependencies_block_then_unblock(s, out)
        await two_writers_lose_no_update(stack, out)
        await a_stale_write_without_a_revision_is_refused(stack)
        await bad_arguments_are_tool_errors(s)
        await tool_groups_and_a_dead_daemon(stack)
        await a_daemon_restart_is_survived(stack)
        status, text = await ok(s, "plan_status", {"plan": "claude-tasks"})
        assert "claude-tasks" in text and status["plan"]["name"] == "claude-tasks", status
    print(json.dumps(out))


def leaves(e):
    """The failures inside anyio's exception groups, which hide them."""
    if isinstance(e, BaseExceptionGroup):
        for inner in e.exceptions:
            yield from leaves(inner)
    else:
        yield e


try:
    asyncio.run(main())
except BaseException as e:  # noqa: BLE001 - report the real failure, then fail
    for leaf in leaves(e):
        traceback.print_exception(leaf)
    sys.exit(1)
