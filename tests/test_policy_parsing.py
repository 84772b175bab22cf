"""``--set`` text is parsed by the field's declared type, exactly (agentlab.policy_json.parse_value_text)."""

from __future__ import annotations

import pytest

from agentlab.bench.config import RetrievalSettings
from agentlab.model.base import GenerationConfig
from agentlab.policy_json import FieldError, parse_value_text


def test_an_integer_is_parsed_exactly_however_large() -> None:
    # 2**53 + 1 has no float of its own: parsed through float() it became 2**53.
    assert parse_value_text(GenerationConfig, "seed", "9007199254740993") == 2**53 + 1
    assert parse_value_text(GenerationConfig, "max_tokens", "1e3") == 1000
    assert parse_value_text(GenerationConfig, "seed", "none") is None


@pytest.mark.parametrize("raw", ["1.5", "x", "1e300"])
def test_a_value_that_is_no_integer_is_refused(raw: str) -> None:
    with pytest.raises(FieldError, match="max_tokens must be an integer"):
        parse_value_text(GenerationConfig, "max_tokens", raw)


def test_list_errors_say_what_is_wrong() -> None:
    assert parse_value_text(RetrievalSettings, "ks", "[1, 4]") == (1, 4)
    with pytest.raises(FieldError, match="must end with"):
        parse_value_text(RetrievalSettings, "ks", "[1,4")
    with pytest.raises(FieldError, match="ks must be a list of integers; got '\\[1,x\\]'"):
        parse_value_text(RetrievalSettings, "ks", "[1,x]")
