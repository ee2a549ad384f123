"""Drive our coding_env with a client written against the *published* OpenEnv package.

Run by tests/compat/test_coding_env.py with the compat venv's python (openenv==0.10.0):
`<compat-python> published_coding_script.py URL`. The client is an `EnvClient` subclass with
OpenEnv's coding_env models (`CodeAction{code}`, `CodeObservation{stdout, stderr, exit_code}`,
`CodeState{last_exit_code}`), used the way OpenEnv's coding_env README shows (a plain `with`
block). Prints one JSON object with what it saw.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from openenv.core import EnvClient
from openenv.core.client_types import StepResult
from openenv.core.env_server.types import Action, Observation, State


class CodeAction(Action):
    code: str


class CodeObservation(Observation):
    stdout: str = ""
    stderr: str = ""
    exit_code: int = 0


class CodeState(State):
    last_exit_code: int = 0


class PublishedCodingClient(EnvClient[CodeAction, CodeObservation, CodeState]):
    def _step_payload(self, action: CodeAction) -> dict[str, Any]:
        return {"code": action.code}

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[CodeObservation]:
        raw = payload.get("observation", {})
        obs = CodeObservation(
            stdout=raw.get("stdout", ""),
            stderr=raw.get("stderr", ""),
            exit_code=raw.get("exit_code", 0),
            done=payload.get("done", False),
            reward=payload.get("reward"),
        )
        return StepResult(observation=obs, reward=payload.get("reward"), done=obs.done)

    def _parse_state(self, payload: dict[str, Any]) -> CodeState:
        return CodeState(**payload)


def main() -> None:
    seen: dict[str, Any] = {}
    with PublishedCodingClient(base_url=sys.argv[1]) as env:
        env.reset()
        steps = []
        for code in (
            "x = 6 * 7\nprint(x)",
            "print(x + 1)",
            "import sys\nprint('oops', file=sys.stderr)\n1 / 0",
        ):
            result = env.step(CodeAction(code=code))
            steps.append(
                {
                    "stdout": result.observation.stdout,
                    "stderr": result.observation.stderr,
                    "exit_code": result.observation.exit_code,
                    "reward": result.reward,
                    "done": result.done,
                }
            )
        seen["steps"] = steps
        seen["state"] = env.state().model_dump()
    print(json.dumps(seen))


if __name__ == "__main__":
    main()
