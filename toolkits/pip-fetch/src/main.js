// pip-fetch: a package's files of one version from a PyPI simple index (PEP 691 JSON or
// PEP 503 HTML), listed or downloaded hash-checked — every request through the Dock's net cap.
import * as std from 'qjs:std';
import { wb, DockError } from './wb_dock.js';
import { sha256hex } from './sha256.js';

const USAGE = 'usage: pip-fetch [--index URL] [--json] [-m BYTES] [-t SECONDS] NAME VERSION [FILE|sdist|wheel]\n' +
  '  --index: your pip index (python -m pip config get global.index-url, or $PIP_INDEX_URL)\n';
const ACCEPT = 'application/vnd.pypi.simple.v1+json, text/html;q=0.2';
const SDIST = ['.tar.gz', '.zip', '.tar.bz2', '.tgz'];

class Fail extends Error {
  constructor(message, code) { super(message); this.code = code; }
}

export const normalize = (name) => name.toLowerCase().replace(/[-_.]+/g, '-');

// (name, version) of a distribution file name, or null (PEP 427 wheels, sdists)
export function nameVersion(filename) {
  if (filename.endsWith('.whl')) {
    const parts = filename.slice(0, -4).split('-');
    return parts.length >= 5 ? [parts[0], parts[1]] : null;
  }
  const ext = SDIST.find((e) => filename.endsWith(e));
  if (!ext) return null;
  const stem = filename.slice(0, -ext.length);
  const dash = stem.lastIndexOf('-');
  return dash > 0 ? [stem.slice(0, dash), stem.slice(dash + 1)] : null;
}

function resolveUrl(base, href) {
  if (/^https?:\/\//i.test(href)) return href;
  const m = /^(https?:\/\/[^/]+)(\/[^?#]*)?/i.exec(base);
  if (!m) throw new Fail(`cannot resolve ${href} against ${base}`, 65);
  if (href.startsWith('//')) return base.split(':')[0] + ':' + href;
  if (href.startsWith('/')) return m[1] + href;
  const dir = (m[2] || '/').replace(/[^/]*$/, '');
  const parts = [];
  for (const seg of (dir + href).split('/')) {
    if (seg === '..') parts.pop(); else if (seg !== '.') parts.push(seg);
  }
  return m[1] + parts.join('/').replace(/^(?!\/)/, '/');
}

const unescape = (s) => s.replace(/&amp;/g, '&').replace(/&lt;/g, '<').replace(/&gt;/g, '>')
  .replace(/&quot;/g, '"').replace(/&#39;/g, "'").replace(/&#x27;/g, "'");

// PEP 503: <a href="url#sha256=..." data-requires-python="..." data-yanked>filename</a>
export function parseHtml(page, pageUrl) {
  const files = [];
  const re = /<a\s([^>]*)>([^<]*)<\/a>/gi;
  let m;
  while ((m = re.exec(page))) {
    const attrs = m[1];
    const href = /href\s*=\s*"([^"]*)"|href\s*=\s*'([^']*)'/i.exec(attrs);
    if (!href) continue;
    const raw = unescape(href[1] ?? href[2]);
    const [url, frag = ''] = raw.split('#');
    const sha = /(?:^|&)sha256=([0-9a-fA-F]{64})/.exec(frag);
    const rp = /data-requires-python\s*=\s*"([^"]*)"/i.exec(attrs);
    files.push({ filename: unescape(m[2].trim()), url: resolveUrl(pageUrl, url), sha256: sha ? sha[1].toLowerCase() : null,
                 yanked: /data-yanked/i.test(attrs), requires_python: rp ? unescape(rp[1]) : null });
  }
  return files;
}

// PEP 691: {"files": [{"filename", "url", "hashes": {"sha256"}, "yanked", "requires-python"}]}
export function parseJson(doc, pageUrl) {
  if (!doc || !Array.isArray(doc.files)) throw new Fail('the index answered JSON without a "files" list', 70);
  return doc.files.map((f) => ({ filename: String(f.filename), url: resolveUrl(pageUrl, String(f.url)),
                                 sha256: f.hashes && f.hashes.sha256 ? String(f.hashes.sha256).toLowerCase() : null,
                                 yanked: Boolean(f.yanked), requires_python: f['requires-python'] ?? null }));
}

function get(url, opt, accept) {
  const req = { url, method: 'GET', headers: accept ? { Accept: accept } : {} };
  if (opt.max > 0) req.max_bytes = Math.floor(opt.max);
  if (opt.timeout > 0) req.timeout = opt.timeout;
  let resp;
  try {
    resp = wb.net.fetch(req);
  } catch (e) {
    if (!(e instanceof DockError)) throw e;
    throw new Fail(`${e.kind}${e.reason ? ` (${e.reason})` : ''}: ${e.message}`, e.exitCode);
  }
  if (resp.status === 404) throw new Fail(`${url}: not found (HTTP 404)`, 1);
  if (resp.status >= 400) throw new Fail(`${url}: HTTP ${resp.status}`, 1);
  return resp;
}

function header(resp, name) {
  for (const [k, v] of resp.headers || []) {
    const key = typeof k === 'string' ? k : new TextDecoder().decode(k);
    if (key.toLowerCase() === name) return typeof v === 'string' ? v : new TextDecoder().decode(v);
  }
  return '';
}

export function parseArgs(args) {
  // No built-in index: the guest cannot read the user's pip configuration, and wbcore names
  // no registry host of its own, so the caller passes the index they configured.
  const opt = { index: '', json: false, max: 0, timeout: 0, rest: [] };
  for (let i = 0; i < args.length; i++) {
    const a = args[i];
    const value = () => { if (i + 1 >= args.length) throw new Fail(`${a} needs a value`, 65); return args[++i]; };
    if (a === '--index') opt.index = value().replace(/\/+$/, '');
    else if (a === '--json') opt.json = true;
    else if (a === '-m') opt.max = Number(value());
    else if (a === '-t') opt.timeout = Number(value());
    else if (a === '-h' || a === '--help') throw new Fail('help', 0);
    else if (a.startsWith('-')) throw new Fail(`unknown option ${a}`, 65);
    else opt.rest.push(a);
  }
  if (opt.rest.length < 2 || opt.rest.length > 3) throw new Fail('give NAME VERSION [FILE]', 65);
  if (!opt.index) throw new Fail('give --index URL: your pip index (python -m pip config get global.index-url)', 65);
  if (!/^https?:\/\//i.test(opt.index)) throw new Fail(`--index ${opt.index}: use an http(s) URL`, 65);
  if (!/^[A-Za-z0-9._-]+$/.test(opt.rest[0])) throw new Fail(`package name ${JSON.stringify(opt.rest[0])} is not a valid name`, 65);
  return opt;
}

function run() {
  const opt = parseArgs(scriptArgs.slice(1));
  const [name, version, want] = opt.rest;
  const pageUrl = `${opt.index}/${normalize(name)}/`;
  const page = get(pageUrl, opt, ACCEPT);
  const type = header(page, 'content-type');
  const body = new TextDecoder().decode(page.body);
  const all = type.includes('json') ? parseJson(JSON.parse(body), page.url || pageUrl) : parseHtml(body, page.url || pageUrl);
  const files = all.filter((f) => {
    const nv = nameVersion(f.filename);
    return nv && normalize(nv[0]) === normalize(name) && nv[1] === version;
  });
  if (!files.length) {
    const versions = [...new Set(all.map((f) => (nameVersion(f.filename) || [])[1]).filter(Boolean))];
    throw new Fail(`${name} ${version}: no files on ${pageUrl}` +
                   (versions.length ? ` (versions there: ${versions.slice(-10).join(', ')})` : ''), 1);
  }
  if (want === undefined) {
    if (opt.json) std.out.puts(JSON.stringify(files, null, 2) + '\n');
    else for (const f of files) std.out.puts(`${f.filename} ${f.sha256 || '-'} ${f.url}${f.yanked ? ' (yanked)' : ''}\n`);
    return 0;
  }
  const file = want === 'sdist' ? files.find((f) => !f.filename.endsWith('.whl'))
    : want === 'wheel' ? files.find((f) => f.filename.endsWith('.whl'))
      : files.find((f) => f.filename === want);
  if (!file) throw new Fail(`${name} ${version} has no file ${want}; it has: ${files.map((f) => f.filename).join(', ')}`, 1);
  if (!file.sha256) throw new Fail(`${file.filename}: the index gives no sha256, so it cannot be checked; refusing`, 1);
  const got = get(file.url, opt, null);
  const data = typeof got.body === 'string' ? new TextEncoder().encode(got.body) : got.body;
  const digest = sha256hex(data);
  if (digest !== file.sha256) throw new Fail(`${file.filename}: sha256 ${digest} does not match the index's ${file.sha256}; nothing written`, 1);
  std.out.write(data.buffer, data.byteOffset, data.byteLength);
  std.err.puts(`pip-fetch: ${file.filename}: ${data.byteLength} bytes, sha256 ${digest} ok\n`);
  return 0;
}

try {
  process.exitCode = run();
} catch (e) {
  if (!(e instanceof Fail)) throw e;
  std.err.puts(e.message === 'help' ? USAGE : `pip-fetch: ${e.message}\n` + (e.code === 65 ? USAGE : ''));
  process.exitCode = e.code;
}
std.out.flush();
