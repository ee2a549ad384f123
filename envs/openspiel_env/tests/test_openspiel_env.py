"""OpenSpiel over the wire: every tested game to the end, opponents, chance, illegal actions."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest

from openenv.core.errors import InvalidRequestError
from openenv.testing import check_env, running_server
from openspiel_env import OpenSpielAction, OpenSpielEnv
from openspiel_env.server.openspiel_environment import TESTED_GAMES, OpenSpielEnvironment

APP = "openspiel_env.server.app:app"


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with running_server(APP) as url:
        yield url


@pytest.fixture(scope="module")
def kuhn_server() -> Iterator[str]:
    with running_server(APP, env={"OPENSPIEL_GAME": "kuhn_poker"}) as url:
        yield url


def legal_line(game: str, seed: int = 0) -> list[OpenSpielAction]:
    """The actions of a whole seeded game in which the agent always plays its last legal action
    (so the checker's samples are legal at every step of its `reset(seed=0)` episodes)."""
    env = OpenSpielEnvironment(game=game)
    obs, line = env.reset(seed=seed), []
    while not obs.done:
        line.append(OpenSpielAction(action_id=obs.legal_actions[-1]))
        obs = env.step(line[-1])
    return line


@pytest.mark.parametrize("game", TESTED_GAMES)
def test_passes_the_environment_checker(game: str) -> None:
    samples = legal_line(game)
    report = check_env(
        lambda: OpenSpielEnvironment(game=game), sample_actions=samples, steps=len(samples)
    )
    assert report.ok, str(report)
    assert "step_after_done" in str(report)


async def play(env: OpenSpielEnv, seed: int, **options: object) -> tuple[list, float]:
    """A random game; returns the observations and the sum of the rewards."""
    rng = random.Random(seed)
    result = await env.reset(seed=seed, **options)
    observations, total = [result.observation], 0.0
    for _ in range(10_000):
        if result.done:
            break
        obs = result.observation
        assert obs.legal_actions and len(obs.legal_action_names) == len(obs.legal_actions)
        assert obs.current_player == 0
        result = await env.step(OpenSpielAction(action_id=rng.choice(obs.legal_actions)))
        observations.append(result.observation)
        total += result.reward
    else:
        pytest.fail("the game did not end")
    return observations, total


@pytest.mark.parametrize("game", TESTED_GAMES)
async def test_random_episode_to_the_end(server: str, game: str) -> None:
    async with OpenSpielEnv(base_url=server) as env:
        observations, total = await play(env, seed=3, game=game)
        last = observations[-1]
        assert last.done and last.game == game and last.legal_actions == []
        assert total == pytest.approx(last.returns[0])
        state = await env.state()
        assert state.done and state.game == game and state.episode_return == last.returns[0]
        assert state.step_count == len(observations) - 1
        if game in ("tic_tac_toe", "connect_four", "kuhn_poker"):
            assert len(last.returns) == 2 and sum(last.returns) == pytest.approx(0.0)
        if game in ("tic_tac_toe", "connect_four", "blackjack"):
            assert last.returns[0] in (-1.0, 0.0, 1.0)
        first = observations[0]
        assert first.observation_tensor is not None and first.observation_tensor_shape
        size = 1
        for n in first.observation_tensor_shape:
            size *= n
        assert len(first.observation_tensor) == size
        assert first.info_state_string is not None or first.observation_string is not None
        assert first.game_phase == "initial" and last.game_phase == "terminal"
        assert first.info_state and last.current_player_id == last.current_player


async def test_seeded_resets_are_deterministic(server: str) -> None:
    async with OpenSpielEnv(base_url=server) as env:
        for game in TESTED_GAMES:
            a, ra = await play(env, seed=11, game=game)
            b, rb = await play(env, seed=11, game=game)
            assert ra == rb
            assert [o.model_dump() for o in a] == [o.model_dump() for o in b]


async def test_tic_tac_toe_first_legal_opponent(server: str) -> None:
    async with OpenSpielEnv(base_url=server) as env:
        result = await env.reset(game="tic_tac_toe", opponent="first_legal")
        assert result.observation.legal_actions == list(range(9))
        assert result.observation.legal_action_names[4] == "x(1,1)"
        assert result.reward is None
        # x plays 2, 4, 6 (the anti-diagonal); o always takes the lowest free square: 0, 1.
        for move in (2, 4):
            result = await env.step(OpenSpielAction(action_id=move))
            assert not result.done and result.reward == 0.0
        assert [a["action_id"] for a in result.observation.other_actions] == [1]
        result = await env.step(OpenSpielAction(action_id=6))
        assert result.done and result.reward == pytest.approx(1.0)
        assert result.observation.returns == [1.0, -1.0]
        assert (await env.state()).history == [2, 0, 4, 1, 6]


async def test_illegal_actions_are_validation_errors(server: str) -> None:
    async with OpenSpielEnv(base_url=server) as env:
        result = await env.reset(game="connect_four", seed=0)
        for bad in (7, -1, 1000):
            with pytest.raises(InvalidRequestError) as info:
                await env.step(OpenSpielAction(action_id=bad))
            assert info.value.code == "VALIDATION_ERROR"
            assert "action_id" in info.value.message
            assert info.value.data["errors"][0]["loc"] == ["action_id"]
        again = await env.step(OpenSpielAction(action_id=result.observation.legal_actions[0]))
        assert not again.done and (await env.state()).step_count == 1
        with pytest.raises(InvalidRequestError):
            await env.reset(game="no_such_game")
        with pytest.raises(InvalidRequestError):
            await env.reset(game="tic_tac_toe", opponent="perfect")


async def test_2048_pays_intermediate_rewards(server: str) -> None:
    async with OpenSpielEnv(base_url=server) as env:
        observations, total = await play(env, seed=0, game="2048")
        rewards = [o.reward for o in observations[1:]]
        assert sum(1 for r in rewards if r > 0) > 1 and total > 0
        assert observations[0].legal_action_names[:1] in (["Up"], ["Right"], ["Down"], ["Left"])
        assert any(a["player"] == -1 for a in observations[1].other_actions)


async def test_server_default_game_from_env_var(kuhn_server: str) -> None:
    async with OpenSpielEnv(base_url=kuhn_server) as env:
        result = await env.reset(seed=5)
        obs = result.observation
        assert obs.game == "kuhn_poker" and obs.legal_action_names == ["Pass", "Bet"]
        assert obs.state_string == ""  # the opponent's card stays hidden
        # The deals are chance outcomes: the agent learns chance played, not which cards.
        deals = [a for a in obs.other_actions if a["player"] == -1]
        assert deals and all(a["action_id"] is None and a["action"] is None for a in deals)
        assert obs.info_state_string is not None and len(obs.observation_tensor) == 7
        assert len(obs.info_state) == 11  # OpenEnv's info_state: the information-state tensor
        result = await env.step(OpenSpielAction(action_id=1))  # bet
        assert result.observation.other_actions[0]["player"] == 1
        while not result.done:
            result = await env.step(OpenSpielAction(action_id=result.observation.legal_actions[0]))
        assert result.reward == pytest.approx(result.observation.returns[0])
        assert abs(result.reward) in (1.0, 2.0)
