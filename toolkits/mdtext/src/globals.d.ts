// What the js lane's runtime provides (QuickJS-NG with --std, plus wbcore's entry shim).
declare const scriptArgs: string[];
declare const std: { in: { readAsString(): string }; out: { puts(s: string): void }; err: { puts(s: string): void } };
declare const process: { exitCode: number; exit(code?: number): never };
