"""The LoCoMo paper's retrieval protocol: units, recall arithmetic, aggregation, the CLI and the stored table."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from cli_helpers import run_cli

from agentlab.bench.config import apply_overrides, load_settings
from agentlab.bench.datasets.locomo import LoCoMoData, parse_conversation
from agentlab.bench.retrieval import locomo as lr
from agentlab.bench.store.retrieval_protocol import published_recall, read_protocol_table
from agentlab.bench.tasks import get_task
from agentlab.bench.tasks import locomo as lc
from agentlab.recall.embed import HashEmbedder

RAW = {
    "sample_id": "conv-26",  # a development conversation
    "conversation": {
        "speaker_a": "Caroline",
        "speaker_b": "Melanie",
        "session_1_date_time": "1:56 pm on 8 May, 2023",
        "session_1": [
            {"speaker": "Caroline", "dia_id": "D1:1", "text": "I went to a support group yesterday."},
            {"speaker": "Melanie", "dia_id": "D1:2", "text": "I painted a sunrise at the lake.",
             "img_url": ["http://example.invalid/p.jpg"], "blip_caption": "a photo of a painting"},
        ],
        "session_2_date_time": "10:00 am on 20 June, 2023",
        "session_2": [
            {"speaker": "Caroline", "dia_id": "D2:1", "text": "I adopted a puppy named Oscar."},
            {"speaker": "Melanie", "dia_id": "D2:2", "text": "My kids love camping in the mountains."},
        ],
    },
    "observation": {
        "session_1_observation": {
            "Caroline": [["Caroline attended a support group.", "D1:1"]],
            "Melanie": [["Melanie painted a lake sunrise and shared it.", ["D1:2", "D1:1"]]],
        },
        "session_2_observation": {
            "Caroline": [["Caroline adopted a puppy called Oscar.", "D2:1, D2:2"]],
        },
    },
    "session_summary": {
        "session_2_summary": "Caroline adopted Oscar; Melanie's kids go camping.",
        "session_1_summary": "Caroline went to a support group and Melanie painted a sunrise.",
    },
    "qa": [
        {"question": "What did Melanie paint at the lake?", "answer": "a sunrise", "evidence": ["D1:2"], "category": 4},
        {"question": "What puppy did Caroline adopt and where do the kids go camping?", "answer": "Oscar; mountains",
         "evidence": ["D2:1", "D2:2", "D1:1"], "category": 1},
        {"question": "When did Caroline go to the support group?", "answer": "7 May 2023", "evidence": [],
         "category": 2},
    ],
}


@pytest.fixture(autouse=True)
def tiny_dataset(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    second = copy.deepcopy(RAW)
    second["sample_id"] = "conv-99"  # held out
    data = LoCoMoData((parse_conversation(RAW, "fixture"), parse_conversation(second, "fixture")), "fixture-sha")
    monkeypatch.setattr(lc, "load_locomo", lambda: data)
    monkeypatch.setenv("AGENTLAB_EMBED_CACHE_DB", str(tmp_path / "embed.duckdb"))


def cases():  # type: ignore[no-untyped-def]
    task = get_task("locomo")
    settings = apply_overrides(load_settings("locomo", task.default_settings()), [])
    return task.load_cases(settings).cases, settings


# ------------------------------------------------------------------------------ arithmetic


def test_fractional_credit_and_empty_evidence() -> None:
    assert lr.question_recall(["D1:2", "D2:5"], ["D1:1", "D1:2", "D2:5"], "dialog") == pytest.approx(2 / 3)
    assert lr.question_recall(["D1:2"], [], "dialog") == 0.0
    # Evidence strings are matched as written: a malformed entry is never found.
    assert lr.question_recall(["D8:6", "D9:17"], ["D8:6; D9:17"], "dialog") == 0.0
    rows = [{"category": 4, "recall": {5: 1.0}}, {"category": 4, "recall": {5: 0.5}},
            {"category": 2, "recall": {5: 0.0}}]  # the last one: no evidence, still in the denominator
    out = lr.aggregate_recall(rows, [5])
    assert out["overall"] == {"n": 3, "recall@5": pytest.approx(50.0)}
    assert out["per_category"]["4"]["recall@5"] == pytest.approx(75.0)
    assert out["per_category"]["2"]["recall@5"] == 0.0
    assert list(out["per_category"]) == ["4", "2"]  # the paper's column order: 4, 1, 2, 3, 5


def test_multi_id_observations_count_k_in_units() -> None:
    conversation = parse_conversation(RAW, "fixture")
    units = lr.protocol_units(conversation, "observation")
    assert [u.ids for u in units] == [("D1:1",), ("D1:2", "D1:1"), ("D2:1", "D2:2")]
    assert units[0].text == "1:56 pm on 8 May, 2023. Caroline attended a support group."
    # k = 1 unit yields both ids of the comma-joined observation.
    assert lr.retrieved_ids(units, [2, 0, 1], 1) == ["D2:1", "D2:2"]
    assert lr.question_recall(lr.retrieved_ids(units, [2, 0, 1], 1), ["D2:1", "D2:2", "D1:1"],
                              "observation") == pytest.approx(2 / 3)
    assert lr.question_recall(lr.retrieved_ids(units, [2, 0, 1], 2), ["D2:1", "D2:2", "D1:1"],
                              "observation") == 1.0


def test_summary_units_find_evidence_by_session() -> None:
    conversation = parse_conversation(RAW, "fixture")
    units = lr.protocol_units(conversation, "summary")
    assert [u.ids for u in units] == [("S1",), ("S2",)]  # session order, whatever the file's order
    assert lr.question_recall(["S2"], ["D2:7", "D1:1"], "summary") == pytest.approx(0.5)
    assert lr.question_recall(["S12"], ["D1:2"], "summary") == 0.0  # S12 is not S1
    assert lr.question_recall(["S1", "S2"], ["D2:7", "D1:1"], "summary") == 1.0


def test_dialog_unit_text_follows_the_protocol() -> None:
    units = lr.protocol_units(parse_conversation(RAW, "fixture"), "dialog")
    assert units[0].text == 'Caroline said, "I went to a support group yesterday."'
    assert units[1].text == 'Melanie said, "I painted a sunrise at the lake." and shared a photo of a painting'
    with pytest.raises(ValueError, match="use one of dialog, observation, summary"):
        lr.protocol_units(parse_conversation(RAW, "fixture"), "turns")


# -------------------------------------------------------------------------------- protocol


def test_lexical_protocol_by_hand() -> None:
    all_cases, settings = cases()
    out = lr.protocol_recall(all_cases, "summary", "lexical", settings)
    assert out["protocol"] == "locomo-acl2024-table3" and out["ks"] == [2, 5, 10]
    assert out["questions"] == 6 and out["without_evidence"] == 2
    # With 2 summaries, k >= 2 retrieves both sessions: the two questions with evidence score 1,
    # the one without scores 0 -> 2/3 per conversation, on every split.
    assert out["overall"]["recall@2"] == pytest.approx(200 / 3)
    assert out["per_category"]["4"]["recall@2"] == 100.0 and out["per_category"]["2"]["recall@2"] == 0.0
    assert out["splits"]["dev"]["conversations"] == ["conv-26"]
    assert out["splits"]["held_out"]["conversations"] == ["conv-99"]
    assert out["splits"]["held_out"]["questions"] == 3
    assert out["published"]["overall"] == {"recall@2": 65.9, "recall@5": 72.1, "recall@10": 84.7}


def test_dialog_lexical_ranks_the_matching_turn_first() -> None:
    all_cases, settings = cases()
    config = lr.RetrieverConfig(stem=False)
    out = lr.protocol_recall(all_cases, "dialog", "lexical", settings, config=config)
    units = lr.protocol_units(parse_conversation(RAW, "fixture"), "dialog")
    ranker = lr.UnitRanker(units, "dialog", "lexical", config, None)
    assert ranker.rank("What did Melanie paint at the lake?")[0] == 1
    # 4 units, k >= 5: every turn is retrieved; the empty-evidence question still counts 0.
    assert out["overall"]["recall@5"] == pytest.approx(200 / 3)


def test_dense_and_hybrid_use_the_embedder_and_its_cache() -> None:
    all_cases, settings = cases()
    from agentlab.recall.embed_cache import CachedEmbedder, EmbeddingCache

    cache = EmbeddingCache(None)
    first = CachedEmbedder(HashEmbedder(), cache)
    dense = lr.protocol_recall(all_cases, "dialog", "dense", settings, embedder=first)
    assert dense["embedder"] == "hash-256" and first.embedded > 0
    again = CachedEmbedder(HashEmbedder(), cache)
    hybrid = lr.protocol_recall(all_cases, "dialog", "hybrid", settings, embedder=again)
    assert again.embedded == 0 and again.reused > 0  # every document and question vector replayed
    assert hybrid["latency"]["query"]["n"] == 6
    assert hybrid["overall"]["recall@50"] == pytest.approx(200 / 3)


def test_light_stem_joins_word_forms() -> None:
    assert {lr.light_stem(w) for w in ("painting", "painted", "paints")} == {"paint"}
    assert lr.light_stem("running") == "run" and lr.light_stem("hobbies") == "hobby"
    assert lr.light_stem("is") == "is"


def test_published_row_has_every_k_of_each_unit() -> None:
    for unit, ks in lr.PROTOCOL_KS.items():
        assert set(published_recall(unit)["overall"]) == {f"recall@{k}" for k in ks}
    assert published_recall("dialog")["overall"]["recall@5"] == 56.7


# ------------------------------------------------------------------------------------- CLI


def test_cli_unit_json_shape_and_stored_rows(tmp_path: Path) -> None:
    db = tmp_path / "r.duckdb"
    code, out, err = run_cli("locomo", "--retrieval-only", "--unit", "dialog", "--retriever", "lexical", "--json",
                             "--limit", "4", "--db", str(db))
    assert code == 0, err
    result = json.loads(out)
    assert result["protocol"] == "locomo-acl2024-table3" and result["cases"] == 4 and result["questions"] == 4
    assert set(result["overall"]) == {"n", "recall@5", "recall@10", "recall@25", "recall@50"}
    assert set(result["per_category"]) == {"4", "1", "2"}
    assert set(result["splits"]) == {"all", "held_out", "dev"}
    assert result["published"]["retriever"] == "DRAGON"
    assert result["latency"]["query"]["n"] == 4 and result["latency"]["published_search"]["systems"]["mem0"]
    table = read_protocol_table(db, "locomo")
    assert set(table["split"]) == {"all", "held_out", "dev"} and set(table["k"]) == {5, 10, 25, 50}
    stored = table[(table["split"] == "all") & (table["category"] == "overall") & (table["k"] == 5)]
    assert stored["recall"].iloc[0] == pytest.approx(result["overall"]["recall@5"])
    # Without --unit: the preload-window figures, named for what they measure.
    code, out, _ = run_cli("locomo", "--retrieval-only", "--json", "--limit", "2")
    assert code == 0 and json.loads(out)["protocol"] == "agentlab-preload-window"


def test_cli_text_prints_the_paper_row(tmp_path: Path) -> None:
    code, out, _ = run_cli("locomo", "--retrieval-only", "--unit", "summary", "--retriever", "lexical",
                           "--db", str(tmp_path / "r.duckdb"))
    assert code == 0
    assert "paper DRAGON" in out and "65.9" in out and "[held_out] conv-99" in out and "mem0: p50 0.148 s" in out


@pytest.mark.parametrize(("argv", "needle"), [
    (["--retrieval-only", "--unit", "turns"], "locomo --unit 'turns': use one of dialog, observation, summary"),
    (["--unit", "dialog"], "--unit applies with --retrieval-only"),
    (["--retrieval-only", "--retriever", "dense"], "--retriever applies with --unit"),
])
def test_cli_bad_unit_is_one_line(argv: list[str], needle: str, tmp_path: Path) -> None:
    db = tmp_path / "r.duckdb"
    code, out, err = run_cli("locomo", *argv, "--db", str(db))
    assert code == 2 and err.startswith("error: ") and err.count("\n") == 1, err
    assert needle in err
    assert not db.exists()


# ---------------------------------------------------------------------------------- tuning


def test_tuning_grid_runs_on_the_dev_conversations_only() -> None:
    from agentlab.bench.retrieval import tuning

    grid = tuning.parse_grid(["stem=false,true", "rrf_k=5"], "hybrid")
    assert grid["stem"] == [False, True] and grid["rrf_k"] == [5]
    with pytest.raises(ValueError, match="expected field=v1,v2"):
        tuning.parse_grid(["depth=3"], "lexical")
    with pytest.raises(ValueError, match="expected true or false"):
        tuning.parse_grid(["stem=yes"], "lexical")
    cases, _ = tuning.dev_cases()
    assert {c.data.conversation.sample_id for c in cases} == {"conv-26"}  # conv-99 is held out
    rows = tuning.tune("summary", "lexical", {"stem": [False, True]})
    assert len(rows) == 2 and rows[0]["mean"] >= rows[1]["mean"]
    # Ranked by dev recall alone: no margin over the paper's row enters (or is printed).
    assert set(rows[0]) == {"config", "mean", "@2", "@5", "@10"}


def test_indexed_text_adds_neighbours_of_the_same_session_and_the_date() -> None:
    units = lr.protocol_units(parse_conversation(RAW, "fixture"), "dialog")
    plain = lr.indexed_texts(units, "dialog")
    assert plain == [u.text for u in units]
    widened = lr.indexed_texts(units, "dialog", context_turns=1, date=True)
    # Turn D1:2 gets D1:1 but not D2:1 (another session); the date leads.
    assert widened[1] == f"1:56 pm on 8 May, 2023. {units[1].text} {units[0].text}"
    assert widened[2] == f"10:00 am on 20 June, 2023. {units[2].text} {units[3].text}"
    # Observations already carry their date; neighbours apply to dialog turns only.
    observations = lr.protocol_units(parse_conversation(RAW, "fixture"), "observation")
    assert lr.indexed_texts(observations, "observation", context_turns=2, date=True) == [o.text for o in observations]


def test_cli_unit_missing_from_the_data_is_one_line(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    bare = {k: v for k, v in RAW.items() if k not in ("observation", "session_summary")}  # like a trimmed copy
    data = LoCoMoData((parse_conversation(bare, "fixture"),), "fixture-sha")
    monkeypatch.setattr(lc, "load_locomo", lambda: data)
    code, _, err = run_cli("locomo", "--retrieval-only", "--unit", "observation", "--retriever", "lexical",
                           "--db", str(tmp_path / "r.duckdb"))
    assert code == 2 and err.count("\n") == 1, err
    assert "conv-26 has no observation units in the data file" in err


def test_observation_sources_and_summary_sentences() -> None:
    conversation = parse_conversation(RAW, "fixture")
    observations = lr.protocol_units(conversation, "observation")
    # An observation's sources are the protocol texts of the turns it cites, in citation order.
    assert observations[1].sources == ('Melanie said, "I painted a sunrise at the lake." and shared a photo of a '
                                       'painting Caroline said, "I went to a support group yesterday."')
    assert lr.indexed_texts(observations, "observation", sources=True)[0] == (
        '1:56 pm on 8 May, 2023. Caroline attended a support group. Caroline said, "I went to a support group '
        'yesterday."')
    assert lr.sentences("Caroline adopted Oscar; Melanie's kids go camping. They hike! Who? ") == [
        "Caroline adopted Oscar; Melanie's kids go camping.", "They hike!", "Who?"]
    assert lr.sentences("no end") == ["no end"]
    # With sentences, a summary scores its best sentence: the vector of "puppy" matches one sentence only.
    summaries = [lr.RetrievalUnit("Caroline went to a support group. Melanie painted a sunrise at the lake.", ("S1",),
                                  1, ""),
                 lr.RetrievalUnit("They talked about many things, work and weather and news and a puppy.", ("S2",),
                                  2, "")]
    config = lr.RetrieverConfig(dense_sentences=True)
    ranker = lr.UnitRanker(summaries, "summary", "dense", config, HashEmbedder())
    assert ranker.matrix is not None and ranker.matrix.shape[0] == 3 and list(ranker.owner) == [0, 0, 1]
    assert ranker.rank("Melanie painted a sunrise at the lake")[0] == 0


# ------------------------------------------------------------- retrievers and their indexed text


def test_protocol_text_variant_indexes_exactly_the_unit_text() -> None:
    from agentlab.bench.retrieval import retrievers as lrs

    conversation = parse_conversation(RAW, "fixture")
    for unit in lr.UNITS:
        base, config = lrs.resolve("lexical-protocol-text", unit)
        units = lr.protocol_units(conversation, unit)
        assert base == "lexical"
        assert lr.indexed_texts(units, unit, config.lexical_context_turns, config.lexical_date,
                                config.lexical_sources) == [u.text for u in units]
        assert not lrs.is_expanded(unit, base, config)
        # The same BM25 otherwise: stemming and its parameters are the tuned ones.
        assert (config.stem, config.bm25_k1, config.bm25_b) == (lr.TUNED[unit].stem, lr.TUNED[unit].bm25_k1,
                                                               lr.TUNED[unit].bm25_b)
    assert lrs.is_expanded("dialog", "lexical", lr.TUNED["dialog"])
    assert lrs.describe_indexed_text("dialog", "lexical", lr.TUNED["dialog"]) == (
        "BM25: the turn's protocol text + its session date + the 2 turns either side in its session "
        "(document expansion)")
    assert lrs.describe_indexed_text("observation", "hybrid", lrs.resolve("hybrid-protocol-text", "observation")[1]) \
        == "BM25: the observation's protocol text; dense: the observation's protocol text"
    with pytest.raises(ValueError, match="use one of lexical, dense, hybrid, lexical-protocol-text"):
        lrs.resolve("bm25", "dialog")


def test_cli_unit_without_retriever_prints_one_table_naming_each_indexed_text(tmp_path: Path) -> None:
    db = tmp_path / "r.duckdb"
    code, out, err = run_cli("locomo", "--retrieval-only", "--unit", "dialog", "--set", "recall.embedder=hash",
                             "--db", str(db))
    assert code == 0, err
    lines = out.splitlines()
    table = lines[lines.index(next(line for line in lines if line.startswith("[all]"))):]
    table = table[:next(i for i, line in enumerate(table) if line.startswith("[held_out]"))]
    assert table[1].split()[:2] == ["retriever", "@5"] and table[1].endswith("indexed text")
    assert table[2].startswith("  paper DRAGON") and table[2].endswith("the unit's protocol text")
    names = [row.split()[0] for row in table[3:]]
    assert names == ["lexical-protocol-text", "lexical", "dense", "hybrid-protocol-text", "hybrid"]
    by_name = dict(zip(names, table[3:], strict=True))
    assert by_name["lexical-protocol-text"].endswith("BM25: the turn's protocol text")
    assert "(document expansion)" in by_name["lexical"] and "(document expansion)" in by_name["hybrid"]
    assert "dense vectors: hash-256" in out
    stored = read_protocol_table(db, "locomo")
    assert set(stored["retriever"]) == set(names)
    texts = stored.groupby("retriever")["indexed_text"].unique()
    assert texts["lexical-protocol-text"].tolist() == ["BM25: the turn's protocol text"]


def test_cli_json_of_one_retriever_names_its_indexed_text(tmp_path: Path) -> None:
    code, out, err = run_cli("locomo", "--retrieval-only", "--unit", "observation", "--retriever",
                             "lexical-protocol-text", "--json", "--db", str(tmp_path / "r.duckdb"))
    assert code == 0, err
    result = json.loads(out)
    assert result["retriever"] == "lexical-protocol-text" and result["ranker"] == "lexical"
    assert result["indexed_text"] == "BM25: the observation's protocol text"
    assert result["document_expansion"] is False and result["config"]["lexical_sources"] is False
    code, out, _ = run_cli("locomo", "--retrieval-only", "--unit", "observation", "--retriever", "lexical",
                           "--db", str(tmp_path / "r.duckdb"))
    assert code == 0
    assert ("indexed text: BM25: the observation's protocol text + the text of the turns it cites "
            "(document expansion)") in out


def test_a_results_file_from_before_indexed_text_gains_the_column(tmp_path: Path) -> None:
    import duckdb

    from agentlab.bench.store import retrieval_protocol as store

    db = tmp_path / "old.duckdb"
    with duckdb.connect(str(db)) as conn:  # the table as it was, one old row in it
        conn.execute("\n".join(line for line in store._SCHEMA.splitlines() if "indexed_text" not in line))
        conn.execute(f"INSERT INTO {store.TABLE} (benchmark, protocol, unit, retriever, split, category, k) "
                     "VALUES ('locomo', 'locomo-acl2024-table3', 'summary', 'lexical', 'all', 'overall', 2)")
    code, _, err = run_cli("locomo", "--retrieval-only", "--unit", "dialog", "--retriever", "lexical",
                           "--db", str(db))
    assert code == 0, err
    table = read_protocol_table(db, "locomo")
    old = table[table["unit"] == "summary"]
    assert len(old) == 1 and old["indexed_text"].isna().all()
    assert table[table["unit"] == "dialog"]["indexed_text"].str.contains("document expansion").all()
