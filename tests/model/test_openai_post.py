"""The plain POST of a completion (agentlab.model.openai_post) against the openai library's path.

Every call to a named server goes out as a plain POST; the library path remains for streams and
for the OpenAI API. The two must be indistinguishable from outside: the same request body on the
server, the same response, and for every failure the same error class, sentence and attempts.
"""

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from fake_openai_server import Answer, FakeOpenAIServer, completion, error_body

import agentlab.model.openai_post as openai_post
from agentlab.events import Message
from agentlab.model import GenerationConfig, ModelError, ModelRequest
from agentlab.model.openai_compat import OpenAICompatModel

ROOT = Path(__file__).resolve().parents[2]

USAGE = {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14}


def _model(base_url: str, **kwargs: object) -> OpenAICompatModel:
    options = {"max_attempts": 3, "backoff_base": 0.001, "backoff_max": 0.002, "timeout": 5.0}
    options.update(kwargs)
    return OpenAICompatModel("fake-model", base_url=base_url, api_key="k", **options)  # type: ignore[arg-type]


def _request() -> ModelRequest:
    return ModelRequest(messages=[Message.system("be brief"), Message.user("héllo ✓")],
                        config=GenerationConfig(temperature=0.3, max_tokens=9, stop=("END",)))


async def _outcome(answers: list[Answer], *, plain: bool, monkeypatch: pytest.MonkeyPatch,
                   base_url: str | None = None, **options: object) -> tuple[object, list[dict[str, object]]]:
    """What one generate() gives (the response's parts, or the error's class, text and attempts) and
    the request bodies the server received, on the plain path or the library's.
    """
    monkeypatch.setattr(openai_post, "plain_post_applies", lambda url: plain and url is not None)
    with FakeOpenAIServer(answers) as server:
        url = base_url or server.base_url
        model = _model(url, **options)
        try:
            response = await model.generate(_request())
            outcome: object = ("ok", response.message, response.usage, response.finish_reason, response.attempts)
        except ModelError as exc:  # each server has its own port: the address is left out of the comparison
            outcome = ("error", type(exc).__name__, str(exc).replace(url, "<server>"), exc.attempts, exc.retryable)
        finally:
            await model.aclose()
        return outcome, list(server.requests)


FAILURES = {
    "context length 400": [Answer(400, error_body("This model's maximum context length is 8 tokens",
                                                  code="context_length_exceeded"))],
    "llama.cpp n_ctx": [Answer(400, error_body("the request exceeds the available context size",
                                               type_="exceed_context_size_error", n_ctx=8, n_prompt_tokens=12))],
    "plain 400": [Answer(400, error_body("bad temperature"))],
    "bare message body": [Answer(422, {"message": "unprocessable", "type": "invalid"})],
    "numeric code": [Answer(400, {"error": {"message": "nope", "code": 400}})],
    "text body": [Answer(404, "no such route", headers={"content-type": "text/plain"})],
    "empty body": [Answer(403, "", headers={"content-type": "text/plain"})],
    "json list body": [Answer(409, [1, 2])],  # type: ignore[arg-type]
    "401": [Answer(401, error_body("bad key", type_="auth"))],
    "408 then 500s": [Answer(408, "slow"), Answer(500, error_body("kaboom")), Answer(503, "down")],
    "429 retry-after then ok": [Answer(429, error_body("slow down"), headers={"retry-after": "0.001"}),
                                Answer(body=completion("fine", usage=USAGE))],
    "garbage 200 then ok": [Answer(body="not json"), Answer(body=completion("after garbage", usage=USAGE))],
    "error object in a 200": [Answer(body=error_body("context window exceeded"))],
    "no choices": [Answer(body={"id": "x", "choices": []})],
    "ok without usage": [Answer(body=completion("counted here"))],
    "tool call": [Answer(body=completion(None, tool_calls=[{"id": "c1", "type": "function", "function": {
        "name": "lookup", "arguments": {"q": 1}}}], usage=USAGE, finish_reason="tool_calls"))],
}


@pytest.mark.parametrize("case", list(FAILURES))
async def test_plain_post_and_library_give_the_same_outcome(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    plain, plain_sent = await _outcome(FAILURES[case], plain=True, monkeypatch=monkeypatch)
    library, library_sent = await _outcome(FAILURES[case], plain=False, monkeypatch=monkeypatch)
    assert plain == library
    assert plain_sent == library_sent and plain_sent[0]["messages"][1] == {"role": "user", "content": "héllo ✓"}


async def test_unreachable_server_reads_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeOpenAIServer([Answer()]) as server:
        closed = server.base_url  # the server stops at the end of the block: its port then refuses
    plain, _ = await _outcome([Answer()], plain=True, monkeypatch=monkeypatch, base_url=closed)
    library, _ = await _outcome([Answer()], plain=False, monkeypatch=monkeypatch, base_url=closed)
    assert plain == library and plain[1] == "ModelUnavailable" and "could not be reached" in str(plain[2])


async def test_timeout_reads_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    slow = [Answer(body=completion("late"), delay=0.5)]
    plain, _ = await _outcome(slow, plain=True, monkeypatch=monkeypatch, timeout=0.1, max_attempts=2)
    library, _ = await _outcome(slow, plain=False, monkeypatch=monkeypatch, timeout=0.1, max_attempts=2)
    assert plain == library and plain[1] == "ModelTimeout" and plain[3] == 2


def test_library_only_settings_send_calls_through_the_library(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in openai_post.LIBRARY_ONLY_ENV:
        monkeypatch.delenv(name, raising=False)
    assert openai_post.plain_post_applies("http://127.0.0.1:1/v1")
    assert not openai_post.plain_post_applies(None)  # the OpenAI API itself: the library's credentials apply
    monkeypatch.setenv("OPENAI_CUSTOM_HEADERS", "X-Gateway: 1")
    assert not openai_post.plain_post_applies("http://127.0.0.1:1/v1")


def test_a_run_against_a_named_server_never_imports_the_library() -> None:
    script = textwrap.dedent("""
        import asyncio, sys
        sys.path.insert(0, sys.argv[1])
        from fake_openai_server import Answer, FakeOpenAIServer, completion
        from agentlab.events import Message
        from agentlab.model import ModelRequest
        from agentlab.model.registry import get_model

        async def main(url):
            model = get_model(f"openai:fake@{url}", cache=False, context_window=4096)
            response = await model.generate(ModelRequest([Message.user("hi")]))
            await model.aclose()
            return response.message.content

        with FakeOpenAIServer([Answer(body=completion("plain"))]) as server:
            print(asyncio.run(main(server.base_url)), "openai" in sys.modules, "pydantic" in sys.modules)
    """)
    out = subprocess.run([sys.executable, "-c", script, str(Path(__file__).parent)], capture_output=True, text=True,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, check=False, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["plain", "False", "False"]
