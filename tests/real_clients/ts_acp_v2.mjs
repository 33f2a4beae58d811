// ACP v2 (draft) through the official TypeScript SDK 2.4.0's v2 client
// (`@agentclientprotocol/sdk/experimental/v2`), over stdio: initialize (protocolVersion 2, info),
// session/new, a prompt that writes a file (permission allowed: a diff with changes and a git
// patch), one whose write is rejected (file unchanged), an edit, a command (a display terminal:
// command, base64 output, exit status), a long command cancelled alone with `tool_call/cancel`
// once the SDK says it can be (the call `cancelled`, the turn goes on to `end_turn`), a cancel
// during a slow prompt (idle `cancelled`),
// session/resume with `replayFrom: {type: "start"}` on the same connection (what is replayed
// folds to what was shown live), close. The SDK parses every message it is sent with its zod
// schema; a rejection fails the run.
// usage: node ts_acp_v2.mjs AGENT_BINARY WORKSPACE [TRANSCRIPT.jsonl]   (or ACP_V2_TRANSCRIPT)
//   → prints the observation summary as JSON; every message both ways goes to TRANSCRIPT as
//   {"dir": "in"|"out", "msg": …}, one per line.
import * as acp from "@agentclientprotocol/sdk/experimental/v2";
import { spawn } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { Readable, Writable } from "node:stream";

const [agentBin, ws, transcriptArg] = process.argv.slice(2);
const transcriptPath = transcriptArg ?? process.env.ACP_V2_TRANSCRIPT;
const child = spawn(agentBin, [], { cwd: ws, stdio: ["pipe", "pipe", "inherit"] });

// Every message both ways, for the schema check (tests/acp_v2.rs).
const transcript = transcriptPath ? fs.openSync(transcriptPath, "w") : null;
const log = (dir, msg) => transcript && fs.writeSync(transcript, JSON.stringify({ dir, msg }) + "\n");
// Updates received on the wire and handled by the app's `session/update` handler: the SDK hands
// an update to the ActiveSession queue before the app's handler runs, so a step waits until the
// handler has caught up (bounded) before reading the folds.
let received = 0;
let handled = 0;
const caughtUp = async () => {
  for (let i = 0; handled < received; i++) {
    if (i > 100000) throw new Error(`the session/update handler fell behind (${handled}/${received})`);
    await new Promise((r) => setImmediate(r));
  }
};
const raw = acp.ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));
const stream = {
  readable: raw.readable.pipeThrough(
    new TransformStream({
      transform(m, c) {
        log("in", m);
        if (m.method === "session/update") received += 1;
        c.enqueue(m);
      },
    }),
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

// A client's view of one session, folded from its updates with the schema's upsert rules:
// messages by id (a whole upsert replaces, a chunk appends), tool calls by id (fields patched),
// terminals by id (an output snapshot replaces, chunks append bytes).
const fold = () => {
  const v = { messages: new Map(), calls: new Map(), terminals: new Map(), states: [] };
  const text = (blocks) => (blocks ?? []).map((b) => (b.type === "text" ? b.text : `[${b.type}]`)).join("");
  v.apply = (u) => {
    switch (u.sessionUpdate) {
      case "user_message":
      case "agent_message":
      case "agent_thought": {
        const role = u.sessionUpdate.replace("_message", "");
        const m = v.messages.get(u.messageId) ?? { role, text: "" };
        if (u.content !== undefined) m.text = text(u.content);
        v.messages.set(u.messageId, m);
        break;
      }
      case "user_message_chunk":
      case "agent_message_chunk":
      case "agent_thought_chunk": {
        const role = u.sessionUpdate.replace("_message_chunk", "").replace("_chunk", "");
        const m = v.messages.get(u.messageId) ?? { role, text: "" };
        m.text += text([u.content]);
        v.messages.set(u.messageId, m);
        break;
      }
      case "tool_call_update": {
        const c = v.calls.get(u.toolCallId) ?? {};
        for (const [k, val] of Object.entries(u)) if (k !== "sessionUpdate" && k !== "_meta") c[k] = val;
        v.calls.set(u.toolCallId, c);
        break;
      }
      case "terminal_update": {
        const t = v.terminals.get(u.terminalId) ?? { bytes: "" };
        if (u.command !== undefined) t.command = u.command;
        if (u.exitStatus !== undefined) t.exitStatus = u.exitStatus;
        if (u.output != null) t.bytes = Buffer.from(u.output.data, "base64").toString("utf8");
        v.terminals.set(u.terminalId, t);
        break;
      }
      case "terminal_output_chunk": {
        const t = v.terminals.get(u.terminalId) ?? { bytes: "" };
        t.bytes += Buffer.from(u.data, "base64").toString("utf8");
        v.terminals.set(u.terminalId, t);
        break;
      }
      case "state_update":
        v.states.push(u.state === "idle" && u.stopReason ? `idle:${u.stopReason}` : u.state);
        break;
    }
  };
  // What a person would compare: each message's role and text, each call's final status and
  // content kinds, each terminal's command, bytes and exit code.
  v.view = () => ({
    messages: [...v.messages.values()].filter((m) => m.role !== "agent_thought"),
    calls: [...v.calls.values()].map((c) => ({
      title: c.title ?? null,
      status: c.status ?? null,
      content: (c.content ?? []).map((x) => x.type),
    })),
    terminals: [...v.terminals.values()].map((t) => ({
      command: t.command ?? null,
      bytes: t.bytes,
      exitCode: t.exitStatus?.exitCode ?? null,
    })),
  });
  return v;
};

// Everything the app is sent for the session, live and replayed (an app-level handler sees every
// `session/update`, routed to an ActiveSession or not).
let sink = null;
const permissions = [];
const answers = []; // option kinds to answer with, in order
const app = acp
  .client({ name: "maka-real-client-ts-v2" })
  .onNotification(acp.methods.client.session.update, ({ params }) => {
    handled += 1;
    sink?.apply(params.update);
  })
  .onRequest(acp.methods.client.session.requestPermission, ({ params }) => {
    const kind = answers.shift();
    const option = params.options.find((o) => o.kind === kind);
    permissions.push({
      titled: typeof params.title === "string" && params.title.length > 0,
      subject: params.subject?.type ?? null,
      callKnown: params.subject?.type === "tool_call" && live.calls.has(params.subject.toolCall.toolCallId),
      kinds: params.options.map((o) => o.kind),
      answered: option ? kind : "cancelled",
    });
    return option
      ? { outcome: { outcome: "selected", optionId: option.optionId } }
      : { outcome: { outcome: "cancelled" } };
  });

const live = fold();
sink = live;
const notes = path.join(ws, "notes.txt");
const onDisk = () => (fs.existsSync(notes) ? fs.readFileSync(notes, "utf8") : null);

const summary = await app.connectWith(stream, async (cx) => {
  const out = {};
  const init = await cx.request(acp.methods.agent.initialize, {
    protocolVersion: 2,
    info: { name: "maka-real-client-ts-v2", version: "1" },
    capabilities: {},
  });
  out.initialize = {
    protocolVersion: init.protocolVersion,
    agent: init.info.name,
    // v2's resume and close are baseline; what is optional is advertised here.
    session: Object.keys(init.capabilities?.session ?? {}).sort(),
  };

  const s = await cx.buildSession(ws).start();

  // One prompt followed to the idle state after its message was inserted: the prompt's answer
  // (its message id), the user_message that echoed it, the states, and the turn's new calls,
  // terminals and agent text.
  const turn = async (text, ...kinds) => {
    answers.push(...kinds);
    const before = { calls: new Set(live.calls.keys()), terminals: new Set(live.terminals.keys()), msgs: new Set(live.messages.keys()) };
    const states = [];
    const { messageId } = await s.prompt(text);
    let echoed = null;
    let stop;
    for (;;) {
      const m = await s.nextUpdate();
      const u = m.update;
      if (u.sessionUpdate === "user_message" && u.messageId === messageId) {
        echoed = (u.content ?? []).map((b) => b.text).join("");
      }
      if (echoed === null) continue; // snapshots from before this prompt's message
      if (u.sessionUpdate === "state_update") states.push(u.state);
      if (m.kind === "stop") { stop = m.stopReason; break; }
    }
    await caughtUp();
    const calls = [...live.calls.entries()].filter(([id]) => !before.calls.has(id)).map(([, c]) => c);
    const terminals = [...live.terminals.entries()].filter(([id]) => !before.terminals.has(id)).map(([, t]) => t);
    const agentText = [...live.messages.entries()]
      .filter(([id, m]) => !before.msgs.has(id) && m.role === "agent")
      .map(([, m]) => m.text)
      .join(" | ");
    return { messageId, echoed: echoed === text, states, stop, calls, terminals, agentText };
  };
  const diffOf = (call) => {
    const d = (call.content ?? []).find((c) => c.type === "diff");
    if (!d) return null;
    return {
      changes: d.changes.map((c) => ({ operation: c.operation, path: path.relative(ws, c.path) })),
      patchFormat: d.patch?.format ?? null,
      patchIsGit: (d.patch?.text ?? "").startsWith("diff --git "),
      patchAdds: (d.patch?.text ?? "").split("\n").filter((l) => l.startsWith("+") && !l.startsWith("+++")),
    };
  };
  const ids = [];
  const brief = (t) => {
    ids.push(t.messageId);
    return { echoed: t.echoed, states: t.states, stop: t.stop, agentText: t.agentText };
  };

  const w = await turn("please write the notes", "allow_once");
  out.write = {
    ...brief(w),
    calls: w.calls.map((c) => ({ status: c.status, diff: diffOf(c) })),
    onDisk: onDisk(),
  };

  const r = await turn("please overwrite the notes", "reject_once");
  out.reject = {
    ...brief(r),
    calls: r.calls.map((c) => ({ status: c.status, diff: diffOf(c) })),
    onDisk: onDisk(),
  };

  const e = await turn("please edit the notes", "allow_once");
  out.edit = {
    ...brief(e),
    calls: e.calls.map((c) => ({ status: c.status, diff: diffOf(c) })),
    onDisk: onDisk(),
  };

  const c = await turn("please run the tests", "allow_once");
  out.command = {
    ...brief(c),
    calls: c.calls.map((x) => ({
      status: x.status,
      content: (x.content ?? []).map((k) => k.type),
      showsItsTerminal: (x.content ?? []).some((k) => k.type === "terminal" && c.terminals.length === 1 && live.terminals.get(k.terminalId) === c.terminals[0]),
    })),
    terminals: c.terminals.map((t) => ({
      command: t.command,
      output: t.bytes,
      exitCode: t.exitStatus?.exitCode ?? null,
    })),
  };

  // One call cancelled while the turn goes on: a long command (allowed) runs until the SDK says
  // it can be cancelled (its `tool_call_update` carried `capabilities.cancel`), then
  // `tool_call/cancel` through the SDK's ActiveSession; the call ends `cancelled`, the model
  // answers, the turn ends idle `end_turn`.
  {
    answers.push("allow_once");
    const before = { calls: new Set(live.calls.keys()), terminals: new Set(live.terminals.keys()), msgs: new Set(live.messages.keys()) };
    const states = [];
    const { messageId } = await s.prompt("please start the long job");
    ids.push(messageId);
    let echoed = null;
    let callId = null;
    let terminalCancellable = null;
    let answer;
    let stop;
    for (;;) {
      const m = await s.nextUpdate();
      const u = m.update;
      if (u.sessionUpdate === "user_message" && u.messageId === messageId) {
        echoed = (u.content ?? []).map((b) => b.text).join("");
      }
      if (echoed === null) continue;
      if (u.sessionUpdate === "state_update") states.push(u.state);
      if (callId === null && u.sessionUpdate === "tool_call_update" && s.canCancelToolCall(u.toolCallId)) {
        callId = u.toolCallId;
      }
      // Cancelled once it has printed (its first output chunk): what it printed stays shown.
      if (callId !== null && answer === undefined && u.sessionUpdate === "terminal_output_chunk") {
        await caughtUp();
        const shown = (live.calls.get(callId)?.content ?? []).find((k) => k.type === "terminal");
        terminalCancellable = shown ? s.canCancelTerminal(shown.terminalId) : null;
        answer = await s.cancelToolCall(callId);
      }
      if (m.kind === "stop") { stop = m.stopReason; break; }
    }
    await caughtUp();
    const calls = [...live.calls.entries()].filter(([id]) => !before.calls.has(id)).map(([, c]) => c);
    const terminals = [...live.terminals.entries()].filter(([id]) => !before.terminals.has(id)).map(([, t]) => t);
    const agentText = [...live.messages.entries()]
      .filter(([id, m]) => !before.msgs.has(id) && m.role === "agent")
      .map(([, m]) => m.text)
      .join(" | ");
    out.toolCancel = {
      echoed: echoed === "please start the long job",
      cancellableSeen: callId !== null,
      terminalCancellable,
      cancelAnswer: answer ?? null,
      stillCancellable: callId !== null && s.canCancelToolCall(callId),
      states,
      stop,
      agentText,
      calls: calls.map((x) => ({
        status: x.status,
        capabilities: x.capabilities ?? null,
        content: (x.content ?? []).map((k) => k.type),
      })),
      terminals: terminals.map((t) => ({ command: t.command, output: t.bytes, exitStatus: t.exitStatus ?? null })),
    };
  }

  // Cancel during a slow prompt: after its first text, `session/cancel`; the turn ends idle
  // `cancelled`.
  {
    const states = [];
    const { messageId } = await s.prompt("tell a slow story");
    ids.push(messageId);
    let seen = false;
    let cancelled = false;
    let stop;
    for (;;) {
      const m = await s.nextUpdate();
      const u = m.update;
      if (u.sessionUpdate === "user_message" && u.messageId === messageId) seen = true;
      if (!seen) continue;
      if (u.sessionUpdate === "state_update") states.push(u.state);
      if (!cancelled && u.sessionUpdate === "agent_message_chunk") {
        cancelled = true;
        await cx.notify(acp.methods.agent.session.cancel, { sessionId: s.sessionId });
      }
      if (m.kind === "stop") { stop = m.stopReason; break; }
    }
    out.cancel = { cancelledAfterText: cancelled, states, stop };
  }

  // The prompt answers' ids are the ids the user_message echoes carried, all distinct.
  out.messageIds = {
    distinct: new Set(ids).size === ids.length,
    allEchoed: ids.every((id) => live.messages.get(id)?.role === "user"),
    userMessagesShown: [...live.messages.values()].filter((m) => m.role === "user").length,
  };
  out.permissions = permissions;

  await caughtUp();
  // Resume with replay on the same connection: the ActiveSession helper is disposed (it only
  // routes updates); what the agent replays before its answer goes to a fresh fold.
  s.dispose();
  const replay = fold();
  sink = replay;
  const resumed = await cx.request(acp.methods.agent.session.resume, {
    sessionId: s.sessionId,
    cwd: ws,
    replayFrom: { type: "start" },
  });
  await caughtUp();
  sink = null;
  const lv = live.view();
  const rv = replay.view();
  const same = (a, b) => JSON.stringify(a) === JSON.stringify(b);
  out.resume = {
    answered: resumed !== undefined && resumed !== null,
    // The state told after the replay, before the answer (replayed turns may show `running`
    // first: only the last snapshot is the session's state).
    stateAtAnswer: replay.states.at(-1) ?? null,
    sameMessages: same(lv.messages, rv.messages),
    sameCalls: same(lv.calls, rv.calls),
    sameTerminals: same(lv.terminals, rv.terminals),
    messages: rv.messages.length,
  };
  if (!out.resume.sameMessages || !out.resume.sameCalls || !out.resume.sameTerminals) {
    process.stderr.write(`live:   ${JSON.stringify(lv)}\nreplay: ${JSON.stringify(rv)}\n`);
  }

  const closed = await cx.request(acp.methods.agent.session.close, { sessionId: s.sessionId });
  out.close = { answered: closed !== undefined };
  return out;
});
child.stdin.end();
console.log(JSON.stringify(summary, null, 1));
