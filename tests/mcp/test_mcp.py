"""sandboxd's MCP tools through the official MCP Python client, unmodified: over stdio
(`sandboxd mcp`, which relays to the daemon) and over Streamable HTTP (`/mcp` on the daemon).

Environment: SANDBOXD_URL, SANDBOXD_TOKEN (an API key), SANDBOXD_BIN (the sandboxd binary).
Exits non-zero with the failed assertion when anything is not as claimed.
"""

import asyncio
import os

import httpx2
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

URL = os.environ["SANDBOXD_URL"]
TOKEN = os.environ["SANDBOXD_TOKEN"]
BIN = os.environ["SANDBOXD_BIN"]

TOOLS = {
    "create_sandbox", "run_command", "run_code", "read_file", "write_file",
    "list_files", "expose_port", "list_sandboxes", "delete_sandbox",
    "git_clone", "git_status", "git_add", "git_commit", "git_branches", "git_checkout", "git_push",
    "git_pull", "create_volume", "list_volumes",
}


async def call(session, tool, args):
    result = await session.call_tool(tool, args)
    assert not result.is_error, f"{tool}: {result}"
    return result.structured_content


async def expect_error(session, tool, args, words, code, status):
    """A failing tool answers a result with isError (not a protocol error), so the model sees the
    API's message; its structured content keeps the API's code and status."""
    result = await session.call_tool(tool, args)
    assert result.is_error, f"{tool} {args}: expected a failed tool result, got {result}"
    text = " ".join(c.text for c in result.content if getattr(c, "text", None))
    assert words in text, f"{tool}: {text}"
    failure = result.structured_content
    assert failure["code"] == code and failure["status"] == status, f"{tool}: {failure}"
    assert words in failure["message"], f"{tool}: {failure}"
    return result


async def expect_protocol_error(session, tool, args):
    """An unknown tool stays a protocol error."""
    try:
        result = await session.call_tool(tool, args)
    except MCPError as e:
        return e
    raise AssertionError(f"{tool} {args}: expected a protocol error, got {result}")


async def exercise(session, via):
    await session.initialize()
    names = {t.name for t in (await session.list_tools()).tools}
    assert TOOLS <= names, f"{via}: tools {names}"

    sandbox = await call(session, "create_sandbox", {"timeout_sec": 300, "metadata": {"via": via}})
    sid = sandbox["id"]
    assert sandbox["state"] == "running", sandbox
    run = await call(session, "run_command", {"sandbox": sid, "command": "echo hello-$((6*7)); exit 3"})
    assert run["exitCode"] == 3 and run["stdout"] == "hello-42\n", run
    await call(session, "write_file", {"sandbox": sid, "path": "/home/user/note.txt", "content": f"from {via}\n"})
    read = await call(session, "read_file", {"sandbox": sid, "path": "/home/user/note.txt"})
    assert read["content"] == f"from {via}\n", read
    listed = await call(session, "list_files", {"sandbox": sid, "path": "/home/user"})
    assert "note.txt" in [e["name"] for e in listed["entries"]], listed
    sandboxes = await call(session, "list_sandboxes", {})
    assert sid in [s["id"] for s in sandboxes["sandboxes"]], sandboxes

    # A volume shared by two sandboxes: one writes, the other reads.
    volume = await call(session, "create_volume", {"name": f"mcp-{via}"})
    assert volume["name"] == f"mcp-{via}", volume
    listed_volumes = await call(session, "list_volumes", {})
    assert volume["id"] in [v["id"] for v in listed_volumes["volumes"]], listed_volumes
    mounts = [{"name": f"mcp-{via}", "path": "/data"}]
    first = await call(session, "create_sandbox", {"timeout_sec": 120, "volumes": mounts})
    second = await call(session, "create_sandbox", {"timeout_sec": 120, "volumes": mounts})
    await call(session, "write_file", {"sandbox": first["id"], "path": "/data/shared.txt", "content": "shared\n"})
    shared = await call(session, "read_file", {"sandbox": second["id"], "path": "/data/shared.txt"})
    assert shared["content"] == "shared\n", shared
    await expect_error(session, "create_sandbox", {"volumes": [{"name": "no-such-volume", "path": "/data"}]},
                       "not found", "not_found", 404)
    for other in (first, second):
        await call(session, "delete_sandbox", {"sandbox": other["id"]})

    await exercise_git(session, sid)

    # The API's messages, as failed tool results the model can read.
    await expect_error(session, "run_command", {"sandbox": "no-such-sandbox", "command": "true"},
                       "not found", "not_found", 404)
    await expect_error(session, "read_file", {"sandbox": sid, "path": "relative/path"},
                       "absolute", "invalid_request", 400)
    await expect_error(session, "run_code", {"sandbox": sid, "code": "1+1"}, "interpreter",
                       "conflict", 409)
    await expect_protocol_error(session, "no_such_tool", {})

    await call(session, "delete_sandbox", {"sandbox": sid})
    await expect_error(session, "delete_sandbox", {"sandbox": sid}, "not found", "not_found", 404)
    print(f"{via}: ok")


async def exercise_git(session, sid):
    """Git through the tools, on repositories inside the sandbox (a local path is a remote too)."""
    home = "/home/user"
    made = await call(session, "run_command", {"sandbox": sid, "command": f"git init -q -b main {home}/origin"})
    assert made["exitCode"] == 0, made
    await call(session, "write_file", {"sandbox": sid, "path": f"{home}/origin/a.txt", "content": "a\n"})
    status = await call(session, "git_status", {"sandbox": sid, "path": "origin"})
    assert status["fileStatus"] == [
        {"name": "a.txt", "staging": "Untracked", "worktree": "Untracked", "extra": ""}
    ], status
    await call(session, "git_add", {"sandbox": sid, "path": "origin", "files": ["."]})
    commit = {"sandbox": sid, "path": "origin", "message": "first", "author": "A", "email": "a@example.com"}
    sha = (await call(session, "git_commit", commit))["hash"]
    head = await call(session, "run_command", {"sandbox": sid, "command": f"git -C {home}/origin rev-parse HEAD"})
    assert head["stdout"].strip() == sha, (head, sha)
    cloned = await call(session, "git_clone", {"sandbox": sid, "url": f"{home}/origin", "path": "clone"})
    assert cloned["path"] == f"{home}/clone", cloned
    await call(session, "git_checkout", {"sandbox": sid, "path": "clone", "branch": "feature", "create": True})
    branches = await call(session, "git_branches", {"sandbox": sid, "path": "clone"})
    assert branches == {"branches": ["feature", "main"], "current": "feature"}, branches
    await call(session, "git_push", {"sandbox": sid, "path": "clone", "set_upstream": True})
    pushed = await call(session, "run_command", {"sandbox": sid, "command": f"git -C {home}/origin rev-parse feature"})
    assert pushed["stdout"].strip() == sha, pushed
    await call(session, "git_pull", {"sandbox": sid, "path": "clone"})
    await expect_error(session, "git_status", {"sandbox": sid, "path": home}, "not a git repository",
                       "git_repo_not_found", 404)
    await expect_error(session, "git_checkout", {"sandbox": sid, "path": "clone", "branch": "-D"},
                       "invalid branch", "invalid_request", 400)


def stdio_params(token):
    env = {"SB_API_URL": URL, "SB_PAT_TOKEN": token, "SB_LOG": "warn"}
    return StdioServerParameters(command=BIN, args=["mcp"], env=env)


async def over_stdio():
    async with stdio_client(stdio_params(TOKEN)) as (read, write):
        async with ClientSession(read, write) as session:
            await exercise(session, "stdio")


async def over_http():
    client = httpx2.AsyncClient(headers={"Authorization": f"Bearer {TOKEN}"})
    async with client, streamable_http_client(f"{URL}/mcp", http_client=client) as (read, write):
        async with ClientSession(read, write) as session:
            await exercise(session, "http")


async def wrong_key():
    # Over stdio the relay starts and answers every call with the daemon's refusal.
    async with stdio_client(stdio_params("not-a-key")) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            try:
                await session.list_tools()
            except MCPError as e:
                assert "401" in str(e) or "nauthorized" in str(e), e
            else:
                raise AssertionError("stdio: a wrong key listed the tools")
    # Over HTTP the daemon refuses the request (401) before any MCP message is read, and the SDK
    # raises an MCP error.
    client = httpx2.AsyncClient(headers={"Authorization": "Bearer not-a-key"})
    try:
        async with client, streamable_http_client(f"{URL}/mcp", http_client=client) as (read, write):
            async with ClientSession(read, write) as session:
                await asyncio.wait_for(session.initialize(), 30)
    except BaseException as e:  # the SDK's MCPError, inside the ExceptionGroups of its task groups
        assert "MCPError" in repr(e), repr(e)
    else:
        raise AssertionError("http: a wrong key initialized a session")
    async with httpx2.AsyncClient() as plain:
        answer = await plain.post(
            f"{URL}/mcp",
            headers={"Authorization": "Bearer not-a-key", "Accept": "application/json, text/event-stream"},
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        )
        assert answer.status_code == 401 and answer.json()["code"] == "unauthorized", answer.text
    print("wrong key: refused")


async def main():
    await over_stdio()
    await over_http()
    await wrong_key()


asyncio.run(main())
