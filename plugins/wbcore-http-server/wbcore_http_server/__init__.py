"""wbcore-http-server: the HTTP server engine of ``wbx engine serve`` and ``wbx mcp serve --http``
(uvicorn with every bound of ``contract.http_server.ServerLimits``, :mod:`wbcore_http_server.serve`)."""
