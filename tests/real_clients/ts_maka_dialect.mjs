// A client of Apache Maka's own `maka --acp` (written from its surface, not from our docs),
// through the official TypeScript SDK — the SDK Maka's adapter and Paseo's Maka provider are
// built on — against `maka-acp --acp`: Maka's opt-in flags, its config ids and categories, its
// goal, copy-source and branch requests, its notifications and error conventions.
// usage: node ts_maka_dialect.mjs AGENT_BINARY WORKSPACE  → prints the observation summary as JSON.
import * as acp from "@agentclientprotocol/sdk";
import { spawn } from "node:child_process";
import { Readable, Writable } from "node:stream";

const [agentBin, ws] = process.argv.slice(2);
const child = spawn(agentBin, ["--acp"], { stdio: ["pipe", "pipe", "inherit"] });

const notes = { turnStatus: [], goalStatus: [], planChanged: 0, ours: 0 };
let onGoal = () => {};
const app = acp
  .client({ name: "maka-real-client-ts-maka-dialect" })
  .onNotification(acp.methods.client.session.update, () => {})
  .onNotification("_maka/turn/status", (p) => p, ({ params }) => {
    notes.turnStatus.push(params.status);
  })
  .onNotification("_maka/goal/status", (p) => p, ({ params }) => {
    notes.goalStatus.push(params.goal?.status ?? null);
    onGoal(params.goal);
  })
  .onNotification("_maka/plan/changed", (p) => p, () => {
    notes.planChanged += 1;
  })
  .onNotification("_maka/turn_state", (p) => p, () => {
    notes.ours += 1;
  })
  .onNotification("_maka/goal_update", (p) => p, () => {
    notes.ours += 1;
  });

const stream = acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));
const failure = async (call) => {
  try {
    await call();
    return null;
  } catch (e) {
    return { code: e.code, reason: e.data?.reason ?? null };
  }
};

const summary = await app.connectWith(stream, async (agent) => {
  const out = {};
  const init = await agent.request(acp.methods.agent.initialize, {
    protocolVersion: 1,
    clientCapabilities: { _meta: { "_maka/turnStatus": true, "_maka/goalPlanStatus": true } },
    clientInfo: { name: "maka-real-client-ts-maka-dialect", version: "1" },
  });
  out.initialize = {
    goalPlan: init.agentCapabilities._meta["_maka/goalPlan"] ?? null,
    loadSession: init.agentCapabilities.loadSession,
  };

  const created = await agent.request(acp.methods.agent.session.new, { cwd: ws, mcpServers: [] });
  const sessionId = created.sessionId;
  const set = async (configId, value) => {
    const r = await agent.request(acp.methods.agent.session.setConfigOption, { sessionId, configId, value });
    return r.configOptions.find((o) => o.id === configId).currentValue;
  };
  out.config = {
    options: created.configOptions.map((o) => [o.id, o.category]),
    collaboration: await set("collaboration_mode", "plan"),
    agent: await set("collaboration_mode", "agent"),
    permission: await set("permission_mode", "bypass"),
  };

  const say = async (id, text) =>
    (await agent.request(acp.methods.agent.session.prompt, { sessionId: id, prompt: [{ type: "text", text }] })).stopReason;
  await say(sessionId, "hello");
  const page = await agent.request("_maka/session/copy-source/query", {
    sessionId, throughSequence: null, position: 0, maxContributions: 128,
  });
  const branch = await agent.request("_maka/session/branch/create", {
    sourceSessionId: sessionId,
    targetSessionId: "ts-maka-branch",
    sourceTurnId: page.contributions[0].turnId,
    expectedSourceRevision: page.expectedSourceRevision,
  });
  const stale = await agent.request("_maka/session/branch/create", {
    sourceSessionId: sessionId,
    targetSessionId: "ts-maka-branch-2",
    sourceTurnId: page.contributions[0].turnId,
    expectedSourceRevision: 999999,
  });
  out.branch = {
    previews: page.contributions.map((c) => c.userPromptPreview),
    committed: [branch.kind, branch.session.sessionId],
    prompted: await say("ts-maka-branch", "hello again"),
    stale: stale.kind,
  };

  const armed = await agent.request("_maka/goal/arm", {
    sessionId, condition: "make it shine", maxIterations: 5, tokenBudget: null,
  });
  const achieved = new Promise((resolve) => {
    onGoal = (g) => g?.status === "achieved" && resolve(g);
  });
  const first = await say(sessionId, "start on it");
  const goal = await achieved;
  const queried = await agent.request("_maka/goal/query", { sessionId });
  out.goal = {
    armed: [armed.goal.status, armed.goal.condition, armed.goal.maxIterations],
    prompt: first,
    achieved: [goal.condition, goal.iterations > 0],
    queried: queried.goal.status,
  };

  out.errors = {
    unknownSession: await failure(() => say("no-such-session", "hi")),
    document: await failure(() => agent.request("_maka/memory/query", { kind: "document_start" })),
    abandonProposal: await failure(() =>
      agent.request("_maka/plan/control", { kind: "abandon_proposal", sessionId, proposalId: "proposal-1", operationId: "op" }),
    ),
  };
  out.notifications = {
    goalStatus: notes.goalStatus.includes("active") && notes.goalStatus.includes("achieved"),
    turnStatus: notes.turnStatus.includes("completed"),
    ours: notes.ours,
  };
  return out;
});

child.stdin.end();
process.stdout.write(JSON.stringify(summary) + "\n");
