"""The local model server process: ``python -m wbcore_llm_local.serve --port N --api-key-env VAR``.

llama-cpp-python's OpenAI-compatible server (FastAPI on uvicorn) serving the bundled
model with :mod:`wbcore_llm_local.handler` as its chat format, bound to loopback only.
:class:`wbcore_llm_local.server.LocalServer` starts it, waits until it answers and stops it.
The key is read from an environment variable, never from argv (``ps`` shows argv).
"""

from __future__ import annotations

import argparse
import os
import sys

from wbcore_llm_local.model import LOOPBACK, MODEL_ALIAS, N_CTX, model_path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m wbcore_llm_local.serve")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--api-key-env", default="",
                    help="the environment variable holding the key clients must send")
    ap.add_argument("--threads", type=int, default=max(1, min(4, os.cpu_count() or 1)))
    ap.add_argument("--n-ctx", type=int, default=N_CTX)
    args = ap.parse_args(argv)
    if not 0 < args.port < 65536:
        print(f"--port {args.port}: expected 1..65535", file=sys.stderr)
        return 2
    import uvicorn
    from llama_cpp.server.app import create_app
    from llama_cpp.server.settings import ModelSettings, ServerSettings

    from wbcore_llm_local import handler

    handler.register()
    key = os.environ.get(args.api_key_env) if args.api_key_env else None
    server = ServerSettings(host=LOOPBACK, port=args.port, api_key=key or None)
    model = ModelSettings(model=str(model_path()), model_alias=MODEL_ALIAS, chat_format=handler.NAME,
                          n_ctx=args.n_ctx, n_threads=args.threads, n_threads_batch=args.threads,
                          verbose=False)
    app = create_app(server_settings=server, model_settings=[model])
    uvicorn.run(app, host=LOOPBACK, port=args.port, log_level="warning")
    return 0


if __name__ == "__main__":
    sys.exit(main())
