"""Entry point of wbcore-demo: the ``wbx demo`` command. The demo's module (the build machinery,
the local web site) loads only when the command runs, so every other ``wbx`` start-up stays light."""

from __future__ import annotations

from typing import Any

from wbcore_runtime import hookimpl


@hookimpl
def wbcore_cli_commands(add: Any) -> None:
    runtime = add.runtime

    def demo() -> None:
        """Discover the shipped toolkits, build and run the buildable ones, verify all."""
        from wbcore_demo import demo as _demo  # deferred: loads the build machinery only for wbx demo

        _demo.run(runtime)

    add("demo", demo,
        help="Discover the shipped toolkits, build and run the buildable ones, verify all (offline).")
