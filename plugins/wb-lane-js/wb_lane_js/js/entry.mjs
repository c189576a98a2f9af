// wbcore js lane: the entry module of every js artifact (see wb_lane_js/artifact.py).
// It runs the toolkit's module like a command-line program: scriptArgs is
// [cli, ...args], timers keep the program alive until they finish, an uncaught
// error prints its stack and exits 1, and stdout is flushed before exit.
import * as std from 'qjs:std';
import * as os from 'qjs:os';

const ENTRY = '/app/@ENTRY@';
globalThis.scriptArgs = scriptArgs.slice(1);

let live = 0;
let idle = null;
let nextId = 1;
const handles = new Map();
const settle = () => {
  live -= 1;
  if (live === 0 && idle) { const wake = idle; idle = null; wake(); }
};
globalThis.setTimeout = (fn, ms = 0, ...args) => {
  const id = nextId++;
  live += 1;
  handles.set(id, os.setTimeout(() => { handles.delete(id); settle(); fn(...args); }, ms));
  return id;
};
globalThis.clearTimeout = (id) => {
  const h = handles.get(id);
  if (h !== undefined) { os.clearTimeout(h); handles.delete(id); settle(); }
};
globalThis.setInterval = (fn, ms = 0, ...args) => {
  const id = nextId++;
  live += 1;
  const tick = () => { handles.set(id, os.setTimeout(tick, ms)); fn(...args); };
  handles.set(id, os.setTimeout(tick, ms));
  return id;
};
globalThis.clearInterval = globalThis.clearTimeout;

const process = {
  argv: ['qjs', ...scriptArgs],
  env: {},
  exitCode: 0,
  exit(code) { std.out.flush(); std.err.flush(); std.exit(code ?? process.exitCode ?? 0); },
  stdout: { write(s) { std.out.puts(String(s)); return true; } },
  stderr: { write(s) { std.err.puts(String(s)); return true; } },
};
globalThis.process = process;

try {
  await import(ENTRY);
  while (live > 0) await new Promise((resolve) => { idle = resolve; });
} catch (e) {
  std.out.flush();
  std.err.puts((e && e.stack ? `${e}\n${e.stack}` : `${e}`) + '\n');
  std.err.flush();
  std.exit(1);
}
std.out.flush();
std.err.flush();
std.exit(typeof process.exitCode === 'number' ? process.exitCode : 0);
