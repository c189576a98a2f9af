"""The ACT tool-provider model (seed 002) in the core, so every surface speaks it.

- :mod:`wbcore_runtime.act.model`    tool definitions, calls, stream events, error kinds, ``std:`` keys
- :mod:`wbcore_runtime.act.cbor`     deterministic CBOR (RFC 8949 §4.2) with bounded decoding
- :mod:`wbcore_runtime.act.wire`     reading wire values of any ACT revision; component info
- :mod:`wbcore_runtime.act.sections` the ``act:component`` / ``act:skill`` custom sections of a binary
- :mod:`wbcore_runtime.act.provider` every registered toolkit as an ACT tool provider (``wbx call``, MCP)

The revision adapters that write each ACT revision's wire form and the ``wbx act``
commands are the ``wbcore-act`` plugin's.
"""
