"""The Kubernetes provider, through the real `kubernetes` client, against a STAND-IN API server.

No cluster can run on the test machines: `tests/providers/k8s_standin.py` is a test double of
the Kubernetes API server (a real HTTP server that stores objects, answers with the API's shapes
and status codes, checks every object against the Kubernetes JSON schema, runs a pod's image as
an in-process app and marks it Ready when its readiness probe answers, and can kill a pod). What
these tests prove is that the provider speaks the API correctly and cleans up; what they cannot
prove (scheduling, image pulls, the kubelet's enforcement of the security context, cluster DNS,
NetworkPolicy enforcement) is for a real cluster: docs/providers-kubernetes.md says how.
The episode itself is real: the echo environment's server, over a real WebSocket.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Optional

import pytest

pytest.importorskip(
    "kubernetes", reason="the kubernetes client is not installed (openenv[kubernetes])"
)
kubernetes_validate = pytest.importorskip(
    "kubernetes_validate", reason="kubernetes-validate is not installed (dev group)"
)

from echo_env import CallToolAction, EchoEnv  # noqa: E402
from openenv.core.errors import ServerUnreachableError  # noqa: E402
from openenv.providers import (  # noqa: E402
    EnvironmentStartError,
    EnvSpec,
    ProviderUnavailableError,
    get_provider,
)
from openenv.providers import kubernetes as k8s  # noqa: E402
from openenv.providers.kubernetes import KubernetesProvider  # noqa: E402
from openenv.providers.ownership import Owner  # noqa: E402
from tests.providers.k8s_standin import KUBERNETES_VERSION, KubeStandIn, running_standin  # noqa: E402
from tests.providers.leaks import end_trainer, run_gc, start_trainer  # noqa: E402

ECHO_IMAGE = "registry.example/openenv-echo:test"
IMAGES = {ECHO_IMAGE: "echo_env.server.app:app"}


@pytest.fixture
def standin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[KubeStandIn]:
    with running_standin(IMAGES) as api:
        monkeypatch.setenv("KUBECONFIG", str(api.kubeconfig(tmp_path)))
        monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
        monkeypatch.delenv("OPENENV_KUBERNETES_NAMESPACE", raising=False)
        k8s._forget_default()
        yield api
        k8s._forget_default()


def validate(manifest: dict) -> None:
    kubernetes_validate.validate(manifest, KUBERNETES_VERSION, strict=True)


# -- manifests ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "spec",
    [
        EnvSpec(target=ECHO_IMAGE),
        EnvSpec(
            target=ECHO_IMAGE,
            env_vars={"MODE": "x"},
            limits={"cpus": 0.5, "memory_mb": 512, "pids": 64, "wall_time_s": 90.5},
            network="none",
        ),
    ],
    ids=["defaults", "limits-and-no-network"],
)
def test_every_manifest_is_valid_against_the_kubernetes_schema(spec: EnvSpec) -> None:
    owner = Owner.current()
    reference = {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u", "controller": True}
    pod = k8s.pod_manifest(
        "openenv-k8s-echo-1", spec, owner, command=["serve"], image_pull_policy="IfNotPresent"
    )
    for manifest in (
        pod,
        k8s.service_manifest("openenv-k8s-echo-1", "NodePort", pod_reference=reference),
        k8s.service_manifest("openenv-k8s-echo-1", "ClusterIP"),
        k8s.service_manifest("openenv-k8s-echo-1", "LoadBalancer"),
        k8s.deny_egress_manifest("openenv-k8s-echo-1", pod_reference=reference),
    ):
        validate(manifest)
    # The Docker provider's hardening, spelled for Kubernetes.
    container = pod["spec"]["containers"][0]
    security = container["securityContext"]
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert security["allowPrivilegeEscalation"] is False
    assert security["readOnlyRootFilesystem"] is True
    assert security["runAsUser"] == 65534 and security["runAsNonRoot"] is True
    assert pod["spec"]["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert pod["spec"]["automountServiceAccountToken"] is False
    assert {"name": "tmp", "mountPath": "/tmp"} in container["volumeMounts"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/health"
    assert Owner.from_labels(pod["metadata"]["annotations"]) == owner
    if spec.limits.cpus:
        assert container["resources"]["limits"] == {"cpu": "500m", "memory": "512Mi"}
        assert container["resources"]["requests"] == container["resources"]["limits"]
        assert pod["spec"]["activeDeadlineSeconds"] == 90


def test_the_schema_check_rejects_a_broken_manifest() -> None:
    """The validator really reads the schema: a mistyped or unknown field fails."""
    pod = k8s.pod_manifest("openenv-k8s-echo-1", EnvSpec(target=ECHO_IMAGE), Owner.current())
    pod["spec"]["containers"][0]["securityContext"]["readOnlyRootFileSystem"] = True  # typo
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(pod)
    pod = k8s.pod_manifest("openenv-k8s-echo-1", EnvSpec(target=ECHO_IMAGE), Owner.current())
    pod["spec"]["activeDeadlineSeconds"] = "soon"
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(pod)


# -- against the stand-in API server --------------------------------------------------------------


async def test_an_episode_in_a_hardened_pod_and_nothing_left_after_stop(
    standin: KubeStandIn,
) -> None:
    provider = get_provider("kubernetes")
    assert isinstance(provider, KubernetesProvider)
    env = await provider.start(ECHO_IMAGE, limits={"cpus": 0.25, "memory_mb": 256})
    try:
        assert env.info["access"] == "node-port"
        assert env.base_url.startswith("http://127.0.0.1:3")
        pod = standin.get("pods", env.id)
        service = standin.get("services", env.id)
        assert pod is not None and service is not None
        # The stand-in's kubelet marks the pod Ready once its readiness probe (/health) passes.
        assert await _eventually(lambda: _ready(standin.get("pods", env.id)))
        assert pod["spec"]["containers"][0]["resources"]["limits"] == {
            "cpu": "250m",
            "memory": "256Mi",
        }
        # The service dies with its pod (owner reference to the pod's uid).
        assert service["metadata"]["ownerReferences"][0]["uid"] == pod["metadata"]["uid"]
        assert service["spec"]["selector"] == {k8s.ENV_LABEL: env.id}

        async with EchoEnv(**env.client_kwargs()) as client:
            await client.reset()
            result = await client.step(
                CallToolAction(tool_name="echo_message", arguments={"message": "hi"})
            )
            assert "hi" in str(result.observation)

        mine = [r for r in KubernetesProvider.resources() if r.id == env.id]
        assert mine and mine[0].running and mine[0].owner == Owner.current()
        assert not mine[0].orphaned
    finally:
        await provider.stop(env)
    assert standin.names("pods") == [] and standin.names("services") == []
    assert standin.rejected == []


async def test_network_none_denies_egress_and_wall_time_is_the_pods_deadline(
    standin: KubeStandIn,
) -> None:
    async with KubernetesProvider() as provider:
        env = await provider.start(ECHO_IMAGE, network="none", limits={"wall_time_s": 600})
        policy = standin.get("networkpolicies", env.id)
        assert policy is not None
        assert policy["spec"]["policyTypes"] == ["Egress"] and "egress" not in policy["spec"]
        assert standin.get("pods", env.id)["spec"]["activeDeadlineSeconds"] == 600
        await provider.stop(env)
        assert standin.names("networkpolicies") == []
    assert standin.rejected == []


async def test_an_image_that_cannot_be_pulled_fails_the_start_with_the_reason(
    standin: KubeStandIn,
) -> None:
    async with KubernetesProvider() as provider:
        with pytest.raises(EnvironmentStartError, match="ErrImagePull"):
            await provider.start("registry.example/missing:1", ready_timeout_s=60)
    assert standin.names("pods") == [] and standin.names("services") == []


async def test_a_killed_pod_is_reported_dead(standin: KubeStandIn) -> None:
    async with KubernetesProvider() as provider:
        env = await provider.start(ECHO_IMAGE)
        assert await provider.is_running(env)
        standin.kill_pod(env.id)
        assert not await provider.is_running(env)
        assert "exit code 137" in await provider.log_tail(env)
        with pytest.raises(ServerUnreachableError):  # nothing answers any more
            async with EchoEnv(**env.client_kwargs()) as client:
                await client.reset()
    assert standin.names("pods") == []


async def test_a_start_cancelled_mid_creation_leaves_nothing(standin: KubeStandIn) -> None:
    """Cancelled after the pod exists and before its service does: the creating thread
    removes what it made, and `close()` waits for it."""
    standin.services_gate.clear()
    provider = KubernetesProvider()
    start = asyncio.ensure_future(provider.start(ECHO_IMAGE))
    assert await _eventually(lambda: bool(standin.names("pods")))
    start.cancel()
    with pytest.raises(asyncio.CancelledError):
        await start
    standin.services_gate.set()
    await provider.close()
    assert standin.names("pods") == [] and standin.names("services") == []


async def test_cluster_dns_address_and_the_trainer_pod_as_owner(
    standin: KubeStandIn, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Inside a cluster the trainer reaches the service by name, and the environment's pod is
    a dependent of the trainer's pod: deleting the trainer's pod deletes it."""
    trainer_pod = standin.add(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "trainer-0"},
            "spec": {"containers": [{"name": "trainer", "image": "trainer:1"}]},
        }
    )
    monkeypatch.setenv("HOSTNAME", "trainer-0")
    provider = KubernetesProvider(access="cluster-dns", owned_by_trainer_pod=True)
    env = await provider.start(ECHO_IMAGE, wait=False)
    assert env.base_url == f"http://{env.id}.default.svc:8000"
    pod = standin.get("pods", env.id)
    assert pod["metadata"]["ownerReferences"][0]["uid"] == trainer_pod["metadata"]["uid"]
    standin._call(standin._delete("pods", "default", "trainer-0"))
    assert standin.names("pods") == [] and standin.names("services") == []
    await provider.close()


async def test_namespace_from_the_kubeconfig_context(
    standin: KubeStandIn, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = standin.kubeconfig(tmp_path, namespace="rl-envs")
    # Explicit credentials need none in the environment.
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "absent"))
    k8s._forget_default()
    async with KubernetesProvider(kubeconfig=str(config)) as provider:
        env = await provider.start(ECHO_IMAGE)
        assert standin.names("pods", "rl-envs") == [env.id]
        assert env.info["namespace"] == "rl-envs"
    assert standin.names("pods", "rl-envs") == []


def _dead_owner() -> Owner:
    process = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True
    )
    me = Owner.current()
    return Owner(me.host, me.boot, int(process.stdout), 1)


def test_ps_lists_and_gc_removes_only_orphans(standin: KubeStandIn) -> None:
    spec = EnvSpec(target=ECHO_IMAGE)
    orphan = k8s.pod_manifest("openenv-k8s-orphan", spec, _dead_owner())
    live = k8s.pod_manifest("openenv-k8s-live", spec, Owner.current())
    for manifest in (orphan, live):
        pod = standin.add(manifest)
        reference = k8s.owner_reference(_Obj(pod), controller=True)
        standin.add(
            k8s.service_manifest(manifest["metadata"]["name"], "NodePort", pod_reference=reference)
        )
    # A service whose pod is gone (the trainer died between two deletions) is an orphan too.
    standin.add(k8s.service_manifest("openenv-k8s-stray", "ClusterIP"))

    listed = {r.id: r for r in KubernetesProvider.resources()}
    assert set(listed) == {"openenv-k8s-orphan", "openenv-k8s-live", "openenv-k8s-stray"}
    assert listed["openenv-k8s-orphan"].orphaned and not listed["openenv-k8s-live"].orphaned
    assert listed["openenv-k8s-live"].target == ECHO_IMAGE

    removed = {r.id for r in KubernetesProvider.collect_orphans()}
    assert removed == {"openenv-k8s-orphan", "openenv-k8s-stray"}
    assert standin.names("pods") == ["openenv-k8s-live"]
    assert standin.names("services") == ["openenv-k8s-live"]


def test_unavailable_in_one_line_without_credentials_or_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    k8s._forget_default()
    with pytest.raises(ProviderUnavailableError) as missing:
        KubernetesProvider.check_available()
    assert "KUBECONFIG" in str(missing.value) and "\n" not in str(missing.value)
    with running_standin(IMAGES) as api:
        config = api.kubeconfig(tmp_path)
    monkeypatch.setenv("KUBECONFIG", str(config))  # the server it names is gone now
    k8s._forget_default()
    with pytest.raises(ProviderUnavailableError) as gone:
        KubernetesProvider.check_available()
    assert "does not answer" in str(gone.value) and "\n" not in str(gone.value)
    assert KubernetesProvider.collect_orphans() == []
    k8s._forget_default()


@pytest.mark.slow
def test_a_trainer_killed_with_sigkill_leaves_nothing_after_gc(
    standin: KubeStandIn, tmp_path: Path
) -> None:
    """The trainer (another process) starts an environment through the stand-in, takes a step
    and is killed; the real `openenv gc` then removes its pod and service."""
    trainer = start_trainer("kubernetes", ECHO_IMAGE, "sigkill", state_dir=tmp_path / "state")
    try:
        env_id = trainer.report["id"]
        assert standin.names("pods") == [env_id]
        end_trainer(trainer, "sigkill")
        gc = run_gc(tmp_path / "state")
        assert gc.returncode == 0, gc.stdout + gc.stderr
        assert standin.names("pods") == [] and standin.names("services") == [], gc.stdout
    finally:
        if trainer.process.poll() is None:
            trainer.process.kill()
            trainer.process.communicate()


def _ready(pod: Optional[dict]) -> bool:
    conditions = (pod or {}).get("status", {}).get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions)


async def _eventually(condition: Callable[[], bool], timeout_s: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.02)
    return True


class _Obj:
    """A stored object with attribute access, as `owner_reference` reads a client model."""

    def __init__(self, obj: dict) -> None:
        self.metadata = type(
            "M", (), {"name": obj["metadata"]["name"], "uid": obj["metadata"]["uid"]}
        )
