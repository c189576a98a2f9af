"""wbcore-engine: ``wbx engine serve``, the engine service (an ASGI app on starlette, served by
wbcore-http-server)."""
