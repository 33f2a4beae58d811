// The scenario (see scenario.md) through the acpx command-line client, one acpx command per
// step, reading its `--format json` output (the two-way wire transcript) and its session record.
// usage: node acpx_client.mjs ACPX_BIN AGENT_BINARY WORKSPACE  → prints the summary as JSON.
// acpx keeps a "queue owner" process (which holds the agent) between commands; --ttl 1 lets it
// exit a second after each command, so later commands start the agent again and resume.
import { execFileSync, spawn } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";

const [acpx, agentBin, ws] = process.argv.slice(2);
const base = ["--agent", agentBin, "--approve-all", "--format", "json", "--ttl", "1", "--timeout", "60"];
// acpx quirk: a command that reaches a queue owner in the moment its TTL expires fails with
// QUEUE_OWNER_CLOSED (marked retryable) instead of starting a new owner; retry it, as it says.
const run = (...args) => {
  for (let attempt = 1; ; attempt++) {
    try {
      return execFileSync(acpx, [...base, ...args], { cwd: ws, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
    } catch (e) {
      if (attempt < 5 && String(e.stdout).includes("QUEUE_OWNER_CLOSED")) {
        Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 500);
        continue;
      }
      throw e;
    }
  }
};
const lines = (out) =>
  out
    .split("\n")
    .filter((l) => l.startsWith("{"))
    .map((l) => JSON.parse(l));
const updates = (msgs) => msgs.filter((m) => m.method === "session/update").map((m) => m.params.update);
const text = (list) =>
  list.filter((u) => u.sessionUpdate === "agent_message_chunk").map((u) => u.content.text).join("");
// The transcript interleaves both directions and their ids overlap (the agent's fs request 2,
// the client's prompt 2): the prompt's response is the one carrying a stopReason.
const promptResponse = (msgs) => msgs.find((m) => m.method === undefined && m.result?.stopReason);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const unsupported = (why) => ({ unsupported: why });

const out = {};
const created = lines(run("sessions", "new")).find((m) => m.action === "session_ensured");
const sessionId = created.acpxSessionId;
const record = JSON.parse(fs.readFileSync(path.join(os.homedir(), ".acpx", "sessions", `${sessionId}.json`), "utf8"));
out.initialize = { protocolVersion: record.protocol_version, loadSession: record.agent_capabilities.loadSession };
const options = record.acpx.config_options;
out.new = {
  configOptions: options.map((o) => o.id),
  // acpx keeps the config options, not the legacy `modes`; the mode option is the same setting.
  mode: options.find((o) => o.id === "mode").currentValue,
};

await sleep(1500); // the queue owner exits: the prompt starts the agent again and resumes
const wire = lines(run("prompt", "please write the notes"));
const resumeReq = wire.find((m) => m.method === "session/resume");
const resumeResp = wire.find((m) => m.id === resumeReq?.id && m.result?.configOptions);
const prompt = promptResponse(wire);
const promptAt = wire.findIndex((m) => m.method === "session/prompt");
const turn = updates(wire.slice(promptAt));
const tools = new Map();
for (const u of turn) {
  if (u.sessionUpdate === "tool_call") tools.set(u.toolCallId, [u.title, u.status]);
  if (u.sessionUpdate === "tool_call_update" && u.status) tools.get(u.toolCallId)[1] = u.status;
}
out.prompt = {
  stopReason: prompt.result.stopReason,
  text: text(turn),
  permissions: wire.filter((m) => m.method === "session/request_permission").map((m) => m.params.toolCall.title),
  tools: [...tools.values()],
  file: fs.readFileSync(path.join(ws, "notes.txt"), "utf8"),
};

// Cancel mid-turn: a prompt in the background, `acpx cancel` once words have streamed.
const bg = spawn(acpx, [...base, "prompt", "start the slow job"], { cwd: ws, stdio: ["ignore", "pipe", "ignore"] });
let bgOut = "";
bg.stdout.on("data", (d) => (bgOut += d));
const exited = new Promise((r) => bg.on("exit", r));
for (let i = 0; i < 300 && !bgOut.includes("agent_message_chunk"); i++) await sleep(50);
run("cancel");
await exited;
const bgWire = lines(bgOut);
out.cancel = {
  stopReason: promptResponse(bgWire).result.stopReason,
  streamedBeforeCancel: text(updates(bgWire)).length > 0,
};

const listed = lines(run("sessions", "list")).find((m) => Array.isArray(m.sessions));
const mine = listed.sessions.find((s) => s.sessionId === sessionId);
out.list = { listed: !!mine, title: mine?.title ?? null };

// acpx re-attaches with session/resume when the agent offers it (as this one does) and uses
// session/load only for agents without resume, so it never asks for a replay.
out.load = unsupported("acpx re-attaches with session/resume when offered; no command replays");
out.resume = {
  configOptions: resumeResp.result.configOptions.map((o) => o.id),
  replayed: updates(wire.slice(wire.indexOf(resumeReq), wire.indexOf(resumeResp))).filter((u) =>
    u.sessionUpdate.endsWith("_chunk"),
  ).length,
};

const set = lines(run("set", "mode", "bypass")).find((m) => m.action === "config_set");
out.config = { mode: set.configOptions.find((o) => o.id === "mode").currentValue };

const closed = lines(run("sessions", "close")).find((m) => m.action === "session_closed");
out.close = closed ? "ok" : "failed";
out.delete = unsupported("acpx has no session/delete command (its prune removes local records)");
process.stdout.write(JSON.stringify(out) + "\n");
