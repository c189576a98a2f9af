"""Dispatch: a call resolved (toolkit, tier, runner) and run, the Dock cadence of cap calls and
its hash-chained audit trail, budgets, and the running-call table."""
