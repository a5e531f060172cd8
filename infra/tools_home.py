"""Where infra/tools.sh installs the tools: EXACTLY_ONCE_TOOLS, as
infra/local-env.sh sets it (by default ~/.cache/exactly-once, outside the
checkout). The scripts started by a python3 without boto3 or PyYAML re-run
themselves with the tools' (VENV_PYTHON)."""

import os
import pathlib


def tools_dir():
    chosen = os.environ.get("EXACTLY_ONCE_TOOLS")
    if chosen:
        return pathlib.Path(chosen)
    cache = os.environ.get("XDG_CACHE_HOME") or pathlib.Path.home() / ".cache"
    return pathlib.Path(cache) / "exactly-once"


VENV_PYTHON = tools_dir() / "venv" / "bin" / "python"
