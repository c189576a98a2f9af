// mdtext: Markdown → plain text, outline, links, word count. Reads stdin.
import { blocks, links, type Block } from './markdown.ts';

type Command = (md: string, args: string[]) => string;

class UsageError extends Error {}

const USAGE = `usage: mdtext <command> [options] < file.md
commands:
  plain [--width=N]   Markdown → readable plain text (default width 0 = no wrapping)
  outline             the heading tree, indented, with line numbers
  links [--json]      every link and image: line, text, URL
  stats               words, headings, links, code blocks as JSON`;

function wrap(text: string, width: number, indent = ''): string {
  if (width <= 0) return indent + text;
  const words = text.split(/\s+/).filter(Boolean);
  const lines: string[] = [];
  let cur = '';
  for (const w of words) {
    if (cur && indent.length + cur.length + 1 + w.length > width) { lines.push(indent + cur); cur = w; } else cur = cur ? `${cur} ${w}` : w;
  }
  if (cur) lines.push(indent + cur);
  return lines.join('\n');
}

function intOpt(args: string[], name: string, dflt: number): number {
  const a = args.find((x) => x.startsWith(`--${name}=`));
  if (!a) return dflt;
  const n = Number(a.slice(name.length + 3));
  if (!Number.isInteger(n) || n < 0) throw new UsageError(`--${name} needs an integer >= 0`);
  return n;
}

const plain: Command = (md, args) => {
  const width = intOpt(args, 'width', 0);
  const parts: string[] = [];
  for (const b of blocks(md)) {
    switch (b.kind) {
      case 'heading': parts.push(b.text.toUpperCase() === b.text ? b.text : b.level === 1 ? b.text.toUpperCase() : b.text); break;
      case 'item': parts.push(wrap(`- ${b.text}`, width, '  '.repeat(b.level ?? 0))); break;
      case 'quote': parts.push(wrap(b.text, width, '  ')); break;
      case 'code': parts.push(b.text.split('\n').map((l) => `    ${l}`).join('\n')); break;
      case 'rule': parts.push(''); break;
      case 'table': parts.push(b.text.replace(/\t/g, '  ')); break;
      default: parts.push(wrap(b.text, width));
    }
  }
  // items, table rows and quotes of one list stay together; other blocks get a blank line
  let out = '';
  let prev: Block['kind'] | '' = '';
  blocks(md).forEach((b, i) => {
    const tight = (b.kind === 'item' || b.kind === 'table' || b.kind === 'quote') && b.kind === prev;
    out += (i === 0 ? '' : tight ? '\n' : '\n\n') + parts[i];
    prev = b.kind;
  });
  return out.trimEnd() + '\n';
};

const outline: Command = (md) => blocks(md)
  .filter((b) => b.kind === 'heading')
  .map((b) => `${'  '.repeat((b.level ?? 1) - 1)}${b.text}  (line ${b.line})`)
  .join('\n') + '\n';

const linkList: Command = (md, args) => {
  const found = links(md);
  if (args.includes('--json')) return JSON.stringify(found) + '\n';
  return found.map((l) => `${l.line}\t${l.image ? 'image' : 'link'}\t${l.text}\t${l.url}`).join('\n') + (found.length ? '\n' : '');
};

const stats: Command = (md) => {
  const bs = blocks(md);
  const text = bs.filter((b) => b.kind !== 'code').map((b) => b.text).join(' ');
  const words = text.split(/\s+/).filter((w) => /[\p{L}\p{N}]/u.test(w)).length;
  const result = {
    words,
    reading_minutes: Math.max(1, Math.round(words / 230)),
    headings: bs.filter((b) => b.kind === 'heading').length,
    paragraphs: bs.filter((b) => b.kind === 'para').length,
    list_items: bs.filter((b) => b.kind === 'item').length,
    code_blocks: bs.filter((b) => b.kind === 'code').length,
    links: links(md).filter((l) => !l.image).length,
    images: links(md).filter((l) => l.image).length,
  };
  return JSON.stringify(result, null, 2) + '\n';
};

const COMMANDS: Record<string, Command> = { plain, outline, links: linkList, stats };

const [, cmd, ...rest] = scriptArgs as string[];
try {
  if (!cmd || cmd === 'help' || cmd === '--help') {
    std.out.puts(USAGE + '\n');
    if (!cmd) process.exitCode = 2;
  } else if (!(cmd in COMMANDS)) {
    throw new UsageError(`unknown command ${JSON.stringify(cmd)}; commands: ${Object.keys(COMMANDS).join(', ')}`);
  } else {
    std.out.puts(COMMANDS[cmd](std.in.readAsString(), rest));
  }
} catch (e) {
  std.err.puts(`mdtext: ${(e as Error).message}\n`);
  process.exitCode = e instanceof UsageError ? 2 : 1;
}
