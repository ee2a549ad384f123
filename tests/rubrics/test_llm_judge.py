"""LLMJudge and score parsing.

The judge runs the real OpenAIClient / AnthropicClient against a local stand-in for the paid,
unreachable LLM services (an OpenAI-/Anthropic-compatible HTTP server on a loopback port,
tests/rubrics/fake_llm.py), answering with realistic judge outputs.
"""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from openenv.core.llm_client import (
    AnthropicClient,
    LLMClient,
    LLMUnavailableError,
    OpenAIClient,
)
from openenv.core.rubrics import (
    JudgeError,
    LLMJudge,
    ParsedScore,
    RubricError,
    Sequential,
    WeightedSum,
    parse_score,
)

from .fake_llm import FakeLLMServer, Reply, anthropic_reply, closed_port, meeting, openai_reply
from .helpers import ACTION, OBS, Const

TEMPLATE = "Task answer: {action.text}\nEnvironment said: {observation.text}\nRate the answer."
FAST = {"backoff_base_s": 0.001, "backoff_max_s": 0.05}

# -- parsing realistic outputs ----------------------------------------------------------------

REALISTIC = [
    ("Score: 8/10", 0.8),
    ("**Rating:** 0.7", 0.7),
    ("I'd give it 7 out of 10.", 0.7),
    ('{"score": 0.9}', 0.9),
    ('```json\n{"reasoning": "Mostly right.", "score": 8, "max_score": 10}\n```', 0.8),
    ('Reasoning first.\n{"evaluation": {"rating": "4/5"}}', 0.8),
    ("3/4", 0.75),
    ("85%", 0.85),
    ("Score: 85%", 0.85),
    ("Rating (1-10): 7", 0.7),
    ("**Score**: 6 out of 10", 0.6),
    ("The answer lists 3 items out of the 5 required.\n\nScore: 0.6", 0.6),
    ("The response is accurate but verbose.\n\nFinal Score: 9/10", 0.9),
    ("Score: 2/10 at first glance... on reflection, Final score: 6/10", 0.6),
    ("I would rate this response a 6/10.", 0.6),
    ("The score is 0.85", 0.85),
    ("score = 0.25", 0.25),
    ("1", 1.0),
    ("0", 0.0),
    ("**0.5**", 0.5),
    ("Verdict: 1", 1.0),
]


@pytest.mark.parametrize(("output", "expected"), REALISTIC)
def test_parse_realistic_outputs(output: str, expected: float) -> None:
    parsed = parse_score(output)
    assert parsed is not None
    assert parsed.normalized() == pytest.approx(expected)


@pytest.mark.parametrize(
    "output",
    [
        "The answer is good.",
        "Grade: B",
        "In 2 of the 3 cases it works, but it fails to give 2 examples.",
        "On 1/2/2024 the market fell.",
        "I'm 90% confident the answer is right.",
        "",
    ],
)
def test_unscoreable_outputs_parse_to_none(output: str) -> None:
    assert parse_score(output) is None


def test_parse_with_custom_pattern() -> None:
    assert parse_score("Result: 7 pts", r"Result: (\d+)") == ParsedScore(7.0)
    assert parse_score("grade=8/10", r"grade=(?P<score>\S+)") == ParsedScore(8.0, 10.0)
    assert parse_score("7 of max 9", r"(?P<score>\d) of max (?P<scale>\d)") == ParsedScore(7.0, 9.0)
    assert parse_score("Score: 8", r"Result: (\d+)") is None


def test_normalize_clamps_out_of_range_scores_as_openenv() -> None:
    judge = LLMJudge(TEMPLATE, _StaticClient("Rating: [[7]]"))
    assert judge.score_output("Rating: [[7]]") == 1.0  # no scale given: clamped
    assert judge.score_output("Score: 11/10") == 1.0
    assert judge.score_output("Score: -0.5") == 0.0
    assert LLMJudge(TEMPLATE, _StaticClient(""), scale=10).score_output("Rating: [[7]]") == 0.7
    assert LLMJudge(TEMPLATE, _StaticClient(""), normalize=False).score_output("Score: 8/10") == 8.0


class _StaticClient(LLMClient):
    """An in-process client for tests that only exercise parsing/rendering."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.prompts: list[str] = []

    async def complete(self, prompt: str, **kwargs: Any) -> Any:
        self.prompts.append(prompt)
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


# -- the judge over the real client -----------------------------------------------------------


def judge_for(server: FakeLLMServer, **kwargs: Any) -> LLMJudge:
    client = OpenAIClient(server.url, model="judge", **FAST)
    return LLMJudge(TEMPLATE, client, **kwargs)


async def test_judge_scores_via_openai_compatible_server(llm_server: FakeLLMServer) -> None:
    llm_server.queue(openai_reply("The answer is correct and concise.\n\nScore: 9/10"))
    judge = judge_for(llm_server, complete_kwargs={"temperature": 0.2})
    assert judge.is_async
    assert await judge(ACTION, OBS) == pytest.approx(0.9)
    assert judge.last_score == pytest.approx(0.9)
    assert judge.last_output.endswith("Score: 9/10")
    body = llm_server.requests[0].body
    assert body["messages"][-1]["content"] == (
        "Task answer: hello\nEnvironment said: world\nRate the answer."
    )
    assert body["temperature"] == 0.2


@pytest.mark.parametrize(("output", "expected"), REALISTIC[:8])
async def test_judge_parses_realistic_replies(
    llm_server: FakeLLMServer, output: str, expected: float
) -> None:
    llm_server.queue(openai_reply(output))
    assert await judge_for(llm_server).ascore(ACTION, OBS) == pytest.approx(expected)


async def test_judge_via_anthropic(llm_server: FakeLLMServer) -> None:
    llm_server.queue(anthropic_reply([{"type": "text", "text": "**Rating:** 0.7"}]))
    client = AnthropicClient(llm_server.url, model="claude-judge", api_key="k", **FAST)
    judge = LLMJudge(TEMPLATE, client)
    assert await judge(ACTION, OBS) == pytest.approx(0.7)
    assert llm_server.requests[0].path == "/v1/messages"


async def test_unparseable_answer_raises_judge_error(llm_server: FakeLLMServer) -> None:
    llm_server.queue(openai_reply("I cannot evaluate this without more context."))
    judge = judge_for(llm_server)
    with pytest.raises(JudgeError) as info:
        await judge(ACTION, OBS)
    assert info.value.output == "I cannot evaluate this without more context."
    assert isinstance(info.value, RubricError)
    assert judge.last_score is None  # never a silent 0


async def test_default_score_is_an_explicit_opt_in(llm_server: FakeLLMServer) -> None:
    llm_server.queue(openai_reply("I cannot evaluate this."), openai_reply("Score: 0.4"))
    judge = judge_for(llm_server, default_score=0.25)
    assert await judge(ACTION, OBS) == 0.25  # the caller chose what an unreadable answer is
    assert await judge(ACTION, OBS) == pytest.approx(0.4)
    assert judge.state_dict()["default_score"] == 0.25


async def test_default_score_never_covers_a_failed_call(llm_server: FakeLLMServer) -> None:
    llm_server.queue(*[Reply(503, "overloaded") for _ in range(2)])
    client = OpenAIClient(llm_server.url, model="judge", max_retries=1, **FAST)
    with pytest.raises(LLMUnavailableError, match="503") as info:
        await LLMJudge(TEMPLATE, client, default_score=0.0)(ACTION, OBS)
    assert any("not a score" in note for note in info.value.__notes__)


async def test_unreachable_judge_raises_the_clients_error() -> None:
    client = OpenAIClient(f"http://127.0.0.1:{closed_port()}", model="m", max_retries=0)
    with pytest.raises(LLMUnavailableError):
        await LLMJudge(TEMPLATE, client)(ACTION, OBS)


async def test_judge_error_inside_a_tree_reports_its_path(llm_server: FakeLLMServer) -> None:
    llm_server.queue(openai_reply("no idea"))
    tree = Sequential(format=Const(1.0), quality=judge_for(llm_server))
    with pytest.raises(JudgeError) as info:
        await tree(ACTION, OBS)
    assert info.value.path == "quality"
    assert "'quality' (LLMJudge)" in str(info.value)


async def test_two_judges_run_concurrently(llm_server: FakeLLMServer) -> None:
    both = meeting(2)  # asked one after the other, the first is never answered
    llm_server.respond = lambda request: Reply(200, openai_reply("Score: 1/2").body, meet=both)
    tree = WeightedSum({"a": judge_for(llm_server), "b": judge_for(llm_server)}, [0.5, 0.5])
    assert await tree(ACTION, OBS) == pytest.approx(0.5)
    assert tree.component_scores() == {"a": 0.5, "b": 0.5}


async def test_sync_score_of_a_judge_inside_a_running_loop(llm_server: FakeLLMServer) -> None:
    judge = judge_for(llm_server)
    assert judge.score(ACTION, OBS) == 1.0  # helper thread, its own loop and connection pool
    assert await judge.ascore(ACTION, OBS) == 1.0  # and again on this loop


async def test_template_errors_keep_their_type_with_a_hint() -> None:
    judge = LLMJudge('Reply as {"score": x}', _StaticClient("1"))
    with pytest.raises(KeyError) as info:  # what str.format raises, as in OpenEnv
        await judge(ACTION, OBS)
    assert any("literal braces" in note for note in info.value.__notes__)
    escaped = LLMJudge('Reply as {{"score": x}} for {action.text}', _StaticClient('{"score": 1}'))
    assert await escaped(ACTION, OBS) == 1.0
    assert escaped.client.prompts == ['Reply as {"score": x} for hello']


async def test_client_failures_keep_their_type() -> None:
    judge = LLMJudge(TEMPLATE, _StaticClient(RuntimeError("socket closed")))
    with pytest.raises(RuntimeError, match="socket closed"):
        await judge(ACTION, OBS)
    with pytest.raises(JudgeError, match="not text"):
        await LLMJudge(TEMPLATE, _StaticClient(0.5))(ACTION, OBS)


def test_judge_error_pickles() -> None:
    error = JudgeError("no score", output="meh")
    error.path = "quality"
    clone = pickle.loads(pickle.dumps(error))
    assert type(clone) is JudgeError and clone.output == "meh" and clone.path == "quality"
    assert str(clone) == str(error)


def test_judge_state_dict() -> None:
    judge = LLMJudge(TEMPLATE, _StaticClient("1"), score_pattern=r"S: (\d)", scale=5)
    state = judge.state_dict()
    assert state == {
        "prompt_template": TEMPLATE,
        "score_pattern": r"S: (\d)",
        "default_score": None,  # no opt-in: an unreadable answer raises
        "normalize": True,
        "scale": 5.0,
    }
    other = LLMJudge("x", _StaticClient("1"))
    other.load_state_dict(state)
    assert other.score_output("S: 4") == 0.8
    with pytest.raises(ValueError):
        LLMJudge("x", _StaticClient("1"), scale=0)


async def test_openenv_style_subclass_overriding_render_and_parse() -> None:
    class Strict(LLMJudge):  # overrides the hooks OpenEnv's LLMJudge documents
        def _render_prompt(self, action: Any, observation: Any) -> str:
            return f"Grade {action.text}"

        def _parse_score(self, response: str) -> float:
            match = self._score_pattern.search(response)
            return float(match.group(1)) / 10 if match else self.default_score

    judge = Strict("unused", _StaticClient("7 points"), default_score=0.0)
    assert judge._client is judge.client
    assert await judge(ACTION, OBS) == pytest.approx(0.7)
    assert judge.client.prompts == ["Grade hello"]
