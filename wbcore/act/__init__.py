"""The ACT tool-provider model (seed 002) in the core, so every surface speaks it.

- :mod:`wbcore.act.model`    tool definitions, calls, stream events, error kinds, ``std:`` keys
- :mod:`wbcore.act.cbor`     deterministic CBOR (RFC 8949 §4.2) with bounded decoding
- :mod:`wbcore.act.wire`     reading wire values of any ACT revision; component info
- :mod:`wbcore.act.sections` the ``act:component`` / ``act:skill`` custom sections of a binary
- :mod:`wbcore.act.provider` every registered toolkit as an ACT tool provider (``wbx call``, MCP)

The revision adapters that write each ACT revision's wire form and the ``wbx act``
commands are the ``wb-act`` plugin's.
"""
