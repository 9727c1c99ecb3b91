# SPDX-License-Identifier: Apache-2.0
"""The releases of each adapted project, read out of their published archives.

``adapters/<folder>/releases.toml`` lists a project's releases, oldest first, each with the URL
of one archive on PyPI (a wheel or an sdist) and its sha256, and the files an adapter needs
(``files``: paths inside the package, a trailing ``/`` for a folder). ``root(folder, version)``
downloads the archive once into the cache, checks its hash, and unpacks only those files
(Python sources) into ``<cache>/<folder>/<version>/``, which then holds the package's tree as
it would be installed (``megatron/core/...``, ``liger_kernel/ops/...``), a ``VERSION`` file and
the list of files it was unpacked with (a change to ``files`` unpacks it anew).
Nothing of a release is built or installed: no setup.py runs, no package's ``__init__``.

The cache is ``$MLAROPE_RELEASE_CACHE``, else ``~/.cache/mlarope/releases`` (kept between
runs, as pip keeps its own). A file whose hash differs is an error, never used.

    python releases.py list                  # every project's releases
    python releases.py fetch [FOLDER ...]    # download and unpack them all (or one project's)
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tarfile
import tempfile
import urllib.request
import zipfile

import tomllib

HERE = os.path.dirname(os.path.abspath(__file__))
#: The adapter folders that have a releases.toml, in the order tables list them.
FOLDERS = ("megatron", "liger", "flash_attn", "flag_gems", "unsloth", "colossalai")


def cache_folder() -> str:
    return os.environ.get("MLAROPE_RELEASE_CACHE") or os.path.join(
        os.path.expanduser("~"), ".cache", "mlarope", "releases"
    )


def manifest(folder: str) -> dict:
    """``adapters/<folder>/releases.toml``: ``project``, ``files`` and ``release`` (a list of
    ``version``, ``url``, ``sha256``, oldest first)."""
    with open(os.path.join(HERE, folder, "releases.toml"), "rb") as f:
        return tomllib.load(f)


def versions(folder: str) -> list[str]:
    return [r["version"] for r in manifest(folder)["release"]]


def newest(folder: str) -> str:
    return versions(folder)[-1]


def sha256(folder: str, version: str) -> str:
    return _release(folder, version)["sha256"]


def _release(folder: str, version: str) -> dict:
    for release in manifest(folder)["release"]:
        if release["version"] == version:
            return release
    raise KeyError(f"{folder}: no release {version} in releases.toml (known: {versions(folder)})")


def archive(folder: str, version: str) -> str:
    """The release's archive in the cache, downloaded if absent, its sha256 checked."""
    release = _release(folder, version)
    path = os.path.join(cache_folder(), "archives", os.path.basename(release["url"]))
    if not os.path.isfile(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with urllib.request.urlopen(release["url"], timeout=120) as response:
            data = response.read()
        _check(data, release, release["url"])
        partial = path + f".{os.getpid()}.part"
        with open(partial, "wb") as f:
            f.write(data)
        os.replace(partial, path)  # whole or absent, for a concurrent reader
        return path
    with open(path, "rb") as f:
        _check(f.read(), release, path)
    return path


def _check(data: bytes, release: dict, where: str) -> None:
    digest = hashlib.sha256(data).hexdigest()
    if digest != release["sha256"]:
        raise ValueError(f"{where}: sha256 {digest}, expected {release['sha256']}")


def _members(path: str):
    """(name inside the package tree, bytes) of every file of a wheel or an sdist; an sdist's
    names lose their first folder (``megatron_core-0.19.2/``)."""
    if path.endswith(".whl"):
        with zipfile.ZipFile(path) as wheel:
            for name in wheel.namelist():
                yield name, lambda name=name, wheel=wheel: wheel.read(name)
        return
    with tarfile.open(path, "r:gz") as sdist:
        for member in sdist:
            if member.isfile():
                name = member.name.split("/", 1)[1] if "/" in member.name else member.name
                yield name, lambda member=member, sdist=sdist: sdist.extractfile(member).read()


def root(folder: str, version: str | None = None) -> str:
    """The folder holding the release's files as the package would install them (the newest
    release when ``version`` is None); those of ``files`` the release lacks are absent (an
    older release without a kernel: ``has`` tells)."""
    version = version or newest(folder)
    target = os.path.join(cache_folder(), folder, version)
    wanted = tuple(manifest(folder)["files"])
    if _unpacked_files(target) == list(wanted):
        return target
    source = archive(folder, version)
    staging = tempfile.mkdtemp(prefix=f"{version}.", dir=os.path.dirname(_ensure(target)))
    for name, read in _members(source):
        if name.startswith(wanted) and name.endswith(".py") and ".." not in name.split("/"):
            os.makedirs(os.path.join(staging, os.path.dirname(name)), exist_ok=True)
            with open(os.path.join(staging, name), "wb") as f:
                f.write(read())
    with open(os.path.join(staging, "VERSION"), "w", encoding="utf-8") as f:
        f.write(version + "\n")
    with open(os.path.join(staging, FILES_STAMP), "w", encoding="utf-8") as f:
        json.dump(list(wanted), f)
    if os.path.isdir(target):  # unpacked before with another list of files
        stale = tempfile.mkdtemp(prefix=f"{version}.stale.", dir=os.path.dirname(target))
        os.rename(target, os.path.join(stale, "tree"))
        shutil.rmtree(stale)
    try:
        os.rename(staging, target)
    except OSError:  # unpacked meanwhile by another process
        shutil.rmtree(staging)
    return target


#: The list of files a folder was unpacked with: another list in releases.toml unpacks anew.
FILES_STAMP = "FILES.json"


def _unpacked_files(target: str):
    try:
        with open(os.path.join(target, FILES_STAMP), encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def _ensure(target: str) -> str:
    os.makedirs(os.path.dirname(target), exist_ok=True)
    return target


def version_of(root_folder: str) -> str:
    with open(os.path.join(root_folder, "VERSION"), encoding="utf-8") as f:
        return f.read().strip()


def has(root_folder: str, path: str) -> bool:
    """Whether the release unpacked in ``root_folder`` ships ``path`` (a kernel file)."""
    return os.path.isfile(os.path.join(root_folder, path))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("list", "fetch"))
    parser.add_argument("folders", nargs="*", default=list(FOLDERS), help="adapter folders")
    args = parser.parse_args(argv)
    for folder in args.folders:
        data = manifest(folder)
        for version in versions(folder):
            if args.command == "fetch":
                print(f"{data['project']} {version}: {root(folder, version)}", flush=True)
            else:
                print(f"{data['project']} {version}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
