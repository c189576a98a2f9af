// wbcore svelte lane: compile .svelte components with the Svelte compiler, inside QuickJS.
// scriptArgs: the .svelte files (under /app). Prints one JSON object to stdout:
// {"files": {"<name>.svelte.js": "<js>"}, "errors": ["file:line:col: message", ...],
//  "warnings": [...]}. Components are compiled for the server (generate: 'server'): the
// output imports 'svelte/internal/server', which the lane bundles from the same tarball.
import * as std from 'qjs:std';

// compiler/index.js is UMD: with no `module`/`define` it sets globalThis.svelte.
std.evalScript(std.loadFile('/app/__wb_svelte_compiler.js'));
const compiler = globalThis.svelte;
const files = {};
const errors = [];
const warnings = [];
for (const path of scriptArgs.slice(1)) {
  const rel = path.replace(/^\/app\//, '');
  const text = std.loadFile(path);
  try {
    const out = compiler.compile(text, { filename: rel, generate: 'server', dev: false });
    files[rel + '.js'] = out.js.code;
    for (const w of out.warnings ?? []) {
      warnings.push(`${rel}:${w.start?.line ?? 0}:${(w.start?.column ?? 0) + 1}: ${w.message} (${w.code})`);
    }
  } catch (e) {
    if (e && e.start) {
      errors.push(`${rel}:${e.start.line}:${e.start.column + 1}: ${e.message ?? e} (${e.code ?? 'error'})`);
    } else {
      errors.push(`${rel}: ${e && e.message ? e.message : e}`);
    }
  }
}
std.out.puts(JSON.stringify({ files, errors, warnings }));
std.out.flush();
std.exit(0);
