"""Rubric and LLM-judge code written the way OpenEnv 0.10's documentation shows it.

Run by tests/compat/test_rubrics_api.py twice: with the compat venv's python (the published
`openenv==0.10.0`) and with ours. It uses only the public `openenv.core.rubrics` and
`openenv.core.llm_client` API, runs every check (one failing check does not stop the others) and
prints one JSON object: {check: {case: outcome}}, where an outcome is {"value": x, "kind":
"float" | "awaitable"} or {"raises": "ExceptionType"} (or plain data for names and keys).

The LLM judge talks to a test double, not a model: a tiny HTTP server on a loopback port, started
here, that speaks the OpenAI chat-completions format and answers each prompt with the text after
"Rate: " in it -- so each case picks the judge's answer through its action.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import socket
import threading
import traceback
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace
from typing import Any

from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import Action, Observation, State
from openenv.core.llm_client import LLMClient, OpenAIClient
from openenv.core.rubrics import (
    ExponentialDiscountingTrajectoryRubric,
    Gate,
    LLMJudge,
    Rubric,
    RubricDict,
    RubricList,
    Sequential,
    TrajectoryRubric,
    WeightedSum,
)

# -- the LLM test double -------------------------------------------------------------------------


class _ChatCompletions(BaseHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers.get("content-length") or 0)))
        prompt = body["messages"][-1]["content"]
        answer = prompt.split("Rate: ", 1)[-1]
        data = json.dumps(
            {
                "id": "chatcmpl-double",
                "object": "chat.completion",
                "created": 0,
                "model": body.get("model", "double"),
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": answer},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            }
        ).encode()
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def start_double() -> int:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _ChatCompletions)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server.server_address[1]


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# -- outcomes ------------------------------------------------------------------------------------


def outcome(fn: Callable[[], Any]) -> dict[str, Any]:
    """What a call gives: its value and whether it had to be awaited, or the exception type."""
    try:
        result = fn()
        kind = "float"
        if inspect.isawaitable(result):
            kind = "awaitable"
            result = asyncio.run(_wait_for(result))
        return {"value": round(float(result), 6), "kind": kind}
    except Exception as exc:
        return {"raises": type(exc).__name__}


async def _wait_for(awaitable: Any) -> Any:
    return await awaitable


async def aoutcome(fn: Callable[[], Any]) -> dict[str, Any]:
    """`outcome` inside a running event loop."""
    try:
        result = fn()
        kind = "float"
        if inspect.isawaitable(result):
            kind = "awaitable"
            result = await result
        return {"value": round(float(result), 6), "kind": kind}
    except Exception as exc:
        return {"raises": type(exc).__name__}


# -- rubrics as users write them ----------------------------------------------------------------


class Const(Rubric):
    def __init__(self, value: float) -> None:
        super().__init__()
        self.value = value

    def forward(self, action: Any, observation: Any) -> float:
        return self.value


class KeepsScore(Rubric):
    """Keeps its last result in `self.score`, as OpenEnv rubrics may."""

    def __init__(self, value: float) -> None:
        super().__init__()
        self.value = value
        self.score = 0.0

    def forward(self, action: Any, observation: Any) -> float:
        self.score = self.value
        return self.score


class Fails(Rubric):
    def forward(self, action: Any, observation: Any) -> float:
        raise KeyError("missing field")


class WinLossRubric(TrajectoryRubric):
    """TrajectoryRubric's docstring example."""

    def score_trajectory(self, trajectory: Any) -> float:
        _, final_obs = trajectory[-1]
        return 1.0 if final_obs.metadata.get("won") else 0.0

    def compute_step_rewards(self) -> list[float]:
        score = self.score_trajectory(self._trajectory)
        return [score] * len(self._trajectory)


class ChessRubric(ExponentialDiscountingTrajectoryRubric):
    """ExponentialDiscountingTrajectoryRubric's docstring example."""

    def score_trajectory(self, trajectory: Any) -> float:
        _, final_obs = trajectory[-1]
        outcome = final_obs.metadata.get("winner")
        if outcome == "agent":
            return 1.0
        if outcome == "opponent":
            return 0.0
        return 0.5


def obs(done: bool = False, **metadata: Any) -> SimpleNamespace:
    return SimpleNamespace(done=done, metadata=metadata)


# -- checks --------------------------------------------------------------------------------------


def check_score_attribute() -> dict[str, Any]:
    trees = {
        "sequential": lambda: Sequential(KeepsScore(0.8), KeepsScore(0.6)),
        "gate": lambda: Gate(KeepsScore(0.8), threshold=0.5),
        "weighted_sum": lambda: WeightedSum([KeepsScore(0.8), KeepsScore(0.4)], [0.5, 0.5]),
    }
    out: dict[str, Any] = {}
    for name, make in trees.items():
        tree = make()
        out[name] = outcome(lambda tree=tree: tree("a", obs()))
        out[name + "_last_scores"] = {
            path: rubric.last_score for path, rubric in tree.named_rubrics()
        }
        out[name + "_own_attribute"] = [rubric.score for rubric in tree.children()]
    return out


def check_names() -> dict[str, Any]:
    seq = Sequential(Const(1.0), Gate(Const(0.5), threshold=0.1))
    total = WeightedSum([Const(1.0), Const(0.0)], weights=[0.7, 0.3])
    items = RubricList([Const(1.0), Const(0.5)])
    table = RubricDict({"pong": Const(1.0), "breakout": Const(0.0)})
    seq("a", obs())
    return {
        "sequential": [name for name, _ in seq.named_rubrics()],
        "sequential_children": [name for name, _ in seq.named_children()],
        "get_rubric": type(seq.get_rubric("rubric_1.rubric")).__name__,
        "last_scores": {path: r.last_score for path, r in seq.named_rubrics()},
        "weighted_sum": [name for name, _ in total.named_rubrics()],
        "weights": total.weights,
        "rubric_list": [name for name, _ in items.named_rubrics()],
        "rubric_dict": [name for name, _ in table.named_rubrics()],
        "missing_path": outcome(lambda: seq.get_rubric("rubric_7")),
        "len_and_index": [len(seq), seq[1] is seq.get_rubric("rubric_1")],
        "shared": [name for name, _ in Sequential(seq[0], Gate(seq[0])).named_rubrics()],
    }


def check_errors() -> dict[str, Any]:
    def failing_pre_hook(rubric: Any, action: Any, observation: Any) -> None:
        raise ValueError("pre")

    def failing_hook(rubric: Any, action: Any, observation: Any, result: float) -> None:
        raise RuntimeError("post")

    pre = Const(1.0)
    pre.register_forward_pre_hook(failing_pre_hook)
    post = Const(1.0)
    post.register_forward_hook(failing_hook)
    return {
        "leaf": outcome(lambda: Fails()("a", obs())),
        "in_sequential": outcome(lambda: Sequential(Const(1.0), Fails())("a", obs())),
        "in_gate": outcome(lambda: Gate(Fails())("a", obs())),
        "in_weighted_sum": outcome(lambda: WeightedSum([Fails()], [1.0])("a", obs())),
        "pre_hook": outcome(lambda: Gate(pre)("a", obs())),
        "post_hook": outcome(lambda: Sequential(post)("a", obs())),
        "rubric_list": outcome(lambda: RubricList([Const(1.0)])("a", obs())),
        "rubric_dict": outcome(lambda: RubricDict({"x": Const(1.0)})("a", obs())),
        "weights_must_sum_to_one": outcome(lambda: WeightedSum([Const(1.0)], [0.5])),
        "one_weight_per_rubric": outcome(lambda: WeightedSum([Const(1.0)], [0.5, 0.5])),
        "gamma_range": outcome(lambda: ChessRubric(gamma=1.5)),
    }


def check_sync_values() -> dict[str, Any]:
    return {
        "sequential": outcome(lambda: Sequential(Const(0.5), Const(0.7))("a", obs())),
        "sequential_fail_fast": outcome(lambda: Sequential(Const(0.0), Fails())("a", obs())),
        "sequential_empty": outcome(lambda: Sequential()("a", obs())),
        "gate_below": outcome(lambda: Gate(Const(0.4), threshold=0.5)("a", obs())),
        "gate_above": outcome(lambda: Gate(Const(0.6), threshold=0.5)("a", obs())),
        "weighted_sum": outcome(
            lambda: WeightedSum([Const(1.0), Const(0.5)], weights=[0.7, 0.3])("a", obs())
        ),
        "nested": outcome(
            lambda: Sequential(
                Gate(Const(1.0)),
                Gate(Const(0.75), threshold=0.5),
                WeightedSum([Const(1.0), Const(0.5)], weights=[0.7, 0.3]),
            )("a", obs())
        ),
    }


async def _in_loop() -> dict[str, Any]:
    return {
        "leaf": await aoutcome(lambda: Const(0.5)("a", obs())),
        "sequential": await aoutcome(lambda: Sequential(Const(0.5), Const(0.7))("a", obs())),
        "sequential_zero_first": await aoutcome(
            lambda: Sequential(Const(0.0), Const(0.7))("a", obs())
        ),
        "sequential_zero_last": await aoutcome(
            lambda: Sequential(Const(0.3), Const(0.0))("a", obs())
        ),
        "sequential_empty": await aoutcome(lambda: Sequential()("a", obs())),
        "gate": await aoutcome(lambda: Gate(Const(0.5), threshold=0.4)("a", obs())),
        "gate_of_sequential": await aoutcome(
            lambda: Gate(Sequential(Const(0.5)), threshold=0.4)("a", obs())
        ),
        "weighted_sum": await aoutcome(
            lambda: WeightedSum([Const(0.5), Const(1.0)], [0.5, 0.5])("a", obs())
        ),
        "weighted_sum_of_sequential": await aoutcome(
            lambda: WeightedSum([Sequential(Const(0.5)), Const(1.0)], [0.5, 0.5])("a", obs())
        ),
        "sequential_of_sequential": await aoutcome(
            lambda: Sequential(Sequential(Const(0.4)))("a", obs())
        ),
    }


def check_running_loop() -> dict[str, Any]:
    return asyncio.run(_in_loop())


def check_trajectory() -> dict[str, Any]:
    rubric = WinLossRubric()
    episode = [("e2e4", obs()), ("e7e5", obs()), ("d1h5", obs(done=True, won=True))]
    rewards = [rubric(action, observation) for action, observation in episode]
    step_rewards = rubric.compute_step_rewards()
    kept = len(rubric.trajectory)
    rubric.reset()
    chess = ChessRubric(gamma=0.5)
    chess_rewards = [
        chess(action, observation)
        for action, observation in [("a", obs()), ("b", obs(done=True, winner="agent"))]
    ]
    return {
        "rewards": rewards,
        "step_rewards": step_rewards,
        "kept": kept,
        "after_reset": len(rubric.trajectory),
        "chess_rewards": chess_rewards,
        "chess_step_rewards": chess.compute_step_rewards(),
        "chess_state": chess.state_dict(),
        "intermediate": WinLossRubric(intermediate_reward=0.1)("a", obs()),
    }


def check_state_dict() -> dict[str, Any]:
    client = OpenAIClient("http://127.0.0.1", closed_port(), model="judge")
    judge = LLMJudge("Rate: {action}", client, default_score=0.5, normalize=False)
    loaded = LLMJudge("x", client)
    loaded.load_state_dict(judge.state_dict())
    return {
        "judge": judge.state_dict(),
        "loaded": {key: loaded.state_dict()[key] for key in judge.state_dict()},
        "trajectory": WinLossRubric(intermediate_reward=0.2).state_dict(),
        "sequential": Sequential(Const(1.0), Gate(Const(1.0), threshold=0.3)).state_dict(),
        "gate": Gate(Const(1.0), threshold=0.3).state_dict(),
    }


async def _judge(port: int) -> dict[str, Any]:
    client = OpenAIClient("http://127.0.0.1", port, model="judge")
    judge = LLMJudge("Rate: {action}", client)
    with_default = LLMJudge("Rate: {action}", client, default_score=0.0)
    first_number = LLMJudge("Rate: {action}", client, score_pattern=r"(\d+\.?\d*)")
    raw = LLMJudge("Rate: {action}", client, normalize=False)
    labelled = LLMJudge("Rate: {action}", client, score_pattern=r"Score: (\d+\.?\d*)")
    unreachable = LLMJudge(
        "Rate: {action}", OpenAIClient("http://127.0.0.1", closed_port(), model="judge")
    )
    tree = Sequential(Gate(Const(1.0)), judge)
    return {
        "plain": await aoutcome(lambda: judge("0.7", obs())),
        "above_one": await aoutcome(lambda: judge("1.5", obs())),
        "labelled_above_one": await aoutcome(lambda: judge("Score: 3", obs())),
        "raw": await aoutcome(lambda: raw("Score: 7", obs())),
        "custom_pattern": await aoutcome(lambda: labelled("7 tests. Score: 0.25", obs())),
        "no_score_with_default": await aoutcome(lambda: with_default("no idea", obs())),
        "no_score": await aoutcome(lambda: judge("no idea", obs())),
        "out_of_ten": await aoutcome(lambda: judge("Score: 8/10", obs())),
        "out_of_ten_first_number": await aoutcome(lambda: first_number("Score: 8/10", obs())),
        "reasoning_first": await aoutcome(lambda: judge("Test 2 failed. Score: 0.4", obs())),
        "reasoning_first_number": await aoutcome(
            lambda: first_number("Test 2 failed. Score: 0.4", obs())
        ),
        "in_sequential": await aoutcome(lambda: tree("0.6", obs())),
        "last_score": judge.last_score,
        "unreachable_with_default": await aoutcome(
            lambda: LLMJudge("Rate: {action}", unreachable._client, default_score=0.0)("x", obs())
        ),
        "bad_template": await aoutcome(lambda: LLMJudge("{nope}", client)("x", obs())),
    }


def check_judge() -> dict[str, Any]:
    return asyncio.run(_judge(start_double()))


class Echo(LLMClient):
    """A client implementing only `complete()`, as LLMClient's docstring says."""

    async def complete(self, prompt: str, **kwargs: Any) -> str:
        return prompt.upper()


async def _clients(port: int) -> dict[str, Any]:
    echo = Echo("http://localhost", 8000)
    openai = OpenAIClient("http://127.0.0.1", port, model="judge", temperature=0.0)
    with_path = OpenAIClient("http://127.0.0.1:8000/v1", None, model="judge")
    positional = OpenAIClient("http://127.0.0.1", port, "judge", "sk-test", "Be brief.", 0.5, 64)
    try:
        await echo.complete_with_tools([{"role": "user", "content": "hi"}], [])
        tools: str = "returned"
    except Exception as exc:
        tools = type(exc).__name__
    return {
        "echo": [echo.endpoint, echo.port, echo.base_url, await echo.complete("hi")],
        "echo_tools": tools,
        "echo_url_port": Echo("http://localhost:8000", None).base_url,
        "openai": [openai.endpoint, openai.port == port, openai.model, openai.max_tokens],
        "openai_base_url": openai.base_url == f"http://127.0.0.1:{port}",
        "openai_complete": await openai.complete("Rate: fine"),
        "with_path": [with_path.endpoint, with_path.port, with_path.base_url],
        "positional": [
            positional.model,
            positional.system_prompt,
            positional.temperature,
            positional.max_tokens,
        ],
        "port_conflict": outcome(lambda: Echo("http://localhost:8000", 9000).base_url),
    }


def check_llm_clients() -> dict[str, Any]:
    return asyncio.run(_clients(start_double()))


# -- the rubrics tutorial's environment ------------------------------------------------------------


class CodeAction(Action):
    code: str


class CodeObservation(Observation):
    compiles: bool = False
    tests_passed: int = 0
    tests_total: int = 0


class CodeState(State):
    attempts: int = 0


class CompilesRubric(Rubric):
    def forward(self, action: Any, observation: Any) -> float:
        return 1.0 if observation.compiles else 0.0


class TestsPassRubric(Rubric):
    def forward(self, action: Any, observation: Any) -> float:
        if observation.tests_total == 0:
            return 0.0
        return observation.tests_passed / observation.tests_total


class StyleRubric(Rubric):
    def forward(self, action: Any, observation: Any) -> float:
        return 1.0 if action.code.count("\n\n\n") == 0 else 0.6


class CodeEnvironment(Environment):
    def __init__(self) -> None:
        rubric = Sequential(
            Gate(CompilesRubric(), threshold=1.0),
            WeightedSum([TestsPassRubric(), StyleRubric()], weights=[0.7, 0.3]),
        )
        super().__init__(rubric=rubric)
        self._state = CodeState()

    def reset(self, seed: Any = None, episode_id: Any = None, **kwargs: Any) -> CodeObservation:
        self._reset_rubric()
        self._state = CodeState()
        return CodeObservation()

    def step(self, action: Any, timeout_s: Any = None, **kwargs: Any) -> CodeObservation:
        self._state.attempts += 1
        compiles = "def " in action.code
        obs = CodeObservation(compiles=compiles, tests_passed=2 if compiles else 0, tests_total=4)
        obs.reward = self._apply_rubric(action, obs)
        return obs

    @property
    def state(self) -> CodeState:
        return self._state


class AsyncGame(Rubric):
    async def forward(self, action: Any, observation: Any) -> float:
        await asyncio.sleep(0)
        return 0.25


class MultiGameRubric(Rubric):
    def __init__(self) -> None:
        super().__init__()
        self.games = RubricDict({"pong": Const(1.0), "breakout": AsyncGame()})

    def forward(self, action: Any, observation: Any) -> float:
        return self.games[observation.game_id](action, observation)


def check_tutorial() -> dict[str, Any]:
    env = CodeEnvironment()
    env.reset()
    good = env.step(CodeAction(code="def solution(): return 42"))
    components = {name: c.last_score for name, c in env.rubric.named_rubrics()}
    bad = env.step(CodeAction(code="print(42)"))
    logged: list[str] = []
    rubric = StyleRubric()
    rubric.register_forward_hook(
        lambda r, action, obs, result: logged.append(f"{type(r).__name__}: {result:.2f}")
    )
    rubric(CodeAction(code="x\n\n\ny"), obs())
    games = MultiGameRubric()
    return {
        "good_reward": good.reward,
        "components": components,
        "bad_reward": bad.reward,
        "hook_log": logged,
        "pong": outcome(lambda: games("a", SimpleNamespace(game_id="pong"))),
        "breakout": outcome(lambda: games("a", SimpleNamespace(game_id="breakout"))),
        "game_names": [name for name, _ in games.named_rubrics()],
    }


CHECKS = {
    name[len("check_") :]: fn
    for name, fn in sorted(globals().items())
    if name.startswith("check_") and callable(fn)
}


def main() -> None:
    results: dict[str, Any] = {}
    for name, check in CHECKS.items():
        try:
            results[name] = check()
        except Exception as exc:
            results[name] = {
                "error": f"{type(exc).__name__}: {exc}",
                "traceback": traceback.format_exc(),
            }
    print(json.dumps(results, default=repr))


if __name__ == "__main__":
    main()
