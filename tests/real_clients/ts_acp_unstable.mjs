// ACP's unstable surface as it stands now (issue 26, items 4–6) through the official TypeScript
// SDK 2.4's `/unstable` entry point: a client that advertises `plan` follows the stored plan by
// id (`plan_update` proposed, then approved through `_maka/plan/control`; replayed so by
// `session/load`) and never sees the legacy `plan`; `systemPrompt` is advertised, stored with the
// session (`_maka/session/turns`), and an unknown mode refused; a client that advertises
// `subagents` sees a delegation (to the stub agent, tests/fixtures/stub_agent.py) as a child
// session: announced, the task its first message, its call and that call's dialog under the
// child's id, its state on the parent, its answer a message to the parent; `session/load` shows
// the same child. The SDK parses every message.
// usage: node ts_acp_unstable.mjs AGENT_BINARY WORKSPACE STUB_AGENT
//   → prints the observation summary as JSON.
import * as acp from "@agentclientprotocol/sdk/unstable";
import { spawn } from "node:child_process";
import { Readable, Writable } from "node:stream";
import { writeFileSync } from "node:fs";
import { join } from "node:path";

const [agentBin, ws, stubAgent] = process.argv.slice(2);
// The stub agent, declared in the user's configuration (so trusted: no trust dialog).
const config = join(ws, "..", "subagent-config.json");
writeFileSync(
  config,
  JSON.stringify({ agents: { stub: { command: "python3", args: [stubAgent], description: "a stub" } } }),
);
const child = spawn(agentBin, [], {
  stdio: ["pipe", "pipe", "inherit"],
  env: { ...process.env, MAKA_CONFIG: config },
});

const updates = [];
// Every update with the session it was sent in, in arrival order (a child's are its own).
const lines = [];
const dialogs = [];
const app = acp
  .client({ name: "maka-real-client-ts-unstable" })
  .onNotification(acp.methods.client.session.update, ({ params }) => {
    updates.push(params.update);
    lines.push(params);
  })
  .onRequest(acp.methods.client.session.requestPermission, ({ params }) => {
    dialogs.push({ sessionId: params.sessionId, toolCallId: params.toolCall.toolCallId });
    return { outcome: { outcome: "selected", optionId: params.options[0].optionId } };
  });

// A delegation as the subagent-aware client sees it, with the session ids replaced by their
// role (`parent`, `child`) and the delegate call's id by `D`.
const subagentView = (parent) => {
  const announced = [];
  const role = (sid) => (sid === parent ? "parent" : announced.includes(sid) ? "child" : `unannounced ${sid}`);
  let delegateId = null;
  const id = (s) => (delegateId && typeof s === "string" ? s.replaceAll(delegateId, "D") : s);
  const seen = [];
  for (const { sessionId, update: u } of lines) {
    if (u.sessionUpdate === "subagent_update" && !announced.includes(u.sessionId)) announced.push(u.sessionId);
    if (u.sessionUpdate === "tool_call" && u.name === "delegate") delegateId = u.toolCallId;
    const where = role(sessionId);
    switch (u.sessionUpdate) {
      case "subagent_update":
        seen.push({ where, kind: u.sessionUpdate, title: u.title ?? null, state: u.state?.state ?? null,
          stopReason: u.state?.stopReason ?? null });
        break;
      case "session_message":
        seen.push({ where, kind: u.sessionUpdate, messageId: id(u.messageId),
          from: u.senderSessionId ? role(u.senderSessionId) : null,
          to: u.recipientSessionId ? role(u.recipientSessionId) : null,
          text: (u.content ?? []).map((c) => c.text).join("").split("\n")[0] });
        break;
      case "tool_call":
      case "tool_call_update":
        if (u.status === "pending" || u.status === "completed" || u.status === "failed") {
          seen.push({ where, kind: u.sessionUpdate, toolCallId: id(u.toolCallId), status: u.status,
            parentMeta: u._meta?.maka?.parentToolCallId ?? null });
        }
        break;
      case "session_message_chunk":
        // Many or few pieces: one line for all of them.
        if (seen.at(-1)?.kind !== u.sessionUpdate) seen.push({ where, kind: u.sessionUpdate });
        break;
    }
  }
  return { children: announced.length, seen };
};

const stream = acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));
const plans = () =>
  updates
    .filter((u) => u.sessionUpdate.startsWith("plan"))
    .map((u) =>
      u.sessionUpdate === "plan_update"
        ? {
            kind: u.sessionUpdate,
            planId: u.plan.planId,
            type: u.plan.type,
            entries: u.plan.entries.map((e) => e.content),
            status: u.plan._meta?.maka?.status ?? null,
          }
        : { kind: u.sessionUpdate },
    );

const summary = await app.connectWith(stream, async (agent) => {
  const out = {};
  const init = await agent.request(acp.methods.agent.initialize, {
    protocolVersion: 1,
    clientCapabilities: { plan: {}, subagents: {} },
    clientInfo: { name: "maka-real-client-ts-unstable", version: "1" },
  });
  // A session with the client's system prompt (append), stored with it.
  const withPrompt = await agent.request(acp.methods.agent.session.new, {
    cwd: ws,
    mcpServers: [],
    systemPrompt: { mode: "append", content: [{ type: "text", text: "Answer briefly." }] },
  });
  const stored = await agent.request("_maka/session/turns", { sessionId: withPrompt.sessionId });
  let refused = null;
  try {
    await agent.request(acp.methods.agent.session.new, {
      cwd: ws,
      mcpServers: [],
      systemPrompt: { mode: "_custom", content: [{ type: "text", text: "x" }] },
    });
  } catch (e) {
    refused = e.code ?? null;
  }
  out.sysPrompt = {
    advertised: init.agentCapabilities.sessionCapabilities.systemPrompt ?? null,
    stored: stored.systemPrompt ?? null,
    unknownModeRefused: refused,
  };
  const { sessionId } = await agent.request(acp.methods.agent.session.new, { cwd: ws, mcpServers: [] });
  const set = (configId, value) =>
    agent.request(acp.methods.agent.session.setConfigOption, { sessionId, configId, value });
  await set("mode", "bypass");
  await set("collaboration_mode", "plan");
  updates.length = 0;
  const r = await agent.request(acp.methods.agent.session.prompt, {
    sessionId,
    prompt: [{ type: "text", text: "plan the work" }],
  });
  out.proposed = { stopReason: r.stopReason, plans: plans() };

  const { revision } = await agent.request("_maka/plan/query", { sessionId });
  updates.length = 0;
  const approved = await agent.request("_maka/plan/control", {
    sessionId,
    expectedRevision: revision,
    action: "approve",
  });
  out.approved = { status: approved.plan.status, plans: plans() };

  await agent.request(acp.methods.agent.session.close, { sessionId });
  updates.length = 0;
  await agent.request(acp.methods.agent.session.load, { sessionId, cwd: ws, mcpServers: [] });
  out.load = { plans: plans() };

  // A delegation, live and replayed.
  const sub = await agent.request(acp.methods.agent.session.new, { cwd: ws, mcpServers: [] });
  lines.length = 0;
  const d = await agent.request(acp.methods.agent.session.prompt, {
    sessionId: sub.sessionId,
    prompt: [{ type: "text", text: "delegate the count" }],
  });
  out.subagent = {
    stopReason: d.stopReason,
    dialogs: dialogs.map((x) => ({ where: x.sessionId === sub.sessionId ? "parent" : "child",
      toolCallId: x.toolCallId.replace(/^.*\.(call_\d+)$/, "D.$1") })),
    ...subagentView(sub.sessionId),
  };
  await agent.request(acp.methods.agent.session.close, { sessionId: sub.sessionId });
  lines.length = 0;
  await agent.request(acp.methods.agent.session.load, { sessionId: sub.sessionId, cwd: ws, mcpServers: [] });
  out.subLoad = subagentView(sub.sessionId);
  return out;
});
child.stdin.end();
console.log(JSON.stringify(summary, null, 1));
