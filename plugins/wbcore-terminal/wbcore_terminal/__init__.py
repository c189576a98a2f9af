"""wbcore-terminal: terminal sessions' engine (``wbx shell``): the PTY agent a sandbox tier ships
into its sandbox (:mod:`wbcore_terminal.agent`) and the host's relay (:mod:`wbcore_terminal.attach`)."""
