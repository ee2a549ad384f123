"""The reasoning gym environment over the wire: reasoning-gym's own questions and verifiers,
seeded resets, typed errors for bad options, answer tags and composite datasets."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

pytest.importorskip(
    "reasoning_gym_env",
    reason="reasoning_gym_env is outside the uv workspace (reasoning-gym needs a C compiler); "
    "`uv pip install -e envs/reasoning_gym_env` installs it",
)

from openenv.core.errors import InvalidActionError, InvalidRequestError
from openenv.testing import check_env, check_server
from reasoning_gym_env import ReasoningGymAction, ReasoningGymEnv
from reasoning_gym_env.server.reasoning_gym_environment import ReasoningGymEnvironment
from tests.conformance.helpers import assert_error, assert_observation_frame, request, ws_connect
from tests.support.server import RunningServer, serve


@pytest.fixture(scope="module")
def server() -> Iterator[RunningServer]:
    with serve("reasoning_gym_env.server.app:app") as running:
        yield running


def chain_sum(question: str) -> int:
    """The answer to a chain_sum question (`... problem: 4 - 1 - 7 =`)."""
    tokens = question.rsplit(":", 1)[1].removesuffix("=").split()
    total, sign = 0, 1
    for token in tokens:
        if token in "+-":
            sign = 1 if token == "+" else -1
        else:
            total += sign * int(token)
    return total


def test_passes_the_environment_checker_in_process() -> None:
    report = check_env(ReasoningGymEnvironment)  # plays the action schema's examples
    assert report.ok, str(report)


def test_passes_the_environment_checker_over_the_wire(server: RunningServer) -> None:
    report = check_server(server.url)
    assert report.ok, str(report)


async def test_answers_are_scored_by_the_datasets_verifier(server: RunningServer) -> None:
    async with ReasoningGymEnv(base_url=server.url) as env:
        first = await env.reset(dataset_name="chain_sum", seed=5, size=3)
        question = first.observation.question
        assert question and "arithmetic problem" in question
        # Nothing of the solution before the step.
        assert first.observation.correct_answer is None
        assert first.observation.dataset_metadata is None
        assert first.reward == 0.0 and not first.done
        assert first.observation.metadata == {"dataset": "chain_sum", "index": 0}
        right = await env.step(ReasoningGymAction(answer=str(chain_sum(question))))
        assert right.done and right.reward == 1.0 and right.observation.score == 1.0
        assert right.observation.correct_answer == str(chain_sum(question))
        assert right.observation.dataset_metadata["source_dataset"] == "chain_sum"
        assert right.observation.question is None
        # The dataset stays with the session: the next questions, wrapping after `size`.
        seen = [question]
        for _ in range(3):
            seen.append((await env.reset()).observation.question)
            wrong = await env.step(ReasoningGymAction(answer="not a number"))
            assert wrong.done and wrong.reward == 0.0
        assert seen[3] == seen[0] and len(set(seen[:3])) == 3
        state = await env.state()
        assert (state.dataset_name, state.seed, state.size, state.index) == ("chain_sum", 5, 3, 0)
        assert state.answered and state.step_count == 1


async def test_a_seeded_reset_asks_the_same_question(server: RunningServer) -> None:
    async with (
        ReasoningGymEnv(base_url=server.url) as env,
        ReasoningGymEnv(base_url=server.url) as other,
    ):
        default = await env.reset()
        state = await env.state()
        assert (state.dataset_name, state.seed, state.size) == ("leg_counting", 42, 1000)
        again = await other.reset(seed=42)
        assert again.observation.question == default.observation.question
        await env.reset(seed=9)
        nine = (await env.reset(seed=9)).observation.question
        await env.reset()
        assert (await env.reset(seed=9)).observation.question == nine
        assert (await other.reset(seed=9)).observation.question == nine


async def test_bad_options_get_typed_errors_and_the_session_goes_on(
    server: RunningServer,
) -> None:
    async with ReasoningGymEnv(base_url=server.url) as env:
        asked = await env.reset(dataset_name="chain_sum", seed=1)
        with pytest.raises(InvalidRequestError) as unknown:
            await env.reset(dataset_name="leg_count", seed=1, size=10)
        assert "did you mean leg_counting" in unknown.value.message
        assert "leg_counting" in unknown.value.data["available"]
        assert unknown.value.data["errors"][0]["loc"] == ["dataset_name"]
        assert unknown.value.category == "client"
        with pytest.raises(InvalidRequestError, match="did you mean max_terms"):
            await env.reset(dataset_config={"max_term": 3})
        with pytest.raises(InvalidRequestError, match="refused the chain_sum config"):
            await env.reset(dataset_config={"min_terms": 5, "max_terms": 2})
        with pytest.raises(InvalidRequestError, match="positive number"):
            await env.reset(dataset_specs=[{"name": "chain_sum", "weight": 0}])
        with pytest.raises(InvalidRequestError, match="between 1 and"):
            await env.reset(size=0)
        with pytest.raises(InvalidRequestError, match="plain tag name"):
            await env.reset(answer_tag="a.*")
        # None of it changed the session: the question is still open and answerable.
        state = await env.state()
        assert (state.dataset_name, state.seed, state.index) == ("chain_sum", 1, 0)
        answered = await env.step(
            ReasoningGymAction(answer=str(chain_sum(asked.observation.question)))
        )
        assert answered.reward == 1.0
        with pytest.raises(InvalidRequestError, match="call reset"):
            await env.step(ReasoningGymAction(answer="again"))
        assert (await env.reset()).observation.question


@pytest.mark.parametrize(
    ("options", "loc", "words"),
    [
        ({"dataset_specs": [{"name": "chain_sums"}]}, ["dataset_specs", 0, "name"], "chain_sum"),
        ({"dataset_specs": [{"name": "composite"}]}, ["dataset_specs", 0, "name"], "composite"),
        ({"dataset_specs": [{"name": "chain_sum", "w": 1}]}, ["dataset_specs", 0, "w"], "weight"),
        (
            {"dataset_specs": [{"name": "chain_sum", "config": {"max_term": 2}}]},
            ["dataset_specs", 0, "config", "max_term"],
            "max_terms",
        ),
        ({"dataset_name": "composite"}, ["dataset_specs"], "needs dataset_specs"),
        (
            {"dataset_name": "chain_sum", "dataset_specs": [{"name": "chain_sum"}]},
            ["dataset_specs"],
            "composite",
        ),
        ({"dataset_config": {"seed": 3}}, ["dataset_config", "seed"], "own reset option"),
        ({"dataset_config": [1]}, ["dataset_config"], "object"),
        ({"seed": "7"}, ["seed"], "integer"),
        ({"size": True}, ["size"], "integer"),
        ({"dataset_name": 5}, ["dataset_name"], "string"),
    ],
)
def test_each_bad_option_is_named(options: dict, loc: list, words: str) -> None:
    env = ReasoningGymEnvironment()
    question = env.reset(seed=1).question
    with pytest.raises(InvalidActionError, match=words) as refused:
        env.reset(**options)
    assert refused.value.data["errors"][0]["loc"] == loc
    assert env.state.dataset_name == "leg_counting" and env.state.index == 0
    assert env.step(ReasoningGymAction(answer="1")).done
    assert env.reset(seed=1).question == question


async def test_error_frames_name_the_option(server: RunningServer) -> None:
    async with ws_connect(server.ws_url) as ws:
        frame = await request(ws, {"type": "reset", "data": {"dataset_name": "chain_summ"}})
        data = assert_error(frame, "VALIDATION_ERROR", "client")
        assert data["errors"][0]["loc"] == ["dataset_name"]
        assert "chain_sum" in data["message"]
        frame = await request(ws, {"type": "step", "data": {"answer": "1"}})
        assert_error(frame, "VALIDATION_ERROR", "client")  # no question yet
        frame = await request(ws, {"type": "reset", "data": {"seed": 0}})
        observation = assert_observation_frame(frame)["observation"]
        assert "legs" in observation["question"] and observation["correct_answer"] is None


async def test_answer_tags_score_only_the_tagged_part(server: RunningServer) -> None:
    async with ReasoningGymEnv(base_url=server.url) as env:
        result = await env.reset(dataset_name="chain_sum", seed=2, answer_tag="answer")
        total = chain_sum(result.observation.question)
        tagged = await env.step(
            ReasoningGymAction(answer=f"It is 1 + 1 = 2, so <answer> {total} </answer>")
        )
        assert tagged.reward == 1.0 and tagged.metadata["extracted_answer"] == str(total)
        await env.reset(seed=2)  # the tag stays until reset(answer_tag="")
        untagged = await env.step(ReasoningGymAction(answer=str(total)))
        assert untagged.reward == 0.0 and untagged.metadata["extracted_answer"] is None
        await env.reset(seed=2, answer_tag="")
        plain = await env.step(ReasoningGymAction(answer=str(total)))
        assert plain.reward == 1.0 and "extracted_answer" not in plain.metadata


async def test_composite_datasets_mix_tasks(server: RunningServer) -> None:
    specs = [
        {"name": "chain_sum", "weight": 1, "config": {"max_terms": 3}},
        {"name": "leg_counting", "weight": 1},
    ]
    async with ReasoningGymEnv(base_url=server.url) as env:
        sources = []
        for index in range(6):
            if index == 0:
                result = await env.reset(dataset_specs=specs, seed=0, size=50)
            else:
                result = await env.reset()
            sources.append(result.metadata["dataset"])
            # Learn the right answer, then answer the same question again from the seed.
            wrong = await env.step(ReasoningGymAction(answer="?"))
            assert wrong.reward == 0.0 and wrong.observation.correct_answer
        assert set(sources) == {"chain_sum", "leg_counting"}
        state = await env.state()
        assert state.dataset_name == "composite" and state.index == 5
        await env.reset(seed=0)  # the composite stays; its first question again
        first = await env.step(ReasoningGymAction(answer="?"))
        await env.reset(seed=0)
        answer = first.observation.correct_answer
        assert (await env.step(ReasoningGymAction(answer=answer))).reward == 1.0


def test_sessions_do_not_share_datasets(server: RunningServer) -> None:
    async def play() -> list[str | None]:
        async with (
            ReasoningGymEnv(base_url=server.url) as a,
            ReasoningGymEnv(base_url=server.url) as b,
        ):
            await a.reset(dataset_name="chain_sum", seed=3)
            await b.reset(seed=3)  # b's own default dataset, leg_counting
            return [(await a.state()).dataset_name, (await b.state()).dataset_name]

    assert asyncio.run(play()) == ["chain_sum", "leg_counting"]
