"""Which queued units make the next batch: pure functions over unit sizes, with atroposlib's semantics.

A *unit* is what the queue holds: one scored group, or several smaller groups of one environment that were
buffered until their sizes summed to that environment's ``group_size``. Units are never split, so a batch is
always made of whole groups.

atroposlib packs units of equal size until they fill the largest unit size (four units of 2 when the largest
is 8) and takes packs in arrival order; a unit whose size does not divide the largest never packs. When packing
cannot make a batch although enough sequences wait, we also try any arrival-ordered subset that sums exactly
to the batch size, so an awkward mix of sizes delays a batch instead of stalling the run.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

# The exact-subset fallback looks at most this many units, oldest first: its cost grows with
# units x batch_size, and a queue that long has packable units anyway in any sane configuration.
FALLBACK_WINDOW = 256


def subset_summing_to(sizes: Sequence[int], target: int) -> list[int]:
    """Indices (ascending) of a subset of ``sizes`` that sums exactly to ``target``, or ``[]``.

    Prefers the greedy arrival-ordered choice; otherwise any exact subset, preferring earlier units.
    """
    if target <= 0 or not sizes:
        return []
    greedy = _greedy_prefix(sizes, target)
    if greedy:
        return greedy
    return _exact_subset(sizes, target)


def _greedy_prefix(sizes: Sequence[int], target: int) -> list[int]:
    chosen: list[int] = []
    total = 0
    for index, size in enumerate(sizes):
        if total + size > target:
            continue
        chosen.append(index)
        total += size
        if total == target:
            return chosen
    return []


def _exact_subset(sizes: Sequence[int], target: int) -> list[int]:
    # reachable[i][s]: some subset of sizes[:i] sums to s.
    reachable = [[False] * (target + 1) for _ in range(len(sizes) + 1)]
    reachable[0][0] = True
    for i, size in enumerate(sizes, start=1):
        previous, row = reachable[i - 1], reachable[i]
        for total in range(target + 1):
            row[total] = previous[total] or (total >= size and previous[total - size])
    if not reachable[len(sizes)][target]:
        return []
    chosen: list[int] = []
    total = target
    for i in range(len(sizes), 0, -1):
        size = sizes[i - 1]
        # Skip unit i-1 whenever the rest can still be made without it: that keeps earlier units.
        if reachable[i - 1][total]:
            continue
        chosen.append(i - 1)
        total -= size
    return sorted(chosen)


def packed_order(sizes: Sequence[int], keys: Sequence[Hashable] | None = None) -> list[int]:
    """Indices of the units that form complete packs, in the order the packs completed.

    Units pack with units of the same size (and the same key, when ``keys`` is given) until they add up to
    the largest unit size; leftovers are not listed.
    """
    if not sizes:
        return []
    largest = max(sizes)
    waiting: dict[tuple[Hashable, int], list[int]] = {}
    order: list[int] = []
    for index, size in enumerate(sizes):
        slot = waiting.setdefault((keys[index] if keys else None, size), [])
        slot.append(index)
        if len(slot) * size == largest:
            order.extend(slot)
            slot.clear()
    return order


def _take_in_order(sizes: Sequence[int], candidates: Sequence[int], batch_size: int) -> list[int] | None:
    chosen: list[int] = []
    total = 0
    for index in candidates:
        total += sizes[index]
        chosen.append(index)
        if total == batch_size:
            return chosen
        if total > batch_size:
            return None
    return None


def select_exact(sizes: Sequence[int], batch_size: int) -> list[int] | None:
    """Indices (ascending) of units summing exactly to ``batch_size``, or ``None`` when none do yet."""
    if sum(sizes) < batch_size:
        return None
    chosen = _take_in_order(sizes, packed_order(sizes), batch_size)
    if chosen is None:
        window = list(sizes[:FALLBACK_WINDOW])
        chosen = subset_summing_to(window, batch_size) or None
    return sorted(chosen) if chosen else None


def select_with_minimums(
    sizes: Sequence[int],
    env_ids: Sequence[int | None],
    batch_size: int,
    minimums: dict[int, float],
) -> list[int] | None:
    """Like :func:`select_exact`, but environment ``e`` fills at least ``minimums[e]`` of the batch.

    As in atroposlib: when an environment with a minimum has no complete pack queued, no batch is formed
    (the trainer waits for it); minimums that add up to more than the batch are scaled down, keeping at
    least one unit of each such environment.
    """
    if not sizes:
        return None
    packable = _packable_by_env(sizes, env_ids)
    wanted = {env: int(batch_size * share) for env, share in minimums.items() if int(batch_size * share) > 0}
    if any(not packable.get(env) for env in wanted):
        return None
    wanted = _scale_down(wanted, packable, sizes, batch_size)
    chosen: list[int] = []
    total = 0
    for env, need in wanted.items():
        taken = 0
        for index in packable[env]:
            if taken >= need:
                break
            if total + sizes[index] <= batch_size:
                chosen.append(index)
                taken += sizes[index]
                total += sizes[index]
    taken_already = set(chosen)
    rest = sorted(i for units in packable.values() for i in units if i not in taken_already)
    for index in rest:
        if total == batch_size:
            break
        if total + sizes[index] <= batch_size:
            chosen.append(index)
            total += sizes[index]
    return sorted(chosen) if total == batch_size else None


def _packable_by_env(sizes: Sequence[int], env_ids: Sequence[int | None]) -> dict[int | None, list[int]]:
    packable: dict[int | None, list[int]] = {}
    for index in packed_order(sizes, env_ids):
        packable.setdefault(env_ids[index], []).append(index)
    return packable


def _scale_down(
    wanted: dict[int, int], packable: dict[int | None, list[int]], sizes: Sequence[int], batch_size: int
) -> dict[int, int]:
    total = sum(wanted.values())
    if total <= batch_size:
        return wanted
    scale = batch_size / total
    return {env: max(min(sizes[i] for i in packable[env]), int(need * scale)) for env, need in wanted.items()}
