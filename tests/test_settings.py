"""The optimize settings have one owner (language/blocks/method.py): the checker, the Python API, `sbpc optimize`,
`sbpc compare` and the run record take the same names, defaults, words and ranges from it."""

from __future__ import annotations

import json
import re

import pytest
from test_optimize import TOY, data, write

import sembp_dsl as sbp
from sembp_dsl import cli
from sembp_dsl.compare import CompareError, read_setting
from sembp_dsl.language.blocks.method import SETTINGS, Method, SettingError, SettingTypeError
from sembp_dsl.language.graph.compile import compile_file

NUMBERS = [s for s in SETTINGS.values() if not s.choices]
WORDS = [s for s in SETTINGS.values() if s.choices]


def file_with(tmp_path, setting: str, value) -> str:
    """`sbpc check` of a pipeline whose optimize block sets one setting: its error lines."""
    path = tmp_path / "p.sbp"
    path.write_text(TOY + f"optimize {{ {setting} = {value} }}\n")
    try:
        compile_file(str(path))
    except sbp.PipelineError as exc:
        return exc.render()
    return ""


def beyond(setting) -> object:
    """The first value past the top of a setting's range, of the setting's own kind."""
    return setting.kind(setting.high + 1)


@pytest.mark.parametrize("setting", NUMBERS, ids=lambda s: s.name)
def test_every_front_end_refuses_a_number_out_of_the_one_range(tmp_path, setting):
    value = beyond(setting)
    assert f"'{setting.name}' must be" in file_with(tmp_path, setting.name, value)
    with pytest.raises(SettingError, match=re.escape(f"{setting.name}={value!r} is out of range")) as refused:
        Method(**{setting.name: value})
    assert refused.value.cli.startswith(f"{setting.option}={value} is out of range")
    if setting.name in ("iterations", "errors_per_gradient", "train_size", "val_size", "gate_alpha"):
        with pytest.raises(CompareError, match=re.escape(f"is out of range ({setting.span()})")):
            read_setting(setting.name, str(value))
    low = setting.kind(setting.low)
    assert getattr(Method(**{setting.name: setting.kind(setting.high)}), setting.name) == setting.high
    if setting.low_excluded:
        with pytest.raises(SettingError):
            Method(**{setting.name: low})
    else:
        assert getattr(Method(**{setting.name: low}), setting.name) == low


@pytest.mark.parametrize("setting", WORDS, ids=lambda s: s.name)
def test_every_front_end_takes_the_same_words(tmp_path, setting):
    assert "must be one of " + ", ".join(setting.choices) in file_with(tmp_path, setting.name, "bogus")
    with pytest.raises(SettingError, match=f"is not one of {', '.join(setting.choices)}"):
        Method(**{setting.name: "bogus"})
    with pytest.raises(CompareError, match=f"is not one of {', '.join(setting.choices)}"):
        read_setting(setting.name, "bogus")
    for word in setting.words:  # its own words and their other spellings, the same everywhere
        assert file_with(tmp_path, setting.name, f'"{word}"') == ""
        assert getattr(compile_file(str(tmp_path / "p.sbp")).optimize, setting.name) == setting.word(word)
        assert getattr(Method(**{setting.name: word}), setting.name) == setting.word(word)
        assert read_setting(setting.name, word) == setting.word(word)


def test_a_file_without_an_optimize_block_takes_the_defaults(tmp_path):
    path = tmp_path / "p.sbp"
    path.write_text(TOY)
    assert compile_file(str(path)).optimize == Method()
    assert {name: getattr(Method(), name) for name in SETTINGS} == {name: s.default for name, s in SETTINGS.items()}


def test_a_method_setting_of_the_wrong_kind_is_a_type_error():
    with pytest.raises(SettingTypeError, match=r"^iterations must be a whole number, got 2\.5$"):
        Method(iterations=2.5)
    with pytest.raises(SettingTypeError, match="gate_alpha must be a number, got True"):
        Method(gate_alpha=True)
    with pytest.raises(SettingError, match=r"gradient=3 is not one of"):
        Method(gradient=3)
    with pytest.raises(TypeError, match="did you mean 'gate_alpha'"):
        Method().changed({"gate_alfa": 0.5})
    assert Method(only="decide").only == ("decide",) and Method(only=["a", "b"]).only == ("a", "b")


def test_the_flags_of_optimize_say_what_the_table_says(capsys):
    with pytest.raises(SystemExit):
        cli.main(["optimize", "--help"])
    help_text = " ".join(capsys.readouterr().out.split())
    for setting in SETTINGS.values():
        assert setting.option in help_text and " ".join(setting.help.split()) in help_text, setting.name
    assert "--iterations N" in help_text  # the name a user would guess, beside --iters


@pytest.fixture
def toy(tmp_path, fake_llm, script):
    with sbp.load(write(tmp_path, "toy.sbp", TOY, fake_llm.url)) as pipeline:
        yield pipeline


def test_optimize_draws_a_data_set_as_sbpc_optimize_does(toy, tmp_path, fake_llm, capsys):
    rows = data(tmp_path, n=12)
    found = toy.optimize(rows, iterations=0, train_size=3, val_size=4, test_size=2, runs_dir=tmp_path / "api")
    api = json.loads((found.record / "run.json").read_text())["settings"]
    code = cli.main(
        ["optimize", toy.path, "--data", rows, "--iters", "0", "--train-size", "3", "--val-size", "4"]
        + ["--test-size", "2", "--runs-dir", str(tmp_path / "cli"), "--dry-run"]
    )
    assert code == 0
    [record] = (tmp_path / "cli").glob("*/run.json")
    assert json.loads(record.read_text())["settings"] == api
    assert (api["data"], api["train_size"], api["val_size"], api["test_size"]) == (rows, 3, 4, 2)
    found = toy.optimize(
        sbp.Data(rows), method=sbp.Method(iterations=0, gate="train", train_size=3), runs_dir=tmp_path / "api"
    )
    assert json.loads((found.record / "run.json").read_text())["settings"]["val_size"] == 0  # no gate on it


def test_sizes_cut_a_data_set_not_examples_given_as_lists(toy, tmp_path):
    examples = [{"q": "claim", "answer": "Yes"}] * 2
    with pytest.raises(TypeError, match="train_size cuts a data set"):
        toy.optimize(examples, examples, train_size=3, runs_dir=tmp_path / "runs")
    with pytest.raises(TypeError, match="val and test go with train examples"):
        toy.optimize(data(tmp_path), examples, runs_dir=tmp_path / "runs")
    with pytest.raises(SettingError, match=r"the train split is empty: give train_size of at least 1") as empty:
        toy.optimize(data(tmp_path), train_size=0, val_size=2, runs_dir=tmp_path / "runs")
    assert empty.value.cli == "the train split is empty: give --train-size of at least 1"
    assert not (tmp_path / "runs").exists()


def test_the_gate_warning_names_the_split_the_gate_scores(toy, capsys):
    examples = [{"q": f"claim {i}", "answer": "Yes"} for i in range(3)]
    for gate, size in (("val", "val_size"), ("train", "train_size")):
        warning = toy.plan(examples, examples, gate=gate).warning
        assert "the gate split has 3 samples" in warning and f"Use a larger {size} " in warning
        assert f"Use a larger --{size.replace('_', '-')} " in warning.cli and "--gate-alpha" in warning.cli
    assert toy.plan(examples, examples, gate_alpha=1).warning is None


def test_models_are_named_without_building_a_model_layer(toy, monkeypatch):
    from sembp_dsl import api

    def no_llm(*args, **kwargs):
        raise AssertionError("an LLM was built")

    monkeypatch.setattr(api, "LLM", no_llm)
    assert toy.models == {"forward": "openai/fake", "backward": "openai/fake", "optimizer": "openai/fake"}
    assert toy.method(iterations=5).iterations == 5 and toy.method().gate == "val"


def test_the_warning_of_a_run_names_the_size_of_the_split_its_gate_scores(tmp_path, fake_llm, script, capsys):
    """Every gate sample already right leaves no win: the run says which flag would give it room."""
    script.verdict = lambda prompt: "Yes"
    path = write(tmp_path, "toy.sbp", TOY, fake_llm.url)
    flags = ["--data", data(tmp_path, n=12), "--train-size", "6", "--val-size", "6", "--iters", "1", "--dry-run"]
    for gate, flag in (("val", "--val-size"), ("train", "--train-size")):
        code = cli.main(["optimize", str(path), *flags, "--gate", gate, "--runs-dir", str(tmp_path / "runs")])
        out = capsys.readouterr().out
        assert code == 0 and f"no step can be accepted, and no further step is proposed. Use a larger {flag}, " in out


def test_once_no_step_can_pass_the_gate_no_further_step_is_proposed(toy, tmp_path, script):
    """Every validation sample right already leaves no win for a step to need: the first iteration proposes (the
    initial score is still coming in), the later ones spend no backward or optimizer call, and say why."""
    script.verdict = lambda prompt: "Yes" if "valid" in prompt else "No"
    train = [{"q": f"train claim {i}", "answer": "Yes"} for i in range(4)]
    val = [{"q": f"valid claim {i}", "answer": "Yes"} for i in range(5)]
    lines: list[str] = []
    found = toy.optimize(train, val, iterations=3, gate_alpha=0.1, runs_dir=tmp_path / "runs", log=lines.append)
    first, *later = json.loads((found.record / "run.json").read_text())["iterations"]
    assert first["candidates"] and not first["accepted"] and first["gate"]["samples"] == 0
    for it in later:
        assert it["note"].startswith("no step can pass the gate: the current prompts answer 5 of the 5 gate")
        assert it["calls"] == 0 and not it["candidates"]
    asked = [script.kind(prompt) for prompt in script.prompts]
    assert asked.count("optimizer") == len(first["candidates"]) == 3  # one per param, in the first iteration only
    assert asked.count("backward") == 2  # the toy's two nodes that hints reach, once
