"""The chess environment's reward: a rubric.

    ChessRubric
    ├── outcome  WinLossRubric: +1 win, 0 draw (or a game cut at max_moves), -1 loss; 0 while on
    └── illegal  IllegalMovePenalty: the penalty (default -0.1) when the move was rejected

step reward = outcome when the game is over, else illegal
"""

from __future__ import annotations

from typing import Any

from openenv.core.rubrics import Rubric


def agent_score(result: str | None, agent_color: str) -> float:
    """+1 / 0 / -1 for the agent from a game result (None or "*": 0)."""
    if result == "1-0":
        return 1.0 if agent_color == "white" else -1.0
    if result == "0-1":
        return 1.0 if agent_color == "black" else -1.0
    return 0.0


class WinLossRubric(Rubric):
    """+1 win, 0 draw, -1 loss, scored on the step that ends the game (0 before)."""

    def forward(self, action: Any, observation: Any) -> float:
        if not observation.done:
            return 0.0
        return agent_score(observation.result, observation.agent_color)


class IllegalMovePenalty(Rubric):
    def __init__(self, penalty: float = -0.1) -> None:
        super().__init__()
        self.penalty = penalty

    def forward(self, action: Any, observation: Any) -> float:
        return self.penalty if observation.illegal_move else 0.0

    def own_state_dict(self) -> dict[str, Any]:
        return {"penalty": self.penalty}

    def load_own_state_dict(self, state: dict[str, Any]) -> None:
        self.penalty = float(state["penalty"])


class ChessRubric(Rubric):
    def __init__(self, illegal_move_penalty: float = -0.1) -> None:
        super().__init__()
        self.outcome = WinLossRubric()
        self.illegal = IllegalMovePenalty(illegal_move_penalty)

    def forward(self, action: Any, observation: Any) -> float:
        outcome = self.outcome(action, observation)
        illegal = self.illegal(action, observation)
        return outcome if observation.done else illegal
