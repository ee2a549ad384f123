"""Serve every environment in envs/ and play a short episode against each with a random or
heuristic policy over the wire; prints the reward of each step and the episode total.

uv run python examples/play_all.py

Servers start in parallel, each in a subprocess on a free loopback port. An environment whose
package is not importable is skipped (and said so); the exit code is non-zero when any served
environment fails.
"""

from __future__ import annotations

import importlib.util
import random
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import httpx

ENVS_DIR = Path(__file__).resolve().parents[1] / "envs"
MAX_STEPS = 8


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# -- one policy per environment: (client class, reset kwargs, action factory) --------------


def play_echo(url: str, rng: random.Random) -> list[float]:
    from echo_env import CallToolAction, EchoEnv

    rewards = []
    with EchoEnv(base_url=url).sync() as env:
        env.reset()
        for word in ("hello", "openenv"):
            result = env.step(CallToolAction(tool_name="echo_message", arguments={"message": word}))
            rewards.append(result.reward or 0.0)
    return rewards


def _episode(client_cls, url: str, act: Callable, reset: dict | None = None) -> list[float]:
    rewards = []
    with client_cls(base_url=url).sync() as env:
        result = env.reset(**(reset or {}))
        for _ in range(MAX_STEPS):
            if result.done:
                break
            result = env.step(act(result.observation))
            rewards.append(result.reward or 0.0)
    return rewards


def play_math(url: str, rng: random.Random) -> list[float]:
    from math_env import MathAction, MathEnv

    def act(obs):
        a, b = obs.question.removeprefix("What is ").removesuffix("?").split(" + ")
        return MathAction(answer=str(int(a) + int(b)))

    return _episode(MathEnv, url, act, {"seed": 0})


def play_chess(url: str, rng: random.Random) -> list[float]:
    from chess_env import ChessAction, ChessEnv

    return _episode(
        ChessEnv, url, lambda obs: ChessAction(move=rng.choice(obs.legal_moves)), {"seed": 0}
    )


def play_grid_world(url: str, rng: random.Random) -> list[float]:
    from grid_world_env import GridWorldAction, GridWorldEnv

    def act(obs):  # greedy towards the goal
        down = obs.goal[0] > obs.position[0]
        return GridWorldAction(direction="DOWN" if down else "RIGHT")

    return _episode(GridWorldEnv, url, act, {"seed": 0})


def play_maze(url: str, rng: random.Random) -> list[float]:
    from maze_env import MazeAction, MazeEnv

    def act(obs):
        return MazeAction(action=rng.choice(obs.legal_actions or [0, 1, 2, 3]))

    return _episode(MazeEnv, url, act, {"seed": 0})


def play_connect4(url: str, rng: random.Random) -> list[float]:
    from connect4_env import Connect4Action, Connect4Env

    def act(obs):
        return Connect4Action(column=rng.choice(obs.legal_actions))

    return _episode(Connect4Env, url, act, {"seed": 0})


def play_coding(url: str, rng: random.Random) -> list[float]:
    from coding_env import CodeAction, CodingEnv

    solutions = {  # a wrong first attempt, then the right one
        "add": ["def add(a, b):\n    return a - b", "def add(a, b):\n    return a + b"],
        "fizzbuzz": [
            "def fizzbuzz(n):\n    return [str(i) for i in range(1, n + 1)]",
            "def fizzbuzz(n):\n    return [('Fizz' * (i % 3 == 0) + 'Buzz' * (i % 5 == 0))"
            " or str(i) for i in range(1, n + 1)]",
        ],
    }
    task = rng.choice(sorted(solutions))
    attempts = iter(solutions[task])
    return _episode(CodingEnv, url, lambda obs: CodeAction(code=next(attempts)), {"task_id": task})


def play_snake(url: str, rng: random.Random) -> list[float]:
    from snake_env import SnakeAction, SnakeEnv

    return _episode(SnakeEnv, url, lambda obs: SnakeAction(action=rng.randint(0, 2)), {"seed": 0})


def play_gymnasium(url: str, rng: random.Random) -> list[float]:
    from gymnasium_env import GymnasiumAction, GymnasiumEnv

    def act(obs):  # CartPole: push towards the side the pole leans to
        return GymnasiumAction(action=1 if obs.observation[2] > 0 else 0)

    return _episode(GymnasiumEnv, url, act, {"seed": 0, "env_id": "CartPole-v1"})


def play_trading(url: str, rng: random.Random) -> list[float]:
    from trading_env import TradingAction, TradingEnv

    def act(obs):
        ticker = rng.choice(obs.tickers)
        return TradingAction(orders={ticker: rng.choice([-2, 0, 3])})

    return _episode(TradingEnv, url, act, {"seed": 0})


def play_textarena(url: str, rng: random.Random) -> list[float]:
    from textarena_env import TextArenaAction, TextArenaEnv
    from textarena_env.server.wordle import feedback, word_list

    def act(obs):  # guess a word consistent with all the feedback so far
        history = list(zip(obs.info.get("guesses", []), obs.info.get("feedback", []), strict=False))
        for word in word_list():
            if all(feedback(g, word) == p for g, p in history):
                return TextArenaAction(message=f"[{word}]")
        return TextArenaAction(message="[crane]")

    return _episode(TextArenaEnv, url, act, {"seed": 0, "env_id": "Wordle-v0"})


def play_jupyter(url: str, rng: random.Random) -> list[float]:
    from jupyter_env import JupyterAction, JupyterEnv

    cells = iter(  # look at the data, compute with pandas, then answer with the result
        [
            "import pandas as pd\nsales = pd.read_csv('sales.csv')\nsales.head()",
            "north = sales[sales.region == 'north']\n"
            "round(float((north.units * north.unit_price).sum()), 2)",
        ]
    )

    def act(obs):
        code = next(cells, None)
        if code is not None:
            return JupyterAction(code=code, timeout_s=120)
        return JupyterAction(answer=obs.outputs[-1].data["text/plain"])

    return _episode(JupyterEnv, url, act, {"seed": 0, "task": "north_revenue"})


def play_openspiel(url: str, rng: random.Random) -> list[float]:
    from openspiel_env import OpenSpielAction, OpenSpielEnv

    def act(obs):  # blackjack against the dealer, a random legal move
        return OpenSpielAction(action_id=rng.choice(obs.legal_actions))

    return _episode(OpenSpielEnv, url, act, {"seed": 0, "game": "blackjack"})


def play_atari(url: str, rng: random.Random) -> list[float]:
    from atari_env import AtariAction, AtariEnv

    def act(obs):  # random buttons; a short, truncated episode of Pong
        return AtariAction(action_id=rng.choice(obs.legal_actions))

    return _episode(AtariEnv, url, act, {"seed": 0, "game": "pong"})


def play_reasoning_gym(url: str, rng: random.Random) -> list[float]:
    from reasoning_gym_env import ReasoningGymAction, ReasoningGymEnv

    def solve(question: str) -> int:  # chain_sum: "... problem: 4 - 1 - 7 ="
        total, sign = 0, 1
        for token in question.rsplit(":", 1)[1].removesuffix("=").split():
            if token in "+-":
                sign = 1 if token == "+" else -1
            else:
                total += sign * int(token)
        return total

    rewards = []  # three one-question episodes, the answer in tags
    with ReasoningGymEnv(base_url=url).sync() as env:
        result = env.reset(dataset_name="chain_sum", seed=0, answer_tag="answer")
        for _ in range(3):
            answer = f"<answer>{solve(result.observation.question)}</answer>"
            rewards.append(env.step(ReasoningGymAction(answer=answer)).reward or 0.0)
            result = env.reset()
    return rewards


def play_terminal(url: str, rng: random.Random) -> list[float]:
    from terminal_env import TerminalAction, TerminalEnv

    commands = iter(["ls -la", "echo 'Hello, world!' > hello.txt", "cat hello.txt"])

    def act(obs):  # a scripted shell session for the greeting task; the last one hands in
        command = next(commands)
        return TerminalAction(command=command, submit=command == "cat hello.txt")

    return _episode(TerminalEnv, url, act, {"task_id": "create-greeting"})


def play_repo(url: str, rng: random.Random) -> list[float]:
    from repo_env import CallToolAction, RepoEnv

    # Look around, run the tests, then give up: the grade (0, the bug is still there) and the
    # episode's git diff come with the last observation.
    plan = iter([("list_files", {}), ("run_tests", {}), ("git_diff", {}), ("submit", {})])

    def act(obs):
        tool, arguments = next(plan)
        return CallToolAction(tool_name=tool, arguments=arguments)

    return _episode(RepoEnv, url, act, {"seed": 0})


#: name -> (package, policy); openspiel/atari are played when their packages exist
POLICIES: dict[str, tuple[str, Callable[[str, random.Random], list[float]]]] = {
    "echo": ("echo_env", play_echo),
    "math": ("math_env", play_math),
    "chess": ("chess_env", play_chess),
    "grid_world": ("grid_world_env", play_grid_world),
    "maze": ("maze_env", play_maze),
    "connect4": ("connect4_env", play_connect4),
    "terminal": ("terminal_env", play_terminal),
    "coding": ("coding_env", play_coding),
    "snake": ("snake_env", play_snake),
    "gymnasium": ("gymnasium_env", play_gymnasium),
    "trading": ("trading_env", play_trading),
    "jupyter": ("jupyter_env", play_jupyter),
    "textarena": ("textarena_env", play_textarena),
    "openspiel": ("openspiel_env", play_openspiel),
    "atari": ("atari_env", play_atari),
    "reasoning_gym": ("reasoning_gym_env", play_reasoning_gym),
    "repo": ("repo_env", play_repo),
}


#: System programs an environment needs (a fresh machine may lack them).
NEEDS = {"repo": ("git",)}


def discover() -> list[str]:
    names = [p.name.removesuffix("_env") for p in sorted(ENVS_DIR.glob("*_env")) if p.is_dir()]
    extra = [n for n in ("openspiel", "atari") if n not in names]
    return names + extra


def start(package: str) -> tuple[subprocess.Popen, str]:
    port = free_port()
    cmd = [sys.executable, "-m", f"{package}.server.app", "--host", "127.0.0.1", "--port"]
    log = tempfile.TemporaryFile("w+")  # not a pipe: a chatty server must never block on it
    process = subprocess.Popen([*cmd, str(port)], stdout=log, stderr=subprocess.STDOUT, text=True)
    process.log = log  # type: ignore[attr-defined]
    return process, f"http://127.0.0.1:{port}"


def wait_healthy(process: subprocess.Popen, url: str, deadline: float) -> None:
    while time.monotonic() < deadline:
        if process.poll() is not None:
            process.log.seek(0)  # type: ignore[attr-defined]
            raise RuntimeError(f"server exited early:\n{process.log.read()}")  # type: ignore[attr-defined]
        try:
            if httpx.get(f"{url}/health", timeout=1, trust_env=False).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise TimeoutError(f"{url} did not become healthy")


def main() -> int:
    servers: dict[str, tuple[subprocess.Popen, str]] = {}
    for name in discover():
        if name not in POLICIES:
            print(f"SKIP {name}: no policy for it in play_all.py", flush=True)
            continue
        package, _ = POLICIES[name]
        if importlib.util.find_spec(package) is None:
            print(f"SKIP {name}: package {package} is not importable", flush=True)
            continue
        absent = [tool for tool in NEEDS.get(name, ()) if shutil.which(tool) is None]
        if absent:
            print(f"SKIP {name}: needs {', '.join(absent)}, not installed here", flush=True)
            continue
        servers[name] = start(package)
    failed = []
    # Every server imports its environment at once on however few cores there are.
    deadline = time.monotonic() + 60 + 10 * len(servers)
    try:
        for name, (process, url) in servers.items():
            try:
                wait_healthy(process, url, deadline)
                rewards = POLICIES[name][1](url, random.Random(0))
            except Exception:
                print(f"FAIL {name}:\n{traceback.format_exc()}", flush=True)
                failed.append(name)
                continue
            shown = ", ".join(f"{r:g}" for r in rewards)
            print(f"{name}: rewards per step [{shown}]", flush=True)
            print(f"EPISODE {name} steps={len(rewards)} total={sum(rewards):g}", flush=True)
    finally:
        for process, _ in servers.values():
            process.terminate()
        for process, _ in servers.values():
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
    if failed:
        print(f"failed: {', '.join(failed)}")
        return 1
    print(f"played {len(servers)} environment(s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
