// wbcore js lane: the entry module of every js artifact (see wbcore_lane_js/artifact.py).
// Evaluated once at build time, inside the snapshot (wbcore_lane_js/snapshot.py): it sets up
// the globals and defines __wb_main, which each call runs. __wb_main runs the toolkit's
// module like a command-line program: scriptArgs is [cli, ...args], timers keep the
// program alive until they finish, an uncaught error prints its stack and exits 1, and
// stdout is flushed before exit.
import * as std from 'qjs:std';
import * as os from 'qjs:os';

const ENTRY = '/app/@ENTRY@';

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

// UTF-8 TextEncoder/TextDecoder (QuickJS-NG 0.17 has neither; wbcore_runtime/sdk/wb_dock.js needs both).
if (typeof globalThis.TextEncoder !== 'function') {
  globalThis.TextEncoder = class TextEncoder {
    get encoding() { return 'utf-8'; }
    encode(input = '') {
      const s = String(input);
      const out = [];
      for (let i = 0; i < s.length; i++) {
        let c = s.codePointAt(i);
        if (c > 0xffff) i++;
        else if (c >= 0xd800 && c <= 0xdfff) c = 0xfffd; // lone surrogate
        if (c < 0x80) out.push(c);
        else if (c < 0x800) out.push(0xc0 | (c >> 6), 0x80 | (c & 63));
        else if (c < 0x10000) out.push(0xe0 | (c >> 12), 0x80 | ((c >> 6) & 63), 0x80 | (c & 63));
        else out.push(0xf0 | (c >> 18), 0x80 | ((c >> 12) & 63), 0x80 | ((c >> 6) & 63), 0x80 | (c & 63));
      }
      return new Uint8Array(out);
    }
  };
}
if (typeof globalThis.TextDecoder !== 'function') {
  globalThis.TextDecoder = class TextDecoder {
    get encoding() { return 'utf-8'; }
    decode(input) {
      if (input === undefined) return '';
      const b = input instanceof Uint8Array ? input
        : ArrayBuffer.isView(input) ? new Uint8Array(input.buffer, input.byteOffset, input.byteLength) : new Uint8Array(input);
      let out = '';
      const chunk = [];
      for (let i = 0; i < b.length;) {
        const x = b[i];
        let c = 0xfffd, n = 1;
        if (x < 0x80) c = x;
        else if (x >= 0xc2 && x < 0xe0 && (b[i + 1] & 0xc0) === 0x80) { c = ((x & 31) << 6) | (b[i + 1] & 63); n = 2; }
        else if (x >= 0xe0 && x < 0xf0 && (b[i + 1] & 0xc0) === 0x80 && (b[i + 2] & 0xc0) === 0x80) {
          c = ((x & 15) << 12) | ((b[i + 1] & 63) << 6) | (b[i + 2] & 63); n = 3;
          if (c < 0x800 || (c >= 0xd800 && c <= 0xdfff)) c = 0xfffd;
        } else if (x >= 0xf0 && x < 0xf5 && (b[i + 1] & 0xc0) === 0x80 && (b[i + 2] & 0xc0) === 0x80 && (b[i + 3] & 0xc0) === 0x80) {
          c = ((x & 7) << 18) | ((b[i + 1] & 63) << 12) | ((b[i + 2] & 63) << 6) | (b[i + 3] & 63); n = 4;
          if (c < 0x10000 || c > 0x10ffff) c = 0xfffd;
        }
        chunk.push(c);
        i += n;
        if (chunk.length >= 8192) { out += String.fromCodePoint(...chunk); chunk.length = 0; }
      }
      return out + String.fromCodePoint(...chunk);
    }
  };
}

const process = {
  argv: ['qjs'],
  env: {},
  exitCode: 0,
  exit(code) { std.out.flush(); std.err.flush(); std.exit(code ?? process.exitCode ?? 0); },
  stdout: { write(s) { std.out.puts(String(s)); return true; } },
  stderr: { write(s) { std.err.puts(String(s)); return true; } },
};
globalThis.process = process;

// The Dock bridge (wbcore_runtime/sdk/wb_dock.js uses it; wbcore_lane_js/dock.py is the host side):
// present only when the call was granted caps. A request is a framed write to stdout,
// the answer a file the host leaves in the read-only /wb-dock folder.
const bridge = () => {
  const dockToken = std.loadFile('/wb-dock/token');
  if (!dockToken) return;
  let seq = 0;
  globalThis.__wb_dock = (cap, request) => {
    seq += 1;
    std.out.flush();
    std.out.puts(`\0WBDOCK:${dockToken}\n${cap}\0${request.byteLength}\n`);
    std.out.write(request.buffer, request.byteOffset, request.byteLength);
    std.out.flush();
    const answer = std.loadFile(`/wb-dock/${seq}`, { binary: true });
    if (!answer || answer.byteLength < 1) return [5, new Uint8Array(0)];
    return [answer[0], answer.subarray(1)];
  };
};

// Math.random: the snapshot holds one generator state, so every call would draw the same
// numbers; each call seeds its own (from the clock, as QuickJS itself seeds).
let rs0 = 0n, rs1 = 0n;
const M64 = (1n << 64n) - 1n;
const mix = (z) => {
  z = (z + 0x9e3779b97f4a7c15n) & M64;
  z = ((z ^ (z >> 30n)) * 0xbf58476d1ce4e5b9n) & M64;
  z = ((z ^ (z >> 27n)) * 0x94d049bb133111ebn) & M64;
  return z ^ (z >> 31n);
};
Math.random = () => {
  let s1 = rs0;
  const s0 = rs1;
  rs0 = s0;
  s1 ^= (s1 << 23n) & M64;
  rs1 = s1 ^ s0 ^ (s1 >> 17n) ^ (s0 >> 26n);
  return Number(((rs1 + s0) & M64) >> 11n) / 2 ** 53;
};

globalThis.__wb_main = async (argv, dock) => {
  const seed = BigInt(Math.floor(Date.now())) * 1000003n + BigInt(Math.floor(os.now() * 1000) % 1e15);
  rs0 = mix(seed & M64);
  rs1 = mix(rs0);
  globalThis.scriptArgs = argv;
  process.argv = ['qjs', ...argv];
  if (dock) bridge(); // a file look-up costs a WASI call: only when the call was granted caps
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
};


// Compile the toolkit's modules now, at build time, without evaluating them (their
// top-level code reads stdin and argv at run time): compiling a module that imports the
// entry resolves, reads and compiles the whole import graph under its /app names, and
// evaluates none of it. A call's import() finds each module compiled and reads no file.
std.evalScript(`import ${JSON.stringify(ENTRY)};`, { compile_only: true, compile_module: true });

// Collect now, before the snapshot is taken: the heap a call starts from is compact and
// QuickJS's next collection is due only once it has grown by half (a collection marks
// every object, so a call that ran one would write to, and copy, every page).
std.gc();
