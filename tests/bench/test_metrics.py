from __future__ import annotations

import math

import pytest

from agentlab.bench.scoring import metrics as m


def test_normalisation_keeps_unicode_letters_and_digits() -> None:
    assert m.normalize_tokens("Café-au-lait, 42%!  OK") == ["café", "au", "lait", "42", "ok"]
    assert m.normalize_tokens("") == []


def test_token_f1_hand_computed() -> None:
    # pred/ref 6 tokens each; overlap the x2, cat, on, mat = 5 -> P = R = 5/6.
    assert m.token_f1("The cat sat on the mat.", "the cat is on the mat") == pytest.approx(5 / 6)
    # Clipping: "the" counted once against one "the" in the reference: P = 1/3, R = 1/2 -> 0.4.
    assert m.token_f1("the the the", "the cat") == pytest.approx(0.4)
    assert m.token_f1("", "") == 1.0
    assert m.token_f1("...", "x") == 0.0


def test_rouge_hand_computed_and_equal_to_f1_for_unigrams() -> None:
    scores = m.rouge("The cat sat on the mat.", "the cat is on the mat")
    # Bigrams: 3 of 5 shared (the-cat, on-the, the-mat); LCS "the cat on the mat" = 5 of 6.
    assert scores["rouge1"] == pytest.approx(5 / 6)
    assert scores["rouge2"] == pytest.approx(3 / 5)
    assert scores["rougeL"] == pytest.approx(5 / 6)
    for pred, ref in [("a b c d", "d c b a e"), ("Marketing wanted a cheaper remote.", "The remote must be cheap")]:
        assert m.rouge(pred, ref)["rouge1"] == pytest.approx(m.token_f1(pred, ref))
    assert m.rouge("", "") == {"rouge1": 1.0, "rouge2": 1.0, "rougeL": 1.0}
    assert m.rouge("word", "word")["rouge2"] == 0.0  # no bigrams on either side, texts not empty


def test_stemmed_rouge_is_a_separate_metric() -> None:
    assert m.rouge("cats running", "cat runs")["rouge1"] == 0.0
    stemmed = m.rouge("cats running", "cat runs", stemmed=True)
    assert set(stemmed) == {"rouge1_stem", "rouge2_stem", "rougeL_stem"}
    assert stemmed["rouge1_stem"] == pytest.approx(1.0)
    assert m.version_of("rouge1") != m.version_of("rouge1_stem")


def test_bleu1_hand_computed() -> None:
    # Both tokens match (P = 1); brevity penalty exp(1 - 6/2) = exp(-2).
    assert m.bleu1("cat sat", "the cat sat on the mat") == pytest.approx(math.exp(-2))
    assert m.bleu1("the the the", "the cat") == pytest.approx(1 / 3)
    assert m.bleu1("", "") == 1.0 and m.bleu1("", "x") == 0.0


def test_exact_match_is_substring_of_prediction() -> None:
    assert m.exact_match("She graduated in Business Administration.", " Business administration ") == 1.0
    assert m.exact_match("Business", "Business Administration") == 0.0


def test_summary_scores_rows_carry_versions() -> None:
    rows = {s.metric: s for s in m.summary_scores("a b", "a c", exact=True)}
    assert set(rows) == {"f1", "bleu1", "rouge1", "rouge2", "rougeL", "exact_match"}
    assert rows["f1"].value == pytest.approx(0.5) and rows["f1"].version == m.version_of("f1")
    assert all(s.version for s in rows.values())


# ------------------------------------------------------------------------------------ LoCoMo


def test_locomo_normalize() -> None:
    assert m.locomo_normalize("The Beatles, and a band!") == "beatles band"


def test_locomo_token_f1_is_stemmed_multiset() -> None:
    # pred -> [run, in, park]; gold -> [she, run, in, park]: overlap 3, P = 1, R = 3/4.
    assert m.locomo_token_f1("running in the parks", "She runs in park") == pytest.approx(2 * 0.75 / 1.75)
    assert m.locomo_token_f1("", "") == 0  # the official scorer returns 0 when nothing overlaps


def test_locomo_category_rules() -> None:
    # Category 1: split on commas, best match per gold part, mean over gold parts.
    assert m.locomo_f1("Paris, London", "London, Berlin, Paris", 1) == pytest.approx(2 / 3)
    assert m.locomo_f1("Paris and London", "Paris, London", 1) == pytest.approx(2 / 3)
    # Category 3: gold cut at the first ';'.
    assert m.locomo_f1("Sweden", "Sweden; she mentioned it twice", 3) == pytest.approx(1.0)
    assert m.locomo_f1("Sweden", "Sweden; she mentioned it twice", 2) == pytest.approx(1 / 3)
    # Category 5: the adversarial phrase rule, case-insensitive.
    assert m.locomo_f1("This was Not mentioned in the conversation", "anything", 5) == 1.0
    assert m.locomo_f1("No information available.", "x", 5) == 1.0
    assert m.locomo_f1("Yes", "No", 5) == 0.0
    assert m.locomo_f1("2022", 2022, 4) == 1.0  # type: ignore[arg-type] - int golds exist in the file
    with pytest.raises(ValueError):
        m.locomo_f1("a", "a", 6)


def test_set_f1_differs_from_multiset_f1() -> None:
    # Sets {the, cat} vs {the, cat, sat}: P = 1, R = 2/3 -> 0.8; multiset F1 gives 2/3.
    assert m.set_f1("the the cat", "The cat sat!") == pytest.approx(0.8)
    assert m.token_f1("the the cat", "The cat sat!") == pytest.approx(2 / 3)
    assert m.set_f1("", "x") == 0.0


def test_percentiles_and_mean() -> None:
    assert m.percentiles([50, 10, 40, 20, 30]) == {"p25": 20, "p50": 30, "p75": 40, "p95": pytest.approx(48)}
    assert m.mean([1.0, None, 3.0]) == 2.0
    assert m.mean([None]) is None


# ------------------------------------------------------------------------------- retention


def test_extract_key_information() -> None:
    text = 'The Eiffel Tower opened in 1889 and cost 7,799,401 francs. Then "iron lady" was coined by Paris Match. 5'
    # Numbers first ("5" is too short), then the quote, then Capitalised phrases; a lone common word
    # ("Then") is dropped, but a phrase that starts with one ("The Eiffel Tower") is kept whole.
    assert m.extract_key_information(text) == ["1889", "7,799,401", "iron lady", "The Eiffel Tower", "Paris Match"]
    assert len(m.extract_key_information(" ".join(f"Name{c} {i}0" for i, c in enumerate("abcdefghijkl")))) == 10


def test_retention_rule() -> None:
    baseline = ["Paris has 2,100,000 people.", "Rome is older.", "Berlin."]
    # Turn 1: "2,100,000" found without commas, "Paris" found -> 2/2; turn 2: "Rome" missing -> 0/1;
    # turn 3 not answered: "Berlin" lost. 2 of 4.
    assert m.retention(baseline, ["paris: 2100000 residents", "Milan is older."]) == pytest.approx(0.5)
    assert m.retention(["no key items here"], ["whatever"]) == 1.0
    assert m.is_retained("3.5", "about 3.5 kg") and not m.is_retained("Rome", "")


def test_evidence_recall_and_hit_at_k() -> None:
    ranked = ["D1:3", "D2:1", "D5:7", "D1:4"]
    assert m.evidence_recall_at_k(ranked, ["D1:3", "D1:4"], 2) == pytest.approx(0.5)
    assert m.evidence_recall_at_k(ranked, ["D1:3", "D1:4"], 4) == pytest.approx(1.0)
    assert m.evidence_hit_at_k(ranked, ["D5:7"], 2) == 0.0 and m.evidence_hit_at_k(ranked, ["D5:7"], 3) == 1.0
    assert m.evidence_recall_at_k(ranked, [], 5) is None
