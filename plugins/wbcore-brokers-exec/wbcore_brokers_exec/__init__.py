"""wbcore-brokers-exec: commands, exec and parallel — guests running other registered commands.

A distribution of its own (not wbcore-brokers-state) because these brokers call back into
``Runtime.call`` — the engine and the command registry — while the state brokers need
nothing but SQLite; a deployer can install storage without composition and vice versa.
"""
