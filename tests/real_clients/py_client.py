"""The scenario (see scenario.md) through the Python SDK (PyPI agent-client-protocol).

usage: python py_client.py AGENT_BINARY WORKSPACE  → prints the observation summary as JSON.
"""
import asyncio
import json
import os
import sys

import acp
from acp import RequestError, spawn_agent_process, text_block
from acp.schema import ClientCapabilities, FileSystemCapabilities, Implementation

agent_bin, ws = sys.argv[1], sys.argv[2]


class Client:
    def __init__(self):
        self.updates = []
        self.permissions = []
        self.on_update = None

    async def session_update(self, session_id, update, **kwargs):
        u = update.model_dump(by_alias=True, exclude_none=True)
        self.updates.append(u)
        if self.on_update:
            self.on_update(u)

    async def request_permission(self, session_id, tool_call, options, **kwargs):
        self.permissions.append(tool_call.title)
        allow = next(o for o in options if o.kind == "allow_once")
        return {"outcome": {"outcome": "selected", "optionId": allow.option_id}}

    async def read_text_file(self, session_id, path, line=None, limit=None, **kwargs):
        if not os.path.exists(path):
            raise RequestError.resource_not_found(path)
        with open(path) as f:
            return {"content": f.read()}

    async def write_text_file(self, session_id, path, content, **kwargs):
        with open(path, "w") as f:
            f.write(content)
        return {}

    def on_connect(self, conn):
        pass


def text(updates):
    return "".join(u["content"]["text"] for u in updates if u["sessionUpdate"] == "agent_message_chunk")


async def main():
    client = Client()
    out = {}
    # The SDK passes only a minimal environment by default; the agent needs its settings.
    async with spawn_agent_process(client, agent_bin, env=dict(os.environ)) as (conn, _proc):
        init = await conn.initialize(
            protocol_version=1,
            client_capabilities=ClientCapabilities(
                fs=FileSystemCapabilities(read_text_file=True, write_text_file=True), terminal=False
            ),
            client_info=Implementation(name="maka-real-client-py", version="1"),
        )
        out["initialize"] = {
            "protocolVersion": init.protocol_version,
            "loadSession": init.agent_capabilities.load_session,
        }
        created = await conn.new_session(cwd=ws, mcp_servers=[])
        sid = created.session_id
        out["new"] = {
            "configOptions": [o.root.id if hasattr(o, "root") else o.id for o in created.config_options],
            "mode": created.modes.current_mode_id,
        }

        client.updates.clear()
        r1 = await conn.prompt(session_id=sid, prompt=[text_block("please write the notes")])
        tools = {}
        for u in client.updates:
            if u["sessionUpdate"] == "tool_call":
                tools[u["toolCallId"]] = [u["title"], u.get("status")]
            if u["sessionUpdate"] == "tool_call_update" and u.get("status"):
                tools[u["toolCallId"]][1] = u["status"]
        with open(os.path.join(ws, "notes.txt")) as f:
            written = f.read()
        out["prompt"] = {
            "stopReason": r1.stop_reason,
            "text": text(client.updates),
            "permissions": list(client.permissions),
            "tools": list(tools.values()),
            "file": written,
        }

        client.updates.clear()
        first = asyncio.Event()
        client.on_update = lambda u: u["sessionUpdate"] == "agent_message_chunk" and first.set()
        pending = asyncio.create_task(conn.prompt(session_id=sid, prompt=[text_block("start the slow job")]))
        await first.wait()
        client.on_update = None
        await conn.cancel(session_id=sid)
        r2 = await pending
        out["cancel"] = {"stopReason": r2.stop_reason, "streamedBeforeCancel": len(text(client.updates)) > 0}

        listed = await conn.list_sessions()
        mine = next((s for s in listed.sessions if s.session_id == sid), None)
        out["list"] = {"listed": mine is not None, "title": mine.title if mine else None}

        client.updates.clear()
        await conn.load_session(cwd=ws, session_id=sid, mcp_servers=[])
        out["load"] = {
            "userTexts": [u["content"]["text"] for u in client.updates if u["sessionUpdate"] == "user_message_chunk"],
            "agentText": text(client.updates),
            "toolCalls": sum(1 for u in client.updates if u["sessionUpdate"] == "tool_call"),
        }

        client.updates.clear()
        resumed = await conn.resume_session(session_id=sid, cwd=ws, mcp_servers=[])
        out["resume"] = {
            "configOptions": [o.root.id if hasattr(o, "root") else o.id for o in resumed.config_options],
            "replayed": sum(1 for u in client.updates if u["sessionUpdate"].endswith("_chunk")),
        }

        changed = await conn.set_config_option(config_id="mode", session_id=sid, value="bypass")
        options = [o.root if hasattr(o, "root") else o for o in changed.config_options]
        out["config"] = {"mode": next(o.current_value for o in options if o.id == "mode")}

        await conn.close_session(session_id=sid)
        out["close"] = "ok"
        # SDK 0.12.1 has no session/delete helper: the raw request through its connection.
        await conn._conn.send_request("session/delete", {"sessionId": sid})
        after = await conn.list_sessions()
        out["delete"] = {"listedAfter": any(s.session_id == sid for s in after.sessions)}
    print(json.dumps(out))


asyncio.run(main())
