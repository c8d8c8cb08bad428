"""What a new user meets first: the shipped pipelines' own commands, small data files, and the data `check` reads."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys

import pytest
from conftest import ROOT, sbpc

from sembp_dsl.cli.commands import main

PIPELINES = sorted((ROOT / "pipelines").glob("*.sbp"))


def header_commands() -> list[tuple[str, list[str]]]:
    """The `sbpc ...` commands each shipped pipeline's header comment tells the reader to run."""
    found = []
    for path in PIPELINES:
        for line in path.read_text().splitlines():
            if not line.startswith("#"):
                break
            command = line.lstrip("#").strip()
            if command.startswith("sbpc "):
                found.append((path.name, shlex.split(command)[1:]))
    return found


def test_the_headers_hold_commands():
    assert {name for name, _ in header_commands()} >= {"agent.sbp", "rag.sbp", "support.sbp"}


@pytest.mark.parametrize("argv", [argv for _, argv in header_commands()], ids=" ".join)
def test_every_header_command_runs_as_written(argv, fake_llm, tmp_path):
    """Each as written, its models pointed at the fake server and an optimize planned (it calls no model): a run
    that could not start with the shipped data fails here."""
    model = ["--model", "openai/fake", "--api-base", fake_llm.url]
    kept = [] if argv[0] == "run" else ["--runs-dir", str(tmp_path / "runs")]
    planned = ["--plan"] if argv[0] == "optimize" else []
    done = sbpc(*argv, *model, *kept, *planned, cwd=ROOT)
    assert done.returncode == 0, done.stderr


def plan_of(capsys, *argv: str) -> tuple[int, str]:
    code = main(["optimize", "pipelines/triage.sbp", "--data", "pipelines/triage.jsonl", "--plan", *argv])
    out, err = capsys.readouterr()
    return code, out + err


def test_a_file_smaller_than_the_default_sizes_is_split_in_proportion_and_said_so(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    code, said = plan_of(capsys)
    assert code == 0, said
    assert "triage.jsonl has 22 rows, fewer than the default sizes ask (20 train + 20 val)" in said
    assert "split in proportion, 11 train + 11 val" in said
    code, said = plan_of(capsys, "--json")
    assert json.loads(said)["data"].endswith("11 train + 11 val")


def test_a_size_asked_for_is_kept_and_only_the_defaults_are_scaled(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    code, said = plan_of(capsys, "--train-size", "6")
    assert code == 0, said
    assert re.search(r"\(20 val\): split in proportion, 16 val$", said, re.M)


def test_sizes_asked_for_that_do_not_fit_are_still_an_error(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    code, said = plan_of(capsys, "--train-size", "15", "--val-size", "15")
    assert code != 0 and "asked for 30 samples" in said and "has only 22" in said


def test_sizes_the_file_asks_for_are_not_scaled(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rows = (ROOT / "pipelines" / "triage.jsonl").read_text()
    (tmp_path / "triage.jsonl").write_text(rows)
    source = (ROOT / "pipelines" / "triage.sbp").read_text()
    (tmp_path / "triage.sbp").write_text(source + '\ndata { file = "triage.jsonl"  train = 20 }\n')
    code = main(["optimize", "triage.sbp", "--plan"])
    said = "".join(capsys.readouterr())
    assert code == 0, said
    assert "(20 val): split in proportion, 2 val" in said
    (tmp_path / "triage.sbp").write_text(source + '\ndata { file = "triage.jsonl"  train = 20  validation = 20 }\n')
    assert main(["optimize", "triage.sbp", "--plan"]) != 0
    assert "has only 22" in capsys.readouterr().err


def test_eval_of_the_val_split_scores_the_rows_a_small_file_gates_on():
    from sembp_dsl.language.blocks.method import Method
    from sembp_dsl.runtime.datasets import eval_splits, load
    from sembp_dsl.runtime.splits import from_dataset

    data = load(str(ROOT / "pipelines" / "triage.jsonl"))
    gated = from_dataset(data, Method(), {}, asked=()).splits[1]
    scored = eval_splits(data, None, None, None, 0, (20, 20, 100), split="val").val
    assert len(scored) == 11 and scored == tuple(gated)


def checked(tmp_path, capsys, rows: str, block: str = "") -> tuple[int, str]:
    (tmp_path / "d.jsonl").write_text(rows)
    source = 'pipeline p "p"\ninput q: text\nparam t = "Answer."\nnode n: text { prompt = t }\nq -> n\noutput n\n'
    (tmp_path / "p.sbp").write_text(source + f'data {{ file = "d.jsonl" {block} }}\n')
    code = main(["check", str(tmp_path / "p.sbp")])
    return code, "".join(capsys.readouterr())


def test_check_names_a_row_without_a_field_an_input_reads(tmp_path, capsys):
    rows = '{"q": "a", "answer": "x"}\n{"answer": "y"}\n{"q": "c", "answer": "z"}\n'
    code, said = checked(tmp_path, capsys, rows)
    assert code == 1 and "error[E135]: input 'q' reads the field 'q', which d.jsonl:2 does not have" in said


def test_check_refuses_sizes_that_add_up_to_more_rows_than_the_file_has(tmp_path, capsys):
    rows = "".join(f'{{"q": "{i}", "answer": "x"}}\n' for i in range(4))
    code, said = checked(tmp_path, capsys, rows, "train = 3  validation = 3")
    assert code == 1 and "error[E160]: the sizes add up to 6 rows (3 train + 3 validation), but d.jsonl has 4" in said
    assert checked(tmp_path, capsys, rows, "train = 2  validation = 2")[0] == 0
    assert checked(tmp_path, capsys, rows)[0] == 0  # sbpc's defaults are scaled to fit, never refused


def test_check_of_a_large_file_reads_a_bounded_head_and_counts_its_rows(tmp_path, capsys, monkeypatch):
    from sembp_dsl.runtime import datasets

    monkeypatch.setattr(datasets, "CHECK_BYTES", 200)
    rows = "".join(f'{{"q": "{i}", "answer": "x"}}\n' for i in range(40))  # ~1 KB: read in part
    (tmp_path / "d.jsonl").write_text(rows)
    read = datasets.fields_of(str(tmp_path / "d.jsonl"))
    assert read.columns == ("q", "answer") and read.rows == 41  # a bound: every line, and one past the last
    code, said = checked(tmp_path, capsys, rows, "train = 30  validation = 12")
    assert code == 1 and "but d.jsonl has 41" in said
    assert checked(tmp_path, capsys, rows, "train = 30  validation = 10")[0] == 0


@pytest.fixture
def secret_link(tmp_path):
    """A pipeline whose data block names `data.csv`, a link to a file of secrets outside its folder."""
    (tmp_path / "secrets.env").write_text("API_KEY=sk-live-abc123,OTHER\nx,y\nx,y\nx,y\n")
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "data.csv").symlink_to(tmp_path / "secrets.env")
    source = 'pipeline p "p"\ninput q: text\nparam t = "Answer."\nnode n: text { prompt = t }\nq -> n\noutput n\n'
    (folder / "p.sbp").write_text(source + 'data { file = "data.csv" }\n')
    return folder / "p.sbp"


@pytest.mark.parametrize(
    "argv",
    [["check"], ["eval", "--model", "openai/x"], ["optimize", "--plan"], ["optimize", "--plan", "--json"]],
    ids=" ".join,
)
def test_the_fields_of_a_data_file_outside_the_folder_are_shown_by_no_command(secret_link, argv, capsys):
    code = main(
        [argv[0], str(secret_link), *argv[1:], *(["--runs-dir", str(secret_link.parent)] * (argv[0] == "eval"))]
    )
    said = "".join(capsys.readouterr())
    assert code != 0 and "sk-live" not in said and "OTHER" not in said, said
    assert "not shown: the file is outside the pipeline's folder" in said


LONG = "a" * 300


@pytest.mark.parametrize(
    "argv",
    [
        ["check", "long.sbp"],
        ["eval", "long.sbp", "--model", "openai/x"],
        ["optimize", "long.sbp", "--plan"],
        ["init", "--data", f"{LONG}.csv", "a task"],
        ["eval", "long.sbp", "--data", f"{LONG}.jsonl", "--model", "openai/x"],
    ],
    ids=lambda argv: argv[0] + " " + argv[-2][:8],
)
def test_a_data_file_name_too_long_for_the_file_system_is_a_clear_error(tmp_path, monkeypatch, capsys, argv):
    monkeypatch.chdir(tmp_path)
    source = 'pipeline p "p"\ninput q: text\nparam t = "Answer."\nnode n: text { prompt = t }\nq -> n\noutput n\n'
    (tmp_path / "long.sbp").write_text(source + f'data {{ file = "{LONG}.csv" }}\n')
    try:
        code = main(argv)
    except SystemExit as exc:
        code = exc.code
    said = "".join(capsys.readouterr())
    assert code != 0 and "Traceback" not in said and "a name longer than the file system allows" in said, said


def test_eval_of_a_data_block_with_sizes_scores_the_test_split_they_leave(tmp_path, fake_llm, capsys):
    from conftest import with_fake_model

    from sembp_dsl.runtime.datasets import load, make_splits

    rows = "".join(f'{{"q": "q{i}", "answer": "right"}}\n' for i in range(8))
    (tmp_path / "d.jsonl").write_text(rows)
    source = 'pipeline p "p"\ninput q: text\nparam t = "Answer."\nnode n: text { prompt = t }\nq -> n\noutput n\n'
    block = 'data { file = "d.jsonl"  train = 3  validation = 3 }'
    (tmp_path / "p.sbp").write_text(with_fake_model(source + block, fake_llm.url))
    code = main(["eval", str(tmp_path / "p.sbp"), "--runs-dir", str(tmp_path / "runs"), "--json", "--errors", "9"])
    out = json.loads(capsys.readouterr().out)
    held_out = make_splits(load(str(tmp_path / "d.jsonl")), 3, 3, 2, seed=0).test
    assert code == 0 and out["scored"] == 2 and [e["id"] for e in out["errors"]] == [s.id for s in held_out]
    main(["eval", str(tmp_path / "p.sbp"), "--runs-dir", str(tmp_path / "runs")])
    assert "on d.jsonl/test (2 of 8 rows): accuracy" in capsys.readouterr().out


def test_eval_limit_on_a_file_scored_whole_reads_its_first_rows_only(tmp_path, fake_llm, capsys):
    from conftest import with_fake_model

    rows = [f'{{"q": "q{i}", "answer": "analysis"}}\n' for i in range(6)] + ["{not json\n"]  # the rest is unread
    (tmp_path / "d.jsonl").write_text("".join(rows))
    source = 'pipeline p "p"\ninput q: text\nparam t = "Answer."\nnode n: text { prompt = t }\nq -> n\noutput n\n'
    (tmp_path / "p.sbp").write_text(with_fake_model(source, fake_llm.url))
    argv = ["eval", str(tmp_path / "p.sbp"), "--data", str(tmp_path / "d.jsonl"), "--runs-dir", str(tmp_path / "r")]
    assert main([*argv, "--limit", "2"]) == 0
    assert "on d.jsonl (its first 2 rows): accuracy" in capsys.readouterr().out
    assert main(argv) == 1 and "d.jsonl:7: invalid JSON" in capsys.readouterr().err  # whole, it is read whole
    assert main([*argv, "--limit", "2", "--train-size", "2"]) == 1  # a seeded split needs every row
    assert "d.jsonl:7: invalid JSON" in capsys.readouterr().err


def test_init_reads_a_bounded_head_of_the_file_once(tmp_path, monkeypatch, capsys):
    from sembp_dsl.runtime import datasets

    monkeypatch.setattr(datasets, "CHECK_ROWS", 3)
    monkeypatch.chdir(tmp_path)
    rows = [f'{{"q": "q{i}", "answer": "yes"}}\n' for i in range(6)] + ["{not json\n"]
    (tmp_path / "d.jsonl").write_text("".join(rows))
    reads = []
    monkeypatch.setattr(
        datasets,
        "_read_bytes",
        lambda path, most=None, read=datasets._read_bytes: reads.append(most) or read(path, most),
    )
    assert main(["init", "--data", "d.jsonl", "Answer", "--model", "openai/x"]) == 0, capsys.readouterr()
    assert reads[0] is not None  # init's own read, bounded (the check after it reads the pipeline's data block)


@pytest.mark.parametrize(
    ("name", "data", "task"),
    [
        ("index.csv", ",q,answer\n1,a,yes\n2,b,no\n3,c,yes\n", "Answer it"),  # a column with no name
        ("blank.csv", "q,answer\na,\nb,\nc,\n", "Answer it"),  # an answer column blank in every row
        ("cases.csv", "q,Answer,answer,ANSWER\na,x,y,z\nb,x,y,z\n", "Answer it"),  # three answer columns
        ("t.csv", "q,answer\na,yes\nb,no\nc,yes\n", "Answer {{ q }} now {% if x %} {# #} {% endraw %}"),
        (
            "ok.jsonl",
            '{"text": "a", "label": "yes"}\n{"text": "b", "label": "no"}\n{"text": "c", "label": "no"}\n',
            "Sort",
        ),
    ],
    ids=lambda value: value if isinstance(value, str) and "." in value and len(value) < 12 else "",
)
def test_what_init_writes_passes_its_own_check(tmp_path, monkeypatch, capsys, name, data, task):
    monkeypatch.chdir(tmp_path)
    (tmp_path / name).write_text(data)
    code = main(["init", "--data", name, task, "--model", "openai/x"])
    said = capsys.readouterr().out
    assert code == 0 and "checked: ok" in said, said
    assert main(["check", name.rsplit(".", 1)[0] + ".sbp"]) == 0, capsys.readouterr()
    if task.startswith("Answer {{"):  # the task reaches the prompt as written, not as template code
        from sembp_dsl.language.graph.compile import compile_file

        graph = compile_file(name.rsplit(".", 1)[0] + ".sbp")
        assert graph.nodes["answer"].render({"q": "x"}, graph.prompts).startswith(task.replace("endraw", "end raw"))


def test_check_knows_a_model_name_with_no_provider_and_suggests_litellms_own(tmp_path, capsys):
    source = 'pipeline p "p"\ninput q: text\nparam t = "Answer."\nnode n: text { prompt = t }\nq -> n\noutput n\n'
    (tmp_path / "p.sbp").write_text(source + 'model { name = "gpt-4o-mni" }\n')
    assert main(["check", str(tmp_path / "p.sbp")]) == 1
    said = capsys.readouterr().err
    assert "error[E161]: model name 'gpt-4o-mni' names no provider" in said and "did you mean 'gpt-4o-mini'?" in said
    probe = f"from sembp_dsl.cli import main; main(['check', {str(tmp_path / 'p.sbp')!r}]); import sys; "
    probe += "print('litellm' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert "E161" in done.stderr and done.stdout.splitlines()[-1] == "False"  # its table read as a file, never imported
    (tmp_path / "p.sbp").write_text(source + 'model { name = "gpt-4o-mini" }\n')
    assert main(["check", str(tmp_path / "p.sbp")]) == 0


def test_a_run_of_a_model_with_no_provider_blames_no_server(tmp_path, fake_llm, capsys):
    source = 'pipeline p "p"\ninput q: text\nparam t = "Answer."\nnode n: text { prompt = t }\nq -> n\noutput n\n'
    (tmp_path / "p.sbp").write_text(source)
    code = main(["run", str(tmp_path / "p.sbp"), "--input", "q=hi", "--model", "fake", "--api-base", fake_llm.url])
    said = "".join(capsys.readouterr())
    assert code == 1 and "model name 'fake' names no provider" in said and "openai/fake" in said
    assert fake_llm.url not in said and "Bad Request" not in said and fake_llm.requests == 0


def test_litellms_refusal_of_a_bare_name_names_no_server():
    from sembp_dsl.models.faults import CallError, classify

    refused = CallError("LLM Provider NOT provided. You passed model=fake", 400, name="BadRequestError")
    failure = classify(refused, "http://127.0.0.1:9/v1", reached=False)
    assert "127.0.0.1" not in failure.describe() and "provider/model" in failure.describe()


def test_an_output_no_input_reaches_is_an_error_naming_the_edge(tmp_path, capsys):
    source = 'pipeline p "p"\ninput q, extra: text\nparam t = "Answer."\nnode a: text { prompt = t }\n'
    source += "node b: text { prompt = t }\na -> b\noutput b\n"
    (tmp_path / "p.sbp").write_text(source)
    assert main(["check", str(tmp_path / "p.sbp")]) == 1
    said = capsys.readouterr().err
    assert "error[E162]: output 'b' depends on no input" in said and "add the edge that feeds it, e.g. `q -> a`" in said
    (tmp_path / "p.sbp").write_text(source.replace("a -> b", "q -> a -> b"))  # extra reaches nothing: a warning
    assert main(["check", str(tmp_path / "p.sbp")]) == 0 and "W003" in capsys.readouterr().err


def test_the_readme_says_the_install_without_the_embedded_model_and_keeps_its_two_commands():
    lines = (ROOT / "README.md").read_text().splitlines()
    commands = [line.strip() for line in lines[:10] if line.startswith("    python3 -m venv")]
    assert len(commands) == 2 and all(".[embedded,test]" in command for command in commands)  # .ci/run's two
    assert "`python3 -m venv .venv && .venv/bin/pip install -q -e .`" in " ".join(lines)


def test_the_first_iteration_says_where_the_gate_started(tmp_path, fake_llm, script, capsys):
    from conftest import with_fake_model

    script.verdict = lambda prompt: "Yes" if "Improved" in prompt else "No"
    rows = "".join(f'{{"q": "claim {i}", "answer": "Yes"}}\n' for i in range(12))
    (tmp_path / "d.jsonl").write_text(rows)
    source = 'pipeline p "p"\ninput q: text\nparam t = "Do it."\nnode verdict: text { prompt = t }\nq -> verdict\n'
    (tmp_path / "p.sbp").write_text(with_fake_model(source + "output verdict\n", fake_llm.url))
    argv = ["optimize", str(tmp_path / "p.sbp"), "--data", str(tmp_path / "d.jsonl"), "--iters", "1", "--dry-run"]
    assert main([*argv, "--train-size", "6", "--val-size", "6", "--runs-dir", str(tmp_path / "runs")]) == 0
    out = capsys.readouterr().out
    [record] = (tmp_path / "runs").glob("*/run.json")
    initial = json.loads(record.read_text())["initial_score"]
    assert initial is not None and f"iteration 1/1: train 0.000 (the gate starts at {initial:.3f})" in out, out


def test_the_ab_of_two_evaluations_shows_every_changed_output_even_when_scores_are_equal(
    tmp_path, fake_llm, script, monkeypatch, capsys
):
    """Both prompts are wrong on every row, so no score moves; the outputs do, and the page shows each side by side."""
    from conftest import with_fake_model

    monkeypatch.chdir(tmp_path)
    script.verdict = lambda prompt: "second wording"
    rows = [{"q": f"q{i}", "answer": "never said"} for i in range(4)]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    source = 'pipeline p "p"\ninput q: text\nparam ask = "Answer."\nnode answer: text { prompt = ask }\nq -> answer\n'
    for ask in ("Answer.", "VERDICT please."):
        (tmp_path / "p.sbp").write_text(
            with_fake_model(source.replace("Answer.", ask) + "output answer\n", fake_llm.url)
        )
        assert main(["eval", "p.sbp", "--data", "rows.jsonl"]) == 0
    assert main(["report", "1", "2", "--out", "cmp.html"]) == 0
    page = (tmp_path / "cmp.html").read_text()
    text = re.sub(r"<[^>]+>", "", page)
    assert "0 wrong -> right, 0 right -> wrong" in text and "outputs changed (4 of 4)" in text
    changed = re.findall(r'<tr class="changed">(.*?)</tr>', page)
    assert len(changed) == 4 and all("An analysis." in row and "second wording" in row for row in changed)
    assert 'id="only-changed" checked' in page and "#only-changed:checked ~ * .same" in page and "<script" not in page


@pytest.mark.parametrize("sizes", ["train = 4  validation = 4", "train = 3  validation = 3  test = 0"])
def test_eval_scores_every_row_when_the_files_sizes_hold_none_out(sizes, tmp_path, fake_llm, capsys):
    """replies.sbp uses all 8 of its rows to train and gate on: eval with no size scores them all, as it did, and
    says so, not 'nothing to score'."""
    from conftest import with_fake_model

    rows = "".join(f'{{"q": "q{i}", "answer": "right"}}\n' for i in range(8))
    (tmp_path / "d.jsonl").write_text(rows)
    source = 'pipeline p "p"\ninput q: text\nparam t = "Answer."\nnode n: text { prompt = t }\nq -> n\noutput n\n'
    (tmp_path / "p.sbp").write_text(with_fake_model(source + f'data {{ file = "d.jsonl"  {sizes} }}', fake_llm.url))
    code = main(["eval", str(tmp_path / "p.sbp"), "--runs-dir", str(tmp_path / "runs")])
    assert code == 0 and "on d.jsonl (every row): accuracy 0.000 (0/8)" in capsys.readouterr().out
