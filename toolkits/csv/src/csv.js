// RFC 4180 CSV: parse to rows, format rows back. No dependencies.

export function parse(text, delim = ',') {
  const rows = [];
  let row = [];
  let i = text.charCodeAt(0) === 0xfeff ? 1 : 0;
  const n = text.length;
  if (n === i) return rows;
  for (;;) {
    let field;
    if (text[i] === '"') {
      // quoted field: "" is a literal quote; ends at the closing quote
      let j = i + 1;
      const parts = [];
      for (;;) {
        const q = text.indexOf('"', j);
        if (q < 0) throw new Error(`unterminated quoted field starting at row ${rows.length + 1}`);
        parts.push(text.slice(j, q));
        if (text[q + 1] === '"') { parts.push('"'); j = q + 2; continue; }
        i = q + 1;
        break;
      }
      field = parts.join('');
      // anything between the closing quote and the delimiter is kept, as most readers do
      let k = i;
      while (k < n && text[k] !== delim && text[k] !== '\n' && text[k] !== '\r') k++;
      field += text.slice(i, k);
      i = k;
    } else {
      let k = i;
      while (k < n && text[k] !== delim && text[k] !== '\n' && text[k] !== '\r') k++;
      field = text.slice(i, k);
      i = k;
    }
    row.push(field);
    if (i >= n) { rows.push(row); break; }
    const c = text[i];
    if (c === delim) { i++; continue; }
    // end of record: \n, \r\n or \r
    rows.push(row);
    row = [];
    i += c === '\r' && text[i + 1] === '\n' ? 2 : 1;
    if (i >= n) break;
  }
  return rows;
}

export function formatField(value, delim = ',') {
  const s = value === null || value === undefined ? '' : typeof value === 'object' ? JSON.stringify(value) : String(value);
  return /[",\r\n]/.test(s) || s.includes(delim) || /^\s|\s$/.test(s) ? `"${s.replaceAll('"', '""')}"` : s;
}

export function format(rows, delim = ',') {
  return rows.map((r) => r.map((v) => formatField(v, delim)).join(delim)).join('\r\n') + (rows.length ? '\r\n' : '');
}

const NUM = /^[+-]?(\d+\.?\d*([eE][+-]?\d+)?|\.\d+([eE][+-]?\d+)?)$/;

export function typed(s) {
  if (s === '') return null;
  if (NUM.test(s.trim())) return Number(s);
  if (s === 'true' || s === 'false') return s === 'true';
  return s;
}

export function kindOf(values) {
  let num = 0, bool = 0, empty = 0;
  for (const v of values) {
    if (v === '') empty++;
    else if (NUM.test(v.trim())) num++;
    else if (v === 'true' || v === 'false') bool++;
  }
  const filled = values.length - empty;
  if (filled === 0) return 'empty';
  if (num === filled) return values.every((v) => v === '' || Number.isInteger(Number(v))) ? 'integer' : 'number';
  if (bool === filled) return 'boolean';
  return 'text';
}
