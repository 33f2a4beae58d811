#!/usr/bin/env python3
"""The adapter's overhead on a real model (run by `scripts/real-model bench`).

The same Chat Completions request is sent to the same llama.cpp server two ways:

- directly: the exact body the adapter's OpenAI provider sends (captured once through a
  recording stub), POSTed with stdlib http.client;
- through maka-acp: `session/prompt` over stdio to the adapter, the embedded host and its
  OpenAI provider, timed to the `agent_message_chunk` notifications on stdout.

Runs alternate (direct, adapter, direct, …) after a warm-up of each. Printed: medians of the
first-token latency (request sent → first text) and of the streaming rate between the first
and last text, in characters and in tokens per second. Tokens are counted the same way for
both paths — the streamed text re-tokenized by the server (`/extras/tokenize/count`) — and,
directly, also exactly (llama.cpp sends one token per event). Standard library only.
"""
import argparse
import http.client
import http.server
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse

PROMPT = "Count from 1 to 40 in words, separated by commas."


def capture_body(bin_path, workdir):
    """The body the adapter sends for PROMPT, recorded by a stub that answers one word."""
    seen = []

    class Stub(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            n = int(self.headers.get("content-length", 0))
            seen.append(json.loads(self.rfile.read(n)))
            chunks = [
                {"choices": [{"index": 0, "delta": {"content": "ok"}}]},
                {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
            ]
            body = "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"
            self.send_response(200)
            self.send_header("content-type", "text/event-stream")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body.encode())

        def log_message(self, *a):
            pass

    srv = http.server.HTTPServer(("127.0.0.1", 0), Stub)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    agent = Adapter(bin_path, f"http://127.0.0.1:{srv.server_address[1]}/v1", workdir)
    agent.prompt_timed()
    agent.close()
    srv.shutdown()
    return seen[0]


def count_tokens(url, text):
    """Tokens in `text`, by the server's own tokenizer."""
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=30)
    conn.request("POST", "/extras/tokenize/count", json.dumps({"input": text}), {"content-type": "application/json"})
    n = json.loads(conn.getresponse().read())["count"]
    conn.close()
    return n


def direct(url, body):
    u = urllib.parse.urlparse(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=120)
    data = json.dumps(body)
    t0 = time.perf_counter()
    conn.request("POST", u.path + "/chat/completions", data, {"content-type": "application/json"})
    resp = conn.getresponse()
    first = last = None
    chars = tokens = 0
    streamed = []
    for raw in resp:
        line = raw.decode().strip()
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        ev = json.loads(line[6:])
        for ch in ev.get("choices", []):
            text = ch.get("delta", {}).get("content")
            if text:
                now = time.perf_counter()
                first = first or now
                last = now
                chars += len(text)
                tokens += 1
                streamed.append(text)
    conn.close()
    return first - t0, chars, tokens, last - first, "".join(streamed)


class Adapter:
    def __init__(self, bin_path, url, workdir):
        data = tempfile.mkdtemp(prefix="bench-rm-", dir=workdir)
        env = dict(
            os.environ,
            MAKA_OPENAI_BASE_URL=url,
            MAKA_MODEL="smollm2",
            MAKA_DATA_DIR=data,
            XDG_CONFIG_HOME=os.path.join(data, "config"),
            MAKA_CONFIG="/nonexistent",
            RUST_LOG="warn",
        )
        self.cwd = workdir
        self.p = subprocess.Popen([bin_path], stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
        self.next_id = 0
        self.call("initialize", {"protocolVersion": 1, "clientCapabilities": {}})

    def send(self, method, params):
        self.next_id += 1
        msg = {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params}
        self.p.stdin.write((json.dumps(msg) + "\n").encode())
        self.p.stdin.flush()
        return self.next_id

    def call(self, method, params, on_line=None):
        i = self.send(method, params)
        while True:
            line = self.p.stdout.readline()
            if not line:
                raise SystemExit("the adapter exited")
            v = json.loads(line)
            if v.get("id") == i and "method" not in v:
                if "error" in v:
                    raise SystemExit(f"{method}: {v['error']}")
                return v["result"]
            if on_line:
                on_line(v)

    def prompt_timed(self):
        """A fresh session (not timed), then the prompt: (first text, chars, streaming time)."""
        sid = self.call("session/new", {"cwd": self.cwd, "mcpServers": []})["sessionId"]
        marks = []

        def on_line(v):
            u = v.get("params", {}).get("update", {})
            if u.get("sessionUpdate") == "agent_message_chunk":
                marks.append((time.perf_counter(), u["content"].get("text", "")))

        t0 = time.perf_counter()
        self.call("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": PROMPT}]}, on_line)
        first, last = marks[0][0], marks[-1][0]
        return first - t0, sum(len(t) for _, t in marks), last - first, "".join(t for _, t in marks)

    def close(self):
        self.p.stdin.close()
        self.p.wait(timeout=10)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--bin", default="target/release/maka-acp")
    ap.add_argument("--chat", metavar="PROMPT", help="just send PROMPT through maka-acp and print the reply as it streams")
    args = ap.parse_args()
    url = os.environ["MAKA_TEST_REAL_MODEL_URL"]
    workdir = tempfile.mkdtemp(prefix="bench-rm-ws-")
    if args.chat:
        agent = Adapter(args.bin, url, workdir)
        sid = agent.call("session/new", {"cwd": workdir, "mcpServers": []})["sessionId"]

        def show(v):
            u = v.get("params", {}).get("update", {})
            if u.get("sessionUpdate") == "agent_message_chunk":
                print(u["content"].get("text", ""), end="", flush=True)

        r = agent.call("session/prompt", {"sessionId": sid, "prompt": [{"type": "text", "text": args.chat}]}, show)
        print(f"\n[{r['stopReason']}]")
        agent.close()
        return
    body = capture_body(args.bin, workdir)
    print(f"request: {len(json.dumps(body))} bytes, {len(body.get('messages', []))} messages, "
          f"{len(body.get('tools', []))} tools, stream={body.get('stream')}")
    agent = Adapter(args.bin, url, workdir)
    direct(url, body)  # warm-up
    agent.prompt_timed()
    d_first, d_rate, d_tok, d_retok, a_first, a_rate, a_retok = [], [], [], [], [], [], []
    d_cpt, a_cpt = [], []  # characters per token of each run's text
    for _ in range(args.runs):
        first, chars, tokens, span, text = direct(url, body)
        d_first.append(first)
        d_rate.append(chars / span if span > 0 else 0)
        d_tok.append(tokens / span if span > 0 else 0)
        n = count_tokens(url, text)
        d_retok.append(n / span if span > 0 else 0)
        d_cpt.append(chars / n if n else 0)
        first, chars, span, text = agent.prompt_timed()
        a_first.append(first)
        a_rate.append(chars / span if span > 0 else 0)
        n = count_tokens(url, text)
        a_retok.append(n / span if span > 0 else 0)
        a_cpt.append(chars / n if n else 0)
    agent.close()
    med = statistics.median
    print(f"runs: {args.runs} each, alternating; prompt: {PROMPT!r}")
    print(f"first token, direct:        {med(d_first) * 1000:8.1f} ms (median)")
    print(f"first token, via maka-acp:  {med(a_first) * 1000:8.1f} ms (median)  "
          f"overhead {1000 * (med(a_first) - med(d_first)):+.1f} ms, ratio {med(a_first) / med(d_first):.3f}")
    print(f"streaming, direct:          {med(d_retok):8.1f} tokens/s (re-tokenized; {med(d_tok):.1f} by events), {med(d_rate):.1f} chars/s (median)")
    print(f"streaming, via maka-acp:    {med(a_retok):8.1f} tokens/s (re-tokenized), {med(a_rate):.1f} chars/s (median)  "
          f"ratio {med(a_retok) / med(d_retok):.3f} (tokens), {med(a_rate) / med(d_rate):.3f} (chars)")
    print(f"characters per token:       {med(d_cpt):.2f} direct, {med(a_cpt):.2f} via maka-acp (median)")
    print("Compare tokens/s: the model samples, so each run writes a different text, and chars/s "
          "follows how many characters that text's tokens carry (the line above); the same "
          "tokenizer counts both paths' tokens.")


if __name__ == "__main__":
    main()
