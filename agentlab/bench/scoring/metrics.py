"""Text metrics, each a plain function with a version string stored next to every score.

Two families, kept apart on purpose because peer harnesses conflate them (docs/sources.md#metric-pitfalls):

* **Summary-benchmark metrics** (QMSum, LongMemEval; docs/sources.md#summary-benchmark-metrics).
  Normalisation: lowercase, every character that is not a letter or digit becomes a space, split on whitespace; no stemming,
  no stop words. ``f1`` is clipped unigram-overlap F1 (numerically equal to ROUGE-1 F), ``bleu1`` is
  clipped unigram precision times the brevity penalty, ``exact_match`` is "the lowercased, trimmed
  reference is a substring of the prediction". ``rouge1``/``rouge2``/``rougeL`` are computed by the
  ``rouge-score`` package **without stemming**, fed our normalised tokens, so they equal the
  published harness's plain implementations (the published numbers). ``rouge1_stem``/``rouge2_stem``/
  ``rougeL_stem`` are the QMSum paper convention (rouge-score's own tokenizer, Porter stemming of
  tokens longer than 3 characters); they are reported separately and are *not* comparable to the
  published table. When both texts normalise to nothing every score is 1.0; when one does, 0.0.
* **LoCoMo metrics.** ``locomo_f1`` is the official ``task_eval/evaluation.py`` F1: normalise
  (drop commas, lowercase, drop ASCII punctuation, drop the words a/an/the/and), Porter-stem, and
  take multiset-overlap F1; category 1 splits prediction and gold on commas and averages, over gold
  parts, the best partial F1; category 3 keeps the gold up to its first ``;``; category 5
  (adversarial) scores 1 iff the output contains "no information available" or "not mentioned".
  ``set_f1`` is the F1 that mem0/MemOS report (lowercase, ``. , ! ?`` to spaces, whitespace split,
  *set* overlap, no stemming).

Aggregation helpers: :func:`mean`, :func:`percentiles` (p25/p50/p75/p95, linear interpolation).
"""

from __future__ import annotations

import math
import re
import string
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from nltk.stem import PorterStemmer
    from rouge_score.rouge_scorer import RougeScorer

# ------------------------------------------------------------------------------- registry


@dataclass(frozen=True)
class MetricInfo:
    """A registered metric: its name, the version stored beside each of its scores, and a one-line
    description for tables.
    """

    name: str
    version: str
    description: str


@dataclass(frozen=True)
class Score:
    """One stored score. ``value`` is ``None`` when it could not be computed (e.g. the judge's
    reply did not parse); ``detail`` then says why, and aggregates skip it visibly.
    """

    metric: str
    value: float | None
    version: str
    detail: str | None = None


METRICS: dict[str, MetricInfo] = {}


_MetricFn = TypeVar("_MetricFn", bound=Callable[..., "float | None"])


def _register(name: str, version: str, description: str) -> Callable[[_MetricFn], _MetricFn]:
    """Record a metric's version and description in :data:`METRICS`; the function is returned
    unchanged, so its own signature stays visible to callers and the type checker.
    """

    def wrap(fn: _MetricFn) -> _MetricFn:
        METRICS[name] = MetricInfo(name, version, description)
        return fn

    return wrap


def version_of(metric: str) -> str:
    """The version string of a registered metric (``KeyError`` for unknown names)."""
    return METRICS[metric].version


# ---------------------------------------------- normalisation (docs/sources.md#summary-benchmark-metrics)

NORMALIZE_VERSION = "norm-v1"
# A DeepSeek end-of-sentence marker that leaked into answers in the published MT-Bench-101 runs; dropping it
# keeps our scores comparable on replayed outputs and costs nothing elsewhere.
_EOS_MARKER = "<｜end▁of▁sentence｜>"


def normalize_tokens(text: str) -> list[str]:
    """Lowercase, non-alphanumerics (Unicode letters/digits kept) to spaces, whitespace split."""
    if not text:
        return []
    text = text.replace(_EOS_MARKER, " ").lower()
    return "".join(ch if ch.isalnum() else " " for ch in text).split()


def _prf(overlap: int, n_pred: int, n_ref: int) -> float:
    if overlap == 0 or n_pred == 0 or n_ref == 0:
        return 0.0
    precision, recall = overlap / n_pred, overlap / n_ref
    return 2 * precision * recall / (precision + recall)


def _empty_rule(pred: Sequence[str], ref: Sequence[str]) -> float | None:
    """1.0 when both are empty, 0.0 when one is, ``None`` when both have tokens."""
    if not pred and not ref:
        return 1.0
    if not pred or not ref:
        return 0.0
    return None


@_register("f1", "token-f1-v1/" + NORMALIZE_VERSION, "clipped unigram overlap F1 (== ROUGE-1 F)")
def token_f1(prediction: str, reference: str) -> float:
    """Clipped unigram-overlap F1 of the normalised tokens (numerically equal to ROUGE-1 F)."""
    pred, ref = normalize_tokens(prediction), normalize_tokens(reference)
    early = _empty_rule(pred, ref)
    if early is not None:
        return early
    overlap = sum((Counter(pred) & Counter(ref)).values())
    return _prf(overlap, len(pred), len(ref))


@_register("bleu1", "bleu1-v1/" + NORMALIZE_VERSION, "clipped unigram precision x brevity penalty")
def bleu1(prediction: str, reference: str) -> float:
    """Clipped unigram precision times the brevity penalty (BLEU with unigrams only)."""
    pred, ref = normalize_tokens(prediction), normalize_tokens(reference)
    if not pred:
        return 1.0 if not ref else 0.0
    matches = sum((Counter(pred) & Counter(ref)).values())
    precision = matches / len(pred)
    penalty = 1.0 if len(pred) >= len(ref) else math.exp(1 - len(ref) / len(pred))
    return penalty * precision


@_register("exact_match", "em-substring-v1", "lowercased trimmed reference is a substring of the prediction")
def exact_match(prediction: str, reference: str) -> float:
    """1.0 when the lowercased, trimmed reference occurs in the prediction (a lenient match for short gold
    answers), else 0.0.
    """
    return 1.0 if reference.strip().lower() in prediction.lower() else 0.0


# ------------------------------------------------------------------------------------- ROUGE


class _NormalisingTokenizer:
    """rouge-score tokenizer interface over :func:`normalize_tokens` (no stemming)."""

    def tokenize(self, text: str) -> list[str]:
        return normalize_tokens(text)


_ROUGE_TYPES = ("rouge1", "rouge2", "rougeL")


@lru_cache(maxsize=2)
def _scorer(stemmed: bool) -> RougeScorer:
    # Imported on first use: rouge-score pulls in nltk (and with it scipy), over a second of
    # start-up that a run scoring no ROUGE (and `list`) should not pay.
    from rouge_score import rouge_scorer

    if stemmed:
        return rouge_scorer.RougeScorer(list(_ROUGE_TYPES), use_stemmer=True)
    return rouge_scorer.RougeScorer(list(_ROUGE_TYPES), tokenizer=_NormalisingTokenizer())


ROUGE_VERSION = "rouge-score-0.1.2/unstemmed/" + NORMALIZE_VERSION
ROUGE_STEM_VERSION = "rouge-score-0.1.2/porter"
for _name, _desc in (("rouge1", "unigram"), ("rouge2", "bigram"), ("rougeL", "longest common subsequence")):
    METRICS[_name] = MetricInfo(_name, ROUGE_VERSION, f"ROUGE {_desc} F, reference normalisation, no stemming")
    METRICS[_name + "_stem"] = MetricInfo(
        _name + "_stem", ROUGE_STEM_VERSION, f"ROUGE {_desc} F, rouge-score tokenizer + Porter stemming (QMSum paper)"
    )


def rouge(prediction: str, reference: str, *, stemmed: bool = False) -> dict[str, float]:
    """ROUGE-1/2/L F-measures. Keys ``rouge1``, ``rouge2``, ``rougeL`` (``*_stem`` when stemmed)."""
    suffix = "_stem" if stemmed else ""
    if not stemmed:
        early = _empty_rule(normalize_tokens(prediction), normalize_tokens(reference))
        if early is not None:
            return {name: early for name in _ROUGE_TYPES}
    scores = _scorer(stemmed).score(reference, prediction)  # rouge-score takes (target, prediction)
    return {name + suffix: float(scores[name].fmeasure) for name in _ROUGE_TYPES}


def summary_scores(prediction: str, reference: str, *, stemmed_rouge: bool = False,
                   exact: bool = False) -> list[Score]:
    """The summary benchmark's text metrics as :class:`Score` rows (QMSum / LongMemEval).

    Their definitions: docs/sources.md#summary-benchmark-metrics.
    """
    values = {"f1": token_f1(prediction, reference), "bleu1": bleu1(prediction, reference)}
    values.update(rouge(prediction, reference))
    if stemmed_rouge:
        values.update(rouge(prediction, reference, stemmed=True))
    if exact:
        values["exact_match"] = exact_match(prediction, reference)
    return [Score(name, value, version_of(name)) for name, value in values.items()]


# ------------------------------------------------------------------------------------ LoCoMo

LOCOMO_VERSION = "locomo-official-v1"
_ARTICLES = re.compile(r"\b(a|an|the|and)\b")
_PUNCT = str.maketrans("", "", string.punctuation)
ADVERSARIAL_PHRASES = ("no information available", "not mentioned")


@lru_cache(maxsize=1)
def _porter() -> PorterStemmer:
    # nltk comes with rouge-score; its Porter stemmer needs no downloaded data.
    from nltk.stem import PorterStemmer

    return PorterStemmer()


def locomo_normalize(text: str) -> str:
    """Official LoCoMo answer normalisation (commas dropped first, then punctuation, articles, 'and')."""
    text = str(text).replace(",", "").lower().translate(_PUNCT)
    return " ".join(_ARTICLES.sub(" ", text).split())


def _stemmed(text: str) -> list[str]:
    stem = _porter().stem
    return [stem(w) for w in locomo_normalize(text).split()]


def locomo_token_f1(prediction: str, gold: str) -> float:
    """Porter-stemmed multiset F1 after official normalisation (0 when nothing overlaps)."""
    pred, ref = _stemmed(prediction), _stemmed(gold)
    overlap = sum((Counter(pred) & Counter(ref)).values())
    return _prf(overlap, len(pred), len(ref))


def locomo_multi_answer_f1(prediction: str, gold: str) -> float:
    """Category 1: split both on commas; mean over gold parts of the best F1 against any prediction part."""
    preds = [p.strip() for p in str(prediction).split(",")]
    golds = [g.strip() for g in str(gold).split(",")]
    return sum(max(locomo_token_f1(p, g) for p in preds) for g in golds) / len(golds)


def locomo_adversarial_correct(prediction: str) -> float:
    """Category 5: 1.0 when the answer says the information is not there ("no information available", "not
    mentioned"), else 0.0.
    """
    low = str(prediction).lower()
    return 1.0 if any(phrase in low for phrase in ADVERSARIAL_PHRASES) else 0.0


@_register("locomo_f1", LOCOMO_VERSION, "official LoCoMo F1 with the per-category rules")
def locomo_f1(prediction: str, gold: str, category: int) -> float:
    """The official per-category LoCoMo score (see module docstring)."""
    if category == 5:
        return locomo_adversarial_correct(prediction)
    if category == 1:
        return locomo_multi_answer_f1(prediction, gold)
    if category == 3:
        gold = str(gold).split(";")[0].strip()
    if category in (2, 3, 4):
        return locomo_token_f1(prediction, gold)
    raise ValueError(f"LoCoMo category must be 1-5, got {category!r}")


def mem0_tokenize(text: str) -> list[str]:
    """mem0's tokenisation: lowercase, ``. , ! ?`` to spaces, split on whitespace (no stemming)."""
    text = str(text).lower()
    for ch in ".,!?":
        text = text.replace(ch, " ")
    return text.split()


@_register("set_f1", "mem0-set-f1-v1", "F1 over token sets, mem0/A-Mem tokenisation (no stemming)")
def set_f1(prediction: str, reference: str) -> float:
    """F1 over token sets (mem0/MemOS style): repeated words count once."""
    pred, ref = set(mem0_tokenize(str(prediction).strip())), set(mem0_tokenize(str(reference).strip()))
    return _prf(len(pred & ref), len(pred), len(ref))


# ------------------------------------------------------------------- MT-Bench-101 retention
# Rule-based information retention (docs/sources.md#summary-benchmark-metrics, the published run's fallback
# without an LLM):
# from each baseline turn take up to 10 distinct key items — numbers of at least 2 characters,
# quoted spans of at least 3, and Capitalised phrases of at least 3 that are not one of 23 common
# sentence-initial words — and count an item retained when the summary-mode answer of the same turn
# contains it case-insensitively (numbers also with their commas removed). The dialogue's rate is
# retained / extracted over all turns (1.0 when nothing was extracted); a turn the summary mode did
# not answer loses all its items. Patterns are ASCII, as in the published harness's RE2 expressions.

RETENTION_VERSION = "retention-rule-v1"
_NUMBER = re.compile(r"\b\d+[\d,.]*\b", re.ASCII)
_QUOTED = re.compile(r"[\"']([^\"']+)[\"']")
_PROPER = re.compile(r"\b[A-Z][a-z]+(?:\s+[A-Z][a-z]+)*\b", re.ASCII)
_COMMON_WORDS = frozenset(
    "The This That These There Then When Where What Which How Why And But For With From Into About "
    "After Before During Without".split()
)
MAX_KEY_ITEMS = 10


def extract_key_information(text: str) -> list[str]:
    """Up to 10 distinct key items of a baseline answer, in the order numbers, quotes, names."""
    if not text:
        return []
    items = [n for n in _NUMBER.findall(text) if len(n.encode()) >= 2]
    items += [q for q in _QUOTED.findall(text) if len(q.encode()) >= 3]
    items += [p for p in _PROPER.findall(text) if len(p.encode()) >= 3 and p not in _COMMON_WORDS]
    return list(dict.fromkeys(items))[:MAX_KEY_ITEMS]


def is_retained(item: str, response: str) -> bool:
    """Whether a key item appears in the response, case-insensitively (a number also with its commas
    removed, so "1,200" matches "1200").
    """
    if not item or not response:
        return False
    low = response.lower()
    if item.lower() in low:
        return True
    if all(ch.isdigit() or ch in ".," for ch in item):
        return item.replace(",", "") in low
    return False


@_register("retention", RETENTION_VERSION, "rule-based key-information retention of summary vs baseline answers")
def retention(baseline_turns: Sequence[str], test_turns: Sequence[str]) -> float:
    """Share of the baseline answers' key items found in the test answers of the same turns."""
    extracted = retained = 0
    for i, baseline in enumerate(baseline_turns):
        items = extract_key_information(baseline)
        extracted += len(items)
        if i < len(test_turns):
            retained += sum(is_retained(item, test_turns[i]) for item in items)
    return retained / extracted if extracted else 1.0


# ------------------------------------------------------------------------ evidence retrieval


@_register("evidence_recall", "evidence-recall-v1", "share of gold evidence ids among the top-k retrieved ids")
def evidence_recall_at_k(ranked_ids: Sequence[str], relevant_ids: Iterable[str], k: int) -> float | None:
    """Fraction of the relevant ids found in the first ``k`` retrieved ids (LoCoMo's recall_acc
    style); ``None`` when there is no gold evidence (such questions are left out, not scored 1).
    """
    relevant = set(relevant_ids)
    if not relevant:
        return None
    top = set(ranked_ids[:k])
    return len(relevant & top) / len(relevant)


@_register("evidence_hit", "evidence-hit-v1", "1 if any gold evidence id is among the top-k retrieved ids")
def evidence_hit_at_k(ranked_ids: Sequence[str], relevant_ids: Iterable[str], k: int) -> float | None:
    """1.0 when any gold evidence id is among the first ``k`` retrieved ids, 0.0 when none is; ``None``
    when there is no gold evidence.
    """
    relevant = set(relevant_ids)
    if not relevant:
        return None
    return 1.0 if relevant & set(ranked_ids[:k]) else 0.0


# ---------------------------------------------------------------------------- aggregation


def mean(values: Iterable[float | None]) -> float | None:
    """Mean of the non-``None`` values (``None`` if there are none)."""
    kept = [v for v in values if v is not None]
    return sum(kept) / len(kept) if kept else None


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolation percentile (numpy's default): q in [0, 100]."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    position = (len(ordered) - 1) * q / 100
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def percentiles(values: Sequence[float], qs: Sequence[float] = (25, 50, 75, 95)) -> dict[str, float]:
    """``{"p25": ..., "p50": ..., "p75": ..., "p95": ...}``."""
    return {f"p{q:g}": percentile(values, q) for q in qs}
