// ACP's unstable surface as it stands now (issue 26, items 4–6) through the official TypeScript
// SDK 2.4's `/unstable` entry point: a client that advertises `plan` follows the stored plan by
// id (`plan_update` proposed, then approved through `_maka/plan/control`; replayed so by
// `session/load`) and never sees the legacy `plan`; `systemPrompt` is advertised, stored with the
// session (`_maka/session/turns`), and an unknown mode refused. The SDK parses every message.
// usage: node ts_acp_unstable.mjs AGENT_BINARY WORKSPACE  → prints the observation summary as JSON.
import * as acp from "@agentclientprotocol/sdk/unstable";
import { spawn } from "node:child_process";
import { Readable, Writable } from "node:stream";

const [agentBin, ws] = process.argv.slice(2);
const child = spawn(agentBin, [], { stdio: ["pipe", "pipe", "inherit"] });

const updates = [];
const app = acp
  .client({ name: "maka-real-client-ts-unstable" })
  .onNotification(acp.methods.client.session.update, ({ params }) => {
    updates.push(params.update);
  });

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
    clientCapabilities: { plan: {} },
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
  return out;
});
child.stdin.end();
console.log(JSON.stringify(summary, null, 1));
