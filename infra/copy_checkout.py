#!/usr/bin/env python3
"""A copy of the checkout's files (those git tracks or would), for the
checks that run the documented blocks as a reader does, from outside the
repository, and then show that the blocks left the checkout as it was
(infra/quickstart.sh, infra/cdk-team-check.sh).

    infra/copy_checkout.py ROOT COPY
"""
import pathlib
import shutil
import subprocess
import sys

root, copy = pathlib.Path(sys.argv[1]), pathlib.Path(sys.argv[2])
listed = subprocess.run(["git", "-C", str(root), "ls-files", "-z", "--cached", "--others",
                         "--exclude-standard"], check=True, capture_output=True).stdout
for name in filter(None, listed.decode().split("\0")):
    source = root / name
    if source.is_file():
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, copy / name)
