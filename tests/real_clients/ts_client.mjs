// The scenario (see scenario.md) through the official TypeScript SDK's client API
// (@agentclientprotocol/sdk 2.x: client().onRequest/onNotification().connectWith).
// usage: node ts_client.mjs AGENT_BINARY WORKSPACE  → prints the observation summary as JSON.
import * as acp from "@agentclientprotocol/sdk";
import { spawn } from "node:child_process";
import { Readable, Writable } from "node:stream";
import fs from "node:fs";
import path from "node:path";

const [agentBin, ws] = process.argv.slice(2);
const child = spawn(agentBin, [], { stdio: ["pipe", "pipe", "inherit"] });

// Everything the agent sends, per session, in order.
const updates = [];
let onUpdate = () => {};
const permissions = [];

const app = acp
  .client({ name: "maka-real-client-ts" })
  .onNotification(acp.methods.client.session.update, ({ params }) => {
    updates.push(params.update);
    onUpdate(params.update);
  })
  .onRequest(acp.methods.client.session.requestPermission, ({ params }) => {
    permissions.push(params.toolCall.title);
    const allow = params.options.find((o) => o.kind === "allow_once");
    return { outcome: { outcome: "selected", optionId: allow.optionId } };
  })
  .onRequest(acp.methods.client.fs.readTextFile, ({ params }) => {
    if (!fs.existsSync(params.path)) {
      throw acp.RequestError ? acp.RequestError.resourceNotFound(params.path) : new Error("not found");
    }
    return { content: fs.readFileSync(params.path, "utf8") };
  })
  .onRequest(acp.methods.client.fs.writeTextFile, ({ params }) => {
    fs.writeFileSync(params.path, params.content);
    return {};
  });

const stream = acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));
const text = (list) =>
  list.filter((u) => u.sessionUpdate === "agent_message_chunk").map((u) => u.content.text).join("");

const summary = await app.connectWith(stream, async (agent) => {
  const out = {};
  const init = await agent.request(acp.methods.agent.initialize, {
    protocolVersion: 1,
    clientCapabilities: { fs: { readTextFile: true, writeTextFile: true }, terminal: false },
    clientInfo: { name: "maka-real-client-ts", version: "1" },
  });
  out.initialize = { protocolVersion: init.protocolVersion, loadSession: init.agentCapabilities.loadSession };

  const created = await agent.request(acp.methods.agent.session.new, { cwd: ws, mcpServers: [] });
  const sessionId = created.sessionId;
  out.new = {
    configOptions: created.configOptions.map((o) => o.id),
    mode: created.modes.currentModeId,
  };

  // A prompt with streamed text, a tool call and a permission request.
  updates.length = 0;
  const r1 = await agent.request(acp.methods.agent.session.prompt, {
    sessionId,
    prompt: [{ type: "text", text: "please write the notes" }],
  });
  const tools = new Map();
  for (const u of updates) {
    if (u.sessionUpdate === "tool_call") tools.set(u.toolCallId, [u.title, u.status]);
    if (u.sessionUpdate === "tool_call_update" && u.status) tools.get(u.toolCallId)[1] = u.status;
  }
  out.prompt = {
    stopReason: r1.stopReason,
    text: text(updates),
    permissions: [...permissions],
    tools: [...tools.values()],
    file: fs.readFileSync(path.join(ws, "notes.txt"), "utf8"),
  };

  // Cancel mid-turn, once the first words have streamed.
  updates.length = 0;
  const firstWords = new Promise((resolve) => {
    onUpdate = (u) => u.sessionUpdate === "agent_message_chunk" && resolve();
  });
  const pending = agent.request(acp.methods.agent.session.prompt, {
    sessionId,
    prompt: [{ type: "text", text: "start the slow job" }],
  });
  await firstWords;
  onUpdate = () => {};
  await agent.notify(acp.methods.agent.session.cancel, { sessionId });
  const r2 = await pending;
  out.cancel = { stopReason: r2.stopReason, streamedBeforeCancel: text(updates).length > 0 };

  const listed = await agent.request(acp.methods.agent.session.list, {});
  const mine = listed.sessions.find((s) => s.sessionId === sessionId);
  out.list = { listed: !!mine, title: mine?.title ?? null };

  updates.length = 0;
  await agent.request(acp.methods.agent.session.load, { sessionId, cwd: ws, mcpServers: [] });
  out.load = {
    userTexts: updates.filter((u) => u.sessionUpdate === "user_message_chunk").map((u) => u.content.text),
    agentText: text(updates),
    toolCalls: updates.filter((u) => u.sessionUpdate === "tool_call").length,
  };

  updates.length = 0;
  const resumed = await agent.request(acp.methods.agent.session.resume, { sessionId, cwd: ws, mcpServers: [] });
  out.resume = {
    configOptions: resumed.configOptions.map((o) => o.id),
    replayed: updates.filter((u) => u.sessionUpdate.endsWith("_chunk")).length,
  };

  const changed = await agent.request(acp.methods.agent.session.setConfigOption, {
    sessionId,
    configId: "mode",
    value: "bypass",
  });
  out.config = { mode: changed.configOptions.find((o) => o.id === "mode").currentValue };

  await agent.request(acp.methods.agent.session.close, { sessionId });
  out.close = "ok";
  await agent.request(acp.methods.agent.session.delete, { sessionId });
  const after = await agent.request(acp.methods.agent.session.list, {});
  out.delete = { listedAfter: after.sessions.some((s) => s.sessionId === sessionId) };
  return out;
});

child.stdin.end();
process.stdout.write(JSON.stringify(summary) + "\n");
