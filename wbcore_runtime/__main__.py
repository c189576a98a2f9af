"""``python -m wbcore_runtime`` runs ``wbx`` when its distribution (wbcore-cli) is installed."""

import sys

try:
    from wbcore_cli.app import run
except ModuleNotFoundError as e:  # only wbcore_cli itself missing; a broken CLI shows its own error
    if e.name != "wbcore_cli":
        raise
    print("the wbx CLI is the wbcore-cli distribution: pip install wbcore-cli", file=sys.stderr)
    sys.exit(2)

run()
