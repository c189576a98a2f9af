"""``python -m wbcore_llm_local [--detach] …``: the same as ``wbx llm serve-local``."""

import sys

from wbcore_llm_local.cli import build

if __name__ == "__main__":
    sys.exit(build()(["serve-local", *sys.argv[1:]], prog_name="python -m wbcore_llm_local"))
