"""The demo selection: cases whose baseline prompt fits a small model's window.

The published selections are made for 128k-window models: most QMSum meetings are 20–30k tokens.
On the embedded SmolLM2 (8,192 tokens per slot) the full-context baseline of such a case is refused
before it is sent, so quality loss and recovery have nothing to compare with. Without ``--limit``,
the CLI therefore runs the embedded model on :func:`select_fitting`'s cases: the published
selection filtered to the cases whose baseline prompt (plus its answer budget) fits the window,
in published order, grouped so that a meeting's questions run back to back. Every other model, and
``--dry-run`` / ``--retrieval-only`` on any model, keep the published selection. The chosen cases
are published cases, so a demo run has the same id as a published run with the same settings
(what a case produces does not depend on which other cases run): ``--limit 0`` later reuses the
demo's cases instead of answering them again. The CLI says loudly which selection ran.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from agentlab.bench.config import Settings
from agentlab.bench.tasks import Case, CaseSelection, Task
from agentlab.events import Message
from agentlab.model import tokens
from agentlab.model.base import Model

#: Name of the rule (in ``--json`` output).
FITS_WINDOW_RULE = "fits_window"

PromptCounter = Callable[[Sequence[Message]], int]


@dataclass(frozen=True)
class FittingSelection:
    """What :func:`select_fitting` chose, with the numbers the banner prints."""

    selection: CaseSelection
    #: Cases of the published selection that fit (before the limit).
    fitting: int
    #: Cases of the published selection looked at.
    published: int
    #: Longest baseline prompt among the chosen cases, in the counter's tokens.
    max_prompt_tokens: int
    #: What counted the tokens ("the model's tokenizer" or the cl100k estimate).
    counted_with: str


def model_prompt_counter(model: Model) -> tuple[PromptCounter, str]:
    """The model's own token counter if it has one (the embedded server does), else cl100k."""
    inner: object = model
    while True:
        counter = getattr(inner, "count_prompt_tokens", None)
        if callable(counter):
            return counter, "the model's tokenizer"
        if not hasattr(inner, "inner"):
            break
        inner = inner.inner
    return (lambda messages: tokens.count_messages(list(messages))), f"{tokens.DEFAULT_ENCODING} (estimate)"


def baseline_prompts(task: Task, case: Case, settings: Settings) -> list[list[Message]]:
    """The prompts the benchmark's baseline mode sends for ``case`` (from its dry-run planning)."""
    roles = task.roles()
    if roles is None:
        return []
    return task.dry_run_prompts(case, roles.baseline, settings)


def select_fitting(task: Task, selection: CaseSelection, settings: Settings, *, window: int,
                   limit: int | None, counter: PromptCounter, counted_with: str) -> FittingSelection:
    """The first ``limit`` cases of ``selection`` whose every baseline prompt fits ``window``.

    A prompt fits when its tokens plus the answer budget (``[answer] max_tokens``) are at most
    ``window``. Counting the model's own tokens is exact but costs a server round trip, so a case
    whose cl100k estimate alone exceeds the window is dropped without asking: a tokenizer with
    a smaller vocabulary than cl100k's 100k (SmolLM2's is 49k) does not encode English text in
    fewer tokens. Chosen cases keep published order except that cases of one group (see
    :meth:`Task.case_group`) are moved next to the group's first case.
    """
    from agentlab.bench.running.executor import case_groups

    budget = int(settings.get("answer", "max_tokens", 0) or 0)
    chosen: list[tuple[Case, int]] = []
    fitting = 0
    # Counted group by group: one meeting's prompts repeat its transcript, so the token counter's
    # per-text cache hits (in published, round-robin order it would have forgotten each meeting).
    for _, case in (item for group in case_groups(list(enumerate(selection.cases)), task) for item in group):
        prompts = baseline_prompts(task, case, settings)
        if not prompts:
            continue
        if max(tokens.count_messages(p) for p in prompts) + budget > window:
            continue
        needed = max(counter(p) for p in prompts)
        if needed + budget > window:
            continue
        fitting += 1
        chosen.append((case, needed))
    ordered = [c for group in case_groups(list(enumerate(c for c, _ in chosen)), task) for _, c in group]
    if limit:
        ordered = ordered[:limit]
    needed_by_id = {c.id: n for c, n in chosen}
    note = (f"demo selection: the {len(ordered)} first of {fitting} cases (of {len(selection.cases)} published) whose "
            f"baseline prompt + {budget} answer tokens fit the {window}-token window ({counted_with})")
    return FittingSelection(
        CaseSelection(ordered, selection.dataset_sha256, loaded=selection.loaded, note=note),
        fitting=fitting, published=len(selection.cases),
        max_prompt_tokens=max((needed_by_id[c.id] for c in ordered), default=0), counted_with=counted_with)
