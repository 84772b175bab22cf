from __future__ import annotations

import hashlib
import json
import os
from collections import Counter
from pathlib import Path

import pytest

from agentlab.bench.datasets import base
from agentlab.bench.datasets.base import DatasetError
from agentlab.bench.datasets.locomo import (
    CATEGORY_NAMES_MEMORY_REPORT,
    CATEGORY_NAMES_OFFICIAL,
    load_locomo,
    parse_conversation,
)
from agentlab.bench.datasets.longmemeval import (
    PUBLISHED_QUESTION_TYPE,
    load_longmemeval,
    parse_file,
    write_longmemeval_fixture,
)
from agentlab.bench.datasets.mtbench101 import PUBLISHED_TASKS, load_mtbench101
from agentlab.bench.datasets.qmsum import (
    QMSumData,
    filter_by_support_distance,
    load_qmsum,
    parse_meeting,
    round_robin_by_meeting,
    select_cases,
)


def real_data(name: str) -> bool:
    """The genuine shared copies are present (CI sets AGENTLAB_DATA_DIR); else those tests skip."""
    root = os.environ.get("AGENTLAB_DATA_DIR")
    return bool(root) and (Path(root) / name).is_dir()

# ------------------------------------------------------------------------------ QMSum, synthetic


def _meeting(n_turns: int, spans: list[list[list[str]]]) -> dict:
    return {
        "topic_list": [{"topic": "t", "relevant_text_span": [["0", "1"]]}],
        "general_query_list": [{"query": "Summarize the whole meeting.", "answer": "All of it."}],
        "specific_query_list": [
            {"query": f" q{i} ", "answer": f" a{i} ", "relevant_text_span": s} for i, s in enumerate(spans)
        ],
        "meeting_transcripts": [{"speaker": f"S{i % 2}", "content": f" turn {i} "} for i in range(n_turns)],
    }


def test_support_distance_rule_and_case_ids() -> None:
    # 100 turns (last index 99). Ends: 19 -> distance 80 (kept), 20 -> 79 (dropped),
    # 500 is clamped to 99 -> 0 (dropped); spans given end-before-start are reordered.
    m = parse_meeting("Bed999", _meeting(100, [[["5", "19"]], [["3", "4"], ["20", "10"]], [["0", "500"]]]), "x")
    data = QMSumData((m,), "sha")
    cases = data.cases()
    assert [c.case_id for c in cases] == ["Bed999_specific_01", "Bed999_specific_02", "Bed999_specific_03"]
    assert [c.support_distance_from_end for c in cases] == [80, 79, 0]
    assert cases[1].support_window == (3, 20)
    assert cases[0].query == "q0" and cases[0].answer == "a0"  # trimmed as in the published loader
    assert [c.case_id for c in filter_by_support_distance(cases, 80)] == ["Bed999_specific_01"]
    assert len(filter_by_support_distance(cases, 0)) == 3
    assert m.turn_text(0) == "[Turn 001] S0: turn 0"
    assert m.domain == "Academic"
    assert cases[1].relevant_turn_indices()[:3] == [3, 4, 10]


def test_round_robin_by_meeting() -> None:
    a = parse_meeting("B", _meeting(10, [[["0", "0"]]] * 3), "x")
    b = parse_meeting("A", _meeting(10, [[["0", "0"]]] * 1), "x")
    c = parse_meeting("C", _meeting(10, [[["0", "0"]]] * 2), "x")
    cases = QMSumData((a, b, c), "").cases()
    order = [x.case_id for x in round_robin_by_meeting(list(reversed(cases)))]
    assert order == ["A_specific_01", "B_specific_01", "C_specific_01", "B_specific_02", "C_specific_02",
                     "B_specific_03"]


def test_malformed_meeting_names_the_field() -> None:
    bad = _meeting(3, [[["1", "x"]]])
    with pytest.raises(DatasetError, match=r"f.json: specific_query_list\[0\]: relevant_text_span\[0\]"):
        parse_meeting("M", bad, "f.json")
    bad = _meeting(3, [])
    bad["meeting_transcripts"][1] = {"speaker": "S"}
    with pytest.raises(DatasetError, match=r"meeting_transcripts\[1\]: missing field 'content'"):
        parse_meeting("M", bad, "f.json")


def test_qmsum_loader_via_manifest(isolated_data: Path, tmp_path: Path) -> None:
    payload = json.dumps(_meeting(120, [[["0", "5"]], [["100", "110"]]])).encode()
    sha = hashlib.sha256(payload).hexdigest()
    (isolated_data / "qmsum" / "test").mkdir(parents=True)
    (isolated_data / "qmsum" / "test" / "Zed001.json").write_bytes(payload)
    manifest = tmp_path / "m.toml"
    manifest.write_text(
        '[qmsum]\n[[qmsum.files]]\npath = "test/Zed001.json"\nurl = "http://127.0.0.1:9/z"\n'
        f'sha256 = "{sha}"\n'
    )
    data = load_qmsum(manifest=manifest)
    assert [m.meeting_id for m in data.meetings] == ["Zed001"]
    assert [c.case_id for c in select_cases(data)] == ["Zed001_specific_01"]
    # A corrupt row in a file with the right sha cannot happen; a wrong file is caught by sha.
    (isolated_data / "qmsum" / "test" / "Zed001.json").write_bytes(payload.replace(b"turn 1 ", b"turn X "))
    with pytest.raises(DatasetError, match="sha256"):
        load_qmsum(manifest=manifest)


# ----------------------------------------------------------------------------- QMSum, real data


@pytest.mark.skipif(not real_data("qmsum"), reason="AGENTLAB_DATA_DIR with qmsum/ not available")
def test_qmsum_real_counts() -> None:
    data = load_qmsum(allow_download=False)
    assert len(data.meetings) == 35
    assert sum(len(m.turns) for m in data.meetings) == 20718
    assert len(data.cases("specific")) == 244
    assert len(data.cases("general")) == 37
    selected = select_cases(data)
    assert len(selected) == 189
    assert len({c.case_id for c in selected}) == 189
    assert [c.case_id for c in selected[:3]] == ["Bed003_specific_01", "Bed008_specific_01", "Bed016_specific_01"]
    ids = {c.case_id for c in selected}
    # Case ids the published report names must all be in the selection.
    for named in ("ES2004b_specific_04", "Bro019_specific_04", "Bro027_specific_05", "Bro019_specific_06",
                  "Bed003_specific_01", "covid_4_specific_01"):
        assert named in ids
    assert all(c.support_distance_from_end is not None and c.support_distance_from_end >= 80 for c in selected)
    assert len(select_cases(data, limit=5)) == 5
    assert Counter(m.domain for m in data.meetings) == {"Product": 20, "Academic": 9, "Committee": 6}


# ----------------------------------------------------------------------------------- LoCoMo


def test_locomo_category_mappings_disagree_explicitly() -> None:
    assert CATEGORY_NAMES_OFFICIAL[4] == "single-hop" and CATEGORY_NAMES_MEMORY_REPORT[1] == "single-hop"
    assert CATEGORY_NAMES_OFFICIAL[5] == CATEGORY_NAMES_MEMORY_REPORT[5] == "adversarial"


def test_locomo_parse_and_errors() -> None:
    raw = {
        "sample_id": "conv-x",
        "conversation": {
            "speaker_a": "Ann", "speaker_b": "Bob",
            "session_2_date_time": "2 pm on 3 May, 2023", "session_2": [
                {"speaker": "Bob", "dia_id": "D2:1", "text": "later"}],
            "session_1_date_time": "1 pm on 1 May, 2023", "session_1": [
                {"speaker": "Ann", "dia_id": "D1:1", "text": "hi", "img_url": ["u"], "blip_caption": "a dog"}],
        },
        "qa": [
            {"question": "When?", "answer": 2022, "evidence": ["D1:1"], "category": 2},
            {"question": "Adv?", "evidence": [], "category": 5, "adversarial_answer": "nope"},
        ],
    }
    conv = parse_conversation(raw, "f.json: item 0")
    assert [s.number for s in conv.sessions] == [1, 2]
    assert conv.sessions[0].date_time == "1 pm on 1 May, 2023"
    assert conv.sessions[0].turns[0].render(True) == "Ann: hi [shares a dog]"
    assert conv.qa[0].answer == "2022" and conv.qa[0].category_official == "temporal"
    assert conv.qa[1].answer == "nope" and conv.qa[1].adversarial_answer == "nope"
    assert conv.qa[1].qa_id == "conv-x_qa_0002"
    raw["qa"][0]["category"] = 7
    with pytest.raises(DatasetError, match=r"item 0 \(conv-x\): qa\[0\]: category 7 is not 1-5"):
        parse_conversation(raw, "f.json: item 0")


@pytest.mark.skipif(not real_data("locomo"), reason="AGENTLAB_DATA_DIR with locomo/ not available")
def test_locomo_real_counts() -> None:
    data = load_locomo(allow_download=False)
    assert len(data.conversations) == 10
    assert sum(len(c.sessions) for c in data.conversations) == 272
    assert sum(c.turn_count for c in data.conversations) == 5882
    qa = data.all_qa()
    assert len(qa) == 1986
    assert Counter(q.category for _, q in qa) == {1: 282, 2: 321, 3: 96, 4: 841, 5: 446}
    by_report = Counter(q.category_memory_report for _, q in qa)
    assert by_report == {"single-hop": 282, "multi-hop": 321, "temporal": 96, "open-domain": 841, "adversarial": 446}
    assert [len(c.qa) for c in data.conversations] == [199, 105, 193, 260, 242, 158, 190, 239, 196, 204]


# ------------------------------------------------------------------------------ MT-Bench-101


@pytest.mark.skipif(not real_data("mt_bench_101"), reason="AGENTLAB_DATA_DIR with mt_bench_101/ not available")
def test_mtbench101_real_counts() -> None:
    data = load_mtbench101(allow_download=False)
    assert len(data.dialogues) == 1388
    assert sum(len(d.turns) for d in data.dialogues) == 4208
    selected = data.select()
    assert len(selected) == 917
    assert Counter(d.task for d in selected) == {"CC": 147, "CM": 80, "GR": 71, "IC": 150, "PI": 87, "SA": 73,
                                                  "SC": 77, "SI": 149, "TS": 83}
    assert len(data.select(["AR", "CR", "FR", "MR"])) == 153 + 136 + 74 + 108
    assert set(PUBLISHED_TASKS) == {d.task for d in selected}


def test_mtbench101_bad_line(isolated_data: Path, tmp_path: Path) -> None:
    body = b'{"task": "CM", "id": 1, "history": [{"user": "u", "bot": "b"}]}\n{"task": "CM", "id": 2, "history": []}\n'
    (isolated_data / "mt_bench_101").mkdir(parents=True)
    (isolated_data / "mt_bench_101" / "mtbench101.jsonl").write_bytes(body)
    manifest = tmp_path / "m.toml"
    manifest.write_text('[mt_bench_101]\n[[mt_bench_101.files]]\npath = "mtbench101.jsonl"\nurl = "http://127.0.0.1:9/x"\n')
    with pytest.raises(DatasetError, match=r"mtbench101.jsonl: line 2: empty history"):
        load_mtbench101(manifest=manifest)
    with pytest.raises(ValueError, match="unknown MT-Bench-101 task"):
        from agentlab.bench.datasets.mtbench101 import MTBench101Data

        MTBench101Data((), "").select(["ZZ"])


# ------------------------------------------------------------------------------- LongMemEval


def test_longmemeval_fixture_roundtrip(tmp_path: Path) -> None:
    path = write_longmemeval_fixture(tmp_path / "lme.json", n_questions=14)
    data = parse_file(path)
    assert len(data.questions) == 14
    ssu = data.select()
    assert [q.question_id for q in ssu] == ["fx0000", "fx0006", "fx0012"]
    assert all(q.question_type == PUBLISHED_QUESTION_TYPE for q in ssu)
    q = ssu[0]
    assert q.evidence_turns() == [(1, 0)] and q.answer_session_ids == (q.sessions[1].session_id,)
    assert "Lisbon" in q.sessions[1].turns[0].content and q.answer == "Lisbon"
    assert [x.question_id for x in data.questions if x.is_abstention] == ["fx0004_abs", "fx0009_abs"]
    assert len(data.select(limit=2)) == 2
    assert len(data.select(["multi-session", "temporal-reasoning"])) == 4


def test_longmemeval_malformed_row(tmp_path: Path) -> None:
    path = write_longmemeval_fixture(tmp_path / "lme.json", n_questions=3)
    rows = json.loads(path.read_text())
    rows[2]["haystack_sessions"][0][1]["role"] = "system"
    path.write_text(json.dumps(rows))
    with pytest.raises(DatasetError, match=r"item 2 \(fx0002\): haystack_sessions\[0\]\[1\]: role should be"):
        parse_file(path)
    rows[2]["haystack_dates"] = rows[2]["haystack_dates"][:1]
    path.write_text(json.dumps(rows))
    with pytest.raises(DatasetError, match="differ in length"):
        parse_file(path)


def test_longmemeval_resolves_unpinned_file_from_data_dir(isolated_data: Path, tmp_path: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    shared = tmp_path / "shared"
    write_longmemeval_fixture(shared / "longmemeval" / "longmemeval_s_cleaned.json", n_questions=7)
    monkeypatch.setenv("AGENTLAB_DATA_DIR", str(shared))
    data = load_longmemeval()
    assert len(data.questions) == 7 and len(data.sha256) == 64


def test_longmemeval_missing_says_where_and_url(isolated_data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTLAB_OFFLINE", "1")
    with pytest.raises(DatasetError) as err:
        load_longmemeval()
    msg = str(err.value)
    assert str(isolated_data / "longmemeval" / "longmemeval_s_cleaned.json") in msg
    assert "https://huggingface.co/datasets/xiaowu0162/longmemeval-cleaned/resolve/main/longmemeval_s_cleaned.json" in msg


def test_longmemeval_download_path(isolated_data: Path, http_root, tmp_path: Path) -> None:
    root, url = http_root
    write_longmemeval_fixture(root / "longmemeval_oracle.json", n_questions=2)
    manifest = tmp_path / "m.toml"
    manifest.write_text(
        '[longmemeval]\n[[longmemeval.files]]\npath = "longmemeval_oracle.json"\n'
        f'url = "{url}/longmemeval_oracle.json"\n'
    )
    data = load_longmemeval("oracle", manifest=manifest)
    assert len(data.questions) == 2
    assert (isolated_data / "longmemeval" / "longmemeval_oracle.json").is_file()
    base.clear_verification_memory()
