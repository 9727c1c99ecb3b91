# SPDX-License-Identifier: Apache-2.0
"""What every module of the mutation tool shares: its two error kinds (each with its own
exit status), the progress log and the JSON file writes."""

import json
import os


class UsageError(Exception):
    """Bad usage: the command exits with status 2."""


class ToolError(Exception):
    """The tool could not run (the tree fails its checks, a locked scratch folder, a build that
    cannot be configured): the command exits with status 3."""


def log(message):
    print(message, flush=True)


def write_json(path, data):
    """Writes `data` to `path` whole or not at all (a reader never sees half a file)."""
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(data, f, indent=1)
        f.write("\n")
    os.replace(tmp, path)
