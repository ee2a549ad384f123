"""`openenv push`: the staged Space folder, the dry-run plan, and the real path.

The Hugging Face Hub is not reachable from the test machine, so the real path runs against
`StandInHub`, a local HTTP server that imitates (only) the Hub endpoints `push` and `fork`
call, and against a closed port for the unreachable-Hub errors.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import zipfile
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path, PurePosixPath
from typing import Any, Optional

import pytest
import yaml

from openenv.cli.dockerfile import render_dockerfile
from openenv.cli.staging import (
    SPACE_DOCKERFILE_HEADER,
    StagingError,
    is_excluded,
    space_dockerfile,
    space_readme,
)
from tests.support.server import REPO, free_port

OPENENV = str(Path(sys.executable).with_name("openenv"))
GRID = REPO / "envs" / "grid_world_env"
SECRET_VALUE = "s3cr3t-value-that-must-not-leak"


# -- the stand-in Hub ----------------------------------------------------------------------


class StandInHub:
    """A stand-in for the Hugging Face Hub, NOT the Hub: a local HTTP server that answers the
    few endpoints huggingface_hub calls for `push` and `fork`, and records what it was sent.

    Uploads go through huggingface_hub's plain commit path (`HF_HUB_DISABLE_XET=1`), in which
    small files are sent inline in the commit, so the server sees every uploaded byte.
    """

    def __init__(
        self,
        user: str = "tester",
        *,
        reject_token: bool = False,
        missing: tuple[str, ...] = (),
        existing: tuple[str, ...] = (),
    ) -> None:
        self.user = user
        self.reject_token = reject_token
        self.missing = set(missing)  # repo ids answered with 404
        self.existing = set(existing)  # repo ids a duplicate may not be created as (409)
        self.calls: list[tuple[str, str]] = []
        self.created: list[dict[str, Any]] = []
        self.files: dict[str, bytes] = {}
        self.commits: list[dict[str, Any]] = []
        self.variables: dict[str, str] = {}
        self.secrets: dict[str, str] = {}
        self.hardware: list[str] = []
        self.duplicated: list[dict[str, Any]] = []
        self.bodies: list[bytes] = []
        self.unknown: list[str] = []

    # environment for the CLI subprocess
    def env(self, **extra: str) -> dict[str, str]:
        return {
            **os.environ,
            "HF_ENDPOINT": self.url,
            "HF_TOKEN": "hf_standin_token",
            "HF_HUB_DISABLE_XET": "1",
            "HF_HUB_DISABLE_TELEMETRY": "1",
            "NO_PROXY": "127.0.0.1,localhost",
            **extra,
        }

    def __enter__(self) -> StandInHub:
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _reply(self, payload: Any, status: int = 200) -> None:
                body = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _body(self) -> bytes:
                data = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                hub.bodies.append(data)
                return data

            def do_GET(self) -> None:
                hub.calls.append(("GET", self.path))
                path = self.path.split("?", 1)[0]
                if path == "/api/whoami-v2" and hub.reject_token:
                    self._reply({"error": "Invalid credentials in Authorization header"}, 401)
                elif path == "/api/whoami-v2":
                    self._reply({"type": "user", "name": hub.user, "orgs": []})
                elif re.fullmatch(r"/api/spaces/[^/]+/[^/]+/tree/main.*", path):
                    self._reply([])  # a new Space: nothing to delete
                else:
                    hub.unknown.append(f"GET {self.path}")
                    self._reply({"error": "not in the stand-in"}, 404)

            def do_POST(self) -> None:
                hub.calls.append(("POST", self.path))
                path = self.path.split("?", 1)[0]
                raw = self._body()
                space = re.fullmatch(r"/api/spaces/([^/]+/[^/]+)/(\w+)(?:/main)?", path)
                if path == "/api/repos/create":
                    hub.created.append(json.loads(raw))
                    data = json.loads(raw)
                    self._reply({"url": f"{hub.url}/spaces/{data['organization']}/{data['name']}"})
                elif path == "/api/validate-yaml":
                    self._reply({"errors": [], "warnings": []})
                elif space and space.group(2) == "preupload":
                    files = json.loads(raw)["files"]
                    modes = [
                        {"path": f["path"], "uploadMode": "regular", "shouldIgnore": False}
                        for f in files
                    ]
                    self._reply({"files": modes})
                elif space and space.group(2) == "commit":
                    lines = [json.loads(line) for line in raw.splitlines() if line.strip()]
                    hub.commits.append({"query": self.path, "lines": lines})
                    for line in lines:
                        if line["key"] == "file":
                            value = line["value"]
                            hub.files[value["path"]] = base64.b64decode(value["content"])
                    self._reply(
                        {
                            "commitUrl": f"{hub.url}/spaces/{space.group(1)}/commit/abc",
                            "commitOid": "a" * 40,
                            "pullRequestUrl": f"{hub.url}/spaces/{space.group(1)}/discussions/1",
                        }
                    )
                elif space and space.group(2) == "variables":
                    data = json.loads(raw)
                    hub.variables[data["key"]] = data["value"]
                    self._reply({})
                elif space and space.group(2) == "secrets":
                    data = json.loads(raw)
                    hub.secrets[data["key"]] = data["value"]
                    self._reply({})
                elif space and space.group(2) == "hardware":
                    hub.hardware.append(json.loads(raw)["flavor"])
                    self._reply({"stage": "BUILDING", "hardware": {"current": None}})
                elif space and space.group(2) == "duplicate":
                    data = json.loads(raw)
                    if space.group(1) in hub.missing:
                        self._reply({"error": "Repository not found"}, 404)
                    elif data["repository"] in hub.existing:
                        self._reply({"error": "You already created this space repo"}, 409)
                    else:
                        hub.duplicated.append({"from": space.group(1), **data})
                        self._reply({"url": f"{hub.url}/spaces/{data['repository']}"})
                else:
                    hub.unknown.append(f"POST {self.path}")
                    self._reply({"error": "not in the stand-in"}, 404)

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


# -- helpers ------------------------------------------------------------------------------


def run(
    *args: str, env: Optional[dict[str, str]] = None, cwd: Optional[Path] = None
) -> subprocess.CompletedProcess:
    return subprocess.run(
        [OPENENV, "push", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env or {**os.environ},
        cwd=cwd or REPO,
    )


def front_matter(readme: str) -> tuple[dict, str]:
    assert readme.startswith("---\n"), readme[:80]
    head, body = readme[4:].split("\n---\n", 1)
    return yaml.safe_load(head), body


def tree(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


def no_secret_anywhere(*roots: Path) -> None:
    for root in roots:
        for path in [root] if root.is_file() else root.rglob("*"):
            if path.is_file():
                data = path.read_bytes()
                if path.suffix == ".whl":
                    with zipfile.ZipFile(path) as wheel:
                        data = b"".join(wheel.read(name) for name in wheel.namelist())
                assert SECRET_VALUE.encode() not in data, path


def dockerfile_edits_only(source: str, staged: str) -> None:
    """The staged Dockerfile is the source with only the Space edits."""
    assert staged.startswith(SPACE_DOCKERFILE_HEADER)
    staged = staged[len(SPACE_DOCKERFILE_HEADER) :]
    edited = re.compile(
        r"^(ARG BASE_IMAGE=|ARG PIP_NO_INDEX=|ENV ENABLE_WEB_INTERFACE=|\s+--find-links )"
    )
    kept = [line for line in source.splitlines() if not edited.match(line)]
    assert [line for line in staged.splitlines() if not edited.match(line)] == kept


# -- dry run --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def grid_dry_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """One dry run of envs/grid_world_env, with a variable and a secret."""
    out = tmp_path_factory.mktemp("grid")
    stage = out / "stage"
    env = {**os.environ, "HF_ENDPOINT": f"http://127.0.0.1:{free_port()}"}
    env.pop("HF_TOKEN", None)
    env["HF_HOME"] = str(out / "no-hf-home")  # no cached login either: no token is needed
    result = run(
        str(GRID),
        "--dry-run",
        "--stage-dir",
        str(stage),
        "-e",
        "LOG_LEVEL=debug",
        "--secret",
        f"API_KEY={SECRET_VALUE}",
        "--hardware",
        "cpu-upgrade",
        env=env,
    )
    assert result.returncode == 0, result.stderr
    return {"out": out, "stage": stage, "result": result, "plan": json.loads(result.stdout)}


def test_dry_run_stages_the_environment_files(grid_dry_run: dict[str, Any]) -> None:
    stage = grid_dry_run["stage"]
    files = tree(stage)
    source = set()
    for path in GRID.rglob("*"):
        parts = path.relative_to(GRID).parts
        if (
            path.is_file()
            and not any(part.startswith(".") or part == "__pycache__" for part in parts)
            and parts[0] not in ("build", "dist", "wheels")
            and path.suffix != ".pyc"
        ):
            source.add("/".join(parts))
    source.discard("Dockerfile")
    for name in source:
        assert name in files, name
        if name != "README.md":
            assert (stage / name).read_bytes() == (GRID / name).read_bytes(), name
    assert not [f for f in files if "__pycache__" in f or f.endswith(".pyc") or "/." in f]
    assert not [f for f in files if f.startswith(".")]
    wheels = sorted(f for f in files if f.startswith("wheels/"))
    assert len(wheels) == 2
    assert re.fullmatch(r"wheels/openenv-[\w.]+-py3-none-any\.whl", wheels[0]), wheels
    assert re.fullmatch(r"wheels/openenv_grid_world-[\w.]+-py3-none-any\.whl", wheels[1])
    with zipfile.ZipFile(stage / wheels[1]) as wheel:
        assert "grid_world_env/server/app.py" in wheel.namelist()
    with zipfile.ZipFile(stage / wheels[0]) as wheel:
        assert "openenv/core/env_client.py" in wheel.namelist()
    # Only what staging adds is new.
    assert set(files) - source == {"Dockerfile", *wheels}


def test_dry_run_dockerfile_builds_on_a_space(grid_dry_run: dict[str, Any]) -> None:
    staged = (grid_dry_run["stage"] / "Dockerfile").read_text()
    # The environment ships no Dockerfile: the template is generated into the Space.
    assert not (GRID / "Dockerfile").exists()
    source = render_dockerfile("openenv-grid-world", "grid_world_env")
    assert re.search(r"^ARG BASE_IMAGE=python:3\.11-slim$", staged, re.M)
    assert "openenv-base" not in staged
    if "ARG PIP_NO_INDEX=1" in source:
        assert re.search(r"^ARG PIP_NO_INDEX=0$", staged, re.M)
        assert "ARG PIP_NO_INDEX=1" not in staged
        # openenv comes from the wheel file, never from PyPI.
        assert "--find-links /tmp/wheels /tmp/wheels/*.whl" in staged
    lines = staged.splitlines()
    env_at = lines.index("ENV ENABLE_WEB_INTERFACE=true")
    cmd_at = max(i for i, line in enumerate(lines) if line.startswith("CMD "))
    assert env_at < cmd_at
    assert not lines[env_at - 1].rstrip().endswith("\\")  # not inside HEALTHCHECK ... CMD
    dockerfile_edits_only(source, staged)


def test_dry_run_readme_front_matter_is_valid_for_a_space(grid_dry_run: dict[str, Any]) -> None:
    readme = (grid_dry_run["stage"] / "README.md").read_text()
    meta, body = front_matter(readme)
    assert meta["sdk"] == "docker"
    assert meta["app_port"] == 8000
    assert "openenv" in meta["tags"]
    assert meta["base_path"] == "/web"
    assert meta["title"]
    assert meta["colorFrom"] and meta["colorTo"]
    # The README had no front matter: the block is added and the body is kept whole.
    assert body.lstrip("\n") == (GRID / "README.md").read_text()


def test_dry_run_plan(grid_dry_run: dict[str, Any]) -> None:
    plan, stage, out = grid_dry_run["plan"], grid_dry_run["stage"], grid_dry_run["out"]
    assert plan["repo_id"] == "<your-hf-username>/grid_world_env"
    assert plan["private"] is False
    assert plan["create_pr"] is False
    assert plan["hardware"] == "cpu-upgrade"
    assert plan["variables"] == {"LOG_LEVEL": "debug"}
    assert plan["secrets"] == ["API_KEY"]
    assert plan["files"] == tree(stage)
    assert plan["stage_dir"] == str(stage)
    # The plan file is written beside the staged folder, never inside it.
    assert json.loads((out / "openenv-push.json").read_text()) == plan
    assert "openenv-push.json" not in plan["files"]
    stderr = grid_dry_run["result"].stderr
    assert "nothing was sent to the Hub" in stderr
    assert SECRET_VALUE not in grid_dry_run["result"].stdout + stderr
    no_secret_anywhere(stage, out / "openenv-push.json")


def test_dry_run_without_stage_dir_prints_the_temporary_folder(tmp_path: Path) -> None:
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1"}
    env.pop("HF_TOKEN", None)
    result = run(str(GRID), "--dry-run", "--no-interface", env=env)
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    stage = Path(plan["stage_dir"])
    try:
        assert stage.is_dir() and str(stage) in result.stderr.replace("\n", "")
        assert (stage.parent / "openenv-push.json").is_file()
        assert plan["interface"] is False
        staged = (stage / "Dockerfile").read_text()
        assert "ENABLE_WEB_INTERFACE" not in staged
        meta, _ = front_matter((stage / "README.md").read_text())
        assert "base_path" not in meta
        assert plan["variables"] == {} and plan["secrets"] == []
    finally:
        shutil.rmtree(stage.parent)


@pytest.fixture
def odd_env(tmp_path: Path) -> Path:
    """A copy of grid_world_env with OpenEnv's layout (server/Dockerfile), a README without
    front matter but with tags to keep, build litter, and files to exclude."""
    env = tmp_path / "odd_env"
    shutil.copytree(GRID, env, ignore=shutil.ignore_patterns("Dockerfile", "__pycache__"))
    manifest = yaml.safe_load((env / "openenv.yaml").read_text())
    manifest["port"] = 8123
    manifest["variables"] = {"MODE": "from-manifest", "KEEP": "yes"}
    (env / "openenv.yaml").write_text(yaml.safe_dump(manifest))
    docker = render_dockerfile("openenv-grid-world", "grid_world_env", port=8123)
    (env / "server").mkdir()
    (env / "server" / "Dockerfile").write_text(docker)
    (env / "server" / "notes.txt").write_text("kept\n")
    (env / "README.md").write_text("# Odd\n\nBody line.\n")
    for litter in (".venv/lib/x.py", "build/lib/y.py", "dist/z.whl", ".git/HEAD", ".env"):
        (env / litter).parent.mkdir(parents=True, exist_ok=True)
        (env / litter).write_text("litter\n")
    (env / "grid_world_env" / "cache.pyc").write_bytes(b"\0")
    (env / "data").mkdir()
    (env / "data" / "big.bin").write_bytes(b"\0" * 10)
    (env / "data" / "small.txt").write_text("kept\n")
    (env / "scratch.log").write_text("x\n")
    (env / "grid_world_env" / "debug.log").write_text("x\n")
    (env / "notes.md").write_text("x\n")
    (env / "grid_world_env" / "notes.md").write_text("x\n")
    (env / "tests" / "fixtures").mkdir()
    (env / "tests" / "fixtures" / "f.json").write_text("{}\n")
    return env


def test_dry_run_on_openenv_layout_with_excludes(odd_env: Path, tmp_path: Path) -> None:
    exclude = tmp_path / "exclude.txt"
    exclude.write_text("# comment\n\n*.log\ndata/*.bin\ntests/fixtures/\n**/notes.md\n")
    stage = tmp_path / "out" / "space"
    result = run(
        str(odd_env),
        "--dry-run",
        "--stage-dir",
        str(stage),
        "--exclude",
        str(exclude),
        "--base-image",
        "python:3.12-slim",
        "-e",
        "MODE=from-cli",
        "-s",
        f"TOKEN={SECRET_VALUE}",
    )
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    files = tree(stage)
    assert plan["files"] == files
    for gone in (
        "scratch.log",
        "grid_world_env/debug.log",
        "data/big.bin",
        "tests/fixtures/f.json",
        ".env",
        ".venv/lib/x.py",
        "build/lib/y.py",
        "dist/z.whl",
        ".git/HEAD",
        "grid_world_env/cache.pyc",
        "server/Dockerfile",  # moved to the root
        "notes.md",
        "grid_world_env/notes.md",
    ):
        assert gone not in files, gone
    for kept in ("data/small.txt", "server/notes.txt", "Dockerfile", "openenv.yaml"):
        assert kept in files, kept

    staged = (stage / "Dockerfile").read_text()
    source = (odd_env / "server" / "Dockerfile").read_text()
    assert "ARG BASE_IMAGE=python:3.12-slim" in staged
    assert "ARG PIP_NO_INDEX=0" in staged and "ARG PIP_NO_INDEX=1" not in staged
    assert "--find-links /tmp/wheels /tmp/wheels/*.whl" in staged
    assert "EXPOSE 8123" in staged
    dockerfile_edits_only(source, staged)

    meta, body = front_matter((stage / "README.md").read_text())
    assert meta["app_port"] == 8123 and meta["sdk"] == "docker"
    assert meta["tags"] == ["openenv"] and meta["base_path"] == "/web"
    assert body == "\n# Odd\n\nBody line.\n"

    assert plan["base_image"] == "python:3.12-slim"
    assert plan["variables"] == {"MODE": "from-cli", "KEEP": "yes"}  # the CLI wins
    assert plan["secrets"] == ["TOKEN"]
    assert (stage.parent / "openenv-push.json").is_file()
    no_secret_anywhere(stage, stage.parent / "openenv-push.json")


def test_existing_front_matter_is_made_valid(odd_env: Path, tmp_path: Path) -> None:
    (odd_env / "README.md").write_text(
        "---\ntitle: Mine\nsdk: gradio\ntags: rl\napp_port: 7860\n---\n# Body\n"
    )
    stage = tmp_path / "space"
    result = run(str(odd_env), "--dry-run", "--stage-dir", str(stage))
    assert result.returncode == 0, result.stderr
    meta, body = front_matter((stage / "README.md").read_text())
    assert meta == {
        "title": "Mine",
        "sdk": "docker",
        "tags": ["rl", "openenv"],
        "app_port": 8123,
        "base_path": "/web",
    }
    assert body == "# Body\n"


# -- staging rules, in-process -----------------------------------------------------------------


def test_exclude_patterns_follow_gitignore_basics() -> None:
    def excluded(path: str, pattern: str, is_dir: bool = False) -> bool:
        return is_excluded(PurePosixPath(path), is_dir, [pattern])

    assert excluded("a/b/x.log", "*.log") and excluded("x.log", "*.log")
    assert excluded("data/x.bin", "data/*.bin") and not excluded("other/data/x.bin", "data/*.bin")
    assert excluded("data/x.bin", "/data/*.bin")
    assert excluded("tmp", "tmp/", is_dir=True) and not excluded("tmp", "tmp/", is_dir=False)
    assert excluded("notes.md", "**/notes.md") and excluded("a/notes.md", "**/notes.md")
    assert not excluded("keep.txt", "*.log")


def test_a_custom_dockerfile_keeps_its_from_unless_a_base_image_is_given() -> None:
    custom = 'FROM --platform=linux/amd64 python:3.12 AS app\nCMD ["serve"]\n'
    kept, notes = space_dockerfile(custom, dist_name="openenv-x")
    assert "FROM --platform=linux/amd64 python:3.12 AS app" in kept
    assert any("no `ARG BASE_IMAGE=`" in note for note in notes)
    assert any("the unrelated `openenv` from PyPI" in note for note in notes)
    replaced, _ = space_dockerfile(custom, dist_name="openenv-x", base_image="my/base:1")
    assert "FROM --platform=linux/amd64 my/base:1 AS app" in replaced
    assert replaced.splitlines()[-2:] == ["ENV ENABLE_WEB_INTERFACE=true", 'CMD ["serve"]']


def test_a_port_mismatch_is_reported() -> None:
    text = render_dockerfile("openenv-x", "x_env", port=8000)
    _, notes = space_dockerfile(text, dist_name="openenv-x", port=9000)
    assert any("exposes port 8000 but openenv.yaml says 9000" in note for note in notes)
    _, notes = space_dockerfile(text, dist_name="openenv-x", port=8000)
    assert notes == []


def test_invalid_front_matter_is_refused_with_a_fix() -> None:
    with pytest.raises(StagingError, match="not valid YAML"):
        space_readme("---\ntitle: [unclosed\n---\nbody\n", name="x_env", port=8000)
    with pytest.raises(StagingError, match="mapping"):
        space_readme("---\n- a list\n---\nbody\n", name="x_env", port=8000)


# -- refused input (exit 2) -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--create-pr", "-e", "A=1"], "--create-pr cannot be combined with --env-var/--secret"),
        (["--create-pr", "--secret", "A=1"], "--create-pr cannot be combined"),
        (["--create-pr", "--private"], "--create-pr cannot be combined with --private"),
        (["-r", "a/b/c"], "more than one '/'"),
        (["-e", "NOEQUALS"], "--env-var expects KEY=VALUE"),
        (["-e", "A=1", "-s", "A=2"], "given both as --env-var and as --secret"),
        (["--exclude", "/no/such/exclude/file"], "cannot read the exclude file"),
    ],
)
def test_refused_flags(args: list[str], message: str) -> None:
    result = run(str(GRID), "--dry-run", *args)
    assert result.returncode == 2, result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr


def test_stage_dir_must_be_new_or_empty(tmp_path: Path) -> None:
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("x")
    result = run(str(GRID), "--dry-run", "--stage-dir", str(tmp_path / "full"))
    assert result.returncode == 2
    assert "exists and is not empty" in result.stderr


def test_not_an_environment_folder(tmp_path: Path) -> None:
    result = run(str(tmp_path), "--dry-run")
    assert result.returncode == 2
    assert "openenv.yaml" in result.stderr


# -- the real path ------------------------------------------------------------------------------


def test_unreachable_hub_is_a_clear_error(tmp_path: Path) -> None:
    closed = free_port()
    env = {**os.environ, "HF_ENDPOINT": f"http://127.0.0.1:{closed}", "HF_TOKEN": "hf_test"}
    result = run(str(GRID), env=env)
    assert result.returncode == 1
    assert "could not reach the Hugging Face Hub" in result.stderr
    assert f"127.0.0.1:{closed}" in result.stderr
    assert "HF_ENDPOINT" in result.stderr  # the hint says what to check
    assert "Traceback" not in result.stderr
    assert result.stdout == ""


def test_missing_token_is_a_clear_error(tmp_path: Path) -> None:
    env = {**os.environ, "HF_HOME": str(tmp_path / "hf"), "HF_ENDPOINT": "http://127.0.0.1:9"}
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_TOKEN_PATH"):
        env.pop(name, None)
    result = run(str(GRID), "-r", "me/space", env=env)
    assert result.returncode == 1
    assert "no Hugging Face token found" in result.stderr
    assert "huggingface-cli login" in result.stderr and "HF_TOKEN" in result.stderr
    assert "Traceback" not in result.stderr


def test_rejected_token_is_a_clear_error() -> None:
    with StandInHub(reject_token=True) as hub:
        result = run(str(GRID), env=hub.env())
    assert result.returncode == 1
    assert "the Hub rejected your token" in result.stderr
    assert "HF_TOKEN" in result.stderr and "Traceback" not in result.stderr
    assert hub.created == [] and hub.files == {}  # nothing staged or sent after that


def test_push_uploads_the_staged_folder_to_a_stand_in_hub(tmp_path: Path) -> None:
    stage = tmp_path / "space"
    with StandInHub() as hub:
        result = run(
            str(GRID),
            "-r",
            "grid-space",
            "--private",
            "-H",
            "cpu-upgrade",
            "-e",
            "LOG_LEVEL=debug",
            "-s",
            "API_KEY",
            "--stage-dir",
            str(stage),
            env=hub.env(API_KEY=SECRET_VALUE),
        )
    assert result.returncode == 0, result.stderr
    assert not hub.unknown, hub.unknown
    assert result.stdout.strip().splitlines()[-1] == f"{hub.url}/spaces/tester/grid-space"
    created = hub.created[0]
    assert created["organization"] == "tester" and created["name"] == "grid-space"
    assert created["type"] == "space" and created["sdk"] == "docker"
    # huggingface_hub 0.x sends `private`, newer versions `visibility`.
    assert created.get("private") is True or created.get("visibility") == "private"
    assert created["hardware"] == "cpu-upgrade"
    assert hub.hardware == ["cpu-upgrade"]
    # Exactly the staged folder was committed, byte for byte.
    assert sorted(hub.files) == tree(stage)
    for name, data in hub.files.items():
        assert (stage / name).read_bytes() == data, name
    assert hub.variables == {"LOG_LEVEL": "debug"}
    assert hub.secrets == {"API_KEY": SECRET_VALUE}
    # The secret went to the secrets endpoint only, and was never printed.
    carriers = [body for body in hub.bodies if SECRET_VALUE.encode() in body]
    assert len(carriers) == 1 and json.loads(carriers[0])["key"] == "API_KEY"
    assert SECRET_VALUE not in result.stdout + result.stderr
    no_secret_anywhere(stage)


def test_push_create_pr_only_proposes_files(tmp_path: Path) -> None:
    with StandInHub() as hub:
        result = run(str(GRID), "-r", "someone/grid", "--create-pr", env=hub.env())
    assert result.returncode == 0, result.stderr
    assert not hub.unknown, hub.unknown
    assert hub.created == [] and hub.variables == {} and hub.secrets == {}
    assert "create_pr=1" in hub.commits[0]["query"]
    assert "Dockerfile" in hub.files and "README.md" in hub.files
    lines = result.stdout.strip().splitlines()
    assert lines == [
        f"{hub.url}/spaces/someone/grid/discussions/1",
        f"{hub.url}/spaces/someone/grid",
    ]
