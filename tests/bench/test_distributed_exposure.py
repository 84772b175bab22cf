"""What a Ray run opens to the network: the executor's private local instance, and what a run says about a
cluster's token authentication.

The slow tests start the executor's own local instance (as ``--executor ray`` without ``--ray-address``
does) in a child process, in both authentication modes, and read from /proc every socket that the
child and the processes it started listen on: each must be on a loopback address. The others check the
refusal where loopback cannot be had and the header lines, without starting Ray.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import bench_demo_task as demo
import pytest
from cli_helpers import run_cli

from agentlab.bench.running import distributed
from agentlab.bench.running.distributed import ExecutorNotes, RayBackend, cluster_checks_tokens
from agentlab.testing.openai_server import OpenAITestServer
from agentlab.testing.processes import alive, descendants, is_loopback, listening_sockets

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT = 300.0  # seconds for the child to start Ray and run one task

# The child: the executor's local instance, one task run (so a worker process is up), then wait for a
# line on stdin before closing it, so that the parent reads the sockets while everything runs.
CHILD = """
import asyncio, json, os, sys
import ray
from agentlab.bench.running.distributed import RayBackend

def pid():
    return os.getpid()

async def main():
    backend = RayBackend(None, local_cpus=1)
    notes = backend.check()
    await backend.start()
    worker_pid = ray.get(ray.remote(pid).remote())
    node = ray._private.worker.global_worker.node
    print(json.dumps({"notes": list(notes.info) + list(notes.warnings), "gcs": node.gcs_address,
                      "worker_pid": worker_pid}), flush=True)
    sys.stdin.readline()
    await backend.close()

asyncio.run(main())
"""


@pytest.fixture
def ray_env(tmp_path: Path) -> dict[str, str]:
    """The environment of a child starting Ray: this checkout first, a private HOME (Ray keeps its token
    file in ~/.ray) and no inherited Ray authentication settings."""
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH") and k != distributed.SINGLE_NODE_ENV}
    env.update(HOME=str(home), RAY_USAGE_STATS_ENABLED="0",
               PYTHONPATH=os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    return env


@pytest.mark.slow
@pytest.mark.parametrize("auth_mode", ["disabled", None])  # None: RAY_AUTH_MODE unset, Ray's default (token)
def test_the_local_instance_listens_on_loopback_only(auth_mode: str | None, ray_env: dict[str, str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("ray")
    if auth_mode is not None:
        ray_env["RAY_AUTH_MODE"] = auth_mode
    child = subprocess.Popen([sys.executable, "-c", CHILD], env=ray_env, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO)
    started: set[int] = set()
    try:
        assert child.stdout is not None and child.stdin is not None
        ready, _, _ = select.select([child.stdout], [], [], START_TIMEOUT)
        assert ready, f"the local Ray instance did not start within {START_TIMEOUT:.0f} s"
        line = child.stdout.readline()
        assert line, child.communicate(timeout=60)[1][-3000:]
        report = json.loads(line)
        started = descendants(child.pid)
        sockets = listening_sockets(started | {child.pid})
        # Not vacuous: the GCS, the raylet, the driver and the worker that ran the task all listen.
        assert {"gcs_server", "raylet"} <= {s.process for s in sockets}, sockets
        assert {child.pid, report["worker_pid"]} <= {s.pid for s in sockets}, sockets
        exposed = [s for s in sockets if not is_loopback(s.address)]
        assert exposed == [], f"listening beyond loopback: {exposed}"
        auth = "off" if auth_mode == "disabled" else "on"
        assert report["notes"] == [f"ray: a private local instance listening on 127.0.0.1 only, "
                                   f"token authentication {auth}"]
        # The token probe sees the instance's real setting, even with the token file in this HOME.
        monkeypatch.setenv("HOME", ray_env["HOME"])
        assert cluster_checks_tokens(report["gcs"]) is (auth == "on")
        assert (Path(ray_env["HOME"]) / ".ray" / "auth_token").exists() is (auth == "on")
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.wait(timeout=120) == 0, child.communicate()[1][-3000:]
        deadline = time.monotonic() + 30
        while alive(started) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not alive(started), f"still running after close(): {sorted(alive(started))}"
    finally:
        leftovers = started | descendants(child.pid)
        if child.poll() is None:
            child.kill()
            child.wait()
        for pid in alive(leftovers):
            os.kill(pid, signal.SIGKILL)


# ------------------------------------------------------------------ without starting Ray


@pytest.fixture
def no_loopback(monkeypatch: pytest.MonkeyPatch) -> None:
    """Ray would give a local instance a network address (as without :func:`single_node_ray`)."""
    pytest.importorskip("ray")
    monkeypatch.setattr(distributed, "local_node_address", lambda ray: "192.0.2.2")


@pytest.fixture
def demo_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, ...]]:
    demo.reset()
    monkeypatch.setenv("AGENTLAB_CACHE_DB", str(tmp_path / "cache.duckdb"))
    with OpenAITestServer() as server:
        yield ("demo", "--model", server.model_spec, "--db", str(tmp_path / "r.duckdb"), "--no-progress")
    demo.reset()


def test_without_loopback_and_without_authentication_the_run_is_refused(
        no_loopback: None, demo_run: tuple[str, ...], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    code, out, err = run_cli(*demo_run, "--executor", "ray")
    assert code == 2 and out == ""
    assert err == ("error: a private local Ray instance would listen on every network interface (Ray gives it "
                   "the node address 192.0.2.2, not 127.0.0.1) and RAY_AUTH_MODE=disabled would let anyone who "
                   "can reach this machine run code on it: unset RAY_AUTH_MODE (Ray then uses token "
                   "authentication) or set RAY_AUTH_MODE=token\n")
    assert not (tmp_path / "r.duckdb").exists()  # refused before the results file was touched


@pytest.mark.parametrize("mode", [None, "token", "TOKEN"])
def test_without_loopback_a_token_protected_instance_is_started_with_a_warning(
        no_loopback: None, mode: str | None, monkeypatch: pytest.MonkeyPatch) -> None:
    if mode is None:
        monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    else:
        monkeypatch.setenv("RAY_AUTH_MODE", mode)
    notes = RayBackend(None).check()
    assert notes.info == ("ray: a private local instance listening on every interface (node address 192.0.2.2), "
                          "token authentication on",)
    assert len(notes.warnings) == 1 and notes.warnings[0].startswith(
        "warning: a private local Ray instance would listen on every network interface")


def test_single_node_ray_gives_the_loopback_address_and_puts_everything_back(monkeypatch: pytest.MonkeyPatch) -> None:
    ray = pytest.importorskip("ray")
    constants = ray._private.ray_constants
    monkeypatch.setattr(constants, "ENABLE_RAY_CLUSTER", True)  # as on Linux with the variable unset
    monkeypatch.delenv(distributed.SINGLE_NODE_ENV, raising=False)
    assert distributed.local_node_address(ray) == "127.0.0.1"
    assert constants.ENABLE_RAY_CLUSTER is True and distributed.SINGLE_NODE_ENV not in os.environ
    monkeypatch.setenv(distributed.SINGLE_NODE_ENV, "1")
    with distributed.single_node_ray(ray):
        assert os.environ[distributed.SINGLE_NODE_ENV] == "0" and constants.ENABLE_RAY_CLUSTER is False
    assert os.environ[distributed.SINGLE_NODE_ENV] == "1" and constants.ENABLE_RAY_CLUSTER is True


@pytest.mark.parametrize(("answer", "info", "warns"), [
    (True, "ray: the Ray cluster at 10.0.0.5:6379, token authentication on (a request without the token is "
           "refused)", False),
    (False, "ray: the Ray cluster at 10.0.0.5:6379, token authentication off", True),
    (None, "ray: the Ray cluster at 10.0.0.5:6379, token authentication unknown (its GCS did not answer a "
           "probe)", False),
])
def test_the_header_says_whether_a_cluster_checks_tokens(answer: bool | None, info: str, warns: bool,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("ray")
    asked: list[str] = []
    monkeypatch.setattr(distributed, "cluster_checks_tokens", lambda gcs: asked.append(gcs) or answer)
    notes = RayBackend("10.0.0.5:6379").check()
    assert asked == ["10.0.0.5:6379"] and notes.info == (info,)
    if warns:
        assert notes.warnings == ("warning: the Ray cluster at 10.0.0.5:6379 checks no token (RAY_AUTH_MODE=disabled "
                                  "on its nodes): anyone who can reach its GCS (10.0.0.5:6379) or a node's raylet "
                                  "and worker ports can run code on every node; start the nodes with "
                                  "RAY_AUTH_MODE=token unless the network is trusted",)
    else:
        assert notes.warnings == ()


def test_the_probe_reads_the_child_s_answer(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, object] = {}

    def fake_run(argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
        seen.update(argv=argv, env=kwargs["env"])
        return subprocess.CompletedProcess(argv, 0, stdout=str(seen["stdout"]), stderr="")

    class Reachable:
        def close(self) -> None:
            pass

    monkeypatch.setattr(distributed.subprocess, "run", fake_run)
    monkeypatch.setattr(distributed.socket, "create_connection", lambda address, timeout: Reachable())
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    monkeypatch.setenv("RAY_AUTH_TOKEN", "secret")
    for stdout, expected in (("token\n", True), ("open\n", False), ("unknown ConnectionError x\n", None), ("", None)):
        seen["stdout"] = stdout
        assert cluster_checks_tokens("10.0.0.5:6379") is expected
    env = seen["env"]
    assert isinstance(env, dict) and env["RAY_AUTH_MODE"] == "disabled" and "RAY_AUTH_TOKEN" not in env
    assert seen["argv"] == [sys.executable, "-c", distributed._PROBE_SCRIPT, "10.0.0.5:6379"]


def test_the_run_header_shows_the_executor_notes_and_warnings(demo_run: tuple[str, ...],
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    from agentlab.bench.running.executor import InProcessExecutor

    monkeypatch.setattr(distributed.RayBackend, "check",
                        lambda self: ExecutorNotes(("ray: somewhere",), ("warning: open to all",)))
    monkeypatch.setattr(distributed.RayExecutor, "run", InProcessExecutor.run)  # the cases, without Ray
    code, out, err = run_cli(*demo_run, "--executor", "ray")
    assert code == 0, err
    header, executor_line = out.splitlines()[:2]
    assert header.startswith("demo/") and executor_line == "  ray: somewhere"
    assert err.splitlines() == ["warning: open to all"]



def test_a_gcs_nobody_listens_on_is_not_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    monkeypatch.setattr(distributed.subprocess, "run", lambda *a, **k: pytest.fail("the probe ran"))
    closed = socket.create_server(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # a port on this machine that nothing listens on
    started = time.monotonic()
    assert cluster_checks_tokens(f"127.0.0.1:{port}") is None
    assert cluster_checks_tokens("no port") is None
    assert time.monotonic() - started < distributed.REACH_TIMEOUT
