"""The Daytona provider, through the real `daytona` SDK, against a STAND-IN for Daytona's API.

Daytona is a paid outside service: `tests/providers/daytona_standin.py` is a test double of its
HTTP API (a real local server the SDK talks to; sandboxes run the environment's app in-process
behind a preview-token check; it can answer a burst of creations with 429). What these tests
prove is that the provider drives the SDK correctly, paces and retries creations, sends the
preview token, and cleans up; how a real Daytona builds images, meters resources and enforces
`network_block_all` is not exercised. The episode itself is real (the echo server, over a real
WebSocket).
"""

from __future__ import annotations

import logging
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

pytest.importorskip("daytona", reason="the Daytona SDK is not installed (openenv[daytona])")

from echo_env import CallToolAction, EchoEnv
from openenv.providers import (
    EnvironmentStartError,
    ProviderError,
    ProviderUnavailableError,
    get_provider,
)
from openenv.providers import _docker as dk
from openenv.providers.daytona import (
    PREVIEW_TOKEN_HEADER,
    DaytonaProvider,
    server_command,
)
from openenv.providers.ownership import Owner
from tests.providers.daytona_standin import Box, DaytonaStandIn, running_daytona
from tests.providers.leaks import end_trainer, run_gc, start_trainer

ECHO_IMAGE = "registry.example/openenv-echo:test"


@pytest.fixture
def standin(monkeypatch: pytest.MonkeyPatch) -> Iterator[DaytonaStandIn]:
    with running_daytona() as api:
        monkeypatch.setenv("DAYTONA_API_KEY", api.api_key)
        monkeypatch.setenv("DAYTONA_API_URL", api.api_url)
        monkeypatch.setenv("DAYTONA_TARGET", "us")
        yield api


def fast(**kwargs: object) -> DaytonaProvider:
    """A provider that does not pace its creations (the pacing is not under test here)."""
    provider = DaytonaProvider(**kwargs)  # type: ignore[arg-type]
    provider.max_creates_per_s = 0  # type: ignore[misc]
    return provider


def test_the_server_command_of_openenv_images() -> None:
    assert server_command("ghcr.io/x/openenv-echo:1") == (
        "python -m echo_env.server.app --host 0.0.0.0 --port 8000"
    )
    with pytest.raises(ProviderError, match="command="):
        server_command("python:3.12")
    assert DaytonaProvider.max_creates_per_s > 0


async def test_an_episode_in_a_sandbox_through_its_preview_url(standin: DaytonaStandIn) -> None:
    provider = get_provider("daytona")
    assert isinstance(provider, DaytonaProvider)
    provider.max_creates_per_s = 0  # type: ignore[misc]
    env = await provider.start(ECHO_IMAGE, limits={"cpus": 1.5, "memory_mb": 1536})
    try:
        box = standin.boxes[env.id]
        assert box.data["cpu"] == 2 and box.data["memory"] == 2
        assert box.data["public"] is False and box.data["autoDeleteInterval"] == 0
        assert Owner.from_labels(box.data["labels"]) == Owner.current()
        assert box.data["labels"][dk.TARGET_LABEL] == ECHO_IMAGE
        assert env.headers == {PREVIEW_TOKEN_HEADER: box.token}

        # The sandbox is private: without the token its preview answers 401.
        async with httpx.AsyncClient(trust_env=False) as http:
            assert (await http.get(env.base_url + "/health")).status_code == 401

        async with EchoEnv(**env.client_kwargs()) as client:
            await client.reset()
            result = await client.step(
                CallToolAction(tool_name="echo_message", arguments={"message": "hi"})
            )
            assert "hi" in str(result.observation)

        listed = [r for r in DaytonaProvider.resources() if r.id == env.id]
        assert listed and listed[0].running and not listed[0].orphaned
    finally:
        await provider.stop(env)
    assert standin.boxes == {}


async def test_a_429_burst_is_retried_with_backoff(
    standin: DaytonaStandIn, caplog: pytest.LogCaptureFixture
) -> None:
    standin.rate_limit(3)  # with Retry-After: 0.01
    caplog.set_level(logging.INFO, "openenv.providers.daytona")
    async with fast() as provider:
        env = await provider.start(ECHO_IMAGE, network="none", limits={"wall_time_s": 90})
        assert standin.create_attempts == 4 and standin.rate_limited == 3
        waits = [r.getMessage() for r in caplog.records if "rate-limited" in r.getMessage()]
        assert len(waits) == 3 and all("retrying in 0.01 s" in w for w in waits), waits
        box = standin.boxes[env.id]
        assert box.data["networkBlockAll"] is True and box.data["ttl"] == 2
    assert standin.boxes == {}


async def test_a_rate_limit_that_does_not_end_is_a_provider_error(
    standin: DaytonaStandIn,
) -> None:
    standin.rate_limit(10, retry_after=None)  # no Retry-After: the provider's own backoff
    async with fast(create_retries=2) as provider:
        with pytest.raises(ProviderError, match="rate-limited after 2 retries"):
            await provider.start(ECHO_IMAGE)
    assert standin.create_attempts == 3 and standin.boxes == {}


async def test_explicit_credentials_need_none_in_the_environment(
    standin: DaytonaStandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("DAYTONA_API_KEY", "DAYTONA_API_URL", "DAYTONA_TARGET"):
        monkeypatch.delenv(name)
    async with fast(api_key=standin.api_key, api_url=standin.api_url, target="us") as provider:
        env = await provider.start(ECHO_IMAGE)
        assert env.id in standin.boxes
    assert standin.boxes == {}


async def test_a_server_that_exits_fails_the_start_with_its_output(
    standin: DaytonaStandIn,
) -> None:
    command = "python -m nosuch_env.server.app --host 0.0.0.0 --port 8000"
    async with fast(command=command) as provider:
        with pytest.raises(EnvironmentStartError, match="No module named 'nosuch_env'") as failed:
            await provider.start(ECHO_IMAGE, ready_timeout_s=60)
        assert "exited with code 1" in str(failed.value)
    assert standin.boxes == {}


async def test_a_killed_sandbox_is_reported_dead(standin: DaytonaStandIn) -> None:
    async with fast() as provider:
        env = await provider.start(ECHO_IMAGE)
        assert await provider.is_running(env)
        standin.kill(env.id)
        assert not await provider.is_running(env)
    assert standin.boxes == {}


def _dead_owner() -> Owner:
    child = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    me = Owner.current()
    return Owner(me.host, me.boot, int(child.stdout), 1)


def test_gc_deletes_orphans_and_expired_sandboxes_only(standin: DaytonaStandIn) -> None:
    def add(name: str, owner: Owner, **labels: str) -> None:
        sandbox_id = str(uuid.uuid4())
        data = {
            "id": sandbox_id,
            "organizationId": "standin-org",
            "name": name,
            "user": "daytona",
            "env": {},
            "labels": {**owner.labels(), dk.PROVIDER_LABEL: "daytona", **labels},
            "public": False,
            "networkBlockAll": False,
            "kvm": False,
            "target": "us",
            "cpu": 1,
            "gpu": 0,
            "memory": 1,
            "disk": 3,
            "state": "started",
            "toolboxProxyUrl": standin.url + "/toolbox",
        }
        standin.boxes[sandbox_id] = Box(data, token="t")

    add("orphan", _dead_owner())
    add("expired", Owner.current(), **{dk.DEADLINE_LABEL: f"{time.time() - 1:.3f}"})
    add("live", Owner.current())
    listed = {r.owner.pid if r.owner else None for r in DaytonaProvider.resources()}
    assert len(listed) == 2  # the dead owner's pid and ours
    removed = DaytonaProvider.collect_orphans()
    assert len(removed) == 2
    assert standin.names() == ["live"]


def test_unavailable_in_one_line_without_an_api_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("DAYTONA_API_KEY", raising=False)
    monkeypatch.delenv("DAYTONA_JWT_TOKEN", raising=False)
    with pytest.raises(ProviderUnavailableError) as missing:
        DaytonaProvider.check_available()
    assert "DAYTONA_API_KEY" in str(missing.value) and "\n" not in str(missing.value)
    assert DaytonaProvider.collect_orphans() == []


@pytest.mark.slow
def test_a_trainer_killed_with_sigkill_leaves_nothing_after_gc(
    standin: DaytonaStandIn, tmp_path: Path
) -> None:
    """The trainer (another process) starts a sandbox through the stand-in, takes a step and
    is killed; the real `openenv gc` then deletes its sandbox."""
    trainer = start_trainer("daytona", ECHO_IMAGE, "sigkill", state_dir=tmp_path / "state")
    try:
        assert list(standin.boxes) == [trainer.report["id"]]
        end_trainer(trainer, "sigkill")
        gc = run_gc(tmp_path / "state")
        assert gc.returncode == 0, gc.stdout + gc.stderr
        assert standin.boxes == {}, gc.stdout
    finally:
        if trainer.process.poll() is None:
            trainer.process.kill()
            trainer.process.communicate()
