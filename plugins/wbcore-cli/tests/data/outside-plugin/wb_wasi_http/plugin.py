"""A plugin that lives outside the wbcore workspace: the `wasi-http` EXEC shape."""

from wbcore_runtime import hookimpl
from wbcore_runtime.contract.records import Check, ExecShape


def _verify(ctx):
    handler = ctx.toolkit.manifest.extra("HANDLER")
    if handler:
        yield Check(True, "exec", f"wasi-http handler {handler}")
    else:
        yield Check(False, "exec", "wasi-http toolkits need #+HANDLER")


@hookimpl
def wbcore_exec_shapes():
    yield ExecShape(name="wasi-http", summary="an incoming-handler proxy component", verify=_verify)
