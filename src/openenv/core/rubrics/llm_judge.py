"""`LLMJudge`: a rubric that asks a language model for a score.

The judge renders its prompt template with the action and observation, sends it through an
`openenv.core.llm_client.LLMClient` and parses a score out of the free-form answer. An answer
without a score raises `JudgeError` (a `RubricError`) -- it never falls back to 0, which would be
indistinguishable from a genuinely bad answer -- unless the user opted in with ``default_score``
(OpenEnv's argument). A failed model call always raises the client's own error.

`parse_score` understands what models actually write: ``"Score: 8/10"``, ``"**Rating:** 0.7"``,
``"Rating: [[7]]"``, ``"I'd give it 7 out of 10."``, ``{"score": 0.9}`` (also inside a code
fence), ``"3/4"``, ``"85%"`` or a bare number. Labelled scores win over unlabelled numbers and
the *last* labelled score wins (models reason first and conclude last). Numbers that merely
appear in the prose are never taken as the score.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from openenv.core.llm_client import LLMClient

from .base import Rubric, RubricError, add_note

__all__ = ["JudgeError", "LLMJudge", "ParsedScore", "parse_score"]


class JudgeError(RubricError):
    """An LLM judge could not score: the model call failed or its answer held no score.

    ``output`` is the model's answer when there was one.
    """

    def __init__(
        self, message: str, *, output: str | None = None, cause: BaseException | None = None
    ) -> None:
        super().__init__("", cause, message=message)
        self.output = output


@dataclass(frozen=True)
class ParsedScore:
    """A score found in text: ``value``, and ``scale`` when the text gave one (8/10 -> 10)."""

    value: float
    scale: float | None = None

    def normalized(self, default_scale: float | None = None) -> float | None:
        scale = self.scale if self.scale is not None else default_scale
        if scale is None:
            return self.value if 0.0 <= self.value <= 1.0 else None
        return self.value / scale


_NUM = r"[-+]?(?:\d+(?:\.\d+)?|\.\d+)"
_SCALE = rf"(?:\s*(?:/|\bout\s+of\b|\bof\b)\s*(?P<scale>{_NUM}))?"
_PCT = r"(?:\s*(?P<pct>%|\bpercent\b))?"
_LABEL = r"(?:score|rating|grade|reward|mark|points|verdict)"
_FILL = r"[\s*_`#>\[\]()]*"
# "Score: 8/10", "**Rating:** 0.7", "Final score = 0.9", "Rating (1-10): [[7]]", "Score - 6"
_LABELLED = re.compile(
    rf"\b{_LABEL}\b(?:\s*\((?P<paren>[^)\n]*)\))?{_FILL}(?:[:=]|-(?!\d)){_FILL}"
    rf"(?P<value>{_NUM}){_SCALE}{_PCT}",
    re.IGNORECASE,
)
# "7 out of 10", "8/10"
_RATIO = re.compile(
    rf"(?<![\w./])(?P<value>{_NUM})\s*(?:/|\bout\s+of\b)\s*(?P<scale>{_NUM})(?![\w/]|\.\d)",
    re.IGNORECASE,
)
_OBJECT = r"(?:it|this|that|them|the\s+\w+|this\s+\w+|that\s+\w+)"
# "a score of 8", "the rating is 4", "I'd rate it 0.8", "I would give this answer a 7"
_PHRASE = re.compile(
    rf"(?:\b{_LABEL}\s+(?:of|is|was|would\s+be)"
    rf"|\b(?:rate|rated|rating|grade|graded)(?:\s+{_OBJECT})?(?:\s+(?:an?|as))?"
    rf"|\b(?:give|gives|giving|award|awarding)\s+{_OBJECT}(?:\s+(?:an?|as))?)"
    rf"\s+[\[(*_`]*(?P<value>{_NUM}){_SCALE}{_PCT}(?![\w])",
    re.IGNORECASE,
)
_BARE = re.compile(rf"^(?P<value>{_NUM})(?:\s*/\s*(?P<scale>{_NUM}))?{_PCT}$", re.IGNORECASE)
_LAST_NUMBER = re.compile(r"\d+(?:\.\d+)?(?!.*\d)")
_FIRST_NUMBER = r"(\d+\.?\d*)"  # OpenEnv's default score_pattern
_JSON_KEYS = ("score", "rating", "grade", "reward", "final_score", "overall_score")
_JSON_SCALE_KEYS = ("max_score", "out_of", "scale", "max", "max_rating")


def _from_match(match: re.Match[str]) -> ParsedScore:
    value = float(match.group("value"))
    groups = match.groupdict()
    if groups.get("pct"):
        return ParsedScore(value, 100.0)
    scale = groups.get("scale")
    if scale is None and groups.get("paren"):
        # "Rating (1-10): 7", "Score (out of 5): 4": the parenthesis names the scale.
        last = _LAST_NUMBER.search(groups["paren"])
        scale = last.group(0) if last else None
    if scale is not None:
        scale_value = float(scale)
        if scale_value > 0:
            return ParsedScore(value, scale_value)
    return ParsedScore(value)


def _strip_markup(text: str) -> str:
    text = text.strip().strip("*_`[]()\"'").strip()
    return text.rstrip(".!").strip().strip("*_`[]()\"'").strip()


def _last(pattern: re.Pattern[str], text: str) -> ParsedScore | None:
    matches = list(pattern.finditer(text))
    return _from_match(matches[-1]) if matches else None


def _json_objects(text: str) -> list[Any]:
    decoder = json.JSONDecoder()
    found = []
    index = text.find("{")
    while index != -1:
        try:
            value, end = decoder.raw_decode(text, index)
        except ValueError:
            index = text.find("{", index + 1)
            continue
        found.append(value)
        index = text.find("{", end)
    return found


def _score_in_json(value: Any, depth: int = 0) -> ParsedScore | None:
    if not isinstance(value, Mapping) or depth > 3:
        return None
    lowered = {str(k).lower(): v for k, v in value.items()}
    scale = None
    for key in _JSON_SCALE_KEYS:
        candidate = lowered.get(key)
        if (
            isinstance(candidate, (int, float))
            and not isinstance(candidate, bool)
            and candidate > 0
        ):
            scale = float(candidate)
            break
    for key in _JSON_KEYS:
        if key not in lowered:
            continue
        raw = lowered[key]
        if isinstance(raw, bool):
            continue
        if isinstance(raw, (int, float)):
            return ParsedScore(float(raw), scale)
        if isinstance(raw, str):
            parsed = _parse_text(raw, allow_json=False)
            if parsed is not None:
                return parsed if parsed.scale is not None else ParsedScore(parsed.value, scale)
    for nested in value.values():
        parsed = _score_in_json(nested, depth + 1)
        if parsed is not None:
            return parsed
    return None


def _parse_text(text: str, allow_json: bool = True) -> ParsedScore | None:
    if allow_json:
        for obj in reversed(_json_objects(text)):
            parsed = _score_in_json(obj)
            if parsed is not None:
                return parsed
    labelled = _last(_LABELLED, text)
    if labelled is not None:
        return labelled
    bare = _BARE.match(_strip_markup(text))
    if bare is not None:
        return _from_match(bare)
    for pattern in (_RATIO, _PHRASE):
        parsed = _last(pattern, text)
        if parsed is not None:
            return parsed
    return None


def parse_score(text: str, pattern: str | re.Pattern[str] | None = None) -> ParsedScore | None:
    """Find the score in a model's answer, or None when there is none.

    With ``pattern`` only that regular expression is used (its first match): the score is its
    ``score`` group, else group 1, else the whole match, and may itself be ``8/10`` or ``80%``;
    a ``scale`` group gives the scale.
    """
    if pattern is None:
        return _parse_text(text)
    regex = re.compile(pattern) if isinstance(pattern, str) else pattern
    match = regex.search(text)
    if match is None:
        return None
    groups = match.groupdict()
    if groups.get("score") is not None:
        captured = groups["score"]
    elif regex.groups:
        captured = match.group(1)
    else:
        captured = match.group(0)
    if captured is None:
        return None
    inner = _BARE.match(_strip_markup(captured))
    if inner is None:
        return None
    parsed = _from_match(inner)
    if groups.get("scale") is not None and parsed.scale is None:
        try:
            scale = float(groups["scale"])
        except ValueError:
            return parsed
        if scale > 0:
            return ParsedScore(parsed.value, scale)
    return parsed


class LLMJudge(Rubric):
    """Score a step by asking an LLM.

    ``prompt_template`` is a `str.format` template receiving ``action`` and ``observation``
    (``"{observation.text}"`` works; write literal braces as ``{{`` ``}}``); override
    `render_prompt` (or OpenEnv's ``_render_prompt``) for anything fancier. The answer is parsed
    with `parse_score` (or ``score_pattern``). With ``normalize`` (the default) the score is
    mapped to [0, 1]: by the scale the answer gives (``8/10``, ``7 out of 10``, ``85%``), else by
    ``scale`` (set it when your prompt asks for e.g. "a score from 0 to 10" and the model may
    answer just ``8``), and then clamped to [0, 1] as OpenEnv does. Without ``normalize`` the
    raw number is returned. ``complete_kwargs`` are passed to ``client.complete``.

    An answer holding no score raises `JudgeError`, unless ``default_score`` is given: then that
    score is returned instead (the caller's explicit choice; OpenEnv's default is 0.0). A failed
    model call raises the client's error either way. The last answer is kept in
    ``last_output``.
    """

    def __init__(
        self,
        prompt_template: str,
        client: LLMClient,
        *,
        score_pattern: str | None = None,
        default_score: float | None = None,
        normalize: bool = True,
        scale: float | None = None,
        complete_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        if scale is not None and not scale > 0:
            raise ValueError(f"scale must be > 0, got {scale!r}")
        if score_pattern is not None:
            re.compile(score_pattern)  # fail early on a bad pattern
        self.prompt_template = prompt_template
        self.client = client
        self.score_pattern = score_pattern
        self.default_score = _check_default(default_score)
        self.normalize = normalize
        self.scale = None if scale is None else float(scale)
        self.complete_kwargs = dict(complete_kwargs or {})
        self.last_output: str | None = None

    @property
    def _client(self) -> LLMClient:
        """OpenEnv's name for `client`."""
        return self.client

    @_client.setter
    def _client(self, client: LLMClient) -> None:
        self.client = client

    @property
    def _score_pattern(self) -> re.Pattern[str]:
        """OpenEnv's compiled pattern, for subclasses that override ``_parse_score`` with it:
        ``score_pattern``, or OpenEnv's first-number pattern when none is set."""
        return re.compile(self.score_pattern or _FIRST_NUMBER)

    @_score_pattern.setter
    def _score_pattern(self, pattern: str | re.Pattern[str]) -> None:
        self.score_pattern = pattern if isinstance(pattern, str) else pattern.pattern

    def render_prompt(self, action: Any, observation: Any) -> str:
        try:
            return self.prompt_template.format(action=action, observation=observation)
        except (KeyError, IndexError, AttributeError, ValueError) as exc:
            add_note(
                exc,
                "LLMJudge cannot render its prompt template: it may use only {action} and "
                "{observation} -- write literal braces as {{ and }}",
            )
            raise

    def _render_prompt(self, action: Any, observation: Any) -> str:
        """OpenEnv's name for `render_prompt` (either may be overridden)."""
        return self.render_prompt(action, observation)

    async def forward(self, action: Any, observation: Any) -> float:
        prompt = self._render_prompt(action, observation)
        self.last_output = None
        try:
            output = await self.client.complete(prompt, **self.complete_kwargs)
        except Exception as exc:
            add_note(exc, "the LLM judge's model call failed: this is not a score")
            raise
        if not isinstance(output, str):
            raise JudgeError(f"the LLM client returned {type(output).__name__}, not text")
        self.last_output = output
        return self._parse_score(output)

    def _parse_score(self, response: str) -> float:
        """OpenEnv's name for `score_output` (either may be overridden)."""
        return self.score_output(response)

    def score_output(self, output: str) -> float:
        """Turn one model answer into the judge's score.

        Raises `JudgeError` when the answer holds no score and no ``default_score`` was given.
        """
        parsed = parse_score(output, self.score_pattern)
        if parsed is None or not math.isfinite(parsed.value):
            if self.default_score is not None:
                return self.default_score
            what = "no score" if parsed is None else "a non-finite score"
            raise JudgeError(
                f"{what} in the judge's answer (pass default_score= to LLMJudge to score such "
                f"answers instead): {output[:300]!r}",
                output=output,
            )
        if not self.normalize:
            return parsed.value
        scale = parsed.scale if parsed.scale is not None else self.scale
        value = parsed.value / scale if scale is not None else parsed.value
        return min(1.0, max(0.0, value))

    def own_state_dict(self) -> dict[str, Any]:
        return {
            "prompt_template": self.prompt_template,
            "score_pattern": self.score_pattern,
            "default_score": self.default_score,
            "normalize": self.normalize,
            "scale": self.scale,
        }

    def load_own_state_dict(self, state: dict[str, Any]) -> None:
        if "prompt_template" in state:
            self.prompt_template = str(state["prompt_template"])
        if "score_pattern" in state:
            pattern = state["score_pattern"]
            if pattern is not None:
                re.compile(pattern)
            self.score_pattern = pattern
        if "default_score" in state:
            self.default_score = _check_default(state["default_score"])
        if "normalize" in state:
            self.normalize = bool(state["normalize"])
        if "scale" in state:
            self.scale = None if state["scale"] is None else float(state["scale"])

    def extra_repr(self) -> str:
        return f"client={self.client!r}, normalize={self.normalize}, scale={self.scale}"


def _check_default(value: Any) -> float | None:
    if value is None:
        return None
    score = float(value)
    if not math.isfinite(score):
        raise ValueError(f"default_score must be a finite number, got {value!r}")
    return score
