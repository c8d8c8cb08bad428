"""The method as the paper defines it, and the guards that keep what reaches a user's file defensible."""

from __future__ import annotations

import asyncio
import json
import random
import re
import textwrap

import pytest
from conftest import ROOT
from hypothesis import given, settings
from hypothesis import strategies as st
from test_optimize import TOY, data, optimize, trace_and_llm, write

from sembp_dsl.language.graph.compile import compile_file
from sembp_dsl.learning.backward import backward, hint_lines
from sembp_dsl.learning.descent import examples_for, extract, validate
from sembp_dsl.learning.stats import gate_passes, sign_test, wins_needed
from sembp_dsl.models.llm import LLM
from sembp_dsl.runtime.forward import run

FAN = textwrap.dedent("""\
    pipeline fan "Answer the question"
    input q: text
    param p = "Think about it."
    param judge = "Answer Yes or No."
    node a: text { prompt = p }
    node b: text { prompt = p }
    node c: text { prompt = p }
    node out: choice(Yes, No) { prompt = judge }
    q -> a
    a -> b, c
    b, c -> out
    output out
    """)


# --- backward ------------------------------------------------------------------------------------


def test_the_backward_question_shows_the_nodes_own_instruction(tmp_path, fake_llm, script):
    graph, llm, trace = trace_and_llm(write(tmp_path, "toy.sbp", TOY, fake_llm.url), q="the claim")
    llm.run(backward(graph, llm, trace, "Yes", "sibling"))
    [ask] = script.of_kind("backward")
    assert "# Instruction given to verdict\nSay Yes or No." in ask
    llm.run(backward(graph, llm, trace, "Yes", "no_sibling"))
    assert all("# Instruction given to verdict\nSay Yes or No." in a for a in script.of_kind("backward")[1:])


def test_no_gradient_ablation_shows_the_optimizer_no_feedback(tmp_path, fake_llm, script, capsys):
    path = write(tmp_path, "toy.sbp", TOY, fake_llm.url)
    optimize(
        path,
        "--data",
        data(tmp_path),
        "--train-size",
        "3",
        "--val-size",
        "3",
        "--iters",
        "1",
        "--gradient",
        "none",
        "--dry-run",
        capsys=capsys,
    )
    asks = script.of_kind("optimizer")
    assert len(asks) == 3 and not script.of_kind("backward")
    for ask in asks:
        assert "How the output should change" not in ask and "The answer should be" not in ask
        assert "how its output should have been different" not in ask
    # and with gradients the same prompts do carry them: the assertion above can fail
    script.prompts.clear()
    optimize(
        path,
        "--data",
        data(tmp_path),
        "--train-size",
        "3",
        "--val-size",
        "3",
        "--iters",
        "1",
        "--dry-run",
        "--no-cache",
        capsys=capsys,
    )
    assert all("How the output should change" in ask for ask in script.of_kind("optimizer"))


def test_fan_out_feedback_is_byte_identical_under_shuffled_latencies(tmp_path, fake_llm, script):
    path = write(tmp_path, "fan.sbp", FAN, fake_llm.url)
    graph = compile_file(str(path))
    script.backward_reply = None
    results = []
    for seed in range(6):
        llm = LLM(graph.models)  # no cache: every reply really comes back in its own time
        shuffle = random.Random(seed)
        complete = llm.complete

        async def slow(role, prompt, *shape, complete=complete, shuffle=shuffle, **options):
            await asyncio.sleep(shuffle.uniform(0, 0.05))
            return await complete(role, prompt, *shape, **options)

        llm.complete = slow
        trace = llm.run(run(graph, llm, {"q": "x"}))
        feedback = llm.run(backward(graph, llm, trace, "Yes", "sibling"))
        examples = examples_for(graph, "p", [(trace, feedback)])
        results.append(
            (
                feedback,
                graph.optimizer_prompt("p", "a", examples),
            )
        )
    assert all(r == results[0] for r in results)
    assert results[0][0]["a"] == "1. a should say more.\n2. a should say more."  # from b, then c: numbered


HINT_CASES = {
    "Hint 1: x": "x",
    "**Hint 1:** x": "x",
    "1. Hint 1: x": "x",
    "Hint 1 - x": "x",
    "- Hint 1: x": "x",
    "Hint 1 (from a): x": "x",
    "### Hint 1: x": "x",
    "Hint 1:\nx": "x",
}


@pytest.mark.parametrize("reply, text", HINT_CASES.items())
def test_hint_lines_in_the_forms_models_write(reply, text):
    assert hint_lines(reply, 2) == {1: text}


def test_a_label_alone_does_not_swallow_the_next_hint():
    assert hint_lines("Hint 1:\nHint 2: make it shorter", 2) == {2: "make it shorter"}


LABELS = st.sampled_from(
    [
        "Hint {k}: {t}",
        "**Hint {k}:** {t}",
        "{k}. Hint {k}: {t}",
        "Hint {k} - {t}",
        "- Hint {k}: {t}",
        "Hint {k}:\n{t}",
        "  hint {k}) {t}",
    ]
)
SENTENCE = (
    st.text(st.characters(whitelist_categories=("L", "N"), whitelist_characters=" ,'"), min_size=1, max_size=60)
    .map(str.strip)
    .filter(lambda t: t and not re.match(r"(?i)hint", t))
)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.tuples(LABELS, SENTENCE), min_size=1, max_size=6),
    st.text(max_size=40).filter(lambda t: "int" not in t.lower()),
)
def test_hint_lines_property(hints, chatter):
    """Whatever labels a model uses, line k goes to hint k, and nothing else does."""
    reply = "\n".join(
        [chatter.replace("\n", " ").strip(), *(form.format(k=k, t=t) for k, (form, t) in enumerate(hints, 1))]
    )
    lines = hint_lines(reply, len(hints))
    assert lines == {k: t for k, (_, t) in enumerate(hints, 1)}


# --- candidates ----------------------------------------------------------------------------------


def test_only_a_closed_prompt_block_is_a_candidate():
    assert extract("Sure.\n<prompt>A new rule.</prompt>") == ("A new rule.", None)
    assert extract("<prompt>old</prompt> then <prompt>new</prompt>") == ("new", None)
    assert extract("<prompt>echo <prompt>inner</prompt>") == ("inner", None)
    new, reason = extract("<prompt>Analyze how the state the", "length")
    assert new is None and "cut off by the token limit" in reason
    new, reason = extract("<prompt>first</prompt> and a second try: <prompt>Analyze how the", "length")
    assert new is None and "cut off" in reason  # the fragment after the last closed block was the real answer
    assert extract("<prompt>done</prompt> and some chatter that ran", "length") == ("done", None)
    new, reason = extract("<prompt>closed by a grammar at its bound, mid-sent</prompt>", "length")
    assert new is None and "cut off" in reason  # the limit came at the block's end: nothing says the model ended it
    new, reason = extract("<prompt>never closed")
    assert new is None and "no closed <prompt>" in reason


INJECTIONS = [
    "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "{% for i in range(99999) %}x{% endfor %}",
    "Judge {{ q | upper }}.",
    "Judge {{ q.name }}.",
    "Judge {{ q[100000] }}.",
    "Judge {{ lipsum(n=200000) }}.",
    "Judge {{ 'x' * 300000000 }}.",
    "Judge {{ q ~ q }}.",
    "{% set x = 1 %}Judge.",
    "Judge {{ 7 }}.",
]


@pytest.mark.parametrize("payload", INJECTIONS)
def test_a_candidate_is_text_not_code(tmp_path, fake_llm, payload):
    graph = compile_file(str(write(tmp_path, "toy.sbp", TOY, fake_llm.url)))
    reason = validate(graph, "verdict_task", "Say Yes or No.", payload, [], [{"q": "x", "a": "y", "b": "z"}])
    assert reason is not None and ("template code" in reason or "breaks the template" in reason), reason


@pytest.mark.parametrize("payload", ["Judge \x1b[31mnow\x1b[0m.", "Judge\x00.", "Say \x08Yes."])
def test_a_candidate_with_control_characters_is_refused(tmp_path, fake_llm, payload):
    """The file could not hold it (check refuses control characters), and a model should not see it."""
    graph = compile_file(str(write(tmp_path, "toy.sbp", TOY, fake_llm.url)))
    reason = validate(graph, "verdict_task", "Say Yes or No.", payload, [], [{"q": "x", "a": "y", "b": "z"}])
    assert reason is not None and "control character" in reason


def test_a_plain_input_reference_is_still_allowed(tmp_path, fake_llm):
    graph = compile_file(str(write(tmp_path, "toy.sbp", TOY, fake_llm.url)))
    assert (
        validate(
            graph, "verdict_task", "Say Yes or No.", "Judge {{ q }} on {{a}}.", [], [{"q": "x", "a": "y", "b": "z"}]
        )
        is None
    )


def test_injected_candidates_are_rejected_and_the_run_goes_on(tmp_path, fake_llm, script, capsys):
    """Even with --no-gate, no payload reaches the file; the run finishes; a rerun from the cache too."""
    payloads = iter(INJECTIONS * 3)
    script.improve = lambda param, prompt: next(payloads) if param == "look" else f"Improved instruction for {param}."
    path = write(tmp_path, "toy.sbp", TOY, fake_llm.url)
    flags = ["--data", data(tmp_path), "--train-size", "3", "--val-size", "3", "--iters", "2", "--no-gate"]
    code, out = optimize(path, *flags, capsys=capsys)
    assert code == 0
    text = path.read_text()
    assert "__class__" not in text and "{%" not in text and "Improved instruction for check." in text
    assert 'param look = "Look at the claim."' in text
    assert "look: rejected: is template code" in out
    code, _ = optimize(path, *flags, capsys=capsys)  # the same replies, now from the cache
    assert code == 0


def test_a_cut_off_optimizer_reply_is_rejected(tmp_path, fake_llm, script, capsys):
    script.improve = lambda param, prompt: "A long instruction that the token limit will cut " * 5
    path = tmp_path / "toy.sbp"
    path.write_text(
        write(tmp_path, "toy.sbp", TOY, fake_llm.url).read_text()
        + f'model optimizer {{ name = "openai/fake"  api_base = "{fake_llm.url}"  max_tokens = 12 }}\n'
    )
    before = path.read_text()
    code, out = optimize(
        path,
        "--data",
        data(tmp_path),
        "--train-size",
        "3",
        "--val-size",
        "3",
        "--iters",
        "1",
        "--no-gate",
        capsys=capsys,
    )
    assert code == 0 and path.read_text() == before
    assert out.count("rejected: cut off by the token limit") == 3


def test_backward_and_optimizer_get_a_default_max_tokens(tmp_path, fake_llm):
    graph = compile_file(str(write(tmp_path, "toy.sbp", TOY, fake_llm.url)))
    assert graph.models["backward"].settings["max_tokens"] == 512
    assert graph.models["optimizer"].settings["max_tokens"] == 1024
    assert "max_tokens" not in graph.models["forward"].settings
    liar = compile_file(str(ROOT / "pipelines/liar.sbp"))
    assert liar.models["optimizer"].settings["max_tokens"] == 256  # the file's own setting wins


def test_an_empty_override_of_a_builtin_template_is_honoured(tmp_path, fake_llm):
    graph = compile_file(str(write(tmp_path, "toy.sbp", TOY + 'template loss = ""\n', fake_llm.url)))
    assert graph.builtins["loss"] == ""


def test_a_template_error_is_a_per_sample_error(tmp_path, fake_llm, script):
    source = TOY.replace("Claim: {{ q }}", "Claim: {{ q[5] }}")  # fails on claims shorter than 6 characters
    graph, llm, trace = trace_and_llm(write(tmp_path, "toy.sbp", source, fake_llm.url), q="abc")
    assert trace.final.lost and trace.final.error.startswith("template failed: UndefinedError")
    _, _, fine = trace_and_llm(write(tmp_path, "toy.sbp", source, fake_llm.url), q="a long claim")
    assert fine.final.error is None


# --- the gate -------------------------------------------------------------------------------------


def test_the_sign_test_gate():
    assert gate_passes(5, 0, 0.1) and sign_test(5, 0) == 1 / 32
    assert not gate_passes(2, 0, 0.1) and sign_test(2, 0) == 0.25
    assert wins_needed(0.1) == 4  # 6 samples at 0.1 need 4 wins and no loss
    # alpha = 1 is the paper's rule: any strictly higher score on the same split
    assert gate_passes(1, 0, 1.0) and gate_passes(3, 2, 1.0)
    assert not gate_passes(2, 2, 1.0) and not gate_passes(0, 0, 1.0)
    assert not gate_passes(6, 3, 0.1)  # p = 0.254: a net gain of three, but not beyond noise


def test_the_gate_rejects_two_wins_at_01_and_accepts_them_at_1(tmp_path, fake_llm, script, capsys):
    """Two gate samples: at 0.1 even two wins would not pass (p = 0.25), so the gate decides without a call."""
    script.verdict = lambda prompt: "Yes" if "Improved" in prompt else "No"
    path = write(tmp_path, "toy.sbp", TOY, fake_llm.url)
    before = path.read_text()
    flags = ["--data", data(tmp_path), "--train-size", "2", "--val-size", "2", "--iters", "1"]
    code, out = optimize(path, *flags, capsys=capsys)
    assert code == 0 and path.read_text() == before
    assert "0 wins, 0 losses so far, p = 1.000 > 0.1: does not pass (settled after 0 of 2 samples)" in out
    record = json.loads(next((tmp_path / "runs").glob("*/run.json")).read_text())
    [it] = record["iterations"]
    assert it["gate"]["samples"] == it["gate"]["decided_after"] == 0 and it["gate"]["of"] == 2 and it["gradients"]
    assert all(g["nodes"]["verdict"].startswith("The answer should be Yes") for g in it["gradients"])
    assert not [p for p in script.prompts if "Improved" in p and "VERDICT" in p]  # the proposal never ran
    code, out = optimize(path, *flags, "--gate-alpha", "1", capsys=capsys)
    assert (
        code == 0
        and "1 win, 0 losses so far; at gate_alpha 1 wins must beat losses: passes" in out  # the other: a win or a tie
        and path.read_text() != before
    )


def test_a_baseline_that_leaves_too_few_possible_wins_is_announced(tmp_path, fake_llm, script, capsys):
    """6 gate samples could pass at 0.1 (4 wins needed), but the initial prompts answer all 6 right: no
    possible win is left, and the run says so; with every answer wrong, 6 wins are possible and it does not."""
    path = write(tmp_path, "toy.sbp", TOY, fake_llm.url)
    flags = ["--data", data(tmp_path, n=12), "--train-size", "3", "--val-size", "6", "--iters", "1", "--no-cache"]
    script.verdict = lambda prompt: "Yes"
    code, out = optimize(path, *flags, capsys=capsys)
    assert "leaves 0 possible wins; a step needs 4 wins and no loss to pass at gate_alpha 0.1" in out
    script.verdict = lambda prompt: "No"
    code, out = optimize(path, *flags, capsys=capsys)
    assert code == 0 and "possible wins" not in out


def test_a_gate_too_small_to_pass_is_announced_and_an_empty_one_refused(tmp_path, fake_llm, script, capsys):
    path = write(tmp_path, "toy.sbp", TOY, fake_llm.url)
    optimize(path, "--data", data(tmp_path), "--train-size", "3", "--val-size", "3", "--iters", "1")
    assert "a step needs at least 4 wins and no loss" in capsys.readouterr().err
    with pytest.raises(SystemExit) as stop:
        optimize(path, "--data", data(tmp_path), "--train-size", "3", "--val-size", "0")
    assert stop.value.code == 2 and "the gate split is empty" in capsys.readouterr().err


def test_samples_lost_to_failed_calls_are_not_learnt_from(tmp_path, script):
    from fake_server import FakeServer

    from sembp_dsl.language.blocks.method import Method
    from sembp_dsl.learning.optimize import Optimizer
    from sembp_dsl.records.record import RunRecord, RunSettings
    from sembp_dsl.runtime.datasets import load as load_data

    with FakeServer(reply=script, failures=[500, 500]) as server:
        path = write(tmp_path, "toy.sbp", TOY, server.url)
        graph = compile_file(str(path))
        llm = LLM(graph.models, retries=0)
        samples = list(load_data(data(tmp_path, n=4), None).pools.values())[0]
        method = Method(iterations=1, train_size=4, val_size=0, errors_per_gradient=4, gate="none")
        record = RunRecord.create(tmp_path / "runs", RunSettings(str(path), "x", method, {}), graph.prompts)
        lines = []
        outcome = llm.run(
            Optimizer(graph, llm, method, "exact", {}, samples, [], [], record, lambda g: None, lines.append).run()
        )
    [it] = outcome.iterations
    assert it.lost >= 1 and "lost to failed calls" in lines[0]
    assert len(it.gradients) == 4 - it.lost  # every other sample was wrong and learnt from; the lost ones not
    assert llm.ledger.roles["backward"].calls == 4 - it.lost


# --- the plan ------------------------------------------------------------------------------------


def test_the_plan_bounds_the_readme_run(tmp_path, fake_llm, script, capsys):
    """`--plan` for the README's settings: the real run stays within every role's bound."""
    path = write(tmp_path, "liar.sbp", (ROOT / "pipelines/liar.sbp").read_text(), fake_llm.url)
    flags = ["--data", "liar", "--train-size", "6", "--val-size", "6", "--iters", "2", "--gate-alpha", "1"]
    code, out = optimize(path, *flags, "--plan", "--json", capsys=capsys)
    assert code == 0 and fake_llm.requests == 0  # the plan calls no model
    bound = json.loads(out)["calls"]
    # 6 nodes: 2 iterations of a training pass and a gate, the initial gate score, and the second gate's current
    # prompts where the run does not know their score
    assert bound == {"forward": 2 * 6 * (6 + 6) + 6 * 6 + 6 * 6, "backward": 2 * 2 * 1, "optimizer": 2 * 6}
    prompt_bound = json.loads(out)["prompt_tokens"]
    code, text = optimize(path, *flags, "--plan", capsys=capsys)
    # far above what the run sends (every reply counted at its max_tokens): said to be a bound, and why
    assert f"calls, at most about {prompt_bound['forward']} prompt tokens" in text
    assert "prompt tokens are an upper bound: every earlier node's reply is counted as long as" in text
    script.verdict = lambda prompt: random.Random(prompt).choice(["Yes", "No"])
    code, out = optimize(path, *flags, "--json", capsys=capsys)
    assert code == 0
    roles = json.loads(out)["ledger"]["roles"]
    for role, most in bound.items():
        assert roles[role]["calls"] + roles[role]["cache_hits"] <= most
        assert roles[role]["prompt_tokens"] <= prompt_bound[role]
    assert roles["optimizer"]["calls"] > 0  # the run did go through every phase


def test_the_plan_counts_no_first_training_pass_on_a_train_gate_and_names_what_it_cannot_foresee(
    tmp_path, fake_llm, script, capsys
):
    """Gate on the training split: the initial score is the first iteration's forward pass, so forward calls are
    the initial score, one gate per iteration and one training pass after the first (for the current prompts
    where the run does not know their results, its error draw and its gate's baselines together); --only the judge: no backward call (its hints go to prompts not
    optimized). The savings that depend on the answers are named, not counted."""
    path = write(tmp_path, "toy.sbp", TOY, fake_llm.url)
    flags = ["--data", data(tmp_path), "--train-size", "4", "--val-size", "0", "--gate", "train", "--iters", "2"]
    code, out = optimize(path, *flags, "--plan", "--json", capsys=capsys)
    plan = json.loads(out)
    assert code == 0 and plan["calls"] == {"forward": 3 * ((2 + 1) * 4 + 4), "backward": 2 * 2 * 1, "optimizer": 2 * 3}
    assert "a gate settled before the end of its split (it stops there)" in plan["unforeseen"]
    assert "errors found before the end of the training split (its forward pass stops there)" in plan["unforeseen"]
    code, out = optimize(path, *flags, "--only", "verdict_task", "--plan", capsys=capsys)
    assert "backward       0 calls" in out and "fewer calls when: " in out and "answers from the response cache" in out
    assert fake_llm.requests == 0


def test_the_held_out_change_is_paired_and_a_drop_is_said_in_words(tmp_path, fake_llm, script, capsys):
    script.verdict = lambda prompt: "No" if "Improved" in prompt else "Yes"  # the "improvement" makes it worse
    path = write(tmp_path, "toy.sbp", TOY, fake_llm.url)
    data_file = tmp_path / "mixed.jsonl"
    data_file.write_text(
        "".join(json.dumps({"q": f"claim {i}", "answer": "No" if i < 10 else "Yes"}) + "\n" for i in range(20))
    )
    code, out = optimize(
        path,
        "--data",
        str(data_file),
        "--train-size",
        "5",
        "--val-size",
        "5",
        "--test-size",
        "10",
        "--iters",
        "1",
        "--no-gate",
        "--dry-run",
        "--seed",
        "3",
        capsys=capsys,
    )
    assert code == 0
    line = next(line for line in out.splitlines() if line.startswith("test (10 samples)"))
    before, after = map(float, re.search(r"initial ([\d.]+) -> final ([\d.]+)", line).groups())
    mean = float(re.search(r"paired change ([+-][\d.]+)", line).group(1))
    assert mean == pytest.approx(after - before) and mean < 0
    assert "scores LOWER than the original on the held-out test split" in out


def test_every_phase_has_a_progress_bar(tmp_path, fake_llm, script):
    from sembp_dsl.language.blocks.method import Method
    from sembp_dsl.learning.optimize import Optimizer
    from sembp_dsl.records.record import RunRecord, RunSettings
    from sembp_dsl.runtime.datasets import load as load_data

    graph = compile_file(str(write(tmp_path, "toy.sbp", TOY, fake_llm.url)))
    llm = LLM(graph.models)
    samples = list(load_data(data(tmp_path, n=4), None).pools.values())[0]
    method = Method(iterations=1, train_size=4, val_size=0, gate="train")
    bars: dict[str, list] = {}

    def progress(what, total):
        bars[what] = [total, 0]
        return lambda result: bars[what].__setitem__(1, bars[what][1] + 1)

    record = RunRecord.create(tmp_path / "runs", RunSettings("toy.sbp", "x", method, {}), graph.prompts)
    llm.run(
        Optimizer(
            graph, llm, method, "exact", {}, samples, [], [], record, lambda g: None, lambda line: None, progress
        ).run()
    )
    assert bars["iteration 1: backward"] == [2, 2] and bars["iteration 1: optimizer"] == [3, 3]
    # the gate is on the training split: its initial score is iteration 1's forward pass (no second bar)
    assert bars["gate, initial"] == [4, 4] and "iteration 1: train" not in bars
    # a round of 4: its bar ticks for each outcome that arrives, until the decision is settled and the rest cancelled
    total, ticked = bars["iteration 1: gate, round 1"]
    assert total == 4 and 1 <= ticked <= 4


def test_the_held_out_change_counts_only_samples_scored_both_times_with_a_t_interval():
    """2 of 10 test samples lost after: the change is over the 8 scored both times (-0.250, not -0.200),
    and its interval uses t with 7 degrees of freedom (2.365), not z (1.96)."""
    from types import SimpleNamespace as NS

    from sembp_dsl.cli.calling import held_out_change

    def evaluation(scores):  # None: lost to a failed call
        return NS(results=[NS(sample=NS(id=f"s{i}"), score=s or 0.0, lost=s is None) for i, s in enumerate(scores)])

    before = evaluation([1, 1, 1, 1, 1, 0, 0, 0, 1, 1])
    after = evaluation([1, 0, 1, 0, 1, 0, 0, 0, None, None])
    line = held_out_change(before, after)
    assert line.startswith("test (8 samples, 2 lost to failed calls): initial 0.625 -> final 0.375; ")
    diffs = [0, -1, 0, -1, 0, 0, 0, 0]
    mean = sum(diffs) / 8
    sd = (sum((d - mean) ** 2 for d in diffs) / 7) ** 0.5
    half = 2.365 * sd / 8**0.5
    assert f"paired change {mean:+.3f}, 95% interval [{mean - half:+.3f}, {mean + half:+.3f}]" in line


def test_progress_shows_as_lines_when_stderr_is_no_terminal(tmp_path, fake_llm, script, capsys, monkeypatch):
    """CI, a log file, nohup: no bar can be drawn, so a long phase prints a progress line now and then
    (every 10 s; 0.05 s here) and a last one when it is done; a phase shorter than that prints none."""
    from sembp_dsl.cli import flags

    path = write(tmp_path, "toy.sbp", TOY, fake_llm.url)
    fake_llm.configure(delay=0.03)
    monkeypatch.setattr(flags, "PROGRESS_EVERY", 0.05)
    optimize(path, "--data", data(tmp_path, n=12), "--train-size", "6", "--val-size", "6", "--iters", "1", "--no-cache")
    err = capsys.readouterr().err
    assert re.search(r"^gate, initial: \d/6$", err, re.M), err
    assert err.count("gate, initial: 6/6") == 1 and "\r" not in err
    # each phase's last line comes when it is done, before the first of a phase that waits for it: the initial
    # score runs beside iteration 1's error draw (their lines may interleave), and the gate waits for both
    lines = [line for line in err.splitlines() if re.search(r": \d+/\d+$", line)]
    gate = min(i for i, line in enumerate(lines) if line.startswith("iteration 1: gate"))
    assert lines.index("gate, initial: 6/6") < gate and lines.index("iteration 1: train: 5/5") < gate
    monkeypatch.setattr(flags, "PROGRESS_EVERY", 60.0)
    optimize(path, "--data", data(tmp_path, n=12), "--train-size", "6", "--val-size", "6", "--iters", "1", "--no-cache")
    assert not re.search(r": \d+/\d+$", capsys.readouterr().err, re.M)


def test_a_step_whose_answers_cannot_be_read_says_so(tmp_path, fake_llm, script, capsys):
    """The candidate prompts make the model answer in prose: the gate scores them 0 and says why, in the
    output, in `show` and in the run record, instead of a bare 'rejected'."""
    script.verdict = lambda prompt: "It is hard to say." if "Improved" in prompt else "No"
    path = write(tmp_path, "toy.sbp", TOY, fake_llm.url)
    code, out = optimize(
        path, "--data", data(tmp_path, n=12), "--train-size", "3", "--val-size", "6", "--iters", "1", capsys=capsys
    )
    read = re.search(r"(\d) of (\d) answers could not be read \(a candidate may have dropped the instruction", out)
    assert code == 0 and read and read[1] == read[2] and out.count("could not be read") == 1
    record = json.loads(next((tmp_path / "runs").glob("*/run.json")).read_text())
    assert len(record["iterations"][0]["gate"]["unreadable"]) == int(read[1])
    from sembp_dsl import cli

    assert cli.main(["show", "-1", "--runs-dir", str(tmp_path / "runs")]) == 0
    assert "answers could not be read" in capsys.readouterr().out
