"""Python metrics for pipelines/replies.sbp (`metric overlap = "metrics:overlap"`; docs/metrics.md).

Imported only when a run scores with one (`sbpc eval pipelines/replies.sbp --metric overlap ...`), never by
`sbpc check`."""


def overlap(prediction, example):
    """Partial credit: the share of the reference reply's words the reply uses, and that share as the reason."""
    want = set(example["answer"].lower().split())
    got = set((prediction.text or "").lower().split())
    share = len(want & got) / len(want) if want else 0.0
    return share, f"the reply uses {share:.0%} of the reference reply's words"
