"""The Jupyter environment over the wire: a real server, real kernels in the sandbox.

A kernel takes a second or more to start (far more on a loaded machine), so every test that
runs cells is `slow`; the default run checks what needs no kernel (it starts with the first cell).
"""

from __future__ import annotations

import base64
import os
from collections.abc import Iterator

import pytest

from jupyter_env import JupyterAction, JupyterEnv
from jupyter_env.server.jupyter_environment import JupyterEnvironment
from jupyter_env.server.tasks import TASKS
from openenv.core.errors import InvalidRequestError, is_infrastructure_error
from openenv.sandbox import Sandbox, SandboxError
from openenv.testing import check_server, running_server

# The smallest PNG: 1x1, one grey pixel.
PNG_1X1 = (
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAAAAAA6fptVAAAACklEQVR4nGNgAAAAAgABc3UBGAAAAABJRU5ErkJggg=="
)


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with running_server("jupyter_env.server.app:app", startup_timeout=120) as url:
        yield url


@pytest.mark.slow
def test_cells_keep_state_and_return_rich_outputs(server: str) -> None:
    with JupyterEnv(base_url=server).sync() as env:
        ready = env.reset()
        assert ready.observation.status == "ready"
        assert ready.reward is None

        first = env.step(JupyterAction(code="x = 6 * 7\nprint('hello')\nx"))
        obs = first.observation
        assert obs.status == "ok" and obs.execution_count == 1
        assert [o.output_type for o in obs.outputs] == ["stream", "execute_result"]
        assert obs.outputs[0].name == "stdout" and obs.outputs[0].text == "hello\n"
        assert obs.outputs[1].data == {"text/plain": "42"}
        assert first.reward is None and not first.done

        # State persists across steps; stderr is its own stream.
        second = env.step(JupyterAction(code="import sys\nprint(x + 1, file=sys.stderr)"))
        assert second.observation.outputs[0].name == "stderr"
        assert second.observation.outputs[0].text == "43\n"
        assert second.observation.execution_count == 2

        image = env.step(
            JupyterAction(
                code=(
                    "import base64\nfrom IPython.display import Image, HTML, display\n"
                    f"display(Image(data=base64.b64decode({PNG_1X1!r})))\n"
                    "HTML('<table><tr><th>a</th></tr><tr><td>1</td></tr></table>')"
                )
            )
        ).observation
        display, table = image.outputs
        assert display.output_type == "display_data"
        assert base64.b64decode(display.data["image/png"]).startswith(b"\x89PNG")
        assert table.output_type == "execute_result"
        assert table.data["text/html"].startswith("<table>")

        failed = env.step(JupyterAction(code="def f():\n    return 1 / 0\nf()")).observation
        assert failed.status == "error"
        assert failed.error is not None
        assert failed.error.ename == "ZeroDivisionError"
        assert failed.error.evalue == "division by zero"
        assert not any("\x1b[" in line for line in failed.error.traceback)
        assert failed.outputs[-1].output_type == "error"

        # The kernel runs in the sandbox's workspace, not in the server's folder.
        where = env.step(JupyterAction(code="import os\nos.getcwd()")).observation
        assert where.outputs[0].data["text/plain"] != repr(os.getcwd())


def test_bad_actions_are_refused_and_the_session_goes_on(server: str) -> None:
    with JupyterEnv(base_url=server).sync() as env:
        env.reset()
        with pytest.raises(InvalidRequestError, match="answer"):
            env.step(JupyterAction(answer="42"))  # free mode has no task
        with pytest.raises(InvalidRequestError, match="task"):
            env.reset(task="no-such-task")
        with pytest.raises(InvalidRequestError, match="colour"):
            env.reset(colour="blue")
        ready = env.reset(task="north_revenue", seed=1)
        assert ready.observation.files == ["sales.csv"]
        with pytest.raises(InvalidRequestError, match="alone"):
            env.step(JupyterAction(code="1", answer="42"))
        wrong = env.step(JupyterAction(answer="-1"))
        assert wrong.done and wrong.reward == 0.0 and wrong.observation.message == "wrong"
        with pytest.raises(InvalidRequestError, match="over"):
            env.step(JupyterAction(code="1"))
        assert env.reset().observation.status == "ready"


def test_a_kernel_that_cannot_start_is_an_infrastructure_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(Sandbox, "python", property(lambda self: "/nonexistent/python3"))
    env = JupyterEnvironment()
    try:
        env.reset()
        with pytest.raises(SandboxError) as failed:
            env.step(JupyterAction(code="1"))
        assert is_infrastructure_error(failed.value)
        assert "kernel" in str(failed.value)
    finally:
        env.close()


@pytest.mark.slow
def test_figures_and_dataframes(server: str) -> None:
    with JupyterEnv(base_url=server).sync() as env:
        env.reset()
        frame = env.step(
            JupyterAction(code="import pandas as pd\npd.DataFrame({'a': [1, 2], 'b': [3, 4]})")
        ).observation
        assert frame.status == "ok", frame
        assert "<table" in frame.outputs[0].data["text/html"]
        assert "text/plain" in frame.outputs[0].data
        figure = env.step(
            JupyterAction(
                code="import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()",
                timeout_s=120,
            )
        ).observation
        assert figure.status == "ok", figure
        pngs = [o.data["image/png"] for o in figure.outputs if o.data and "image/png" in o.data]
        assert len(pngs) == 1
        assert base64.b64decode(pngs[0]).startswith(b"\x89PNG")
        assert not [o for o in figure.outputs if o.name == "stderr"], figure.outputs


@pytest.mark.slow
def test_a_runaway_cell_is_interrupted_and_the_kernel_kept(server: str) -> None:
    with JupyterEnv(base_url=server).sync() as env:
        env.reset()
        env.step(JupyterAction(code="kept = 'still here'"))
        loop = env.step(JupyterAction(code="while True:\n    pass", timeout_s=1)).observation
        assert loop.status == "timeout"
        assert loop.error is not None and loop.error.ename == "KeyboardInterrupt"
        assert "interrupted" in loop.message
        after = env.step(JupyterAction(code="kept")).observation
        assert after.outputs[0].data == {"text/plain": "'still here'"}
        assert env.state().kernel_restarts == 0


@pytest.mark.slow
def test_a_cell_that_ignores_the_interrupt_gets_a_new_kernel(server: str) -> None:
    with JupyterEnv(base_url=server).sync() as env:
        env.reset()
        env.step(JupyterAction(code="lost = 1"))
        stubborn = env.step(
            JupyterAction(
                code=(
                    "import signal\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\n"
                    "while True:\n    pass"
                ),
                timeout_s=1,
            )
        ).observation
        assert stubborn.status == "restarted"
        assert "restarted" in stubborn.message
        gone = env.step(JupyterAction(code="lost")).observation
        assert gone.status == "error" and gone.error is not None
        assert gone.error.ename == "NameError"
        assert env.state().kernel_restarts == 1


@pytest.mark.slow
def test_a_dead_kernel_is_restarted_and_reported(server: str) -> None:
    with JupyterEnv(base_url=server).sync() as env:
        env.reset()
        crash = env.step(JupyterAction(code="import os\nos._exit(3)")).observation
        assert crash.status == "restarted"
        assert "died" in crash.message and "status 3" in crash.message
        hog = env.step(JupyterAction(code="hog = b'x' * 2**31")).observation  # 2 GiB > 1 GiB
        assert hog.status in ("restarted", "error"), hog
        if hog.status == "error":  # a per-process rlimit (no cgroup here) raises instead
            assert hog.error is not None and hog.error.ename == "MemoryError"
        fine = env.step(JupyterAction(code="2 + 2")).observation
        assert fine.status == "ok" and fine.outputs[0].data == {"text/plain": "4"}


@pytest.mark.slow
def test_sessions_are_isolated(server: str) -> None:
    with JupyterEnv(base_url=server).sync() as one, JupyterEnv(base_url=server).sync() as two:
        one.reset()
        two.reset()
        one.step(JupyterAction(code="secret = 'one'\nopen('mine.txt', 'w').write('one')"))
        probe = two.step(
            JupyterAction(code="import os\n('secret' in dir(), os.path.exists('mine.txt'))")
        ).observation
        assert probe.outputs[0].data == {"text/plain": "(False, False)"}
        assert one.step(JupyterAction(code="secret")).observation.outputs[0].data == {
            "text/plain": "'one'"
        }


@pytest.mark.slow
def test_a_task_episode_is_scored_by_its_verifier(server: str) -> None:
    task = TASKS["north_revenue"]
    with JupyterEnv(base_url=server).sync() as env:
        ready = env.reset(task="north_revenue")
        assert ready.observation.files == ["sales.csv"]
        assert ready.observation.task == task.question
        cell = env.step(
            JupyterAction(
                code=(
                    "import csv\nrows = list(csv.DictReader(open('sales.csv')))\n"
                    "round(sum(int(r['units']) * float(r['unit_price'])\n"
                    "          for r in rows if r['region'] == 'north'), 2)"
                )
            )
        ).observation
        assert cell.status == "ok" and cell.reward is None
        computed = cell.outputs[0].data["text/plain"]
        right = env.step(JupyterAction(answer=computed))
        assert right.done and right.reward == 1.0
        assert right.observation.message == "correct"


@pytest.mark.slow
def test_reset_reuses_the_kernel_with_a_clean_namespace() -> None:
    env = JupyterEnvironment()
    try:
        env.reset()
        env.step(JupyterAction(code="leftover = 1\nopen('old.txt', 'w').close()"))
        env.step(JupyterAction(code="2"))
        kernel = env._kernel
        assert kernel is not None
        first_process = kernel._process
        env.reset()
        assert kernel._process is first_process  # the same kernel process
        obs = env.step(JupyterAction(code="import os\n('leftover' in dir(), os.listdir('.'))"))
        assert obs.execution_count == 1
        assert obs.outputs[0].data == {"text/plain": "(False, [])"}
        # Something left running means a new kernel (started by the next cell).
        sleeper = "import threading, time\nthreading.Thread(target=time.sleep, args=(60,)).start()"
        env.step(JupyterAction(code=sleeper))
        env.reset()
        assert env.step(JupyterAction(code="'threading' in dir()")).outputs[0].data == {
            "text/plain": "False"
        }
        second_process = kernel._process
        assert second_process is not first_process
        env.reset(fresh_kernel=True)
        timed = env.step(JupyterAction(code="1"))
        assert timed.duration_s is None  # no clock reading unless reset(timing=True)
        env.reset(timing=True)
        timed = env.step(JupyterAction(code="1"))
        assert timed.duration_s is not None and timed.duration_s >= 0
        kernel_dir = kernel._dir
        process = kernel._process
        assert process is not None and process.alive() and process is not second_process
    finally:
        env.close()
    assert not process.alive()
    assert not kernel_dir.exists()


@pytest.mark.slow
def test_passes_the_environment_checker(server: str) -> None:
    report = check_server(server, timeout_s=120, raise_on_failure=False)
    assert report.ok, str(report)


@pytest.mark.slow
def test_the_model_cannot_touch_the_kernel_sockets() -> None:
    """The IPC folder is taken back from the kernel's user once it listens (bubblewrap as root:
    the kernel is nobody; elsewhere it shares the server's user and this does not hold)."""
    env = JupyterEnvironment()
    try:
        env.reset()
        if env.state.sandbox_backend != "bubblewrap" or os.geteuid() != 0:
            pytest.skip("the kernel runs as the server's own user here")
        env.step(JupyterAction(code="1"))
        assert env._kernel is not None
        ipc = env._kernel._dir / "ipc"
        attempt = env.step(
            JupyterAction(
                code=(
                    "import os\nfailed = []\n"
                    f"for path in ({str(ipc / 'k-1')!r}, {str(ipc)!r}):\n"
                    "    try:\n"
                    "        os.rename(path, path + '.moved')\n"
                    "    except OSError as exc:\n"
                    "        failed.append(type(exc).__name__)\n"
                    "failed"
                )
            )
        )
        assert attempt.outputs[0].data == {"text/plain": "['PermissionError', 'PermissionError']"}
        assert env.step(JupyterAction(code="2 + 2")).outputs[0].data == {"text/plain": "4"}
    finally:
        env.close()
