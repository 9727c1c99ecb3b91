# SPDX-License-Identifier: Apache-2.0
"""The scratch copy of the source tree that mutants are written into (SCRATCH/src): the
working tree is never touched. A sync writes only the files whose content differs, so their
mtimes alone change and the scratch build stays incremental from one run to the next."""

import hashlib
import json
import os
import subprocess

from .common import UsageError, write_json


def tree_files(root, exclude):
    """The files of the checkout `root` (tracked and untracked, not ignored), less `exclude`."""
    try:
        out = subprocess.run(
            ["git", "-C", root, "ls-files", "-co", "--exclude-standard", "-z"],
            check=True,
            capture_output=True,
        ).stdout.decode()
    except (subprocess.CalledProcessError, FileNotFoundError) as e:
        raise UsageError(
            f"{root} is not a git checkout (git ls-files failed: {e}); the scratch "
            "copy is made of its tracked and untracked, not ignored files"
        ) from None
    files = []
    for rel in sorted(set(p for p in out.split("\0") if p)):
        path = os.path.join(root, rel)
        if any(rel == x or rel.startswith(x.rstrip("/") + "/") for x in exclude):
            continue
        if os.path.islink(path) or os.path.isfile(path):
            files.append(rel)
    return files


def sync_tree(root, dest, files, manifest_path):
    """Copy `files` of root into dest, writing only files whose content differs (so mtimes
    change only there); delete files copied before that are gone. (changed count, tree hash)"""
    digest = hashlib.sha256()
    changed = 0
    for rel in files:
        src, dst = os.path.join(root, rel), os.path.join(dest, rel)
        if os.path.islink(src):
            changed += _sync_link(rel, src, dst, digest)
        else:
            changed += _sync_file(rel, src, dst, digest)
    old = []
    if os.path.exists(manifest_path):
        with open(manifest_path) as f:
            old = json.load(f)
    keep = set(files)
    for rel in old:
        if rel not in keep and os.path.lexists(os.path.join(dest, rel)):
            os.remove(os.path.join(dest, rel))
            changed += 1
    write_json(manifest_path, files)
    return changed, digest.hexdigest()


def _sync_link(rel, src, dst, digest):
    """Copies the symbolic link src to dst unless it is there; 1 if written, else 0."""
    target = os.readlink(src)
    digest.update(f"{rel}\0link\0{target}\0".encode())
    if os.path.islink(dst) and os.readlink(dst) == target:
        return 0
    if os.path.lexists(dst):
        os.remove(dst)
    os.makedirs(os.path.dirname(dst), exist_ok=True)
    os.symlink(target, dst)
    return 1


def _sync_file(rel, src, dst, digest):
    """Copies the file src to dst unless dst has its content (the mode is copied either
    way); 1 if written, else 0."""
    with open(src, "rb") as f:
        data = f.read()
    digest.update(f"{rel}\0{len(data)}\0".encode())
    digest.update(data)
    same = False
    if os.path.isfile(dst) and not os.path.islink(dst):
        with open(dst, "rb") as f:
            same = f.read() == data
    written = 0
    if not same:
        if os.path.lexists(dst):
            os.remove(dst)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        with open(dst, "wb") as f:
            f.write(data)
        written = 1
    mode = os.stat(src).st_mode & 0o777
    if os.stat(dst).st_mode & 0o777 != mode:
        os.chmod(dst, mode)
    return written
