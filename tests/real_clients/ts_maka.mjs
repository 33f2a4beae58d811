// The `_maka/` extensions and `session/fork` through the official TypeScript SDK's
// extension-method API (`ClientContext.request(method, params)` with a custom method name).
// usage: node ts_maka.mjs AGENT_BINARY WORKSPACE  → prints the observation summary as JSON.
import * as acp from "@agentclientprotocol/sdk";
import { spawn } from "node:child_process";
import { Readable, Writable } from "node:stream";
import fs from "node:fs";
import crypto from "node:crypto";
import path from "node:path";

const [agentBin, ws] = process.argv.slice(2);
const child = spawn(agentBin, [], { stdio: ["pipe", "pipe", "inherit"] });

const updates = [];
let onUpdate = () => {};
const turnStates = [];

const app = acp
  .client({ name: "maka-real-client-ts-maka" })
  .onNotification(acp.methods.client.session.update, ({ params }) => {
    updates.push(params.update);
    onUpdate(params.update);
  })
  .onNotification("_maka/turn_state", (p) => p, ({ params }) => {
    turnStates.push(params);
  })
  .onRequest(acp.methods.client.session.requestPermission, ({ params }) => {
    const allow = params.options.find((o) => o.kind === "allow_once");
    return { outcome: { outcome: "selected", optionId: allow.optionId } };
  });

const stream = acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));
const userTexts = (list) =>
  list.filter((u) => u.sessionUpdate === "user_message_chunk").map((u) => u.content.text);

const summary = await app.connectWith(stream, async (agent) => {
  const out = {};
  const init = await agent.request(acp.methods.agent.initialize, {
    protocolVersion: 1,
    clientCapabilities: {},
    clientInfo: { name: "maka-real-client-ts-maka", version: "1" },
  });
  const methods = init.agentCapabilities._meta.maka.methods;
  out.initialize = {
    fork: init.agentCapabilities.sessionCapabilities.fork ?? null,
    methods: [...methods].sort(),
  };

  const { sessionId } = await agent.request(acp.methods.agent.session.new, { cwd: ws, mcpServers: [] });
  const say = async (text) => {
    const r = await agent.request(acp.methods.agent.session.prompt, {
      sessionId,
      prompt: [{ type: "text", text }],
    });
    return r._meta.maka.turnId;
  };
  const t1 = await say("hello");
  const t2 = await say("please write the notes");

  const turns = await agent.request("_maka/session/turns", { sessionId });
  out.turns = {
    ids: turns.turns.map((t) => (t.turnId === t1 ? "t1" : t.turnId === t2 ? "t2" : "?")),
    titles: turns.turns.map((t) => t.title),
    filesChanged: turns.turns.map((t) => t.filesChanged.map((p) => path.basename(p))),
  };

  // session/fork: the SDK names the method (unstable); the copy answers like session/new.
  const forked = await agent.request(acp.methods.agent.session.fork ?? "session/fork", {
    sessionId,
    cwd: ws,
    mcpServers: [],
  });
  const branch = await agent.request("_maka/session/branch", { sessionId, throughTurnId: t1 });
  const listed = await agent.request(acp.methods.agent.session.list, {});
  const source = (id) => listed.sessions.find((s) => s.sessionId === id)?._meta?.maka?.source ?? null;
  out.copies = {
    forkIsNew: forked.sessionId !== sessionId,
    forkConfig: forked.configOptions.map((o) => o.id),
    forkSource: source(forked.sessionId)?.sessionId === sessionId,
    branchTurns: branch.turnCount,
    branchThrough: source(branch.sessionId)?.throughTurnId === t1,
  };

  const revisions = await agent.request("_maka/session/revisions", { sessionId });
  const named = await agent.request("_maka/session/revision/create", { sessionId, label: "checkpoint" });
  const undone = await agent.request("_maka/session/revision/abandon", {
    sessionId,
    revisionId: `rev_${t2}`,
  });
  out.rewind = {
    revisions: revisions.revisions.map((r) => r.kind),
    named: named.kind,
    abandoned: undone.abandonedTurnIds.length,
    restored: undone.restored.map((r) => [path.basename(r.path), r.action]),
    conflicts: undone.conflicts.length,
    fileGone: !fs.existsSync(path.join(ws, "notes.txt")),
  };

  // Steering: a message for the running turn, once its first words have streamed.
  const firstWords = new Promise((resolve) => {
    onUpdate = (u) => u.sessionUpdate === "agent_message_chunk" && resolve();
  });
  const pending = agent.request(acp.methods.agent.session.prompt, {
    sessionId,
    prompt: [{ type: "text", text: "start the slow job" }],
  });
  await firstWords;
  onUpdate = () => {};
  const steered = await agent.request("_maka/turn/steer", {
    sessionId,
    prompt: [{ type: "text", text: "use the small data set" }],
  });
  await agent.notify(acp.methods.agent.session.cancel, { sessionId });
  const r = await pending;
  let early = null;
  try {
    await agent.request("_maka/turn/steer", { sessionId, prompt: [{ type: "text", text: "late" }] });
  } catch (e) {
    early = { code: e.code, makaCode: e.data?.makaCode ?? null };
  }
  updates.length = 0;
  await agent.request(acp.methods.agent.session.load, { sessionId, cwd: ws, mcpServers: [] });
  out.steer = {
    sameTurn: steered.turnId === r._meta.maka.turnId,
    stopReason: r.stopReason,
    replayedUserTexts: userTexts(updates),
    noTurnRunning: early,
  };
  // Knowledge: memory, an artifact upload, usage, plan and goal state.
  const mem0 = await agent.request("_maka/memory/query", { sessionId });
  const added = await agent.request("_maka/memory/mutate", {
    expectedRevision: mem0.revision,
    change: { kind: "add", scope: "workspace", sessionId, text: "Answer briefly." },
  });
  const stale = await agent.request("_maka/memory/mutate", {
    expectedRevision: mem0.revision,
    change: { kind: "add", scope: "user", text: "x" },
  });
  const body = Buffer.from("hello artifact\n");
  const begun = await agent.request("_maka/artifact/ingest", {
    sessionId,
    kind: "begin",
    name: "hello.txt",
    mimeType: "text/plain",
    totalBytes: body.length,
    sha256: crypto.createHash("sha256").update(body).digest("hex"),
  });
  await agent.request("_maka/artifact/ingest", {
    sessionId, kind: "part", uploadId: begun.uploadId, offset: 0, dataBase64: body.toString("base64"),
  });
  const committed = await agent.request("_maka/artifact/ingest", { sessionId, kind: "commit", uploadId: begun.uploadId });
  const read = await agent.request("_maka/artifact/read", { sessionId, artifactId: committed.artifact.artifactId });
  const usage = await agent.request("_maka/usage/query", { sessionId });
  const plan = await agent.request("_maka/plan/query", { sessionId });
  const goal = await agent.request("_maka/goal/query", { sessionId });
  out.knowledge = {
    memory: [added.kind, stale.kind, added.entry.scope.kind],
    artifact: [committed.kind, Buffer.from(read.dataBase64, "base64").toString()],
    usage: [usage.totals.inputTokens > 0, usage.turns.length],
    plan: plan.status,
    goal: goal.goal,
  };
  return out;
});

child.stdin.end();
process.stdout.write(JSON.stringify(summary) + "\n");
