"""`openenv.settings` is the one table of the environment variables openenv reads: the docs'
tables agree with it, the package reads no variable it lacks, and each value parses as the call
sites always have."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import openenv
from openenv import settings
from openenv.settings import SETTINGS, Setting, SettingError

REPO = Path(__file__).resolve().parents[2]
SRC = Path(openenv.__file__).resolve().parent
VARIABLE = re.compile(r"(?<![A-Za-z0-9_])OPENENV_[A-Z0-9_]*[A-Z0-9]")
#: `OPENENV_*` words in src/openenv that are not environment variables.
NOT_VARIABLES = {
    "OPENENV_BUILD": "a `docker build` argument (the image's build label), not an env variable",
    "OPENENV_DISTRIBUTIONS": "a Python constant of openenv.testing.validation",
}
#: A direct read of an `OPENENV_*` variable: only settings.py may do it.
DIRECT_READ = re.compile(
    r"""(environ\.get|environ\.pop|getenv)\(\s*["']OPENENV_|environ\[\s*["']OPENENV_[^\]]*\]\s*(?!=)"""
)


def _docs() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def test_the_table_is_well_formed() -> None:
    names = [setting.name for setting in SETTINGS]
    assert len(names) == len(set(names))
    assert set(settings.BY_NAME) == set(names)
    for setting in SETTINGS:
        assert setting.doc and "\n" not in setting.doc and setting.default and setting.area
        assert setting.type in {"int", "seconds", "bytes", "flag", "choice", "text", "path", "list"}
        assert setting.name.startswith(settings.PREFIX) or setting.name in {
            "MAX_CONCURRENT_ENVS",
            "ENABLE_WEB_INTERFACE",
        }


def test_every_variable_in_the_package_is_in_the_table() -> None:
    found: dict[str, str] = {}
    for path in sorted(SRC.rglob("*")):
        if path.suffix not in (".py", ".md") or "__pycache__" in path.parts:
            continue
        for name in VARIABLE.findall(path.read_text(encoding="utf-8")):
            found.setdefault(name, str(path.relative_to(SRC)))
    missing = {name: where for name, where in found.items() if name not in settings.BY_NAME}
    assert {n: w for n, w in missing.items() if n not in NOT_VARIABLES} == {}
    # The scan sees what it should (and the exclusions are still needed).
    assert {"OPENENV_API_KEY", "OPENENV_SANDBOX_RUN", *NOT_VARIABLES} <= set(found)


def test_only_settings_reads_openenv_variables() -> None:
    found = []
    for path in sorted(SRC.rglob("*.py")):
        if path == SRC / "settings.py":
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if DIRECT_READ.search(line):
                found.append(f"{path.relative_to(SRC)}:{number}: {line.strip()}")
    assert found == []
    assert DIRECT_READ.search('x = os.environ.get("OPENENV_X")')
    assert DIRECT_READ.search("x = os.environ['OPENENV_X']")
    assert not DIRECT_READ.search('env["OPENENV_X"] = "1"')


def test_the_configuration_doc_holds_the_generated_table() -> None:
    text = (REPO / settings.DOC).read_text(encoding="utf-8")
    assert settings.rewrite(text) == text, "run `python -m openenv.settings --write`"
    block = text.split(settings.BEGIN)[1].split(settings.END)[0]
    for setting in SETTINGS:
        assert f"| `{setting.name}` |" in block, f"{setting.name} is documented nowhere"
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert "(docs/configuration.md)" in readme


def _tables(text: str) -> list[list[list[str]]]:
    """The markdown tables of `text`: rows of cells (the separator row left out)."""
    tables: list[list[list[str]]] = []
    current: list[list[str]] = []
    for line in [*text.splitlines(), ""]:
        if line.startswith("|"):
            cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
            if not all(re.fullmatch(r":?-+:?", cell) for cell in cells):
                current.append(cells)
        elif current:
            tables.append(current)
            current = []
    return tables


def _first_word(text: str) -> str:
    match = re.search(r"[\w.$]+", text.replace("`", ""))
    return match.group(0).lower() if match else ""


def test_docs_tables_agree_with_the_settings() -> None:
    """Every variable a docs table names exists; where a table has a default column and a row
    names one variable, the row's default begins with (or states) the setting's."""
    names = "|".join(re.escape(name) for name in settings.BY_NAME)
    known = re.compile(rf"(?<![A-Za-z0-9_])({names})(?![A-Za-z0-9_])")
    unknown, wrong_default = [], []
    for path in _docs():
        for table in _tables(path.read_text(encoding="utf-8")):
            header = [cell.lower() for cell in table[0]]
            column = header.index("default") if "default" in header else None
            for row in table[1:]:
                text = " ".join(row)
                unknown += [
                    f"{path.name}: {name}"
                    for name in VARIABLE.findall(text)
                    if name not in settings.BY_NAME
                ]
                named = set(known.findall(text))
                if column is None or len(named) != 1 or column >= len(row):
                    continue
                setting = settings.BY_NAME[named.pop()]
                expected = _first_word(setting.default)
                words = {w.lower() for w in re.findall(r"[\w.$]+", row[column].replace("`", ""))}
                if expected not in words:
                    wrong_default.append(
                        f"{path.name}: {setting.name} default {row[column]!r}, "
                        f"settings say {setting.default!r}"
                    )
    assert unknown == []
    assert wrong_default == []


def test_values_are_read_at_call_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENENV_SESSION_TIMEOUT", raising=False)
    assert settings.SESSION_TIMEOUT.get() is None
    monkeypatch.setenv("OPENENV_SESSION_TIMEOUT", "12.5")
    assert settings.SESSION_TIMEOUT.get() == 12.5
    monkeypatch.setenv("OPENENV_SESSION_TIMEOUT", "  ")
    assert settings.SESSION_TIMEOUT.get() is None


@pytest.mark.parametrize(
    ("setting", "raw", "expected"),
    [
        # Numbers of ServerConfig: blank is unset.
        (settings.MAX_THREADS, "8", 8),
        (settings.MAX_CONCURRENT_ENVS, "", None),
        # Connection bounds: unset is the default, blank or 0 or less is no bound.
        (settings.HTTP_BODY_TIMEOUT, None, 30.0),
        (settings.HTTP_BODY_TIMEOUT, "", None),
        (settings.HTTP_BODY_TIMEOUT, "-1", None),
        (settings.HTTP_BODY_TIMEOUT, "2.5", 2.5),
        (settings.MAX_CONNECTIONS, None, 4096),
        (settings.MAX_CONNECTIONS, "0", None),
        (settings.MAX_CONNECTIONS, "12", 12),
        # Flags: None (the caller's default) when unset or unrecognised.
        (settings.METRICS, " Off ", False),
        (settings.METRICS, "YES", True),
        (settings.METRICS, None, None),
        (settings.METRICS, "maybe", None),
        (settings.DEBUG, "on", True),
        # The GC switches: off for exactly 0, false or empty.
        (settings.SESSION_GC_FREEZE, None, True),
        (settings.SESSION_GC_FREEZE, "", False),
        (settings.SESSION_GC_FREEZE, "false", False),
        (settings.SESSION_GC_FREEZE, "no", True),
        (settings.ZYGOTE_WARMUP, "0", False),
        (settings.ZYGOTE_WARMUP, "false", True),
        # Text: empty is unset.
        (settings.API_KEY, "", None),
        (settings.API_KEY, "k", "k"),
        (settings.ALLOWED_ORIGINS, " https://a.example/ ,, * ", ("https://a.example", "*")),
        # Choices: case and spaces ignored; empty is unset.
        (settings.MODE, " Production ", "production"),
        (settings.SANDBOX, "", None),
        (settings.CLIENT_MODE, "simulation", "simulation"),
    ],
)
def test_each_value_parses_as_its_call_sites_read_it(
    monkeypatch: pytest.MonkeyPatch, setting: Setting[object], raw: str | None, expected: object
) -> None:
    if raw is None:
        monkeypatch.delenv(setting.name, raising=False)
    else:
        monkeypatch.setenv(setting.name, raw)
    assert setting.get() == expected


@pytest.mark.parametrize(
    ("setting", "raw", "accepted"),
    [
        (settings.MAX_QUEUED, "lots", "an integer"),
        (settings.MAX_QUEUED, "1.5", "an integer"),
        (settings.CALL_TIMEOUT, "soon", "a number"),
        (settings.WS_SEND_TIMEOUT, "x", "a number of seconds"),
        (settings.MAX_CONNECTIONS, "many", "an integer"),
        (settings.MODE, "prod", "simulation or production"),
        (settings.SANDBOX, "docker", "auto, bubblewrap"),
        (settings.LOG_LEVEL, "loud", "critical, error"),
    ],
)
def test_an_invalid_value_names_the_variable_and_what_it_accepts(
    monkeypatch: pytest.MonkeyPatch, setting: Setting[object], raw: str, accepted: str
) -> None:
    monkeypatch.setenv(setting.name, raw)
    with pytest.raises(SettingError) as caught:
        setting.get()
    message = str(caught.value)
    assert f"{setting.name}={raw!r}" in message and accepted in message
    assert isinstance(caught.value, ValueError)


def test_the_generator_prints_the_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert settings.main(["--markdown"]) == 0
    out = capsys.readouterr().out
    assert out == settings.markdown_table()
    assert out.count("\n") == len(SETTINGS) + 2
    with pytest.raises(ValueError, match="markers"):
        settings.rewrite("no markers here")
