#!/usr/bin/env node
// The `maka-acp` command of the npm package: runs the native binary that npm installed from
// the platform package matching this machine (`maka-acp-<platform>-<arch>`, an optional
// dependency; npm skips the ones whose `os`/`cpu` do not match). Nothing is downloaded at
// install or run time. stdin, stdout and stderr are the binary's own (inherited), so ACP's
// newline-delimited JSON goes straight between the client and the agent.
"use strict";

const { spawn } = require("node:child_process");
const { constants } = require("node:os");

const key = `${process.platform}-${process.arch}`;
const pkg = `maka-acp-${key}`;
let binary;
try {
  binary = require.resolve(`${pkg}/bin/maka-acp`);
} catch {
  process.stderr.write(
    `maka-acp: there is no binary for ${key} here: the package ${pkg} is not installed. ` +
      "Reinstall without --omit=optional, or use a release archive from " +
      "https://github.com/maka-acp/maka-acp/releases.\n"
  );
  process.exit(1);
}

const child = spawn(binary, process.argv.slice(2), { stdio: "inherit" });
// A client that stops the launcher stops the agent: the signal is passed on, and the launcher
// exits the way the agent did.
for (const signal of ["SIGINT", "SIGTERM", "SIGHUP"]) {
  process.on(signal, () => child.kill(signal));
}
child.on("error", (e) => {
  process.stderr.write(`maka-acp: could not start ${binary}: ${e.message}\n`);
  process.exit(1);
});
child.on("exit", (code, signal) => {
  if (signal) {
    // Die of the same signal where Node lets it kill (SIGTERM, SIGSEGV, ...). Node ignores
    // SIGPIPE and takes SIGUSR1 for its debugger, so those, or a re-raise that returns, end
    // in the shell's convention instead: 128 + the signal's number.
    if (signal !== "SIGPIPE" && signal !== "SIGUSR1") {
      process.removeAllListeners(signal);
      process.kill(process.pid, signal);
    }
    process.exit(128 + (constants.signals[signal] || 0));
  } else {
    process.exit(code === null ? 1 : code);
  }
});
