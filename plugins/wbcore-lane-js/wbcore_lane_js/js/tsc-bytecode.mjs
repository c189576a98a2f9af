// wbcore ts lane: compile the vendored TypeScript compiler to QuickJS bytecode (stdout),
// once per compiler and QuickJS build; later builds load it in ~0.1 s instead of ~2.8 s.
import * as std from 'qjs:std';
import * as bjson from 'qjs:bjson';

const fn = std.evalScript(std.loadFile('/app/__wb_typescript.js'), { compile_only: true });
const buf = bjson.write(fn, bjson.WRITE_OBJ_BYTECODE | bjson.WRITE_OBJ_STRIP_SOURCE | bjson.WRITE_OBJ_STRIP_DEBUG);
std.out.write(buf, 0, buf.byteLength);
std.out.flush();
std.exit(0);
