"""Questions from the `reasoning-gym` package's procedural datasets, scored by each dataset's
own verifier (`score_answer`). One question per episode; the dataset stays with the session, so
each plain `reset()` asks the next question of it (wrapping after `size`)."""

from __future__ import annotations

import dataclasses
import difflib
import json
import re
import warnings
from typing import Any
from uuid import uuid4

from openenv.core.env_server import Environment, InvalidActionError

from ..models import ReasoningGymAction, ReasoningGymObservation, ReasoningGymState

with warnings.catch_warnings():
    # One of its dependencies (cellpylib) has `is` comparisons with literals; on a read-only
    # install (the Docker image) the warning would be printed at every start.
    warnings.simplefilter("ignore", SyntaxWarning)
    import reasoning_gym
    from reasoning_gym.composite import DatasetSpec
    from reasoning_gym.dataset import ProceduralDataset
    from reasoning_gym.factory import DATASETS
    from reasoning_gym.utils import extract_answer

DEFAULT_DATASET = "leg_counting"
DEFAULT_SEED = 42
DEFAULT_SIZE = 1000
#: Most datasets make entries on demand, but a few sample from `range(size)` up front.
MAX_SIZE = 1_000_000
COMPOSITE = "composite"
#: The tag name goes into reasoning-gym's regular expression as it is, so it is kept plain.
_TAG_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,31}")


def _invalid(loc: list[str | int], message: str, **extra: Any) -> InvalidActionError:
    return InvalidActionError(
        message, errors=[{"loc": loc, "msg": message, "type": "value_error"}], **extra
    )


def dataset_names() -> list[str]:
    """Every dataset reasoning-gym registers (`composite` mixes the others)."""
    return sorted(DATASETS)


def _check_name(name: Any, loc: list[str | int]) -> str:
    if not isinstance(name, str):
        raise _invalid(loc, f"a dataset name is a string, not {type(name).__name__}")
    if name not in DATASETS:
        close = difflib.get_close_matches(name, DATASETS, n=5, cutoff=0.6)
        hint = f"; did you mean {', '.join(close)}?" if close else ""
        raise _invalid(
            loc,
            f"unknown reasoning-gym dataset {name!r}{hint} ({len(DATASETS)} datasets; "
            "the error's `available` lists them)",
            available=dataset_names(),
        )
    return name


def _config_fields(name: str) -> list[str]:
    return [field.name for field in dataclasses.fields(DATASETS[name][1])]


def _check_config(
    name: str, config: Any, loc: list[str | int], reserved: tuple[str, ...] = ()
) -> dict[str, Any]:
    """`config` as a dict of fields that `name`'s config class has (`reserved` ones are given
    as their own reset options)."""
    if config is None:
        return {}  # a composite spec without a config: the dataset's defaults
    if not isinstance(config, dict):
        raise _invalid(loc, f"a dataset config is an object, not {type(config).__name__}")
    fields = [field for field in _config_fields(name) if field not in reserved]
    for key in config:
        if key in reserved:
            raise _invalid([*loc, key], f"give {key!r} as its own reset option, not in the config")
        if key not in fields:
            close = difflib.get_close_matches(str(key), fields, n=3, cutoff=0.6)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise _invalid(
                [*loc, key],
                f"{name} has no setting {key!r}{hint} (its settings: {', '.join(fields)})",
            )
    return dict(config)


def _check_specs(specs: Any) -> list[dict[str, Any]]:
    """Composite specs as `{"name", "weight", "config"}` dicts, each checked like a dataset."""
    if not isinstance(specs, list) or not specs:
        raise _invalid(["dataset_specs"], "dataset_specs is a non-empty list of specs")
    checked: list[dict[str, Any]] = []
    for i, spec in enumerate(specs):
        loc: list[str | int] = ["dataset_specs", i]
        if not isinstance(spec, dict):
            raise _invalid(loc, "each spec is an object {name, weight, config}")
        unknown = sorted(set(spec) - {"name", "weight", "config"})
        if unknown:
            raise _invalid([*loc, unknown[0]], f"a spec has name, weight and config, not {unknown}")
        name = _check_name(spec.get("name"), [*loc, "name"])
        if name == COMPOSITE:
            raise _invalid([*loc, "name"], "a composite cannot contain a composite")
        weight = spec.get("weight", 1)
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or weight <= 0:
            raise _invalid([*loc, "weight"], f"a weight is a positive number, not {weight!r}")
        config = _check_config(name, spec.get("config"), [*loc, "config"])
        checked.append({"name": name, "weight": weight, "config": config})
    return checked


def _check_int(value: Any, option: str, low: int | None = None, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise _invalid([option], f"{option} is an integer, not {value!r}")
    if (low is not None and value < low) or (high is not None and value > high):
        raise _invalid([option], f"{option} is between {low} and {high}, not {value}")
    return value


def _json_safe(value: Any) -> Any:
    """Entry metadata as plain JSON (tuples become lists, odd keys and objects strings)."""
    return json.loads(json.dumps(value, default=str))


@dataclasses.dataclass(frozen=True)
class _Source:
    """What a session's questions come from; equal sources make the same questions."""

    name: str
    seed: int
    size: int
    config: str  # JSON text of the config (or the composite's specs), so sources compare

    def build(self) -> ProceduralDataset:
        options = json.loads(self.config)
        try:
            if self.name == COMPOSITE:
                specs = [DatasetSpec(**spec) for spec in options]
                return reasoning_gym.create_dataset(
                    COMPOSITE, size=self.size, seed=self.seed, datasets=specs
                )
            return reasoning_gym.create_dataset(
                self.name, size=self.size, seed=self.seed, **options
            )
        except (TypeError, ValueError, AssertionError) as exc:
            # reasoning-gym checks its configs with asserts and ValueErrors.
            loc = "dataset_specs" if self.name == COMPOSITE else "dataset_config"
            raise _invalid([loc], f"reasoning-gym refused the {self.name} config: {exc}") from exc


class ReasoningGymEnvironment(
    Environment[ReasoningGymAction, ReasoningGymObservation, ReasoningGymState]
):
    """Single-step episodes: `reset` asks a question, `step` scores the answer with the
    dataset's verifier (reward = score, done). Reset options set the dataset; an option not
    given keeps its value (at first `leg_counting`, seed 42, size 1000). Any dataset option
    starts the dataset over, so `reset(seed=s)` always asks the same question; a plain
    `reset()` asks the next one. The answer and the entry's metadata are revealed only after
    the step."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self) -> None:
        super().__init__()
        self._source: _Source | None = None
        self._dataset: ProceduralDataset | None = None
        self._entry: dict[str, Any] | None = None
        self._answer_tag: str | None = None
        self._state = ReasoningGymState()

    def _next_source(
        self,
        dataset_name: Any,
        dataset_config: Any,
        dataset_specs: Any,
        seed: Any,
        size: Any,
    ) -> _Source:
        """The source these reset options ask for, checked (the current one fills the gaps)."""
        current = self._source
        if dataset_name is None and dataset_specs is not None:
            dataset_name = COMPOSITE
        if dataset_name is not None:
            name = _check_name(dataset_name, ["dataset_name"])
        else:
            name = current.name if current else DEFAULT_DATASET
        if seed is None:
            seed = current.seed if current else DEFAULT_SEED
        if size is None:
            size = current.size if current else DEFAULT_SIZE
        seed = _check_int(seed, "seed")
        size = _check_int(size, "size", 1, MAX_SIZE)
        same_dataset = current is not None and name == current.name
        options: Any
        if name == COMPOSITE:
            if dataset_specs is None and not same_dataset:
                raise _invalid(["dataset_specs"], "a composite dataset needs dataset_specs")
            if dataset_config is not None:
                raise _invalid(["dataset_config"], "a composite takes dataset_specs, not a config")
            options = _check_specs(dataset_specs) if dataset_specs is not None else None
        else:
            if dataset_specs is not None:
                raise _invalid(["dataset_specs"], f"dataset_specs are for {COMPOSITE}, not {name}")
            if dataset_config is not None:
                reserved = ("seed", "size")
                options = _check_config(name, dataset_config, ["dataset_config"], reserved)
            else:
                options = None
        if options is None:
            # Not given: the same dataset keeps its config, another one starts from defaults.
            config = current.config if same_dataset and current else "{}"
        else:
            config = json.dumps(options, sort_keys=True)
        return _Source(name=name, seed=seed, size=size, config=config)

    def reset(
        self,
        seed: int | None = None,
        episode_id: str | None = None,
        dataset_name: str | None = None,
        dataset_config: dict[str, Any] | None = None,
        dataset_specs: list[dict[str, Any]] | None = None,
        size: int | None = None,
        answer_tag: str | None = None,
    ) -> ReasoningGymObservation:
        if (
            answer_tag is not None
            and answer_tag != ""
            and (not isinstance(answer_tag, str) or not _TAG_NAME.fullmatch(answer_tag))
        ):
            raise _invalid(
                ["answer_tag"], "answer_tag is a plain tag name such as 'answer' ('' for none)"
            )
        options = (dataset_name, dataset_config, dataset_specs, seed, size)
        restart = self._source is None or any(option is not None for option in options)
        if restart:
            source = self._next_source(dataset_name, dataset_config, dataset_specs, seed, size)
            dataset = self._dataset if source == self._source else source.build()
            index = 0
        else:
            assert self._source is not None and self._dataset is not None
            source, dataset = self._source, self._dataset
            index = ((self._state.index or 0) + 1) % source.size
        entry = dataset[index]
        # Commit only once the options were accepted and the question made.
        self._source, self._dataset, self._entry = source, dataset, entry
        if answer_tag is not None:
            self._answer_tag = answer_tag or None
        self._state = ReasoningGymState(
            episode_id=episode_id or str(uuid4()),
            dataset_name=source.name,
            seed=source.seed,
            size=source.size,
            index=index,
            answer_tag=self._answer_tag,
        )
        return ReasoningGymObservation(
            question=str(entry["question"]), reward=0.0, metadata=self._where()
        )

    def _where(self) -> dict[str, Any]:
        """Which dataset (the sub-dataset of a composite) and position the question is from."""
        assert self._entry is not None and self._source is not None
        entry_meta = self._entry.get("metadata") or {}
        return {
            "dataset": entry_meta.get("source_dataset", self._source.name),
            "index": self._state.index,
        }

    def step(
        self, action: ReasoningGymAction, timeout_s: float | None = None, **kwargs: Any
    ) -> ReasoningGymObservation:
        if self._entry is None or self._dataset is None:
            raise _invalid(["answer"], "no question yet: call reset() first")
        if self._state.answered:
            raise _invalid(["answer"], "this question was answered: call reset() for the next")
        metadata = self._where()
        answer: str | None = action.answer
        if self._answer_tag:
            answer = extract_answer(action.answer, tag_name=self._answer_tag)
            metadata["extracted_answer"] = answer
        # An answer without the tags is a format failure, not something to verify.
        score = 0.0 if answer is None else float(self._dataset.score_answer(answer, self._entry))
        self._state.step_count += 1
        self._state.answered = True
        correct = self._entry.get("answer")
        return ReasoningGymObservation(
            question=None,
            score=score,
            correct_answer=None if correct is None else str(correct),
            dataset_metadata=_json_safe(self._entry.get("metadata") or {}),
            reward=score,
            done=True,
            metadata=metadata,
        )

    @property
    def state(self) -> ReasoningGymState:
        return self._state
