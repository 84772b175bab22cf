import time

import pytest

from agentlab.events import Message
from agentlab.model import CallRecord, GenerationConfig, ModelRequest, observe_calls
from agentlab.model.embedded import EmbeddedModel, find_gguf


def test_gguf_is_located_without_importing_the_package() -> None:
    path = find_gguf()
    assert path.suffix == ".gguf" and path.stat().st_size > 10_000_000


@pytest.mark.slow
async def test_embedded_model_answers_through_the_openai_path() -> None:
    model = EmbeddedModel()
    request = ModelRequest(
        messages=[Message.user("What is the capital of France? Answer in one sentence.")],
        config=GenerationConfig(max_tokens=32),
    )
    records: list[CallRecord] = []
    started = time.perf_counter()
    with observe_calls(records.append):
        response = await model.generate(request)
    elapsed = time.perf_counter() - started
    print(f"\nembedded: startup {model.server.startup_seconds:.2f}s, first answer {elapsed:.2f}s "
          f"(incl. startup), usage {response.usage}, window {model.info.context_window}: "
          f"{response.message.content!r}")
    assert response.message.content.strip()
    assert response.usage.prompt_tokens > 0 and response.usage.completion_tokens > 0
    assert model.info.context_window == 8192
    assert model.base_url is not None and model.base_url.startswith("http://127.0.0.1:")
    assert len(records) == 1 and records[0].error is None


@pytest.mark.slow
async def test_embedded_model_follows_a_json_schema() -> None:
    """llama.cpp compiles the schema into a grammar: the 135M model's replies parse and end."""
    from agentlab.bench.tasks.qmsum_judge import QMSUM_JUDGE
    from agentlab.memory.extractor import OPERATIONS_SCHEMA, parse_operations

    model = EmbeddedModel()
    judged = await model.generate(ModelRequest(
        [Message.user("Reference: Paris. Answer: Paris is the capital. Is the answer correct? Reply in JSON.")],
        config=GenerationConfig(temperature=0.0, max_tokens=128, response_format="json",
                                json_schema=QMSUM_JUDGE.schema)))
    reply = QMSUM_JUDGE.parse(judged.message.content)
    assert isinstance(reply["correct"], bool) and 0.0 <= reply["confidence"] <= 1.0
    extracted = await model.generate(ModelRequest(
        [Message.user("Remember: my sister Ana moved to Lisbon in May 2023. Reply with memory operations in JSON.")],
        config=GenerationConfig(temperature=0.0, max_tokens=512, response_format="json",
                                json_schema=OPERATIONS_SCHEMA)))
    operations, _ = parse_operations(extracted.message)
    assert extracted.usage.completion_tokens < 512, extracted.message.content  # it ended by itself
    assert all(op.op in {"add", "update", "delete"} for op in operations)


@pytest.mark.slow
async def test_prompt_count_matches_the_server_and_a_repeated_prefix_is_served_from_its_cache() -> None:
    """The demo's fit check counts with the server's tokenizer; its prompt cache reuses a shared prefix."""
    model = EmbeddedModel()
    transcript = [Message.system("Answer from the meeting.")] + [
        Message.user(f"[Turn {i:03d}] Speaker {i % 3}: we discussed the budget item number {i} at length")
        for i in range(30)]
    first = transcript + [Message.user("What was said about item 7?")]
    counted = model.count_prompt_tokens(first)
    config = GenerationConfig(temperature=0.0, max_tokens=4)
    answered = await model.generate(ModelRequest(first, config=config))
    assert counted == answered.usage.prompt_tokens
    again = await model.generate(ModelRequest(transcript + [Message.user("And about item 12?")], config=config))
    # Everything before the new question was processed once already (the question itself is new).
    assert again.usage.cached_tokens >= counted - 30, again.usage
    assert again.usage.cached_tokens < again.usage.prompt_tokens
