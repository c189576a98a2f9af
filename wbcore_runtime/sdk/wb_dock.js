// SPDX-License-Identifier: Apache-2.0
// wb_dock.js — the Dock for JavaScript guests (docs/dock.md, "JS lane").
//
//   import { wb, DockError } from "./wb_dock.js";   // the js and ts lanes add this file to every bundle
//   const { value } = wb.kv.get({ key: "greeting" });       // throws DockError on -status
//   wb.call("net", "fetch", { url: "https://example.org/" });
//
// Requests and responses are the same CBOR maps a C guest sends (wb_dock.h, beside this file). The
// transport is one host function the JS runner installs before the module runs:
//   globalThis.__wb_dock(cap: string, request: Uint8Array) -> [status: number, body: Uint8Array]
// which performs exactly wb.<cap>(req, len, resp, cap) + wb.fetch (status 0 = ok). Only
// granted caps answer; an ungranted cap is refused with status 4 (capability-denied).

export const STATUS = { 0: "ok", 1: "not-found", 2: "invalid-args", 3: "timeout", 4: "capability-denied", 5: "internal" };
// exit codes a guest uses for a Dock status (WASI exit codes are < 126: the sysexits family)
export const EXIT_CODE = { 1: 66, 2: 65, 3: 75, 4: 77, 5: 70 };

export class DockError extends Error {
  constructor(status, body) {
    super(body && body.message ? body.message : STATUS[status] || `status ${status}`);
    this.status = status;
    this.kind = (body && body.error) || STATUS[status];
    this.reason = body && body.reason;
    this.exitCode = EXIT_CODE[status] || 70;
  }
}

// --- CBOR (definite lengths; text, bytes, ints, floats, arrays, maps, bool, null) ------
const te = new TextEncoder(), td = new TextDecoder();

export function encode(value) {
  const out = [];
  const head = (major, n) => {
    if (n < 24) out.push((major << 5) | n);
    else if (n < 0x100) out.push((major << 5) | 24, n);
    else if (n < 0x10000) out.push((major << 5) | 25, n >> 8, n & 255);
    else if (n < 0x100000000) out.push((major << 5) | 26, (n >>> 24) & 255, (n >> 16) & 255, (n >> 8) & 255, n & 255);
    else { const hi = Math.floor(n / 0x100000000);
      out.push((major << 5) | 27, (hi >>> 24) & 255, (hi >> 16) & 255, (hi >> 8) & 255, hi & 255,
               (n >>> 24) & 255, (n >> 16) & 255, (n >> 8) & 255, n & 255); }
  };
  const put = (v) => {
    if (v === null || v === undefined) out.push(0xf6);
    else if (v === true) out.push(0xf5);
    else if (v === false) out.push(0xf4);
    else if (typeof v === "number" && Number.isInteger(v)) v >= 0 ? head(0, v) : head(1, -1 - v);
    else if (typeof v === "number") { const b = new DataView(new ArrayBuffer(8)); b.setFloat64(0, v);
      out.push(0xfb, ...new Uint8Array(b.buffer)); }
    else if (typeof v === "string") { const b = te.encode(v); head(3, b.length); for (const x of b) out.push(x); }
    else if (v instanceof Uint8Array) { head(2, v.length); for (const x of v) out.push(x); }
    else if (Array.isArray(v)) { head(4, v.length); v.forEach(put); }
    else { const ks = Object.keys(v); head(5, ks.length); for (const k of ks) { put(k); put(v[k]); } }
  };
  put(value);
  return new Uint8Array(out);
}

export function decode(bytes) {
  const dv = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  let off = 0;
  const arg = (ai) => {
    if (ai < 24) return ai;
    if (ai === 24) return dv.getUint8(off++);
    if (ai === 25) { const v = dv.getUint16(off); off += 2; return v; }
    if (ai === 26) { const v = dv.getUint32(off); off += 4; return v; }
    if (ai === 27) { const v = dv.getUint32(off) * 0x100000000 + dv.getUint32(off + 4); off += 8; return v; }
    throw new Error("cbor: indefinite or reserved length");
  };
  const item = () => {
    const ib = dv.getUint8(off++), major = ib >> 5, ai = ib & 31;
    if (major === 7) {
      if (ai === 20) return false; if (ai === 21) return true; if (ai === 22 || ai === 23) return null;
      if (ai === 25) { off += 2; return NaN; }
      if (ai === 26) { const v = dv.getFloat32(off); off += 4; return v; }
      if (ai === 27) { const v = dv.getFloat64(off); off += 8; return v; }
      throw new Error("cbor: unsupported simple value");
    }
    const n = arg(ai);
    switch (major) {
      case 0: return n;
      case 1: return -1 - n;
      case 2: { const v = bytes.slice(off, off + n); off += n; return v; }
      case 3: { const v = td.decode(bytes.subarray(off, off + n)); off += n; return v; }
      case 4: { const a = []; for (let i = 0; i < n; i++) a.push(item()); return a; }
      case 5: { const m = {}; for (let i = 0; i < n; i++) { const k = item(); m[k] = item(); } return m; }
      case 6: return item();
    }
  };
  return item();
}

// --- calls ------------------------------------------------------------------------
export function call(cap, op, args = {}) {
  const bridge = globalThis.__wb_dock;
  if (typeof bridge !== "function") throw new DockError(5, { message: "this JS runner does not provide the Dock bridge" });
  const [status, body] = bridge(cap, encode({ op, ...args }));
  const doc = body && body.length ? decode(body) : null;
  if (status !== 0) throw new DockError(status, doc);
  return doc;
}

// wb.kv.get({key}), wb.net.fetch({url}), wb.call("vfs", "read", {path}) ...
export const wb = new Proxy({ call }, {
  get(target, cap) {
    if (cap in target) return target[cap];
    return new Proxy({}, { get: (_, op) => (args) => call(String(cap), String(op), args) });
  },
});
