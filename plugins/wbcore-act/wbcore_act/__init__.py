"""wbcore-act: every registered toolkit as an ACT tool provider (``provider``, served to MCP, ``wbx call``
and the agent loop through ``wbcore_tool_providers``), the ACT wire readers (``wire``), the ``act:*``
custom sections (``sections``), the revision adapters (0.1, seed, 0.2, 0.4 wire forms) and the
``wbx call`` / ``wbx act`` commands. The records they exchange are the core's
(``wbcore_runtime.contract.tools``)."""
