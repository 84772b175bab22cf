"""What the serve tests need from the project's test server: recorded bodies, queued faults, a prefix cache."""

from __future__ import annotations

import openai
import pytest

from agentlab.testing.openai_server import PER_MESSAGE_OVERHEAD, OpenAITestServer, prompt_tokens


def test_prefix_cache_counts_the_leading_messages_sent_before() -> None:
    first = [{"role": "system", "content": "You answer briefly."}, {"role": "user", "content": "Where is Lisbon?"}]
    longer = [*first, {"role": "assistant", "content": "By the river."}, {"role": "user", "content": "Sure?"}]
    edited = [{"role": "system", "content": "You answer at length."}, *longer[1:]]
    with OpenAITestServer(prefix_cache=True, record_requests=True) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0)
        usages = [client.chat.completions.create(model="test-model", messages=m).usage for m in (first, longer, edited)]
        assert [u.prompt_tokens_details.cached_tokens for u in usages] == [0, prompt_tokens(first), 0]
        assert prompt_tokens(first) > 2 * PER_MESSAGE_OVERHEAD
        assert [b["messages"] for b in server.received] == [first, longer, edited]


def test_queued_faults_come_first_and_in_order() -> None:
    with OpenAITestServer() as server:
        server.queue_faults("429", "503")
        client = openai.OpenAI(base_url=server.base_url, api_key="k", max_retries=0)
        messages = [{"role": "user", "content": "hello"}]
        with pytest.raises(openai.RateLimitError):
            client.chat.completions.create(model="test-model", messages=messages)
        with pytest.raises(openai.InternalServerError):
            client.chat.completions.create(model="test-model", messages=messages)
        assert client.chat.completions.create(model="test-model", messages=messages).choices[0].message.content
        assert dict(server.stats.faults) == {"429": 1, "503": 1}
        assert server.received == []  # recording is off unless asked for
        with pytest.raises(ValueError, match="unknown fault kinds"):
            server.queue_faults("teapot")
