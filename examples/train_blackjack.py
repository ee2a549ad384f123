"""Train a blackjack policy with group-relative policy gradients against a served environment.

The OpenSpiel blackjack environment is served over the protocol (started here with the default
provider, or reached at `--base-url`) and played by many WebSocket sessions at once. A tabular
softmax policy over (player total, soft ace, dealer up card) learns to hit or stand: each
training step deals groups of hands, every hand of a group from the same reset seed (so the same
cards), and scores them against each other with `group_relative_advantages` (GRPO without a
critic). Random play, basic strategy and the trained greedy policy are then evaluated on the same
2,000 seeded hands, and the learning curve is drawn to a PNG.

    .venv/bin/pip install -e ./envs/openspiel_env matplotlib   # the environment, the plot
    .venv/bin/python examples/train_blackjack.py --minutes 4 --out train_blackjack.png

(In a uv checkout, `uv sync --all-packages` installs both; then `uv run python ...`.)

The rules (OpenSpiel's `blackjack`): one fresh 52-card deck per hand, the dealer stands on every
17 (soft ones too) and does not peek, no doubling, splitting or surrender, a natural pays like
any win (+1), pushes pay 0. So basic strategy is a hit/stand table.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import re
import sys
import time
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from openenv._install import install_env_hint, pip_install
from openenv.core.rubrics.group import group_relative_advantages
from openenv.fleet import EnvFleet

try:
    import numpy as np

    from openspiel_env import OpenSpielAction, OpenSpielEnv
except ImportError as exc:  # the README's quick start installs openenv and echo_env only
    sys.exit(
        f"this example plays the OpenSpiel environment, which is not installed here ({exc}). "
        f"Install it (it brings numpy) with {install_env_hint('openspiel')}, and matplotlib "
        f"for the plot: `{pip_install()} matplotlib`."
    )

MATPLOTLIB_MISSING = f"matplotlib draws the learning curve: `{pip_install()} matplotlib`"

HIT, STAND = 0, 1
#: the policy's table: player total 0..21 (4..21 occur), soft or hard, dealer up card 1..10 (1 is
#: the ace), then the logits of (hit, stand)
TABLE_SHAPE = (22, 2, 11, 2)
#: evaluation hands come from their own seed range, never dealt in training
EVAL_SEED_BASE = 1_000_000_000
CARD_VALUES = {"A": 1, "T": 10, "J": 10, "Q": 10, "K": 10, **{str(n): n for n in range(2, 10)}}

console = Console()


# -- the game as the agent sees it ----------------------------------------------------------


@dataclass(frozen=True)
class HandView:
    """What a player may know when deciding: the dealer's hole card stays hidden."""

    total: int
    soft: bool
    upcard: int  # 1 (ace) .. 10


def _card_values(cards: str) -> list[int]:
    return [CARD_VALUES[card[-1]] for card in cards.split() if card != "??"]


def read_hand(observation_string: str) -> HandView:
    """Parse OpenSpiel's observation string (`Player 0: Cards: S5 HK` / `Dealer: Cards: ?? CK`)."""
    player = re.search(r"Player 0: Cards: ([^\n]*)", observation_string)
    dealer = re.search(r"Dealer: Cards: ([^\n]*)", observation_string)
    if player is None or dealer is None:
        raise ValueError(f"not a blackjack observation: {observation_string!r}")
    values, shown = _card_values(player.group(1)), _card_values(dealer.group(1))
    if not values or not shown:
        raise ValueError(f"no cards dealt yet: {observation_string!r}")
    hard = sum(values)
    soft = 1 in values and hard + 10 <= 21
    return HandView(total=hard + 10 if soft else hard, soft=soft, upcard=shown[0])


def basic_strategy(hand: HandView) -> int:
    """The standard hit/stand table for a dealer standing on soft 17, without doubling."""
    total, up = hand.total, hand.upcard
    if hand.soft:
        if total >= 19:
            return STAND
        if total == 18:
            return HIT if up in (9, 10, 1) else STAND
        return HIT
    if total >= 17:
        return STAND
    if total <= 11:
        return HIT
    if total == 12:
        return STAND if 4 <= up <= 6 else HIT
    return STAND if 2 <= up <= 6 else HIT


def basic_chart() -> dict[str, dict[str, str]]:
    """Basic strategy in the chart form of `TabularPolicy.decisions`."""
    return {
        f"{'soft' if soft else 'hard'} {total}": {
            "A" if up == 1 else str(up): "H"
            if basic_strategy(HandView(total, soft, up)) == HIT
            else "S"
            for up in range(1, 11)
        }
        for soft, totals in ((False, range(4, 22)), (True, range(12, 22)))
        for total in totals
    }


# -- the policy -----------------------------------------------------------------------------


def _index(hand: HandView) -> tuple[int, int, int]:
    return hand.total, int(hand.soft), hand.upcard


class TabularPolicy:
    """Softmax over (hit, stand) logits per state, trained by Adam on policy gradients."""

    def __init__(self, lr: float = 0.1, seed: int = 0) -> None:
        # Tiny random logits: the untrained policy samples uniformly, and its greedy form (like
        # that of never-seen states) is an arbitrary table rather than "always hit".
        self.logits = np.random.default_rng([seed, 2]).normal(0.0, 1e-3, TABLE_SHAPE)
        self.lr = lr
        self._m = np.zeros(TABLE_SHAPE)
        self._v = np.zeros(TABLE_SHAPE)
        self._t = 0

    def probabilities(self, hand: HandView) -> np.ndarray:
        logits = self.logits[_index(hand)]
        exp = np.exp(logits - logits.max())
        return exp / exp.sum()

    def sample(self, hand: HandView, rng: np.random.Generator) -> int:
        return HIT if rng.random() < self.probabilities(hand)[HIT] else STAND

    def greedy(self, hand: HandView) -> int:
        hit, stand = self.logits[_index(hand)]
        return HIT if hit > stand else STAND

    def update(self, hands: Sequence[Hand], advantages: Sequence[float]) -> None:
        """One Adam ascent step on the mean of advantage * grad log pi over the hands' decisions."""
        grad = np.zeros(TABLE_SHAPE)
        for hand, advantage in zip(hands, advantages, strict=True):
            if advantage == 0.0:
                continue
            for view, action in hand.decisions:
                onehot = np.zeros(2)
                onehot[action] = 1.0
                grad[_index(view)] += advantage * (onehot - self.probabilities(view))
        grad /= max(len(hands), 1)
        beta1, beta2 = 0.9, 0.999
        self._t += 1
        self._m = beta1 * self._m + (1 - beta1) * grad
        self._v = beta2 * self._v + (1 - beta2) * grad**2
        m_hat = self._m / (1 - beta1**self._t)
        v_hat = self._v / (1 - beta2**self._t)
        self.logits += self.lr * m_hat / (np.sqrt(v_hat) + 1e-8)

    def decisions(self) -> dict[str, dict[str, str]]:
        """The greedy hit/stand chart ("H"/"S") by hand ("hard 16", "soft 18") and up card."""
        chart: dict[str, dict[str, str]] = {}
        for soft, totals in ((False, range(4, 22)), (True, range(12, 22))):
            for total in totals:
                row = {}
                for up in range(1, 11):
                    move = self.greedy(HandView(total, soft, up))
                    row["A" if up == 1 else str(up)] = "H" if move == HIT else "S"
                chart[f"{'soft' if soft else 'hard'} {total}"] = row
        return chart


# -- playing hands over the protocol --------------------------------------------------------


@dataclass
class Hand:
    reward: float
    decisions: list[tuple[HandView, int]] = field(default_factory=list)


Chooser = Callable[[HandView], int]


class SessionPool:
    """A pool of open sessions on one server; a hand borrows a free one."""

    def __init__(self, clients: list[OpenSpielEnv]) -> None:
        self.clients = clients
        self._free: asyncio.Queue[OpenSpielEnv] = asyncio.Queue()
        for client in clients:
            self._free.put_nowait(client)

    async def play(self, seed: int, choose: Chooser) -> Hand:
        client = await self._free.get()
        try:
            result = await client.reset(seed=seed, game="blackjack")
            hand = Hand(reward=0.0)
            while not result.done:
                obs = result.observation
                view = read_hand(obs.observation_string or "")
                move = choose(view)
                name = "Hit" if move == HIT else "Stand"
                action_id = obs.legal_actions[obs.legal_action_names.index(name)]
                hand.decisions.append((view, move))
                result = await client.step(OpenSpielAction(action_id=action_id))
                hand.reward += float(result.reward or 0.0)
            return hand
        finally:
            self._free.put_nowait(client)

    async def play_many(
        self, jobs: Sequence[tuple[int, Chooser]], on_done: Callable[[], None] | None = None
    ) -> list[Hand]:
        async def one(seed: int, choose: Chooser) -> Hand:
            hand = await self.play(seed, choose)
            if on_done is not None:
                on_done()
            return hand

        return list(await asyncio.gather(*(one(seed, choose) for seed, choose in jobs)))


@contextlib.asynccontextmanager
async def open_table(
    base_url: str | None,
    sessions: int,
    fleet_servers: int | None = None,
    provider: str | None = None,
) -> AsyncIterator[SessionPool]:
    """Sessions on `base_url`, on a blackjack server started here, or spread over a fleet of
    `fleet_servers` servers (`--fleet`; `--provider` picks where they run). Stopped on exit."""
    async with contextlib.AsyncExitStack() as stack:
        if fleet_servers is not None:
            fleet = await stack.enter_async_context(
                EnvFleet(
                    "openspiel_env",
                    client=OpenSpielEnv,
                    servers=fleet_servers,
                    provider=provider,
                    env_vars={"OPENSPIEL_GAME": "blackjack"},
                )
            )
            clients = await asyncio.gather(*(fleet.acquire() for _ in range(sessions)))
            console.print(f"a fleet of {len(fleet.servers())} OpenSpiel servers")
            yield SessionPool(list(clients))  # type: ignore[arg-type]
            return
        if base_url is None:
            owner = await stack.enter_async_context(
                OpenSpielEnv.from_env("openspiel_env", env_vars={"OPENSPIEL_GAME": "blackjack"})
            )
            base_url = owner.base_url
            console.print(f"started the OpenSpiel environment at {base_url}")
        free = await free_sessions(base_url)
        if free is not None and sessions > free:
            console.print(f"the server has {free} free session slot(s): using {max(free, 1)}")
            sessions = max(free, 1)
        clients = [OpenSpielEnv(base_url=base_url) for _ in range(sessions)]
        for client in clients:
            await stack.enter_async_context(client)
        yield SessionPool(clients)


async def free_sessions(base_url: str) -> int | None:
    """Sessions the server can still open (`max_sessions - active_sessions` from /capacity),
    or None when it does not say; more would queue for a slot."""
    try:
        async with httpx.AsyncClient(timeout=10.0) as http:
            reply = await http.get(base_url.rstrip("/") + "/capacity")
        capacity = reply.json() if reply.status_code == 200 else {}
    except (httpx.HTTPError, ValueError):
        return None
    limit, active = capacity.get("max_sessions"), capacity.get("active_sessions", 0)
    if not isinstance(limit, int) or not isinstance(active, int):
        return None
    return limit - active


# -- evaluation and training ----------------------------------------------------------------


@dataclass
class Score:
    hands: int
    mean_reward: float
    win_rate: float

    @classmethod
    def of(cls, hands: Sequence[Hand]) -> Score:
        rewards = np.array([hand.reward for hand in hands])
        return cls(len(hands), float(rewards.mean()), float((rewards > 0).mean()))


def random_play(view: HandView, rng: np.random.Generator) -> int:
    return int(rng.integers(2))


async def evaluate(
    table: SessionPool,
    chooser_for: Callable[[int], Chooser],
    hands: int,
    label: str,
    progress: Progress | None = None,
) -> Score:
    """`hands` hands on the evaluation seeds: the same for every policy, so the same deals.
    `chooser_for(i)` plays hand i (a random policy gets a generator per hand: the hands run
    concurrently, in no fixed order)."""
    task = progress.add_task(label, total=hands) if progress is not None else None

    def advance() -> None:
        if progress is not None and task is not None:
            progress.advance(task)

    jobs = [(EVAL_SEED_BASE + i, chooser_for(i)) for i in range(hands)]
    played = await table.play_many(jobs, on_done=advance)
    if progress is not None and task is not None:
        progress.remove_task(task)
    return Score.of(played)


@dataclass
class Curve:
    steps: list[int] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    win_rates: list[float] = field(default_factory=list)
    eval_steps: list[int] = field(default_factory=list)
    eval_rewards: list[float] = field(default_factory=list)
    eval_win_rates: list[float] = field(default_factory=list)


async def train(
    table: SessionPool, policy: TabularPolicy, args: argparse.Namespace, progress: Progress
) -> tuple[Curve, int, float]:
    """Train until `--steps` or the `--minutes` budget runs out; returns the curve, the hands
    played and the seconds taken."""
    curve = Curve()
    budget = args.minutes * 60.0
    started = time.monotonic()
    next_eval = 0.0
    task = progress.add_task("training", total=budget)
    hands_played, step = 0, 0
    while (args.steps is None or step < args.steps) and time.monotonic() - started < budget:
        now = time.monotonic() - started
        if now >= next_eval:
            score = await evaluate(table, lambda i: policy.greedy, args.curve_hands, "greedy check")
            curve.eval_steps.append(step)
            curve.eval_rewards.append(score.mean_reward)
            curve.eval_win_rates.append(score.win_rate)
            next_eval = now + budget / args.curve_points
        jobs: list[tuple[int, Chooser]] = []
        for group in range(args.groups):
            seed = args.seed * 10_000_000 + step * args.groups + group
            for member in range(args.group_size):
                rng = np.random.default_rng([args.seed, step, group, member])
                jobs.append((seed, functools.partial(policy.sample, rng=rng)))
        hands = await table.play_many(jobs)
        advantages: list[float] = []
        for group in range(args.groups):
            members = hands[group * args.group_size : (group + 1) * args.group_size]
            advantages += group_relative_advantages([hand.reward for hand in members])
        policy.update(hands, advantages)
        step += 1
        hands_played += len(hands)
        score = Score.of(hands)
        curve.steps.append(step)
        curve.rewards.append(score.mean_reward)
        curve.win_rates.append(score.win_rate)
        recent = slice(-20, None)
        progress.update(
            task,
            completed=min(time.monotonic() - started, budget),
            description=(
                f"training step {step}  hands {hands_played:,}  "
                f"reward {np.mean(curve.rewards[recent]):+.3f}  "
                f"win {np.mean(curve.win_rates[recent]):.1%}"
            ),
        )
    progress.update(task, completed=budget)
    score = await evaluate(table, lambda i: policy.greedy, args.curve_hands, "greedy check")
    curve.eval_steps.append(step)
    curve.eval_rewards.append(score.mean_reward)
    curve.eval_win_rates.append(score.win_rate)
    return curve, hands_played, time.monotonic() - started


# -- the plot -------------------------------------------------------------------------------


def plot(curve: Curve, scores: dict[str, Score], out: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise SystemExit(MATPLOTLIB_MISSING) from None

    def smooth(values: list[float]) -> np.ndarray:
        """Moving average (the first points average over what there is so far)."""
        series = np.asarray(values, dtype=float)
        width = max(1, min(25, len(series) // 10))
        sums = np.cumsum(np.concatenate([[0.0], series]))
        starts = np.maximum(np.arange(len(series)) + 1 - width, 0)
        return (sums[1:] - sums[starts]) / (np.arange(len(series)) + 1 - starts)

    fig, axes = plt.subplots(2, 1, figsize=(8, 7), sharex=True)
    for ax, train_values, eval_values, attr, label in (
        (axes[0], curve.rewards, curve.eval_rewards, "mean_reward", "mean reward per hand"),
        (axes[1], curve.win_rates, curve.eval_win_rates, "win_rate", "win rate"),
    ):
        ax.plot(curve.steps, train_values, color="tab:blue", alpha=0.2, linewidth=0.8)
        ax.plot(curve.steps, smooth(train_values), color="tab:blue", label="training (sampled)")
        ax.plot(curve.eval_steps, eval_values, "o-", color="tab:green", label="greedy (check)")
        for name, color in (("random", "tab:red"), ("basic strategy", "black")):
            value = getattr(scores[name], attr)
            ax.axhline(value, color=color, linestyle="--", label=f"{name} ({value:.3f})")
        trained = getattr(scores["trained greedy"], attr)
        ax.axhline(
            trained, color="tab:green", linestyle=":", label=f"trained greedy ({trained:.3f})"
        )
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
        ax.legend(loc="lower right", fontsize=8)
    axes[1].set_xlabel("training step")
    hands = scores["trained greedy"].hands
    axes[0].set_title(f"Blackjack, group-relative policy gradient (evaluations: {hands:,} hands)")
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)


# -- main -----------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=4.0, help="training time budget")
    parser.add_argument("--steps", type=int, default=None, help="stop after this many steps")
    parser.add_argument("--sessions", type=int, default=32, help="WebSocket sessions at once")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=Path("train_blackjack.png"), help="PNG path")
    parser.add_argument("--summary", type=Path, default=None, help="write the figures as JSON")
    parser.add_argument("--base-url", default=None, help="a running OpenSpiel environment")
    parser.add_argument(
        "--fleet", type=int, default=None, metavar="SERVERS", help="spread sessions over a fleet"
    )
    parser.add_argument("--provider", default=None, help="where --fleet runs its servers")
    parser.add_argument("--groups", type=int, default=32, help="deals (seeds) per step")
    parser.add_argument("--group-size", type=int, default=8, help="hands per deal")
    parser.add_argument("--lr", type=float, default=0.1, help="Adam step size")
    parser.add_argument("--eval-hands", type=int, default=2000)
    parser.add_argument("--curve-hands", type=int, default=400, help="hands per greedy check")
    parser.add_argument("--curve-points", type=int, default=20, help="greedy checks in the budget")
    args = parser.parse_args(argv)
    if args.group_size < 2:
        parser.error("--group-size must be at least 2 (advantages are relative to the group)")
    return args


def versus_basic(trained: float, basic: float) -> str:
    """How a win rate compares with basic strategy's, in percentage points, true either way."""
    points = round((trained - basic) * 100, 1)
    if points == 0:
        return "level with basic strategy's"
    side = "above" if points > 0 else "below"
    return f"{abs(points):.1f} points {side} basic strategy's"


async def run(args: argparse.Namespace) -> dict[str, Any]:
    started = time.monotonic()
    policy = TabularPolicy(lr=args.lr, seed=args.seed)
    columns = (
        TextColumn("[progress.description]{task.description}"),
        BarColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    )
    if args.fleet is not None and args.base_url is not None:
        raise SystemExit("--fleet starts its own servers: drop --base-url")
    async with open_table(args.base_url, args.sessions, args.fleet, args.provider) as table:
        console.print(
            f"{len(table.clients)} sessions; {args.groups} deals x {args.group_size} hands a step"
        )
        scores: dict[str, Score] = {}
        with Progress(*columns, console=console) as progress:
            scores["random"] = await evaluate(
                table,
                lambda i: functools.partial(
                    random_play, rng=np.random.default_rng([args.seed, 1, i])
                ),
                args.eval_hands,
                "random policy",
                progress,
            )
            scores["basic strategy"] = await evaluate(
                table, lambda i: basic_strategy, args.eval_hands, "basic strategy", progress
            )
            curve, hands_played, train_seconds = await train(table, policy, args, progress)
            scores["trained greedy"] = await evaluate(
                table, lambda i: policy.greedy, args.eval_hands, "trained greedy policy", progress
            )
    total_seconds = time.monotonic() - started

    table_view = Table(title=f"Blackjack, {args.eval_hands:,} evaluation hands each (same deals)")
    for column in ("policy", "win rate", "mean reward"):
        table_view.add_column(column)
    for name, score in scores.items():
        table_view.add_row(name, f"{score.win_rate:.1%}", f"{score.mean_reward:+.3f}")
    console.print(table_view)
    console.print(
        f"trained {len(curve.steps)} steps, {hands_played:,} hands in {train_seconds:.0f} s; "
        f"whole run {total_seconds:.0f} s; the greedy policy's win rate is "
        + versus_basic(scores["trained greedy"].win_rate, scores["basic strategy"].win_rate)
    )
    chart, basic = policy.decisions(), basic_chart()
    differ = [
        f"{hand} vs {up}"
        for hand, row in chart.items()
        for up, move in row.items()
        if move != basic[hand][up]
    ]
    cells = sum(len(row) for row in chart.values())
    console.print(f"the greedy chart differs from basic strategy in {len(differ)} of {cells} cells")
    plot(curve, scores, args.out)
    console.print(f"learning curve: {args.out}")
    summary = {
        "scores": {name: vars(score) for name, score in scores.items()},
        "steps": len(curve.steps),
        "hands_trained": hands_played,
        "train_seconds": train_seconds,
        "total_seconds": total_seconds,
        "greedy_policy": chart,
        "differs_from_basic_strategy": differ,
    }
    if args.summary is not None:
        args.summary.parent.mkdir(parents=True, exist_ok=True)
        args.summary.write_text(json.dumps(summary, indent=1))
    return summary


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        sys.exit(MATPLOTLIB_MISSING)
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
