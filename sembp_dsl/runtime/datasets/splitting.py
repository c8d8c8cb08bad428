"""Seeded train/val/test splits drawn from a data set's pools, the sizes fitted to what it holds."""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping
from types import MappingProxyType

from ...errors import Option
from ...language.diagnostics import did_you_mean
from .dataset import DataError, Dataset, Sample, Splits

_OWN_POOL = MappingProxyType({"val": "validation", "test": "test"})  # a split drawn from a pool of its own


def make_splits(dataset: Dataset, train: int, val: int, test: int, seed: int) -> Splits:
    """Draw disjoint, seeded splits.

    With a "test" pool, test comes from it, and with a "validation" pool val from that; the rest from
    "train", so the official test partition is never trained on. Otherwise all pools are merged
    and carved in order train, val, test. The shuffle depends only on the seed
    and pool sizes, so with one seed a larger train request extends a smaller one.
    """
    for label, size in (("train", train), ("val", val), ("test", test)):
        if size < 0:
            raise DataError(f"{label} size must be 0 or more, got {size}")
    rng = random.Random(seed)
    if any(pool in dataset.pools for pool in _OWN_POOL.values()):
        return _from_own_pools(dataset, {"train": train, "val": val, "test": test}, rng)
    merged = [s for pool in dataset.pools.values() for s in pool]
    pool = _shuffled(merged, rng)
    names = "+".join(dataset.pools) or "(none)"
    _check_size(dataset, names, {"train": train, "val": val, "test": test}, len(pool))
    return Splits(
        train=tuple(pool[:train]),
        val=tuple(pool[train : train + val]),
        test=tuple(pool[train + val : train + val + test]),
    )


def fit_defaults(dataset: Dataset, sizes: Mapping[str, int], asked: Iterable[str]) -> tuple[dict[str, int], str]:
    """`sizes` (train, val, test), those not `asked` (sbpc's defaults) scaled down in proportion where their pool
    holds fewer rows than they add up to, so a small file is split rather than refused; the sizes asked for are
    kept (make_splits refuses them when they do not fit). With what was scaled said in words ("" when nothing)."""
    asked = set(asked)
    fitted = dict(sizes)
    for pool, splits in _pools_of(dataset).items():
        mine = {split: sizes[split] for split in splits}
        available = len(dataset.pools.get(pool, ())) if pool else sum(map(len, dataset.pools.values()))
        free = {split: size for split, size in mine.items() if split not in asked and size}
        room = available - sum(size for split, size in mine.items() if split in asked)
        if sum(mine.values()) > available and free and room > 0:
            fitted.update(_fitting(free, room) or {})
    changed = [split for split in _CARVE_ORDER if fitted[split] != sizes[split]]
    if not changed:
        return fitted, ""
    rows = sum(map(len, dataset.pools.values()))
    default = " + ".join(f"{sizes[split]} {split}" for split in changed)
    now = " + ".join(f"{fitted[split]} {split}" for split in changed)
    return (
        fitted,
        f"{dataset.name} has {rows} rows, fewer than the default sizes ask ({default}): split in proportion, {now}",
    )


def _pools_of(dataset: Dataset) -> dict[str, tuple[str, ...]]:
    """The pool each split is drawn from, as make_splits draws it ("" for every pool merged)."""
    if not any(pool in dataset.pools for pool in _OWN_POOL.values()):
        return {"": _CARVE_ORDER}
    own = {split: pool for split, pool in _OWN_POOL.items() if pool in dataset.pools}
    return {"train": tuple(split for split in _CARVE_ORDER if split not in own)} | {
        pool: (split,) for split, pool in own.items()
    }


def _from_own_pools(dataset: Dataset, sizes: Mapping[str, int], rng: random.Random) -> Splits:
    """val and test each from a pool of its own when the data set has one ("validation", "test"); train, and the
    splits without one, carved in that order from "train"."""
    carved = _shuffled(dataset.pools.get("train", ()), rng)
    own = {split: _shuffled(dataset.pools[pool], rng) for split, pool in _OWN_POOL.items() if pool in dataset.pools}
    from_train = {split: size for split, size in sizes.items() if split not in own}
    _check_size(dataset, "train", from_train, len(carved))
    for split, pool in own.items():
        _check_size(dataset, _OWN_POOL[split], {split: sizes[split]}, len(pool))
    drawn, start = {split: tuple(pool[: sizes[split]]) for split, pool in own.items()}, 0
    for split, size in from_train.items():
        drawn[split], start = tuple(carved[start : start + size]), start + size
    return Splits(drawn["train"], drawn["val"], drawn["test"])


EVAL_TEST_SIZE = 100  # samples `eval` scores from a built-in data set when no size is given
_CARVE_ORDER = ("train", "val", "test")  # the order a single pool is cut in


def eval_splits(
    dataset: Dataset,
    train: int | None,
    val: int | None,
    test: int | None,
    seed: int,
    defaults: tuple[int, int, int],
    split: str = "test",
) -> Splits:
    """The splits `eval` scores: a user's data with no size given is scored whole as the test split (its
    test file, else every row, in file order); otherwise the split `optimize` would carve with these sizes and
    seed, so test never overlaps what was trained on. A size not given is taken from `defaults` only when it
    places the scored split (the splits carved before it from the same pool), else it is 0: evaluating asks
    for no rows it neither scores nor must skip."""
    if split not in _CARVE_ORDER:
        raise ValueError(f"split must be train, val or test, got {split!r}{did_you_mean(split, _CARVE_ORDER)}")
    given = dict(zip(_CARVE_ORDER, (train, val, test)))
    if dataset.user and split == "test" and all(size is None for size in given.values()):
        whole = dataset.pools.get("test") or tuple(s for pool in dataset.pools.values() for s in pool)
        return Splits((), (), whole)
    own = _OWN_POOL.get(split) in dataset.pools  # drawn from a pool of its own, after nothing
    before = () if own else _CARVE_ORDER[: _CARVE_ORDER.index(split)]
    sizes = _scored_sizes(dataset, given, defaults, split, before)
    try:
        return make_splits(dataset, sizes["train"], sizes["val"], sizes["test"], seed)
    except DataError as exc:
        skipped = [name for name in before if given[name] is None and sizes[name]]
        why = _too_few_to_evaluate(dataset, split, skipped, sizes)
        if not why:
            raise
        raise DataError(Option(str(exc), exc.cli), *why) from None


def _scored_sizes(
    dataset: Dataset, given: Mapping[str, int | None], defaults: tuple[int, int, int], split: str, before: tuple
) -> dict[str, int]:
    """The sizes `eval` cuts with to score `split` (`before`: the splits carved before it from its pool)."""
    sizes = _eval_sizes(given, defaults, placing=(*before, split))
    if dataset.user and split == "test" and given["test"] is None:  # a user's test split: the rows the others leave
        sizes["test"] = _rows_left(dataset, sizes, own=not before)
    if split != "test":  # the train or val split a small file holds as optimize cuts it (a test split is placed
        # behind the sizes optimize draws by default, and refused when they do not fit: it must not overlap them)
        sizes, _ = fit_defaults(dataset, sizes, [name for name, size in given.items() if size is not None])
    return sizes


def _rows_left(dataset: Dataset, sizes: Mapping[str, int], own: bool) -> int:
    """A user's test split when no size is given: its own pool whole, else the rows train and val leave (when they
    leave none, the default size, which the error then names with sizes that fit)."""
    if own:
        return len(dataset.pools["test"])
    left = sum(map(len, dataset.pools.values())) - sizes["train"] - sizes["val"]
    return left if left > 0 else sizes["test"]


def _eval_sizes(
    given: Mapping[str, int | None], defaults: tuple[int, int, int], placing: tuple[str, ...]
) -> dict[str, int]:
    """Each split's size: as given, else its default when it places the scored split (those carved before it, and
    itself), else 0."""
    return {
        name: size if (size := given[name]) is not None else default if name in placing else 0
        for name, default in zip(_CARVE_ORDER, defaults)
    }


def _too_few_to_evaluate(
    dataset: Dataset, split: str, skipped: list[str], sizes: Mapping[str, int]
) -> list[str | Option]:
    """The ways out when the data set holds fewer rows than `eval` asks for: the `skipped` splits it draws only to
    place the scored one may be sized 0, and a user's file may be scored whole."""
    why: list[str | Option] = []
    if skipped:  # the rows the scored split sits behind, which optimize trains or gates on
        counts = " and ".join(f"{sizes[name]} {name}" for name in skipped)
        zeros = Option(
            ", ".join(f"{name}_size=0" for name in skipped), " ".join(f"--{name}-size 0" for name in skipped)
        )
        why = [
            f"; the {split} split comes after the {counts} samples `optimize` draws by default, so it never "
            "overlaps them: pass the sizes you optimize with, or ",
            zeros,
            " if you do not optimize on this data",
        ]
    if dataset.user:  # the way out only evaluating has
        why += ["; ", Option("evaluate() with no size", "`eval` with no size"), " scores the whole file"]
    return why


def _shuffled(samples: tuple[Sample, ...] | list[Sample], rng: random.Random) -> list[Sample]:
    out = list(samples)
    rng.shuffle(out)
    return out


def _check_size(dataset: Dataset, pool: str, sizes: Mapping[str, int], available: int) -> None:
    """A request larger than the pool: say which sizes to give instead (same proportions, each split asked for
    keeping at least one sample; no example when the pool cannot hold one of each)."""
    wanted = sum(sizes.values())
    if wanted <= available:
        return
    asked = f"{dataset.name}: asked for {wanted} samples ({' + '.join(sizes)}) but the {pool!r} pool "
    if not available:
        raise DataError(asked + "is empty")
    fitting = _fitting(sizes, available)
    example: list[str | Option] = []
    if fitting:
        example = [
            ", for example ",
            Option(
                ", ".join(f"{split}_size={size}" for split, size in fitting.items()),
                " ".join(f"--{split}-size {size}" for split, size in fitting.items()),
            ),
        ]
    raise DataError(asked + f"has only {available}; pass sizes that add up to at most {available}", *example)


def _fitting(sizes: Mapping[str, int], available: int) -> dict[str, int] | None:
    """`sizes` scaled down to add up to at most `available`, every size asked for kept at 1 or more; None when
    the pool cannot hold one sample of each."""
    if sum(1 for size in sizes.values() if size) > available:
        return None
    wanted = sum(sizes.values())
    fitting = {split: max(1, size * available // wanted) if size else 0 for split, size in sizes.items()}
    while sum(fitting.values()) > available:  # the 1s given to tiny splits come from the largest
        largest = max(fitting, key=fitting.__getitem__)
        fitting[largest] -= 1
    return fitting
