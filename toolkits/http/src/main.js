// http: one HTTP request through the Dock's net cap (curl/httpie-class). No socket here:
// the host resolves, checks (NetGuard, #+ALLOWED_HOSTS), pins, caps and times the exchange.
import * as std from 'qjs:std';
import { wb, DockError } from './wb_dock.js';

const USAGE = "usage: http [-X METHOD] [-H 'Name: value']... [-d DATA|@-] [-i|-I] [-f] [-m BYTES] [-t SECONDS] " +
  "[METHOD] URL [name=value | name:=json | name==query | Header:value]...\n";
const METHODS = new Set(['GET', 'HEAD', 'POST', 'PUT', 'PATCH', 'DELETE', 'OPTIONS']);
const MAX_HEADERS = 64;
const te = new TextEncoder();

function fail(message, code) {
  std.err.puts(`http: ${message}\n`);
  std.err.flush();
  process.exitCode = code;
  return null;
}

export function parse(args) {
  const opt = { method: null, headers: {}, data: null, show: false, headOnly: false, failCode: false,
                max: 0, timeout: 0, url: null, fields: {}, query: [] };
  let nheaders = 0;
  const header = (text) => {
    const colon = text.indexOf(':');
    if (colon <= 0) throw new Error(`header ${JSON.stringify(text)} needs 'Name: value'`);
    if (++nheaders > MAX_HEADERS) throw new Error(`at most ${MAX_HEADERS} headers`);
    opt.headers[text.slice(0, colon).trim()] = text.slice(colon + 1).trim();
  };
  const rest = [];
  for (let i = 0; i < args.length; i++) {
    const a = args[i];
    const value = () => { if (i + 1 >= args.length) throw new Error(`${a} needs a value`); return args[++i]; };
    if (a === '-X' || a === '--request') opt.method = value().toUpperCase();
    else if (a === '-H' || a === '--header') header(value());
    else if (a === '-d' || a === '--data') opt.data = value();
    else if (a === '-i' || a === '--include') opt.show = true;
    else if (a === '-I' || a === '--head') { opt.show = true; opt.headOnly = true; }
    else if (a === '-f' || a === '--fail') opt.failCode = true;
    else if (a === '-m' || a === '--max-bytes') opt.max = Number(value());
    else if (a === '-t' || a === '--timeout') opt.timeout = Number(value());
    else if (a === '-h' || a === '--help') throw new Error('help');
    else if (a.startsWith('-') && a.length > 1) throw new Error(`unknown option ${a}`);
    else rest.push(a);
  }
  if (rest.length && METHODS.has(rest[0]) && rest.length > 1) opt.method = opt.method || rest.shift();
  if (!rest.length) throw new Error('no URL');
  opt.url = rest.shift();
  if (!/^https?:\/\//i.test(opt.url)) throw new Error(`URL ${JSON.stringify(opt.url)} must start with http:// or https://`);
  for (const item of rest) {
    let m;
    if ((m = /^([^=:]+)==(.*)$/s.exec(item))) opt.query.push([m[1], m[2]]);
    else if ((m = /^([^=:]+):=(.*)$/s.exec(item))) {
      try { opt.fields[m[1]] = JSON.parse(m[2]); } catch (e) { throw new Error(`${m[1]}:= needs JSON (${e.message})`); }
    } else if ((m = /^([^=:]+)=(.*)$/s.exec(item))) opt.fields[m[1]] = m[2];
    else if ((m = /^([A-Za-z0-9!#$%&'*+.^_`|~-]+):(.*)$/s.exec(item))) header(`${m[1]}:${m[2]}`);
    else throw new Error(`item ${JSON.stringify(item)}: use name=value, name:=json, name==query or Header:value`);
  }
  if (!Number.isFinite(opt.max) || opt.max < 0) throw new Error('-m needs a byte count');
  if (!Number.isFinite(opt.timeout) || opt.timeout < 0) throw new Error('-t needs seconds');
  return opt;
}

function withQuery(url, pairs) {
  if (!pairs.length) return url;
  const enc = (s) => encodeURIComponent(s).replace(/%20/g, '+');
  const q = pairs.map(([k, v]) => `${enc(k)}=${enc(v)}`).join('&');
  const hash = url.indexOf('#');
  const base = hash >= 0 ? url.slice(0, hash) : url;
  return base + (base.includes('?') ? '&' : '?') + q;
}

function text(v) { return typeof v === 'string' ? v : new TextDecoder().decode(v); }

function main() {
  let opt;
  try {
    opt = parse(scriptArgs.slice(1));
  } catch (e) {
    std.err.puts(e.message === 'help' ? USAGE : `http: ${e.message}\n${USAGE}`);
    process.exitCode = e.message === 'help' ? 0 : 65;
    return;
  }
  let body = null;
  if (opt.data !== null && Object.keys(opt.fields).length) return fail('give a body with -d or as fields, not both', 65);
  if (opt.data !== null) body = opt.data === '@-' ? std.in.readAsString() : opt.data;
  else if (Object.keys(opt.fields).length) {
    body = JSON.stringify(opt.fields);
    if (!Object.keys(opt.headers).some((h) => h.toLowerCase() === 'content-type')) opt.headers['Content-Type'] = 'application/json';
    if (!Object.keys(opt.headers).some((h) => h.toLowerCase() === 'accept')) opt.headers['Accept'] = 'application/json, */*;q=0.5';
  }
  const method = opt.method || (opt.headOnly ? 'HEAD' : body !== null ? 'POST' : 'GET');
  const url = withQuery(opt.url, opt.query);
  const req = { url, method, headers: opt.headers };
  if (body !== null) req.body = te.encode(body);
  if (opt.max > 0) req.max_bytes = Math.floor(opt.max);
  if (opt.timeout > 0) req.timeout = opt.timeout;
  let resp;
  try {
    resp = wb.net.fetch(req);
  } catch (e) {
    if (!(e instanceof DockError)) throw e;
    return fail(`${e.kind}${e.reason ? ` (${e.reason})` : ''}: ${e.message}`, e.exitCode);
  }
  if (opt.show) {
    let head = `HTTP ${resp.status}\n`;
    for (const pair of resp.headers || []) head += `${text(pair[0])}: ${text(pair[1])}\n`;
    std.out.puts(head + '\n');
  }
  if (!opt.headOnly && resp.body && resp.body.length) {
    const b = typeof resp.body === 'string' ? te.encode(resp.body) : resp.body;
    std.out.write(b.buffer, b.byteOffset, b.byteLength);
  }
  std.out.flush();
  if (resp.status >= 400) {
    std.err.puts(`http: HTTP ${resp.status} from ${resp.url || url}\n`);
    process.exitCode = opt.failCode ? 22 : 1;
  }
}

main();
