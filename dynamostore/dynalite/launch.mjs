// Starts dynalite, an in-memory DynamoDB emulator, on the loopback
// interface only, for the dynamostore tests.
//
// Usage (the machine's Node.js 20 or newer):
//
//   node launch.mjs [port] [ready-file]
//
// port defaults to 0 (the kernel picks a free one). Once listening, the
// endpoint URL (http://127.0.0.1:PORT) is printed on stdout and, if a
// ready-file is given, written there, so a caller can wait for it. Tables
// become ACTIVE at once (dynalite's default keeps them CREATING for half a
// second). Data lives in memory only. SIGTERM and SIGINT close the server.

import { writeFileSync } from "node:fs";
import dynalite from "dynalite";

const host = "127.0.0.1";
const port = Number.parseInt(process.argv[2] ?? "0", 10);
const readyFile = process.argv[3];

if (!Number.isInteger(port) || port < 0 || port > 65535) {
  console.error(`launch.mjs: bad port ${JSON.stringify(process.argv[2])}`);
  process.exit(2);
}

const server = dynalite({ createTableMs: 0, deleteTableMs: 0, updateTableMs: 0 });

let closing = false;
function shutdown(signal) {
  if (closing) return;
  closing = true;
  server.close((err) => {
    if (err) console.error(`launch.mjs: close after ${signal}: ${err.message}`);
    process.exit(err ? 1 : 0);
  });
  // Do not wait for keep-alive connections to drain.
  setTimeout(() => process.exit(0), 2000).unref();
}
process.on("SIGTERM", () => shutdown("SIGTERM"));
process.on("SIGINT", () => shutdown("SIGINT"));

server.on("error", (err) => {
  console.error(`launch.mjs: cannot listen on ${host}:${port}: ${err.message}`);
  process.exit(1);
});
server.listen(port, host, () => {
  const { port: bound } = server.address();
  const endpoint = `http://${host}:${bound}`;
  if (readyFile) writeFileSync(readyFile, endpoint + "\n");
  console.log(`dynalite ${endpoint}`);
});
