// ACP as it stands now (issue 26, items 1–3) through the official TypeScript SDK 2.4's stable
// entry point: a client that advertises `session.notices` and `session.compaction` sees every
// tool call named, an MCP server that cannot start as a `notice` (not agent text), and `/compact`
// as `compaction_update` / `compaction_summary_chunk`, live and after `session/load` (which
// replays the compaction once and no notice). The SDK parses every notification it is sent.
// usage: node ts_acp_now.mjs AGENT_BINARY WORKSPACE  → prints the observation summary as JSON.
import * as acp from "@agentclientprotocol/sdk";
import { spawn } from "node:child_process";
import { Readable, Writable } from "node:stream";

const [agentBin, ws] = process.argv.slice(2);
const child = spawn(agentBin, [], { stdio: ["pipe", "pipe", "inherit"] });

const updates = [];
const app = acp
  .client({ name: "maka-real-client-ts-now" })
  .onNotification(acp.methods.client.session.update, ({ params }) => {
    updates.push(params.update);
  })
  .onRequest(acp.methods.client.session.requestPermission, ({ params }) => {
    const allow = params.options.find((o) => o.kind === "allow_once");
    return { outcome: { outcome: "selected", optionId: allow.optionId } };
  });

const stream = acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));
const kind = (k) => updates.filter((u) => u.sessionUpdate === k);
const agentText = () => kind("agent_message_chunk").map((u) => u.content.text).join("");
const compactions = () =>
  updates
    .filter((u) => u.sessionUpdate.startsWith("compaction"))
    .map((u) => (u.sessionUpdate === "compaction_update" ? u.status : u.content.text));

const summary = await app.connectWith(stream, async (agent) => {
  const out = {};
  await agent.request(acp.methods.agent.initialize, {
    protocolVersion: 1,
    clientCapabilities: { session: { notices: {}, compaction: {} } },
    clientInfo: { name: "maka-real-client-ts-now", version: "1" },
  });
  const broken = [{ name: "broken", command: "/nonexistent/mcp-server", args: [], env: [] }];
  const { sessionId } = await agent.request(acp.methods.agent.session.new, {
    cwd: ws,
    mcpServers: broken,
  });
  const say = (text) =>
    agent.request(acp.methods.agent.session.prompt, { sessionId, prompt: [{ type: "text", text }] });

  const first = await say("please write the notes");
  out.toolNames = {
    stopReason: first.stopReason,
    names: kind("tool_call").map((u) => u.name ?? null),
  };
  out.notices = {
    notices: kind("notice").map((u) => ({
      severity: u.severity,
      namesTheServer: u.title.includes("`broken`"),
    })),
    inAgentText: agentText().includes("broken"),
  };

  await say("hello");
  updates.length = 0;
  const compacted = await say("/compact");
  const ids = new Set(
    updates.filter((u) => u.sessionUpdate.startsWith("compaction")).map((u) => u.compactionId),
  );
  out.compaction = {
    stopReason: compacted.stopReason,
    shown: compactions(),
    oneId: ids.size === 1,
    agentText: agentText(),
  };

  await agent.request(acp.methods.agent.session.close, { sessionId });
  updates.length = 0;
  await agent.request(acp.methods.agent.session.load, { sessionId, cwd: ws, mcpServers: [] });
  out.load = {
    compaction: compactions(),
    notices: kind("notice").length,
    names: kind("tool_call").map((u) => u.name ?? null),
  };
  return out;
});
child.stdin.end();
console.log(JSON.stringify(summary, null, 1));
