"""The maze over the wire: rewards for moves, revisits, wall bumps and the exit; seeded mazes."""

from __future__ import annotations

from collections import deque
from collections.abc import Iterator

import pytest

from maze_env import MazeAction, MazeEnv
from maze_env.server.maze_environment import MOVES, MazeEnvironment, generate_layout
from openenv.testing import check_env, running_server


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with running_server("maze_env.server.app:app") as url:
        yield url


def shortest_path(grid: list[str], start: list[int], goal: list[int]) -> list[int]:
    """Actions of a shortest path by breadth-first search over the rendered grid."""
    rows, cols = len(grid), len(grid[0])
    came: dict[tuple[int, int], tuple[tuple[int, int], int] | None] = {tuple(start): None}
    queue = deque([tuple(start)])
    while queue:
        r, c = queue.popleft()
        if [r, c] == goal:
            break
        for a, (dr, dc) in enumerate(MOVES):
            nxt = (r + dr, c + dc)
            if 0 <= nxt[0] < rows and 0 <= nxt[1] < cols and grid[nxt[0]][nxt[1]] != "#":
                if nxt not in came:
                    came[nxt] = ((r, c), a)
                    queue.append(nxt)
    actions: list[int] = []
    cell = tuple(goal)
    while came[cell] is not None:
        cell, a = came[cell]
        actions.append(a)
    return actions[::-1]


def test_passes_the_environment_checker() -> None:
    samples = [MazeAction(action=a) for a in (3, 1, 1, 2, 0)]
    report = check_env(MazeEnvironment, sample_actions=samples)
    assert report.ok, str(report)


def test_passes_the_environment_checker_with_generated_actions() -> None:
    report = check_env(MazeEnvironment)
    assert report.ok, str(report)


def _open_cells_connected(layout: list[str]) -> bool:
    cells = {(r, c) for r, row in enumerate(layout) for c, ch in enumerate(row) if ch != "#"}
    seen = {(0, 0)}
    queue = deque([(0, 0)])
    while queue:
        r, c = queue.popleft()
        for dr, dc in MOVES:
            nxt = (r + dr, c + dc)
            if nxt in cells and nxt not in seen:
                seen.add(nxt)
                queue.append(nxt)
    return seen == cells


@pytest.mark.parametrize("size", [5, 8, 9, 15])
def test_generated_mazes_are_perfect_and_seeded(size: int) -> None:
    import random

    layout = generate_layout(size, random.Random(4))
    assert layout == generate_layout(size, random.Random(4))
    assert len(layout) == size and all(len(row) == size for row in layout)
    assert _open_cells_connected(layout)
    # A perfect maze is a tree: edges between open cells = open cells - 1.
    cells = {(r, c) for r, row in enumerate(layout) for c, ch in enumerate(row) if ch != "#"}
    edges = sum((r + 1, c) in cells for r, c in cells) + sum((r, c + 1) in cells for r, c in cells)
    assert edges == len(cells) - 1


async def test_solving_the_default_maze(server: str) -> None:
    async with MazeEnv(base_url=server) as env:
        result = await env.reset()
        obs = result.observation
        assert obs.position == [0, 0] and obs.exit == [7, 7]
        assert len(obs.grid) == 8 and all(len(row) == 8 for row in obs.grid)
        assert obs.grid[0][0] == "A"
        assert obs.legal_actions == [3]
        path = shortest_path(obs.grid, obs.position, obs.exit)
        for i, action in enumerate(path):
            assert action in result.observation.legal_actions
            result = await env.step(MazeAction(action=action))
            last = i == len(path) - 1
            assert result.done == last
            assert result.reward == pytest.approx(10.0 if last else -0.05)
        assert result.observation.event == "exit"
        state = await env.state()
        assert state.solved and state.step_count == len(path)
        assert state.total_reward == pytest.approx(10.0 - 0.05 * (len(path) - 1))


async def test_wall_bumps_and_revisits(server: str) -> None:
    async with MazeEnv(base_url=server) as env:
        await env.reset()
        bump = await env.step(MazeAction(action=0))  # up, out of the maze
        assert bump.reward == pytest.approx(-0.75)
        assert bump.observation.event == "wall" and bump.observation.position == [0, 0]
        bump = await env.step(MazeAction(action=1))  # down into a wall
        assert bump.reward == pytest.approx(-0.75)
        move = await env.step(MazeAction(action=3))
        assert move.reward == pytest.approx(-0.05) and move.observation.position == [0, 1]
        back = await env.step(MazeAction(action=2))
        assert back.reward == pytest.approx(-0.25) and back.observation.event == "revisit"
        state = await env.state()
        assert state.wall_bumps == 2 and state.visited == 2 and not state.solved


async def test_seeded_random_mazes_over_the_wire(server: str) -> None:
    async with MazeEnv(base_url=server) as env:
        first = await env.reset(seed=11, size=9)
        again = await env.reset(seed=11, size=9)
        other = await env.reset(seed=12, size=9)
        assert first.observation.grid == again.observation.grid
        assert first.observation.grid != other.observation.grid
        result = await env.reset(seed=11, size=9)
        assert result.observation.exit == [8, 8]
        assert (await env.state()).generated
        for action in shortest_path(result.observation.grid, [0, 0], [8, 8]):
            result = await env.step(MazeAction(action=action))
        assert result.done and result.reward == pytest.approx(10.0)


async def test_episode_is_cut_at_max_steps(server: str) -> None:
    async with MazeEnv(base_url=server) as env:
        await env.reset(max_steps=2)
        await env.step(MazeAction(action=0))
        result = await env.step(MazeAction(action=0))
        assert result.done and not (await env.state()).solved


def test_rejects_out_of_range_actions() -> None:
    with pytest.raises(ValueError):
        MazeAction(action=4)
