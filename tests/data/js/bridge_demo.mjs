// A JS "guest" for tests/test_dock_js_sdk.py: the Dock bridge is a line protocol on
// stdio (hex request out, "status hex" back), standing in for the JS lane's wasm import.
import { readSync, writeSync } from "node:fs";
import { wb, DockError, encode, decode } from "../../../wbcore_runtime/sdk/wb_dock.js";

function readLine() {
  const buf = Buffer.alloc(1);
  let line = "";
  while (readSync(0, buf, 0, 1) === 1 && buf[0] !== 10) line += String.fromCharCode(buf[0]);
  return line;
}

globalThis.__wb_dock = (cap, request) => {
  writeSync(1, `CALL ${cap} ${Buffer.from(request).toString("hex")}\n`);
  const [status, hex] = readLine().split(" ");
  return [Number(status), new Uint8Array(Buffer.from(hex || "", "hex"))];
};

const out = {};
wb.kv.put({ key: "greeting", value: new TextEncoder().encode("hello from js") });
out.got = new TextDecoder().decode(wb.kv.get({ key: "greeting" }).value);
try { wb.kv.get({ key: "absent" }); } catch (e) {
  out.missing = { kind: e.kind, exit: e.exitCode, isDockError: e instanceof DockError, message: e.message };
}
try { wb.net.fetch({ url: "http://127.0.0.1/" }); } catch (e) { out.denied = { kind: e.kind, reason: e.reason }; }
const sample = { s: "ünïcode", n: -70000, big: 2 ** 40, f: 1.5, a: [true, false, null], b: new Uint8Array([0, 255]) };
const back = decode(encode(sample));
out.roundtrip = back.s === sample.s && back.n === sample.n && back.big === sample.big && back.f === 1.5 &&
  back.a[0] === true && back.a[2] === null && back.b[1] === 255;
writeSync(1, `DONE ${JSON.stringify(out)}\n`);
