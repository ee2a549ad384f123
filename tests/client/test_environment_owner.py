"""The client's owner contract (`openenv.core.owner.EnvironmentOwner`): whatever started a
client's environment is attached to the client, which asks it whether the environment still
runs, for its last output, and to stop it on close. No provider is involved here: the owner is
a plain object, and the environment that "died" is a Unix socket nobody serves."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from openenv.core.env_client import EnvClient
from openenv.core.errors import (
    EnvironmentDiedError,
    ServerUnreachableError,
    is_infrastructure_error,
)
from openenv.core.owner import EnvironmentOwner


class RecordingOwner:
    def __init__(self, *, running: bool = True, log: str = "") -> None:
        self.running = running
        self.log = log
        self.calls: list[str] = []

    @property
    def label(self) -> str:
        return "environment test-1 ('probe')"

    async def is_running(self) -> bool:
        self.calls.append("is_running")
        return self.running

    async def log_tail(self, lines: int = 40) -> str:
        self.calls.append(f"log_tail {lines}")
        return self.log

    async def stop(self) -> None:
        self.calls.append("stop")


def unserved_client(tmp_path: Path, **kwargs: Any) -> EnvClient[Any, Any, Any]:
    """A client of a server that is not there (its socket does not exist)."""
    return EnvClient(
        base_url="http://localhost",
        unix_socket=str(tmp_path / "gone.sock"),
        max_reconnect_attempts=0,
        **kwargs,
    )


def test_a_plain_object_with_the_four_members_is_an_owner() -> None:
    assert isinstance(RecordingOwner(), EnvironmentOwner)
    assert not isinstance(object(), EnvironmentOwner)


async def test_close_stops_the_owners_environment_once(tmp_path: Path) -> None:
    owner = RecordingOwner()
    client = unserved_client(tmp_path, owner=owner)
    assert client.owner is owner
    await client.close()
    await client.close()
    assert owner.calls == ["stop"]
    assert client.owner is None


async def test_an_owner_attached_after_construction_is_stopped_too(tmp_path: Path) -> None:
    owner = RecordingOwner()
    client = unserved_client(tmp_path)
    assert client.owner is None
    client.attach_owner(owner)
    client.attach_owner(owner)  # the same owner again changes nothing
    await client.close()
    assert owner.calls == ["stop"]


def test_a_second_owner_or_a_non_owner_is_refused(tmp_path: Path) -> None:
    client = unserved_client(tmp_path, owner=RecordingOwner())
    with pytest.raises(ValueError, match="already owned by environment test-1"):
        client.attach_owner(RecordingOwner())
    with pytest.raises(TypeError, match="not an EnvironmentOwner"):
        unserved_client(tmp_path).attach_owner(object())  # type: ignore[arg-type]


async def test_a_dead_environment_is_reported_with_its_label_and_last_output(
    tmp_path: Path,
) -> None:
    owner = RecordingOwner(running=False, log="Traceback: out of memory")
    client = unserved_client(tmp_path, owner=owner)
    with pytest.raises(EnvironmentDiedError) as info:
        await client.reset()
    message = str(info.value)
    assert message.startswith("environment test-1 ('probe') is gone")
    assert "Traceback: out of memory" in message
    assert isinstance(info.value.__cause__, ServerUnreachableError)
    assert is_infrastructure_error(info.value)
    assert "log_tail 40" in owner.calls
    await client.close()


async def test_a_running_environment_leaves_the_connection_error_as_it_is(
    tmp_path: Path,
) -> None:
    owner = RecordingOwner(running=True)
    client = unserved_client(tmp_path, owner=owner)
    with pytest.raises(ServerUnreachableError) as info:
        await client.reset()
    assert info.value.__cause__ is not info.value
    assert owner.calls == ["is_running"]
    await client.close()


async def test_an_openenv_provider_argument_is_the_owner_and_stopped_on_close(
    tmp_path: Path,
) -> None:
    class OpenEnvStyleProvider:
        stopped = 0

        def stop_container(self) -> None:
            self.stopped += 1

    provider = OpenEnvStyleProvider()
    client = unserved_client(tmp_path, provider=provider)
    assert client.owner is not None
    # Such a provider cannot tell whether its environment runs: a failure stays what it is.
    with pytest.raises(ServerUnreachableError):
        await client.reset()
    await client.close()
    assert provider.stopped == 1
