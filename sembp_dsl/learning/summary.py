"""What the loop says of a run: a line per iteration (what it tried, what it kept and why), the gate's rule in
words, and the story of a run that kept its old prompts."""

from __future__ import annotations

from collections.abc import Sequence

from ..language.blocks.method import Method
from ..records.record import GateDecision, Iteration
from ..records.runs import fmt, gate_settled, gate_tally, gate_unreadable, noninferiority_words, step_cost, train_words
from .gating import COST_NOT_LOWER, GATE_REJECTED, NO_ANSWER
from .stats import NO_GAIN, wins_needed

SAME_STEP = "the step the gate rejected in iteration {}, proposed again from the same prompts"


def gate_rule(gate: GateDecision, passed: bool) -> str:
    """The gate's tally against its rule, in words that read right at every alpha: the sign test's p against
    alpha, or at alpha 1 (no test) that wins must beat losses; with partial credit, that the mean must rise."""
    if gate.test is not None:
        return f"{gate_tally(gate)}{noninferiority_words(gate)}: {'passes' if passed else 'does not pass'}"
    if gate.alpha >= 1:
        rule, mean = "; at gate_alpha 1 wins must beat losses", ", and the mean rise"
    else:
        rule, mean = f" {'<=' if gate.p <= gate.alpha else '>'} {gate.alpha:g}", ", but the mean must rise"
    if gate.gain is not None and gate.gain <= NO_GAIN:
        change = f"fall by {-gate.gain:.3f}" if gate.gain < 0 else "do not change"
        rule += f"{mean} (the scores {change} in all)"
    return f"{gate_tally(gate)}{rule}: {'passes' if passed else 'does not pass'}"


def summary(it: Iteration, iterations: int, train_size: int, gate_start: float | None = None) -> str:
    """What an iteration tried, what it kept and why, in words; `gate_start`: where the gate started (the initial
    prompts' score on its split), said beside the first iteration that knows it."""
    if it.accepted:
        verdict = "accepted"
    elif it.note:
        verdict = f"kept old ({it.note})"
    else:
        verdict = GATE_REJECTED
    lines = [
        f"iteration {it.index}/{iterations}: {train_words(it, train_size)}"
        + ("" if gate_start is None else f" (the gate starts at {fmt(gate_start)})")
        + f", {verdict}; {it.calls} calls, {it.tokens} tokens, ${it.cost:.4f}{step_cost(it)}"
    ]
    if it.lost:
        lines.append(f"  {it.lost} training sample(s) lost to failed calls: not learnt from")
    if it.gate and not it.note.startswith(NO_ANSWER):
        scores = "" if it.gate_after is None else f"{fmt(it.gate_before)} -> {fmt(it.gate_after)}; "
        passed = it.accepted or it.note.startswith(COST_NOT_LOWER)
        lines.append(f"  gate: {scores}{gate_rule(it.gate, passed)}" + gate_settled(it.gate) + gate_unreadable(it.gate))
        if it.gate.held_out:
            lines.append(f"  left out of the gate: {', '.join(it.gate.held_out)} (the step's examples came from them)")
    for c in it.candidates:
        lines.append(
            f"  {c.param}: {c.fate}"
            + (f" (examples from samples {', '.join(c.samples)})" if c.samples else "")
            + (f" [{c.strategy}]" if c.strategy else "")
        )
        lines += [f"    left out, as the file cannot hold it: sample {why}" for why in c.left_out]
    return "\n".join(lines)


def why_unchanged(iterations: Sequence[Iteration], method: Method, size: int) -> str:
    """What each iteration tried and how it fared, and what the gate asks (on its split of `size` samples): the story
    of a run that kept its old prompts, told to someone who has never seen a gate."""
    gated = [it for it in iterations if it.gate]
    lines = [f"no prompt changed: {'no step passed the gate' if gated else 'no candidate reached the gate'}."]
    for it in iterations:
        if it.gate:
            tried = [c.param for c in it.candidates if c.fate.startswith(GATE_REJECTED)]
            what = "1 new prompt tried" if len(tried) == 1 else f"{len(tried)} new prompts tried together"
            lines.append(
                f"  iteration {it.index}: {what} ({', '.join(tried)}): {gate_tally(it.gate)} on the gate"
                + gate_settled(it.gate)
                + (f"; {it.note}" if it.note else "")
            )
            continue
        if it.note.startswith(SAME_STEP.partition("{")[0]):  # it tried a step whose gate had already said no
            lines.append(f"  iteration {it.index}: {it.note}")
            continue
        reasons: dict[str, int] = {}
        for c in it.candidates:
            reason = c.fate.removeprefix("rejected: ").split(" (")[0]
            reasons[reason] = reasons.get(reason, 0) + 1
        why = ", ".join(f"{reason} x{n}" for reason, n in reasons.items()) or it.note
        lines.append(f"  iteration {it.index}: nothing to try ({why})")
    if gated:
        alpha = method.gate_alpha
        split = "training" if method.gate == "train" else "validation"
        shared = (
            f" at its share of gate_alpha {alpha:g}, which the run's {method.iterations} iterations share "
            "(a rejected step uses its share up)"
            if method.iterations > 1
            else ""
        )
        rule = (
            "when its wins beat its losses (gate_alpha 1: by any number)"
            if alpha >= 1
            else f"when its wins beat its losses by more than chance (sign test, p <= {alpha:g}{shared}): that "
            f"takes at least {wins_needed(alpha)} wins and no loss, more at a smaller share"
        )
        lines.append(
            f"  The gate runs the new prompts on the {size} {split} samples beside the current ones. A win is a "
            "sample the new prompts score higher on, a loss one the current prompts score higher on. A step is "
            f"kept {rule}. `sbpc show` has every candidate and its reply."
        )
    return "\n".join(lines)
