"""Dispatch: a call resolved (toolkit, tier, runner) and run, the Dock cadence of cap calls,
budgets, and the running-call table."""
