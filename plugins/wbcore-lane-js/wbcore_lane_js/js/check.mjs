// wbcore js lane: build-time check. Compiles every module named in scriptArgs (and
// the modules they import) without evaluating any of them; reports file:line:col.
import * as std from 'qjs:std';
import * as os from 'qjs:os';

let bad = 0;
for (const file of scriptArgs.slice(1)) {
  const dir = file.slice(0, file.lastIndexOf('/')) || '/';
  os.chdir(dir);
  try {
    std.evalScript(std.loadFile(file), { compile_only: true, compile_module: true });
  } catch (e) {
    bad += 1;
    const at = `${e && e.stack}`.match(/<evalScript>:(\d+):(\d+)/);
    std.err.puts(`${file}${at ? `:${at[1]}:${at[2]}` : ''}: ${e}\n`);
  }
}
std.err.flush();
std.exit(bad ? 1 : 0);
