"""Reading engine listings: the Docker providers decide that a container or service is gone
from a name-filtered listing, never from an engine's error text. These are the shapes Docker
(20.10 to 29, API and CLI) and Podman (its Docker API and its CLI) give for the same container.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from openenv.providers import _docker as dk
from openenv.providers.ownership import Owner

NAME = "openenv-docker-openenv-echo-1a2b3c4d5e"
OWNER = Owner("host-a", "boot-1", 4242, 987654)
LABELS = {
    **OWNER.labels(),
    "org.openenv.provider": "docker",
    "org.openenv.target": "openenv-echo:latest",
}

# GET /containers/json?all=1 from Docker 29 (API 1.52: a Health field, image descriptor).
DOCKER_29_API = [
    {
        "Id": "8dfafdbc3a40f0e4b2b6c0a4ad5c0f65e4b32f4c3e40ff1d6c6a6f1c9d3b2e11",
        "Names": [f"/{NAME}"],
        "Image": "openenv-echo:latest",
        "ImageID": "sha256:d20f116ab518",
        "ImageManifestDescriptor": {"mediaType": "application/vnd.oci.image.manifest.v1+json"},
        "Command": "python -m echo_env.server.app --host 0.0.0.0 --port 8000",
        "Created": 1764608718,
        "Ports": [{"IP": "127.0.0.1", "PrivatePort": 8000, "PublicPort": 32768, "Type": "tcp"}],
        "Labels": LABELS,
        "State": "running",
        "Status": "Up 3 seconds (health: starting)",
        "Health": {"Status": "starting", "FailingStreak": 0},
        "HostConfig": {"NetworkMode": "bridge"},
        "NetworkSettings": {"Networks": {"bridge": {"IPAddress": "172.17.0.2"}}},
        "Mounts": [],
    }
]

# `docker ps -a --format '{{json .}}'` (Docker 29 CLI): one object per line, labels joined.
DOCKER_29_CLI = json.dumps(
    {
        "Command": '"python -m echo_env…"',
        "CreatedAt": "2025-12-01 17:05:18 +0000 UTC",
        "ID": "8dfafdbc3a40",
        "Image": "openenv-echo:latest",
        "Labels": ",".join(f"{k}={v}" for k, v in LABELS.items()),
        "LocalVolumes": "0",
        "Mounts": "",
        "Names": NAME,
        "Networks": "bridge",
        "Ports": "127.0.0.1:32768->8000/tcp",
        "RunningFor": "3 seconds ago",
        "Size": "0B",
        "State": "exited",
        "Status": "Exited (137) 1 second ago",
    }
)

# Podman's Docker-compatible API (GET /containers/json): names keep Docker's slash.
PODMAN_API = [
    {
        "Id": "5f0a1b2c3d4e",
        "Names": [f"/{NAME}"],
        "Image": "localhost/openenv-echo:latest",
        "Created": 1764608718,
        "Ports": [{"IP": "127.0.0.1", "PrivatePort": 8000, "PublicPort": 40111, "Type": "tcp"}],
        "Labels": LABELS,
        "State": "running",
        "Status": "Up 3 seconds",
    }
]

# `podman ps -a --format json`: a JSON array, names without a slash, Podman's port fields.
PODMAN_CLI = json.dumps(
    [
        {
            "AutoRemove": False,
            "Command": ["python", "-m", "echo_env.server.app"],
            "Created": 1764608718,
            "CreatedAt": "3 seconds ago",
            "Exited": False,
            "Id": "5f0a1b2c3d4e",
            "Image": "localhost/openenv-echo:latest",
            "Labels": LABELS,
            "Names": [NAME],
            "Pid": 4711,
            "Ports": [
                {
                    "host_ip": "127.0.0.1",
                    "container_port": 8000,
                    "host_port": 40111,
                    "range": 1,
                    "protocol": "tcp",
                }
            ],
            "State": "running",
            "Status": "Up 3 seconds",
        }
    ]
)


@pytest.mark.parametrize(
    ("payload", "state", "published"),
    [
        (DOCKER_29_API, "running", ("127.0.0.1:32768",)),
        (json.dumps(DOCKER_29_API).encode(), "running", ("127.0.0.1:32768",)),
        (DOCKER_29_CLI + "\n", "exited", ("127.0.0.1:32768",)),
        (PODMAN_API, "running", ("127.0.0.1:40111",)),
        (PODMAN_CLI, "running", ("127.0.0.1:40111",)),
    ],
    ids=["docker29-api", "docker29-api-bytes", "docker29-cli", "podman-api", "podman-cli"],
)
def test_one_container_in_every_shape(payload: object, state: str, published: tuple) -> None:
    (item,) = dk.parse_containers(payload)
    assert item.names == (NAME,)
    assert item.name == NAME
    assert item.state == state
    assert item.published == published
    assert Owner.from_labels(item.labels) == OWNER
    assert item.labels["org.openenv.target"] == "openenv-echo:latest"
    assert item.created == pytest.approx(1764608718, abs=86400 * 400)
    assert dk.has_name([item], NAME)


@pytest.mark.parametrize("empty", ["", "\n", "[]", b"", [], None], ids=repr)
def test_an_empty_listing_means_gone(empty: object) -> None:
    assert dk.parse_containers(empty) == []
    assert not dk.has_name(dk.parse_containers(empty), NAME)


def test_a_name_must_match_exactly() -> None:
    # A filter is a regular expression; the listing is checked by name as well.
    other = [dict(DOCKER_29_API[0], Names=[f"/{NAME}-2"])]
    assert not dk.has_name(dk.parse_containers(other), NAME)
    assert not dk.has_name(dk.parse_containers(PODMAN_API), NAME[:-1])


def test_the_name_filter_matches_with_and_without_the_slash() -> None:
    import re

    pattern = re.compile(dk.name_filter(NAME))
    assert pattern.search(f"/{NAME}")  # Docker matches "/name"
    assert pattern.search(NAME)  # Podman matches "name"
    assert not pattern.search(f"/{NAME}-2")
    with pytest.raises(ValueError):
        dk.name_filter("a.b*")


def test_resource_names_are_safe_and_readable() -> None:
    name = dk.resource_name("docker", "registry.example:5000/team/My_Env:v1", "0123456789")
    assert name == "openenv-docker-my-env-0123456789"
    assert dk.name_filter(name)


# GET /services (Docker API) and `docker service ls --format '{{json .}}'`.
SERVICE_API = [
    {
        "ID": "9mnpfk4jbvbrmgy1sh2xc1cly",
        "Version": {"Index": 19},
        "CreatedAt": "2025-12-01T17:05:18.123456789Z",
        "UpdatedAt": "2025-12-01T17:05:18.123456789Z",
        "Spec": {
            "Name": "openenv-swarm-openenv-echo-1a2b3c4d5e",
            "Labels": {**LABELS, "org.openenv.provider": "swarm"},
            "TaskTemplate": {"ContainerSpec": {"Image": "openenv-echo:latest"}},
            "Mode": {"Replicated": {"Replicas": 1}},
        },
        "Endpoint": {
            "Ports": [
                {
                    "Protocol": "tcp",
                    "TargetPort": 8000,
                    "PublishedPort": 30001,
                    "PublishMode": "ingress",
                }
            ]
        },
    }
]
SERVICE_CLI = json.dumps(
    {
        "ID": "9mnpfk4jbvbr",
        "Image": "openenv-echo:latest",
        "Mode": "replicated",
        "Name": "openenv-swarm-openenv-echo-1a2b3c4d5e",
        "Ports": "*:30001->8000/tcp",
        "Replicas": "1/1",
    }
)


def test_services_from_the_api_and_the_cli() -> None:
    (api,) = dk.parse_services(SERVICE_API)
    assert api.name == "openenv-swarm-openenv-echo-1a2b3c4d5e"
    assert api.published == ("0.0.0.0:30001",)
    assert Owner.from_labels(api.labels) == OWNER
    assert api.created > 1.7e9
    (cli,) = dk.parse_services(SERVICE_CLI)
    assert cli.name == api.name
    assert cli.published == ("*:30001",)
    assert dk.parse_services("") == []


def run_python(code: str, **env: str) -> str:
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, **env},
        timeout=60,
    )
    assert out.returncode == 0, out.stderr
    return out.stdout.strip()


def test_the_docker_sdk_loads_only_when_used() -> None:
    code = (
        "import sys, openenv.providers, openenv.providers.docker, openenv.providers.swarm\n"
        "print('docker' in sys.modules)"
    )
    assert run_python(code) == "False"


def test_no_engine_is_one_line_saying_what_to_do(tmp_path: Path) -> None:
    code = (
        "from openenv.providers.docker import DockerProvider\n"
        "from openenv.providers.swarm import DockerSwarmProvider\n"
        "for cls in (DockerProvider, DockerSwarmProvider):\n"
        "    try:\n"
        "        cls.check_available()\n"
        "    except Exception as exc:\n"
        "        print(type(exc).__name__, repr(str(exc)))\n"
        "    print(cls.available(), cls.collect_orphans())\n"
    )
    out = run_python(code, DOCKER_HOST=f"unix://{tmp_path}/no-engine.sock").splitlines()
    assert len(out) == 4
    for line in out[0::2]:
        name, message = line.split(" ", 1)
        assert name == "ProviderUnavailableError"
        assert "\\n" not in message
        assert "start it" in message and "DOCKER_HOST" in message
    assert out[1] == out[3] == "False []"
