"""The optimize settings: each one's name, default, allowed values or range, and meaning, in one place.

A pipeline's `optimize { ... }` block, the Python API's `Method`, the flags of `sbpc optimize` and
`sbpc compare`, and the run record all take these settings and read them from here. `check` is the one
test of a value; the checker reports the same rules as located diagnostics.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from types import MappingProxyType
from typing import Any

from ...errors import Option, OptionError
from ..diagnostics import did_you_mean


@dataclass(frozen=True)
class Setting:
    """One optimize setting: a word from `choices`, or a number of `kind` from `low` to `high`."""

    name: str
    default: Any
    help: str
    choices: tuple[str, ...] = ()  # the words a word setting takes; empty for a number
    spellings: Mapping[str, str] = field(default_factory=dict)  # other words taken for one of them
    kind: type = int  # a number setting: int, or float for any number
    low: float = 0
    high: float = 0
    low_excluded: bool = False
    flag: str = ""  # its flag in `sbpc optimize`, where that is not --NAME

    @property
    def words(self) -> tuple[str, ...]:
        """Every word the setting takes, its own spellings first."""
        return (*self.choices, *self.spellings)

    @property
    def option(self) -> str:
        return self.flag or "--" + self.name.replace("_", "-")

    def span(self) -> str:
        """Its range in words: `0 to 1000`, `above 0 to 1`."""
        return f"{'above ' if self.low_excluded else ''}{self.low} to {self.high}"

    def within(self, value: float) -> bool:
        return within(value, self.low, self.high, self.low_excluded)

    def word(self, value: str) -> str:
        """One of `choices` for a word it takes (`no-sibling` is `no_sibling`)."""
        return self.spellings.get(value, value)


def within(value: float, low: float, high: float, low_excluded: bool) -> bool:
    """A number in its range (never NaN)."""
    return (low < value if low_excluded else low <= value) and value <= high


SETTINGS: Mapping[str, Setting] = MappingProxyType(
    {
        s.name: s
        for s in (
            Setting("iterations", 3, "optimization steps", high=1_000, flag="--iters"),
            Setting("errors_per_gradient", 2, "failed training samples per gradient", low=1, high=1_000),
            Setting(
                "gradient",
                "sibling",
                "sibling: one backward call per node, all its hints side by side; no_sibling: one call per edge; "
                "none: no backward calls",
                choices=("sibling", "no_sibling", "none"),
                spellings={"no-sibling": "no_sibling"},
            ),
            Setting(
                "update",
                "full",
                "full: every prompt takes its candidate; sample: each does with probability 1/2",
                choices=("full", "sample"),
            ),
            Setting(
                "gate",
                "val",
                "the split that must improve for a step to be kept; train reproduces the paper's code, "
                "none keeps every step",
                choices=("val", "train", "none"),
                spellings={"validation": "val"},
            ),
            Setting(
                "gate_alpha",
                0.1,
                "a step passes the gate when its wins beat its losses and a one-sided sign test gives p <= this "
                "(1 is the paper's rule: any higher score)",
                kind=float,
                high=1,
                low_excluded=True,
            ),
            Setting(
                "objective",
                "accuracy",
                "accuracy: a step must score higher; cost: a step that makes the pipeline cheaper (a node moved to "
                "a cheaper one of `models`) need only not score lower by more than the margin",
                choices=("accuracy", "cost"),
            ),
            Setting(
                "margin",
                0.05,
                "with objective cost, the most accuracy a cheaper step may lose (a non-inferiority test at gate_alpha)",
                kind=float,
                high=1,
                low_excluded=True,
            ),
            Setting("train_size", 20, "training samples", high=10_000_000),
            Setting("val_size", 20, "validation samples, which the gate scores", high=10_000_000),
            Setting("test_size", 0, "held-out test samples, scored before and after (0: none)", high=10_000_000),
            Setting("seed", 0, "seed of the splits and the method", low=-(2**63), high=2**63 - 1),
        )
    }
)
SIZES = ("train_size", "val_size", "test_size")
#: The strategies a step may use, each by its name and what a step of it changes, in the order their candidates are
#: listed: the `strategies` setting names some of them. A strategy is a class in learning/strategies.py (a
#: `Strategy` of this name) and its one line here, which the checker, the editor and --help read without importing it.
STRATEGIES: dict[str, str] = {
    "gradients": "prompts rewritten from the errors' semantic gradients",
    "demos": "demonstrations drawn from the answers the pipeline got right",
    "models": "a node moved to another of the models named",
}


class SettingError(OptionError, ValueError):
    """A method setting out of its range or not one of its words, named as the caller gave it."""


class SettingTypeError(OptionError, TypeError):
    """A method setting of the wrong type (a number where a word belongs, 1.5 iterations)."""


def check(name: str, value: Any) -> Any:
    """`value` as the setting `name` takes it (a word in its own spelling), or SettingError / SettingTypeError
    naming it as `name=value` (Python) and `--flag=value` (the command line)."""
    setting = SETTINGS[name]
    said = Option(f"{name}={value!r}", f"{setting.option}={value}")
    if setting.choices:
        if not isinstance(value, str) or value not in setting.words:
            raise SettingError(said, f" is not one of {', '.join(setting.choices)}")
        return setting.word(value)
    if isinstance(value, bool) or not isinstance(value, (int, float) if setting.kind is float else int):
        kind = "a number" if setting.kind is float else "a whole number"
        raise SettingTypeError(Option(name, setting.option), f" must be {kind}, got {value!r}")
    if not setting.within(value):  # NaN too
        lead = "" if setting.low_excluded else "from "
        raise SettingError(said, f" is out of range: {lead}{setting.span()}")
    return value


@dataclass(frozen=True)
class Method:
    """How `optimize` runs: the settings of a pipeline's `optimize` block, and `only`; sbpc's defaults
    where not given. The sizes and the seed cut a data set into train, val and test; examples given as
    lists are their own sizes. Every value is checked when a Method is made."""

    iterations: int = SETTINGS["iterations"].default
    errors_per_gradient: int = SETTINGS["errors_per_gradient"].default
    gradient: str = SETTINGS["gradient"].default  # sibling | no_sibling | none
    update: str = SETTINGS["update"].default  # full | sample
    gate: str = SETTINGS["gate"].default  # val | train | none
    gate_alpha: float = SETTINGS["gate_alpha"].default
    only: tuple[str, ...] = ()  # the params to optimize (empty: every trainable one)
    objective: str = SETTINGS["objective"].default  # accuracy | cost
    margin: float = SETTINGS["margin"].default
    models: tuple[str, ...] = ()  # the named models a node may be moved to (empty: models stay)
    strategies: tuple[str, ...] = field(default_factory=lambda: tuple(STRATEGIES))  # of STRATEGIES (default: all)
    train_size: int = SETTINGS["train_size"].default
    val_size: int = SETTINGS["val_size"].default
    test_size: int = SETTINGS["test_size"].default
    seed: int = SETTINGS["seed"].default

    def __post_init__(self) -> None:
        for name in SETTINGS:
            object.__setattr__(self, name, check(name, getattr(self, name)))
        only = (self.only,) if isinstance(self.only, str) else self.only
        if not isinstance(only, (list, tuple)) or not all(isinstance(p, str) for p in only):
            raise SettingTypeError(Option("only", "--only"), f" must be a param's name or a list of them, got {only!r}")
        object.__setattr__(self, "only", tuple(only))
        models = (self.models,) if isinstance(self.models, str) else self.models
        if not isinstance(models, (list, tuple)) or not all(isinstance(m, str) for m in models):
            raise SettingTypeError(Option("models", "--models"), f" must be a model's name or a list, got {models!r}")
        object.__setattr__(self, "models", tuple(models))
        object.__setattr__(self, "strategies", checked_strategies(self.strategies))

    def changed(self, settings: Mapping[str, Any]) -> Method:
        """This method with some settings changed; an unknown name is a TypeError with the closest one."""
        names = [f.name for f in fields(self)]
        for name in settings:
            if name not in names:
                raise TypeError(f"unknown method setting {name!r}{did_you_mean(name, names)}")
        return replace(self, **settings)


def checked_strategies(value: Any) -> tuple[str, ...]:
    """A `strategies` setting as a tuple of STRATEGIES' names, or SettingError naming the closest one."""
    named = (value,) if isinstance(value, str) else value
    if not isinstance(named, (list, tuple)) or not all(isinstance(s, str) for s in named):
        raise SettingTypeError(Option("strategies", "--strategies"), f" must be a list of names, got {value!r}")
    for name in named:
        if name not in STRATEGIES:
            said = Option(f"strategies={list(named)!r}", f"--strategies={','.join(named)}")
            listed = ", ".join(STRATEGIES)
            raise SettingError(said, f": {name!r} is not one of {listed}{did_you_mean(name, STRATEGIES)}")
    if not named:
        raise SettingError(Option("strategies=[]", "--strategies="), " names no strategy: a step could change nothing")
    return tuple(dict.fromkeys(named))


DEFAULT = Method()
