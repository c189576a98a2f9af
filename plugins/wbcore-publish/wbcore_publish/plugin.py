"""Entry point of wbcore-publish: ``wbx bundle``, ``wbx publish``, ``wbx library``. Imports nothing heavy."""

from __future__ import annotations

from typing import Any

from wbcore_runtime import hookimpl


@hookimpl
def wbcore_cli_commands(add: Any) -> None:
    from wbcore_publish import cli

    add("bundle", cli.bundle_app(add.runtime), help="Ship a workspace as a signed .wbundle, or restore one.")
    add("publish", cli.publish_app(add.runtime),
        help="Sign a published HTML page (workbooks-c2pa) or verify one.")
    add("library", cli.library_cmd(add.runtime),
        help="List an identity's workspaces and bundles with their provenance.")
