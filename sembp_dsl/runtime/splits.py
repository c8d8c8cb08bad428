"""What a run is asked, checked before it starts: its method, fit to the pipeline, and the data-split rules: a data
set cut into train, val and test by the method's sizes and seed, or the caller's own lists of examples taken as they
are; either way a run that could not learn or gate is refused now."""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..errors import Option
from ..language.blocks.method import SIZES, Method, SettingError
from ..language.diagnostics import did_you_mean
from ..language.graph.graph import Graph
from . import datasets
from .datasets import ANSWER_COLUMNS, DataError, Dataset, Sample, fit_defaults, from_records, make_splits

Examples = Sequence[Mapping[str, Any] | Sample]


@dataclass(frozen=True)
class Data:
    """A data set to draw examples from: a name ("liar", "gsm8k", "bbh:<task>"), a .jsonl/.csv/.tsv/.parquet/.arrow
    path or a Hugging Face data set's folder, the folder built-in data sets are looked up in, and files of their own
    for the test and validation splits (drawn from them alone, as from a folder's splits)."""

    name: str
    data_dir: str | None = None
    test_data: str | None = None
    validation_data: str | None = None

    def load(self, first: int | None = None) -> Dataset:
        """The data set; `first`: only a single file's first rows are needed (datasets.load)."""
        return datasets.load(self.name, self.data_dir, self.test_data, self.validation_data, first)

    def fingerprint(self) -> str | None:
        """Of the data files' content, as a run record keeps it (None for a built-in data set)."""
        return datasets.fingerprint(self.name, self.test_data, self.validation_data)


def named(graph: Graph, examples: Examples | str | Data | None) -> Examples | Data:
    """The examples given (a name or path as a Data), else the data the file's data block names."""
    if examples is None:
        if graph.data is None:
            raise TypeError("give examples or a data set: this pipeline names no data (data { file = ... })")
        return Data(graph.data.path, test_data=graph.data.test, validation_data=graph.data.validation)
    return Data(examples) if isinstance(examples, str) else examples


def method_for(graph: Graph, method: Method, settings: Mapping[str, Any]) -> Method:
    """`method` with `settings` changed, each in its range (ValueError) and a setting (TypeError), and every param
    `only` names one the run can optimize (SettingError)."""
    method = method.changed(settings)
    for name in method.only:
        if name not in graph.prompts:
            raise SettingError(
                Option("only", "--only"),
                f": no param '{name}'{did_you_mean(name, graph.prompts)} (params: {', '.join(graph.prompts)})",
            )
        if name not in graph.trainable and name not in graph.trainable_demos:
            raise SettingError(Option("only", "--only"), f": param '{name}' is frozen or used by no node")
    return method


@dataclass(frozen=True)
class Cut:
    """A run's splits, the method with the sizes they were cut by, and the metric their data set scores with."""

    method: Method
    splits: tuple[list[Sample], list[Sample], list[Sample]]  # train, val, test
    metric: str
    note: str = ""  # how sbpc's default sizes were scaled to fit a small data set, said before the run


@dataclass(frozen=True)
class Run:
    """What an optimize run (or its plan) is asked: its cut, and the data it was cut from as its record names it."""

    cut: Cut
    source: Mapping[str, str | None]  # source_of(the data)


def source_of(data: Examples | Data) -> dict[str, str | None]:
    """The data a run read, as its record names it: a data set's name or path ("examples" for lists given in Python),
    the split files of its own, and the sha256 of the files' content (datasets.fingerprint), to tell a change."""
    if not isinstance(data, Data):
        return {"data": "examples"}
    files = {"test_data": data.test_data, "validation_data": data.validation_data}
    return {"data": data.name, **files, "data_sha256": data.fingerprint()}


def for_run(
    graph: Graph, given: Examples | str | Data | None, val: Examples, test: Examples, method: Method, settings: Mapping
) -> Run:
    """A run's splits: a data set (given, or the file's data block) cut by the method's sizes, or the caller's lists
    of examples taken as they are. `method`: the pipeline's with `settings` (those the caller gave) applied."""
    train = named(graph, given)
    if isinstance(train, Data):
        if val or test:
            raise TypeError("val and test go with train examples; a data set is cut by the method's sizes")
        asked = graph.sizes_given | set(settings)
        return Run(from_dataset(train.load(), method, settings, asked), source_of(train))
    return Run(from_examples(train, val, test, method, settings), source_of(train))


def from_dataset(dataset: Dataset, method: Method, settings: Mapping[str, Any], asked: Collection[str] = SIZES) -> Cut:
    """The data set cut by the method's sizes and seed; `settings` are those the caller gave, `asked` the sizes the
    caller or the file gave: the others, sbpc's defaults, are scaled down in proportion to fit a small file."""
    # val is drawn for the gate, or when asked for (compare tests every row of a seed on the same samples)
    val_size = method.val_size if method.gate == "val" or "val_size" in settings else 0
    sizes = {"train": method.train_size, "val": val_size, "test": method.test_size}
    fitted, note = fit_defaults(dataset, sizes, [size.removesuffix("_size") for size in asked])
    splits = make_splits(dataset, fitted["train"], fitted["val"], fitted["test"], method.seed)
    method = replace(method, train_size=fitted["train"], val_size=fitted["val"], test_size=fitted["test"])
    gate = Option(*(("val_size", "--val-size") if method.gate == "val" else ("train_size", "--train-size")))
    return _checked(
        Cut(method, (list(splits.train), list(splits.val), list(splits.test)), dataset.metric, note),
        ("the train split is empty: give ", Option("train_size", "--train-size"), " of at least 1"),
        ("the gate split is empty: give ", gate, " of at least 1, or ", Option("gate='none'", "--no-gate")),
    )


def from_examples(train: Examples, val: Examples, test: Examples, method: Method, settings: Mapping[str, Any]) -> Cut:
    """The caller's lists as the three splits, the method's sizes theirs."""
    sizes = [size for size in SIZES if size in settings]
    if sizes:
        raise TypeError(f"{sizes[0]} cuts a data set; examples given as lists are their own sizes")
    samples = from_records(train, "train"), from_records(val, "val"), from_records(test, "test")
    method = replace(method, train_size=len(samples[0]), val_size=len(samples[1]), test_size=len(samples[2]))
    gate = "train" if method.gate == "train" else "val"
    return _checked(
        Cut(method, samples, "exact"),
        ("train is empty: optimizing learns from the training examples' errors",),
        (f"the gate split ({gate}) is empty: give examples for it, or gate='none'",),
    )


def _checked(cut: Cut, empty_train: tuple, empty_gate: tuple) -> Cut:
    """The cut, unless it leaves the run nothing to learn from (`empty_train`) or to gate on (`empty_gate`)."""
    train, val, _ = cut.splits
    if cut.method.iterations and not train:
        raise SettingError(*empty_train)
    if cut.method.gate != "none" and not (train if cut.method.gate == "train" else val):
        raise SettingError(*empty_gate)
    return cut


def examples_to_score(examples: Examples, sizes: Mapping[str, Any]) -> list[Sample]:
    """Examples given in Python, scored whole: no size cuts them."""
    if sizes:
        raise TypeError(f"{next(iter(sizes))} cuts a data set; examples given as a list are scored whole")
    return from_records(examples, "example")


def require_answers(graph: Graph, samples: list[Sample]) -> None:
    """DataError for an example with no expected output, when the metric compares with one."""
    unanswered = [s.id for s in samples if not s.answer and not graph.answer_field]
    if unanswered:
        raise DataError(
            f"{unanswered[0]} has no expected output: give each example an "
            f"{', '.join(ANSWER_COLUMNS[:-1])} or {ANSWER_COLUMNS[-1]}, or score with a metric of your own"
        )
