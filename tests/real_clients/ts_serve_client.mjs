// A whole conversation with `maka-acp serve` through the official TypeScript SDK's remote
// transports (@agentclientprotocol/sdk 2.4.0: experimental/http-client, experimental/ws-client):
// initialize, session/new, a streamed prompt with a permission allowed and an fs/* round trip,
// fs/read_text_file, a terminal/* round trip (allowed), a command rejected, cancel, session/load
// replay, session/close, and the transport's close.
// usage: node ts_serve_client.mjs AGENT_BINARY WORKSPACE http|ws [TRANSCRIPT.jsonl]
//   → prints the observation summary as JSON; every message both ways goes to TRANSCRIPT.
import * as acp from "@agentclientprotocol/sdk";
import { createHttpStream } from "@agentclientprotocol/sdk/experimental/http-client";
import { createWebSocketStream } from "@agentclientprotocol/sdk/experimental/ws-client";
import { spawn, execFileSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import readline from "node:readline";

const [agentBin, ws, transport, transcriptPath] = process.argv.slice(2);

// The server: a free loopback port; its URL and token file come on stderr. With ACP_SERVE_URL
// and ACP_SERVE_TOKEN, one already running (behind a proxy: tests/serve_nginx.rs).
const external = process.env.ACP_SERVE_URL;
const server = external
  ? null
  : spawn(agentBin, ["serve", "--listen", "127.0.0.1:0"], { stdio: ["ignore", "ignore", "pipe"] });
const { url, token } = external
  ? { url: external, token: process.env.ACP_SERVE_TOKEN }
  : await new Promise((resolve, reject) => {
  const lines = readline.createInterface({ input: server.stderr });
  lines.on("line", (line) => {
    process.stderr.write(line + "\n");
    const m = line.match(/(http:\/\/\S+\/acp) .*token in (\S+)/);
    if (m) resolve({ url: m[1], token: fs.readFileSync(m[2], "utf8").trim() });
  });
  server.on("exit", (code) => reject(new Error(`maka-acp serve exited (${code})`)));
});
const headers = { Authorization: `Bearer ${token}` };

// Node's WebSocket (undici) takes headers in its options object.
class HeaderWebSocket extends globalThis.WebSocket {
  constructor(u, protocols, options) {
    super(u, { protocols: protocols ?? [], headers: options?.headers ?? {} });
  }
}
const raw =
  transport === "ws"
    ? createWebSocketStream(url.replace(/^http/, "ws"), { headers, WebSocket: HeaderWebSocket })
    : createHttpStream(url, { headers });

// Every message both ways, for the schema check.
const transcript = transcriptPath ? fs.openSync(transcriptPath, "w") : null;
const log = (dir, msg) => transcript && fs.writeSync(transcript, JSON.stringify({ dir, msg }) + "\n");
const stream = {
  readable: raw.readable.pipeThrough(
    new TransformStream({ transform(m, c) { log("in", m); c.enqueue(m); } }),
  ),
  writable: new WritableStream({
    async write(m) {
      log("out", m);
      const w = raw.writable.getWriter();
      try { await w.write(m); } finally { w.releaseLock(); }
    },
    async close() { await raw.writable.close(); },
  }),
};

const updates = [];
let onUpdate = () => {};
const permissions = [];
let answer = "allow_once";
const calls = [];
const terminals = new Map();
let nextTerminal = 1;

const app = acp
  .client({ name: "maka-serve-client-ts" })
  .onNotification(acp.methods.client.session.update, ({ params }) => {
    updates.push(params.update);
    onUpdate(params.update);
  })
  .onRequest(acp.methods.client.session.requestPermission, ({ params }) => {
    permissions.push([params.toolCall.title, answer]);
    const chosen = params.options.find((o) => o.kind === answer);
    return { outcome: { outcome: "selected", optionId: chosen.optionId } };
  })
  .onRequest(acp.methods.client.fs.readTextFile, ({ params }) => {
    calls.push("fs/read_text_file");
    return { content: fs.readFileSync(params.path, "utf8") };
  })
  .onRequest(acp.methods.client.fs.writeTextFile, ({ params }) => {
    calls.push("fs/write_text_file");
    fs.writeFileSync(params.path, params.content);
    return {};
  })
  .onRequest(acp.methods.client.terminal.create, ({ params }) => {
    calls.push("terminal/create");
    let output = "";
    let exitStatus = null;
    try {
      output = execFileSync(params.command, params.args ?? [], { cwd: params.cwd ?? ws, encoding: "utf8" });
      exitStatus = { exitCode: 0, signal: null };
    } catch (e) {
      output = String(e.stdout ?? "");
      exitStatus = { exitCode: e.status ?? 1, signal: null };
    }
    const terminalId = `term-${nextTerminal++}`;
    terminals.set(terminalId, { output, exitStatus });
    return { terminalId };
  })
  .onRequest(acp.methods.client.terminal.output, ({ params }) => {
    calls.push("terminal/output");
    const t = terminals.get(params.terminalId);
    return { output: t.output, truncated: false, exitStatus: t.exitStatus };
  })
  .onRequest(acp.methods.client.terminal.waitForExit, ({ params }) => {
    calls.push("terminal/wait_for_exit");
    return terminals.get(params.terminalId).exitStatus;
  })
  .onRequest(acp.methods.client.terminal.kill, () => {
    calls.push("terminal/kill");
    return {};
  })
  .onRequest(acp.methods.client.terminal.release, ({ params }) => {
    calls.push("terminal/release");
    terminals.delete(params.terminalId);
    return {};
  });

const text = (list) =>
  list.filter((u) => u.sessionUpdate === "agent_message_chunk").map((u) => u.content.text).join("");
const toolStatuses = (list) => {
  const tools = new Map();
  for (const u of list) {
    if (u.sessionUpdate === "tool_call") tools.set(u.toolCallId, [u.title, u.status]);
    if (u.sessionUpdate === "tool_call_update" && u.status && tools.has(u.toolCallId)) tools.get(u.toolCallId)[1] = u.status;
  }
  return [...tools.values()];
};

const summary = await app.connectWith(stream, async (agent) => {
  const out = {};
  const init = await agent.request(acp.methods.agent.initialize, {
    protocolVersion: 1,
    clientCapabilities: { fs: { readTextFile: true, writeTextFile: true }, terminal: true },
    clientInfo: { name: "maka-serve-client-ts", version: "1" },
  });
  out.initialize = { protocolVersion: init.protocolVersion, loadSession: init.agentCapabilities.loadSession };

  const created = await agent.request(acp.methods.agent.session.new, { cwd: ws, mcpServers: [] });
  const sessionId = created.sessionId;
  out.new = { mode: created.modes.currentModeId };

  const turn = async (words) => {
    updates.length = 0;
    calls.length = 0;
    permissions.length = 0;
    const r = await agent.request(acp.methods.agent.session.prompt, {
      sessionId,
      prompt: [{ type: "text", text: words }],
    });
    return { stopReason: r.stopReason, permissions: [...permissions], calls: [...new Set(calls)], tools: toolStatuses(updates) };
  };

  answer = "allow_once";
  out.write = { ...(await turn("please write the notes")), text: text(updates), file: fs.readFileSync(path.join(ws, "notes.txt"), "utf8") };
  out.read = await turn("now read the notes");
  out.terminal = { ...(await turn("run it")), ran: text(updates).includes("hi from the terminal") || updates.some((u) => JSON.stringify(u).includes("hi from the terminal")) };
  answer = "reject_once";
  out.reject = { ...(await turn("remove it")), fileKept: fs.existsSync(path.join(ws, "notes.txt")) };

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

  updates.length = 0;
  await agent.request(acp.methods.agent.session.load, { sessionId, cwd: ws, mcpServers: [] });
  out.load = {
    userTexts: updates.filter((u) => u.sessionUpdate === "user_message_chunk").map((u) => u.content.text),
    toolCalls: updates.filter((u) => u.sessionUpdate === "tool_call").length,
  };

  await agent.request(acp.methods.agent.session.close, { sessionId });
  out.close = "ok";
  return out;
});

await stream.writable.close().catch(() => {});
if (transcript) fs.closeSync(transcript);
server?.kill();
process.stdout.write(JSON.stringify(summary) + "\n");
