# SPDX-License-Identifier: Apache-2.0
"""Which mutants a run tries: the sample of sites (--count/--seed, --all, --only, --sites) and
the share of it that each shard runs. Every shard of a campaign draws the same sample, so the
shards' shares are disjoint and together make the whole sample."""

import os
import random
import re

from .common import UsageError


def sample_sites(sites, count, seed):
    """`count` distinct sites drawn uniformly with `seed` (all of them when count >= len),
    in the order drawn: the same sites and order for the same seed and site list."""
    if count is None or count >= len(sites):
        order = list(range(len(sites)))
        random.Random(seed).shuffle(order)
    else:
        order = random.Random(seed).sample(range(len(sites)), count)
    return [sites[k] for k in order]


def shard_of(sample, index, count):
    """Mutants index, index + count, ... of the sample, with their 1-based numbers in it."""
    return [(k + 1, s) for k, s in enumerate(sample) if k % count == index]


def shard_from_env(args):
    """(index, count) from the flags, a SLURM job array or a Kubernetes Indexed Job."""
    env = os.environ
    index, count = args.shard_index, args.shard_count
    if index is None:
        if env.get("SLURM_ARRAY_TASK_ID"):
            index = int(env["SLURM_ARRAY_TASK_ID"]) - int(env.get("SLURM_ARRAY_TASK_MIN", "0") or 0)
            count = count or int(env.get("SLURM_ARRAY_TASK_COUNT", "1"))
        elif env.get("JOB_COMPLETION_INDEX"):
            index = int(env["JOB_COMPLETION_INDEX"])
            count = count or int(env.get("MLAROPE_SHARD_COUNT", "0") or 0) or None
            if count is None:
                raise UsageError(
                    "JOB_COMPLETION_INDEX is set: give --shard-count or MLAROPE_SHARD_COUNT"
                )
    index = 0 if index is None else index
    count = 1 if count is None else count
    if count < 1 or not 0 <= index < count:
        raise UsageError(f"shard {index} of {count}: need 0 <= index < count")
    return index, count


def select_sites(args, sites):
    """The sample of this run (all shards), from --sites, --only, --count / --all."""
    pool = sites
    if not args.device_sites:
        pool = [s for s in pool if not s.device_only]
    if args.only:
        pool = _matching(pool, args.only)
    if args.sites:  # exactly these, in this order (device-only ones too: they were asked for)
        chosen = _named_sites(args.sites, sites)
        if args.only:
            chosen = _matching(chosen, args.only)
        return chosen
    if args.count is None and not args.all and not args.only:
        raise UsageError(
            "say which mutants: --count N (with --seed), --all, --only REGEX or --sites LIST"
        )
    return sample_sites(pool, None if args.all else args.count, args.seed)


def _matching(sites, regex):
    """The sites whose 'FILE:LINE:COL OP LINE-TEXT' matches `regex` (--only)."""
    rx = re.compile(regex)
    return [s for s in sites if rx.search(f"{s.id} {s.op} {s.text.strip()}")]


def _named_sites(spec, sites):
    """The sites --sites names (FILE:LINE:COL,...), in its order, each once."""
    by_id = {s.id: s for s in sites}
    chosen = []
    for item in [x.strip() for x in spec.split(",") if x.strip()]:
        if item not in by_id:
            raise UsageError(
                f"--sites: no site {item} (see --list-sites; the column is the operator's)"
            )
        if by_id[item] not in chosen:
            chosen.append(by_id[item])
    return chosen
