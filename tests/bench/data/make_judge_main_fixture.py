"""Record what main's judge sends and returns, for tests/bench/data/judge_main_fixture.json.

Run against main's code (before the generic judge), e.g. `.venv/bin/python /tmp/make_judge_fixture.py`.
"""
import asyncio, dataclasses, json, subprocess, sys
from types import SimpleNamespace

from agentlab.bench import judge as j
from agentlab.bench.tasks.mtbench101 import MTBench101Task
from agentlab.model.scripted import ScriptedModel

MODEL_NAME = "judge-model"
SAMPLES = {
    "qmsum": [("What was decided about the remote's casing?", "They chose a rubber casing.", "Rubber was chosen."),
              ("Summarise {the} debate on \"cost\"", "Cost: 12.5 € per unit\nno {placeholder}", "")],
    "longmemeval": [("Which degree did I get?", "Business Administration", "An MBA in business."),
                    ("Où suis-je allé ?", "Lisbon {2023}", "I do not know.")],
    "locomo": [("When did Melanie paint a sunrise?", "7 May 2023", "May 7, 2023"),
               ("What is {x}?", "a \"quoted\" answer\nover two lines", "something else")],
    "consistency": [("Tell me about Paris.", "Paris is the capital of France.", "Paris is France's capital."),
                    ("{format} me", "A\n\nwith {braces}", "")],
    "retention": [("Book the 9:00 train to Lyon; bring the passport.", "Take the 9:00 train."),
                  ("x {y} z", "ünïcode\n{}")],
}
REPLIES = [
    '{"correct": true, "confidence": 0.8, "reason": "same points"}',
    '```json\n{"correct": false, "confidence": 0.9, "reason": "wrong"}\n```',
    'Sure: {"correct": "TRUE", "confidence": "0.75"} done',
    '{"correct": true}', '{"confidence": 0.5}', '{"correct": "maybe", "confidence": 0.5}',
    '{"correct": 1, "confidence": 0.5}', '{"correct": true, "confidence": 7}', '{"correct": true, "confidence": "high"}',
    '{"correct": true, "confidence": true}', '{"correct": true, "confidence": 0.5',
    'I think it is correct.', '[1, 2]', '{"a": [1, {"b": 2}]}', '',
    '{"label": "CORRECT", "confidence": 0.7, "reason": "same day"}', '{"label": " wrong ", "confidence": 0.4}',
    '{"label": "CORRECT"}', '{"label": "MAYBE", "confidence": 0.4}', '{"confidence": 0.4}',
    '{"label": "CORRECT", "confidence": -0.1}', '{"label": "correct", "confidence": null}',
    '{"reason": "close", "score": 0.8}', '{"reason": "x", "score": "0.6"}', '{"reason": "x"}',
    '{"score": 1.2}', 'Score: 0.4', 'The answer is fine.\nScore: **1**', 'score: .5 and later Score: 0.2',
    'Score: 3', '{"reason": "r", "score": 0.6, "correct": true, "confidence": 0.3, "label": "WRONG"}',
    'RETENTION_RATE: 0.7\nMISSING: none', 'retention_rate: 1.4.', 'RETENTION_RATE:', 'RETENTION_RATE: abc',
    'nothing here',
]


def request_facts(request):
    return {"messages": [{"role": m.role, "content": m.content} for m in request.messages],
            "config": request.config.to_dict(), "purpose": request.purpose,
            "cache_key": request.cache_key(MODEL_NAME)}


def result_facts(result):
    facts = dataclasses.asdict(result)
    facts["scores"] = [dataclasses.asdict(s) for s in result.to_scores()]
    facts["scores_zero"] = [dataclasses.asdict(s) for s in result.to_scores("m", unparsed_scores_zero=True)]
    return facts


async def main():
    out = {"source": "main " + subprocess.check_output(["git", "rev-parse", "HEAD"], text=True).strip(),
           "model_name": MODEL_NAME, "requests": [], "verdicts": []}
    for bench, samples in SAMPLES.items():
        for fields in samples:
            for reply in REPLIES:
                model = ScriptedModel([reply])
                model.info = dataclasses.replace(model.info, name=MODEL_NAME)
                judge = j.Judge(model, "judge-spec")
                if bench == "retention":
                    ctx = SimpleNamespace(judge=judge)
                    value = await MTBench101Task()._llm_retention(ctx, *fields)
                    result = {"score": value}
                else:
                    result = result_facts(await getattr(judge, bench)(*fields))
                if reply == REPLIES[0]:
                    out["requests"].append({"bench": bench, "fields": list(fields),
                                            "request": request_facts(model.requests[0])})
                if fields == samples[0]:
                    if isinstance(result, dict) and "raw" in result:
                        assert result.pop("raw") == reply
                    out["verdicts"].append({"bench": bench, "reply": reply, "result": result})
    # LongMemEval's exact-match shortcut: no call.
    model = ScriptedModel([])
    result = await j.Judge(model, "judge-spec").longmemeval("Which degree?", "Business Administration",
                                                           "You got a business administration degree.")
    assert not model.requests
    out["exact_match"] = {"fields": ["Which degree?", "Business Administration",
                                     "You got a business administration degree."], "result": result_facts(result)}
    json.dump(out, sys.stdout, indent=1, ensure_ascii=False)
    print()

asyncio.run(main())
