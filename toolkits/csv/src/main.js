// csv: CSV ↔ JSON and quick column tools for agents. Reads stdin, writes stdout.
import { format, kindOf, parse, typed } from './csv.js';

const USAGE = `usage: csv <command> [options] < input
commands:
  to-json  [--types] [--ndjson] [--pretty] [--no-header]   CSV → JSON array of objects
  from-json                                              JSON array / NDJSON → CSV
  columns                                                header names, index and type
  select COL[,COL...]                                    keep these columns (name or 1-based index)
  stats COL                                              summary of one column
common options: --delimiter=C (default ,; use --delimiter=tab for TSV)`;

class UsageError extends Error {}

function options(args) {
  const opts = { flags: new Set(), delimiter: ',', rest: [] };
  for (const a of args) {
    if (a.startsWith('--delimiter=')) {
      const d = a.slice(12);
      opts.delimiter = d === 'tab' || d === '\\t' ? '\t' : d;
      if (opts.delimiter.length !== 1) throw new UsageError(`--delimiter must be one character, got ${JSON.stringify(d)}`);
    } else if (a.startsWith('--')) opts.flags.add(a.slice(2));
    else opts.rest.push(a);
  }
  return opts;
}

function table(text, opts) {
  const rows = parse(text, opts.delimiter);
  if (opts.flags.has('no-header')) {
    const width = Math.max(0, ...rows.map((r) => r.length));
    return { header: Array.from({ length: width }, (_, i) => `c${i + 1}`), rows };
  }
  const [header = [], ...body] = rows;
  const seen = new Map();
  const names = header.map((h) => {
    const base = h.trim() || 'column';
    const k = seen.get(base) ?? 0;
    seen.set(base, k + 1);
    return k ? `${base}_${k + 1}` : base;
  });
  return { header: names, rows: body };
}

function pickColumns(header, spec) {
  return spec.split(',').map((s) => {
    const name = s.trim();
    const byName = header.indexOf(name);
    if (byName >= 0) return byName;
    if (/^\d+$/.test(name) && +name >= 1 && +name <= header.length) return +name - 1;
    throw new UsageError(`no column ${JSON.stringify(name)}; columns: ${header.join(', ')}`);
  });
}

function toJson(text, opts) {
  const { header, rows } = table(text, opts);
  const conv = opts.flags.has('types') ? typed : (s) => s;
  const objs = rows.map((r) => Object.fromEntries(header.map((h, i) => [h, conv(r[i] ?? '')])));
  if (opts.flags.has('ndjson')) return objs.map((o) => JSON.stringify(o)).join('\n') + (objs.length ? '\n' : '');
  return JSON.stringify(objs, null, opts.flags.has('pretty') ? 2 : undefined) + '\n';
}

function fromJson(text, opts) {
  const trimmed = text.trim();
  let records;
  if (trimmed.startsWith('[')) records = JSON.parse(trimmed);
  else records = trimmed ? trimmed.split('\n').filter((l) => l.trim()).map((l, i) => {
    try { return JSON.parse(l); } catch (e) { throw new Error(`line ${i + 1}: ${e.message}`); }
  }) : [];
  if (!Array.isArray(records)) throw new Error('expected a JSON array of objects (or one object per line)');
  if (records.every(Array.isArray)) return format(records, opts.delimiter);
  const keys = [];
  const seen = new Set();
  for (const r of records) {
    if (r === null || typeof r !== 'object' || Array.isArray(r)) throw new Error('every record must be an object');
    for (const k of Object.keys(r)) if (!seen.has(k)) { seen.add(k); keys.push(k); }
  }
  return format([keys, ...records.map((r) => keys.map((k) => r[k]))], opts.delimiter);
}

function columns(text, opts) {
  const { header, rows } = table(text, opts);
  const lines = header.map((h, i) => `${i + 1}\t${h}\t${kindOf(rows.map((r) => r[i] ?? ''))}`);
  return `${rows.length} rows\n` + lines.join('\n') + '\n';
}

function select(text, opts) {
  if (opts.rest.length !== 1) throw new UsageError('select needs one argument: COL[,COL...]');
  const { header, rows } = table(text, opts);
  const idx = pickColumns(header, opts.rest[0]);
  const out = [idx.map((i) => header[i]), ...rows.map((r) => idx.map((i) => r[i] ?? ''))];
  return format(out, opts.delimiter);
}

function stats(text, opts) {
  if (opts.rest.length !== 1) throw new UsageError('stats needs one argument: COL');
  const { header, rows } = table(text, opts);
  const [i] = pickColumns(header, opts.rest[0]);
  const values = rows.map((r) => r[i] ?? '');
  const filled = values.filter((v) => v !== '');
  const kind = kindOf(values);
  const out = { column: header[i], type: kind, count: values.length, missing: values.length - filled.length };
  if (kind === 'integer' || kind === 'number') {
    const xs = filled.map(Number).sort((a, b) => a - b);
    const sum = xs.reduce((a, b) => a + b, 0);
    const mid = xs.length >> 1;
    Object.assign(out, { min: xs[0], max: xs[xs.length - 1], sum, mean: sum / xs.length,
      median: xs.length % 2 ? xs[mid] : (xs[mid - 1] + xs[mid]) / 2 });
  } else {
    const counts = new Map();
    for (const v of filled) counts.set(v, (counts.get(v) ?? 0) + 1);
    out.distinct = counts.size;
    out.top = [...counts].sort((a, b) => b[1] - a[1] || (a[0] < b[0] ? -1 : 1)).slice(0, 5).map(([value, n]) => ({ value, n }));
  }
  return JSON.stringify(out, null, 2) + '\n';
}

const COMMANDS = { 'to-json': toJson, 'from-json': fromJson, columns, select, stats };

const [, cmd, ...args] = scriptArgs;
try {
  if (!cmd || cmd === '--help' || cmd === '-h' || cmd === 'help') {
    std.out.puts(USAGE + '\n');
    if (!cmd) process.exitCode = 2;
  } else if (!(cmd in COMMANDS)) {
    throw new UsageError(`unknown command ${JSON.stringify(cmd)}; commands: ${Object.keys(COMMANDS).join(', ')}`);
  } else {
    std.out.puts(COMMANDS[cmd](std.in.readAsString(), options(args)));
  }
} catch (e) {
  std.err.puts(`csv: ${e.message}\n`);
  process.exitCode = e instanceof UsageError ? 2 : 1;
}
