"""A request's cache identity does not move when the code that computes it is made cheaper."""

from __future__ import annotations

import dataclasses
import itertools

from agentlab.events import Message, ToolCall
from agentlab.model.base import GenerationConfig, ModelRequest
from agentlab.model.cache import CachedModel, CallCache
from agentlab.model.scripted import ScriptedModel

#: Keys of these two requests for model "m", as the code of d4e39b0 computes them.
RECORDED_KEYS = ("e57f971ddd3014c0dff37d6c8ad016071689ba31d974715f88cc4e6cc958e83f",
                 "26f37f0f80892e0c60cc7f3a18fdbb1ead6835b20c764e046fc87343f0324401")


def _requests() -> list[ModelRequest]:
    return [ModelRequest([Message.system("s"), Message.user("héllo ✓")]),
            ModelRequest([Message.user("q"), Message.assistant("", (ToolCall("c1", "lookup", '{"q": 1}'),)),
                          Message.tool("c1", "lookup", "result")],
                         tools=[{"type": "function", "function": {"name": "lookup"}}],
                         config=GenerationConfig(temperature=0.7, max_tokens=5, top_p=0.9, stop=("A", "B"), seed=3,
                                                 response_format="json", json_schema='{"type":"object"}'),
                         purpose="judge", sample_index=2)]


def test_cache_keys_are_the_recorded_ones() -> None:
    assert tuple(r.cache_key("m") for r in _requests()) == RECORDED_KEYS


def test_config_dict_is_what_asdict_gave_for_every_field_combination() -> None:
    for temperature, max_tokens, top_p, stop, seed, fmt, schema in itertools.product(
            (None, 0.0, 0.5), (None, 9), (None, 1.0), ((), ("x", "y")), (None, 4), (None, "json"), (None, "{}")):
        config = GenerationConfig(temperature=temperature, max_tokens=max_tokens, top_p=top_p, stop=stop, seed=seed,
                                  response_format=fmt, json_schema=schema)
        reference = dataclasses.asdict(config)
        reference["stop"] = list(config.stop)
        if reference["json_schema"] is None:
            del reference["json_schema"]
        assert config.to_dict() == reference and list(config.to_dict()) == list(reference)


async def test_the_cache_stores_the_text_its_key_hashes() -> None:
    cache = CallCache(None)
    model = CachedModel(ScriptedModel(["one answer"]), cache)
    request = _requests()[1]
    await model.generate(request)
    cache.flush()
    [(key, stored)] = cache._open().execute("SELECT cache_key, request_json FROM call_cache").fetchall()
    assert key == request.cache_key(model.model_name) and stored == request.cache_blob(model.model_name)
    assert (await model.generate(request)).cache_hit
    cache.close()


def test_tool_schemas_are_counted_as_their_compact_json() -> None:
    import json

    from agentlab.model import tokens

    tools = [{"type": "function", "function": {"name": "lookup", "description": "cherche é ✓",
                                               "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}]
    compact = json.dumps(tools, ensure_ascii=False, separators=(",", ":"))
    assert tokens.count_tools(tools) == tokens.count_text(compact) > 0
