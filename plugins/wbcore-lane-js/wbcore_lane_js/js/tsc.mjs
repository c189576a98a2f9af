// wbcore ts lane: type-strip TypeScript with the TypeScript compiler, inside QuickJS.
// scriptArgs: the .ts/.mts files (under /app). Prints one JSON object to stdout:
// {"files": {"<out path>": "<js>"}, "errors": ["file:line:col: message", ...]}.
// Only transpileModule runs (per file, isolatedModules semantics): syntax is checked,
// types are erased, not checked.
import * as std from 'qjs:std';
import * as bjson from 'qjs:bjson';

const bytecode = std.loadFile('/app/__wb_typescript.qbc', { binary: true });
if (bytecode) {
  const fn = bjson.read(bytecode.buffer, bytecode.byteOffset, bytecode.byteLength, bjson.READ_OBJ_BYTECODE);
  std.evalScript(fn, { eval_function: true });
} else {
  std.evalScript(std.loadFile('/app/__wb_typescript.js'));
}
const options = {
  module: ts.ModuleKind.ESNext,
  target: ts.ScriptTarget.ES2023,
  isolatedModules: true,
  rewriteRelativeImportExtensions: true,
  sourceMap: false,
  removeComments: false,
};
const files = {};
const errors = [];
for (const path of scriptArgs.slice(1)) {
  const rel = path.replace(/^\/app\//, '');
  const text = std.loadFile(path);
  const out = ts.transpileModule(text, { compilerOptions: options, fileName: rel, reportDiagnostics: true });
  for (const d of out.diagnostics ?? []) {
    if (d.category !== ts.DiagnosticCategory.Error) continue;
    const before = text.slice(0, d.start ?? 0).split('\n');
    errors.push(`${rel}:${before.length}:${before[before.length - 1].length + 1}: ${ts.flattenDiagnosticMessageText(d.messageText, ' ')}`);
  }
  files[rel.replace(/\.mts$/, '.mjs').replace(/\.ts$/, '.js')] = out.outputText;
}
std.out.puts(JSON.stringify({ files, errors }));
std.out.flush();
std.exit(0);
