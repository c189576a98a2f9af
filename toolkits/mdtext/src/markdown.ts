// A small CommonMark-ish reader: enough structure for plain text, an outline and links.

export interface Heading { level: number; text: string; line: number }
export interface Link { text: string; url: string; line: number; image: boolean }

const FENCE = /^ {0,3}(`{3,}|~{3,})/;
const ATX = /^ {0,3}(#{1,6})(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$/;
const SETEXT = /^ {0,3}(=+|-+)[ \t]*$/;
const REFDEF = /^ {0,3}\[([^\]]+)\]:[ \t]*<?([^\s>]+)>?/;

/** Inline markup → plain text: links keep their text, images their alt text, code its content. */
export function inlineText(s: string): string {
  // code spans first, kept aside so nothing inside them is read as markup
  const spans: string[] = [];
  const held = s.replace(/(`+)([\s\S]*?[^`])\1(?!`)/g, (_m, _ticks: string, code: string) => {
    spans.push(code.trim());
    return `\u0000${spans.length - 1}\u0000`;
  });
  return held
    .replace(/!\[([^\]]*)\]\([^)]*\)/g, '$1')
    .replace(/\[([^\]]+)\]\([^)]*\)/g, '$1')
    .replace(/\[([^\]]+)\]\[[^\]]*\]/g, '$1')
    .replace(/<(https?:[^>\s]+)>/g, '$1')
    .replace(/(\*\*|__)(?=\S)([\s\S]*?\S)\1/g, '$2')
    .replace(/(\*|_)(?=\S)([\s\S]*?\S)\1/g, '$2')
    .replace(/~~(?=\S)([\s\S]*?\S)~~/g, '$1')
    .replace(/<\/?[A-Za-z][^>]*>/g, '')
    .replace(/\\([!-\/:-@\[-`{-~])/g, '$1')
    .replace(/\u0000(\d+)\u0000/g, (_m, i: string) => spans[Number(i)]);
}

export interface Block { kind: 'heading' | 'para' | 'code' | 'item' | 'quote' | 'rule' | 'table'; text: string; level?: number; line: number }

export function blocks(md: string): Block[] {
  const lines = md.replace(/\r\n?/g, '\n').split('\n');
  const out: Block[] = [];
  let para: string[] = [];
  let paraLine = 0;
  const flush = (): void => {
    if (para.length) out.push({ kind: 'para', text: para.join(' '), line: paraLine });
    para = [];
  };
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i];
    const fence = FENCE.exec(line);
    if (fence) {
      flush();
      const body: string[] = [];
      const start = i + 1;
      for (i++; i < lines.length && !lines[i].trimStart().startsWith(fence[1]); i++) body.push(lines[i]);
      out.push({ kind: 'code', text: body.join('\n'), line: start });
      continue;
    }
    const atx = ATX.exec(line);
    if (atx) { flush(); out.push({ kind: 'heading', level: atx[1].length, text: inlineText(atx[2] ?? ''), line: i + 1 }); continue; }
    if (para.length && SETEXT.test(line) && !/^\s*-\s+\S/.test(line)) {
      const level = line.trim()[0] === '=' ? 1 : 2;
      out.push({ kind: 'heading', level, text: inlineText(para.join(' ')), line: paraLine });
      para = [];
      continue;
    }
    if (/^ {0,3}([-*_])([ \t]*\1){2,}[ \t]*$/.test(line)) { flush(); out.push({ kind: 'rule', text: '', line: i + 1 }); continue; }
    if (REFDEF.test(line)) { flush(); continue; }
    if (line.trim() === '') { flush(); continue; }
    const item = /^(\s*)([-*+]|\d+[.)])[ \t]+(.*)$/.exec(line);
    if (item) { flush(); out.push({ kind: 'item', level: Math.floor(item[1].length / 2), text: inlineText(item[3]), line: i + 1 }); continue; }
    const quote = /^ {0,3}>[ \t]?(.*)$/.exec(line);
    if (quote) { flush(); out.push({ kind: 'quote', text: inlineText(quote[1]), line: i + 1 }); continue; }
    if (/^\s*\|.*\|\s*$/.test(line)) {
      flush();
      if (!/^\s*\|[\s:|-]+\|\s*$/.test(line)) {
        const cells = line.trim().slice(1, -1).split('|').map((c) => inlineText(c.trim()));
        out.push({ kind: 'table', text: cells.join('\t'), line: i + 1 });
      }
      continue;
    }
    if (!para.length) paraLine = i + 1;
    para.push(line.trim());
  }
  flush();
  for (const b of out) if (b.kind === 'para') b.text = inlineText(b.text);
  return out;
}

export function links(md: string): Link[] {
  const out: Link[] = [];
  const defs = new Map<string, string>();
  const lines = md.replace(/\r\n?/g, '\n').split('\n');
  lines.forEach((l) => { const m = REFDEF.exec(l); if (m) defs.set(m[1].toLowerCase(), m[2]); });
  let inCode = false;
  lines.forEach((l, i) => {
    if (FENCE.test(l)) { inCode = !inCode; return; }
    if (inCode || REFDEF.test(l)) return;
    const stripped = l.replace(/`[^`]*`/g, '');
    for (const m of stripped.matchAll(/(!?)\[([^\]]*)\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g)) {
      out.push({ text: inlineText(m[2]), url: m[3], line: i + 1, image: m[1] === '!' });
    }
    for (const m of stripped.matchAll(/(!?)\[([^\]]+)\]\[([^\]]*)\]/g)) {
      const url = defs.get((m[3] || m[2]).toLowerCase());
      if (url) out.push({ text: inlineText(m[2]), url, line: i + 1, image: m[1] === '!' });
    }
    for (const m of stripped.matchAll(/<(https?:\/\/[^>\s]+)>/g)) out.push({ text: m[1], url: m[1], line: i + 1, image: false });
  });
  return out;
}
