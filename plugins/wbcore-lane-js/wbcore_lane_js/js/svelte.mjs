// wbcore svelte lane: compile .svelte components with the Svelte compiler, inside QuickJS.
// scriptArgs: the .svelte files and .svelte.js rune modules (under /app). Prints one JSON object to stdout:
// {"files": {"<name>.svelte.js": "<js>"}, "errors": ["file:line:col: message", ...],
//  "warnings": [...]}. Components are compiled for the server (generate: 'server'): the
// output imports 'svelte/internal/server', which the lane bundles from the same tarball.
import * as std from 'qjs:std';

// compiler/index.js is UMD: with no `module`/`define` it sets globalThis.svelte.
std.evalScript(std.loadFile('/app/__wb_svelte_compiler.js'));
const compiler = globalThis.svelte;
// Svelte's messages end with a line holding the docs URL: one line, "message (code, url)".
const say = (rel, pos, e) => {
  const lines = String(e.message ?? e).split('\n');
  const url = lines.length > 1 && lines[lines.length - 1].startsWith('https://') ? lines.pop() : '';
  const where = pos ? `${rel}:${pos.line}:${pos.column + 1}` : rel;
  return `${where}: ${lines.join(' ')} (${[e.code, url].filter(Boolean).join(', ') || 'error'})`;
};
const files = {};
const errors = [];
const warnings = [];
for (const path of scriptArgs.slice(1)) {
  const rel = path.replace(/^\/app\//, '');
  const text = std.loadFile(path);
  try {
    // X.svelte.js / X.svelte.mjs: a module using runes ($state, $derived) outside a component
    const module = /\.svelte\.m?js$/.test(rel);
    const out = module
      ? compiler.compileModule(text, { filename: rel, generate: 'server', dev: false })
      : compiler.compile(text, { filename: rel, generate: 'server', dev: false });
    files[module ? rel : rel + '.js'] = out.js.code;
    for (const w of out.warnings ?? []) {
      warnings.push(say(rel, w.start, w));
    }
  } catch (e) {
    errors.push(say(rel, e && e.start, e ?? {}));
  }
}
std.out.puts(JSON.stringify({ files, errors, warnings }));
std.out.flush();
std.exit(0);
