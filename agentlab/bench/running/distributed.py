"""Running a run's cases on a Ray cluster: :class:`RayBackend`, the Ray :class:`Backend` of :class:`RemoteExecutor`.

The scheduler, the workers and how failures are handled are described in :mod:`agentlab.bench.running.remote`
(its names are importable from here too); this module starts Ray or joins a cluster
(``pip install 'agentlab[ray]'``), runs each :class:`CaseWorker` as an async Ray actor, and settles
what a run exposes before anything is stored.

* **Exposure.** A private local instance listens on loopback only: while it starts, Ray is told this
  machine is a single-node cluster (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``), so it takes 127.0.0.1 as
  the node address, and its servers bind loopback only for that node address (every interface for any
  other). Where that cannot be had and ``RAY_AUTH_MODE=disabled``, :meth:`RayBackend.check` refuses
  before anything is stored. For a cluster it asks the GCS, without a token, whether one is required,
  so the run header can say so.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from agentlab.bench.running.executor import CaseOutcome, Job
from agentlab.bench.running.remote import (
    MAX_REQUEUES,
    Backend,
    CaseWorker,
    ExecutorError,
    RemoteExecutor,
    WorkerLost,
    seed_entries,
)
from agentlab.bench.tasks import Case
from agentlab.model.cache import CacheEntry

# The scheduler's names (agentlab.bench.running.remote) are still imported from here.
__all__ = [
    "FORWARDED_ENV",
    "LOCAL_OBJECT_STORE_BYTES",
    "LOOPBACK_NODE_ADDRESS",
    "MAX_REQUEUES",
    "PROBE_TIMEOUT",
    "RAY_INSTALL_HINT",
    "REACH_TIMEOUT",
    "READY_TIMEOUT",
    "SINGLE_NODE_ENV",
    "Backend",
    "CaseWorker",
    "ExecutorError",
    "ExecutorNotes",
    "RayBackend",
    "RayExecutor",
    "RemoteExecutor",
    "WorkerLost",
    "cluster_checks_tokens",
    "local_auth_mode",
    "local_node_address",
    "seed_entries",
    "single_node_ray",
]

#: Seconds to wait for the first workers to report ready (model set up, imports done).
READY_TIMEOUT = 300.0
#: Environment variables a worker needs and a remote node may not have; forwarded when set.
FORWARDED_ENV = ("OPENAI_API_KEY", "OPENAI_BASE_URL", "AGENTLAB_EXTENSIONS")
#: Object store of a Ray instance started by the driver: results are small, so keep it modest.
LOCAL_OBJECT_STORE_BYTES = 256 * 1024 * 1024
RAY_INSTALL_HINT = "pip install 'agentlab[ray]'"
#: Ray's switch for "this machine is the whole cluster", read when ``ray`` is imported
#: (``ray/_private/ray_constants.py``); "0" makes Ray take the loopback address as the node address.
SINGLE_NODE_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"
#: The node address for which Ray's servers bind loopback only: they compare it with this exact string.
LOOPBACK_NODE_ADDRESS = "127.0.0.1"
#: Seconds the token probe of a cluster (:func:`cluster_checks_tokens`) may take, and of that, to reach its GCS.
PROBE_TIMEOUT = 60.0
REACH_TIMEOUT = 5.0
# Run in a fresh process with token authentication off and no token: a GCS that checks tokens refuses it.
_PROBE_SCRIPT = """
import sys
from ray._raylet import GcsClient
from ray.exceptions import AuthenticationError
try:
    GcsClient(address=sys.argv[1]).internal_kv_get(b"agentlab-token-probe", None, timeout=20)
except AuthenticationError:
    print("token")
except Exception as exc:
    print("unknown", type(exc).__name__, str(exc).strip().splitlines()[0] if str(exc).strip() else "")
else:
    print("open")
"""


@dataclass(frozen=True)
class ExecutorNotes:
    """What the run header says about where cases run, and the warnings printed with it."""

    #: Lines for the run header (no indentation, no newline).
    info: tuple[str, ...] = ()
    #: Whole ``warning: ...`` lines, for stderr.
    warnings: tuple[str, ...] = ()


def _import_ray() -> Any:
    try:
        import ray
    except ImportError as exc:
        raise ExecutorError(f"--executor ray needs Ray: {RAY_INSTALL_HINT} ({exc})") from exc
    return ray


def local_auth_mode() -> str:
    """``"token"`` or ``"disabled"``: the authentication a private local Ray instance started now gets.

    ``ray.init()`` turns token authentication on for a new instance unless ``RAY_AUTH_MODE`` is set
    (``enable_token_auth_by_default`` in ``ray/_private/authentication/authentication_token_setup.py``);
    set, only ``token`` turns it on.
    """
    mode = os.environ.get("RAY_AUTH_MODE")
    return "token" if mode is None or mode.lower() == "token" else "disabled"


@contextlib.contextmanager
def single_node_ray(ray: Any) -> Iterator[None]:
    """While a local instance starts: Ray treats this machine as the whole cluster, so the node address it
    picks is the loopback one and every Ray server binds loopback only.

    Without this Ray 2.60 replaces even an explicit ``_node_ip_address="127.0.0.1"`` by the machine's
    network address (``resolve_ip_for_localhost`` in ``ray/_private/services.py``), unless
    ``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER`` is off. Ray reads that variable once, on import, into
    ``ray_constants.ENABLE_RAY_CLUSTER``, and this process may have imported Ray already: both are set,
    and both put back afterwards, so that joining a cluster later from this process still works. The Ray
    processes started meanwhile inherit the variable.
    """
    constants = ray._private.ray_constants
    saved_env, saved_flag = os.environ.get(SINGLE_NODE_ENV), constants.ENABLE_RAY_CLUSTER
    os.environ[SINGLE_NODE_ENV] = "0"
    constants.ENABLE_RAY_CLUSTER = False
    try:
        yield
    finally:
        constants.ENABLE_RAY_CLUSTER = saved_flag
        if saved_env is None:
            os.environ.pop(SINGLE_NODE_ENV, None)
        else:
            os.environ[SINGLE_NODE_ENV] = saved_env


def local_node_address(ray: Any) -> str:
    """The node address Ray gives a local instance started now under :func:`single_node_ray`."""
    with single_node_ray(ray):
        return str(ray.util.get_node_ip_address())


def cluster_checks_tokens(gcs_address: str, timeout: float = PROBE_TIMEOUT) -> bool | None:
    """Whether the Ray cluster whose GCS is at ``gcs_address`` (``HOST:PORT``) refuses a request without a
    token: True (token authentication on), False (it serves anyone who reaches the port), None (no answer).

    The request comes from a separate process with ``RAY_AUTH_MODE=disabled`` and no token variable, so
    this process's own setting cannot hide the cluster's: a driver holding a token joins a cluster that
    checks none just as well.
    """
    host, _, port = gcs_address.rpartition(":")
    try:  # Ray's client waits long for a port nobody listens on: ask only a GCS that is there
        socket.create_connection((host.strip("[]"), int(port)), timeout=min(timeout, REACH_TIMEOUT)).close()
    except (OSError, ValueError):
        return None
    env = {k: v for k, v in os.environ.items() if k not in ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")}
    env["RAY_AUTH_MODE"] = "disabled"
    try:
        done = subprocess.run([sys.executable, "-c", _PROBE_SCRIPT, gcs_address], env=env, capture_output=True,
                              text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None
    words = done.stdout.split()
    return {"token": True, "open": False}.get(words[0]) if words else None


def _python_signal_handlers() -> dict[int, Any]:
    return {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}


def _restore_signal_handlers(handlers: dict[int, Any]) -> None:
    if threading.current_thread() is not threading.main_thread():
        return
    for sig, handler in handlers.items():
        if handler is not None:
            signal.signal(sig, handler)


def _no_sigterm_warning(record: logging.LogRecord) -> bool:
    return "SIGTERM handler is not set" not in record.getMessage()


class RayBackend:
    """Workers as async Ray actors (one logical CPU each) on a cluster or a local Ray instance.

    ``address`` None starts a private local instance (and stops it after the run); ``"auto"`` or
    ``"HOST:PORT"`` joins a running cluster (``ray start --head`` / ``ray start --address ...``).
    """

    def __init__(self, address: str | None = None, *, local_cpus: int | None = None) -> None:
        self.address = address
        self.local_cpus = local_cpus
        self._ray: Any = None
        self._owns_ray = False
        self._actor: Any = None
        self._args: tuple[Any, ...] = ()
        self._actors: list[Any] = []
        self._init: asyncio.Future[Any] | None = None

    def check(self) -> ExecutorNotes:
        """Before a run stores anything: what the run will expose, as lines for its header.

        A local instance listens on 127.0.0.1 only (:func:`single_node_ray`); where Ray would give it
        another node address, it would listen on every interface, which is refused
        (:class:`ExecutorError`) with ``RAY_AUTH_MODE=disabled`` and warned about with a token. For a
        cluster the header says whether it checks tokens (:func:`cluster_checks_tokens`), with a warning
        when it does not. :class:`ExecutorError` too when Ray is missing.
        """
        ray = _import_ray()
        if ray.is_initialized():
            return ExecutorNotes(("ray: the Ray instance this process is already connected to",))
        if self.address is None:
            auth = "on" if local_auth_mode() == "token" else "off"
            node = local_node_address(ray)
            if node == LOOPBACK_NODE_ADDRESS:
                return ExecutorNotes((f"ray: a private local instance listening on {LOOPBACK_NODE_ADDRESS} only, "
                                      f"token authentication {auth}",))
            exposure = (f"a private local Ray instance would listen on every network interface (Ray gives it the "
                        f"node address {node}, not {LOOPBACK_NODE_ADDRESS})")
            if auth == "off":
                raise ExecutorError(f"{exposure} and RAY_AUTH_MODE=disabled would let anyone who can reach this "
                                    "machine run code on it: unset RAY_AUTH_MODE (Ray then uses token "
                                    "authentication) or set RAY_AUTH_MODE=token")
            return ExecutorNotes((f"ray: a private local instance listening on every interface (node address "
                                  f"{node}), token authentication on",),
                                 (f"warning: {exposure}; only its token (~/.ray/auth_token) keeps others from "
                                  "running code on this machine",))
        try:
            gcs = ray._private.services.canonicalize_bootstrap_address(self.address)
        except Exception:  # a malformed address: ray.init says what is wrong with it
            gcs = None
        checks = cluster_checks_tokens(gcs) if gcs else None
        where = f"the Ray cluster at {gcs or self.address}"
        if checks is None:
            return ExecutorNotes((f"ray: {where}, token authentication unknown (its GCS did not answer a probe)",))
        if checks:
            return ExecutorNotes((f"ray: {where}, token authentication on (a request without the token is "
                                  "refused)",))
        return ExecutorNotes((f"ray: {where}, token authentication off",),
                             (f"warning: {where} checks no token (RAY_AUTH_MODE=disabled on its nodes): anyone "
                              f"who can reach its GCS ({gcs}) or a node's raylet and worker ports can run code on "
                              "every node; start the nodes with RAY_AUTH_MODE=token unless the network is "
                              "trusted",))

    async def open(self, job: Job, seed: list[CacheEntry], slots: int) -> None:
        """:meth:`start` Ray, then prepare the actor class and the shared arguments every worker gets."""
        await self.start()
        ray = self._ray
        env = {k: os.environ[k] for k in FORWARDED_ENV if os.environ.get(k)}
        options: dict[str, Any] = {"num_cpus": 1, "max_concurrency": slots, "max_restarts": 0}
        if env:
            options["runtime_env"] = {"env_vars": env}
        self._actor = ray.remote(CaseWorker).options(**options)
        self._args = (ray.put(job.task), ray.put(job.request), job.run_id, ray.put(seed))

    async def start(self) -> None:
        """Start the private local instance (loopback only, :func:`single_node_ray`) or join the cluster;
        :meth:`close` stops what this started. :class:`ExecutorError` when Ray is missing, the cluster
        cannot be reached, or a local instance did not get the loopback node address while token
        authentication is off.
        """
        ray = _import_ray()
        self._ray = ray
        if not ray.is_initialized():
            kwargs: dict[str, Any] = {"include_dashboard": False, "logging_level": "WARNING",
                                      "configure_logging": True}
            if self.address is None:
                kwargs.update(num_cpus=self.local_cpus or os.cpu_count() or 1,
                              object_store_memory=LOCAL_OBJECT_STORE_BYTES)
            # ray.init runs off the main thread so that Ray does not replace the CLI's SIGTERM
            # handler (a SIGTERM must stop the run cleanly); Ray warns about exactly that: hush it.
            logging.getLogger("ray._private.worker").addFilter(_no_sigterm_warning)
            handlers = _python_signal_handlers()
            # A thread cannot be cancelled: if Ctrl-C comes during start-up, close() waits for it
            # to finish and then stops the instance, so no Ray process outlives the run.
            self._owns_ray = True
            # "local": always a new private instance, never a cluster that happens to run on this machine.
            address = self.address or "local"
            local = self.address is None
            try:
                with single_node_ray(ray) if local else contextlib.nullcontext():
                    self._init = asyncio.ensure_future(asyncio.to_thread(ray.init, address=address, **kwargs))
                    await asyncio.shield(self._init)
            except (ConnectionError, RuntimeError, ValueError) as exc:
                self._owns_ray = False
                where = f"the Ray cluster at {self.address}" if self.address else "a local Ray instance"
                hint = ""
                if self.address and os.environ.get("RAY_AUTH_MODE", "").lower() != "token":
                    hint = ("; a cluster with token authentication (Ray's default) needs RAY_AUTH_MODE=token here and "
                            "its token in ~/.ray/auth_token or RAY_AUTH_TOKEN (or RAY_AUTH_MODE=disabled on every "
                            "node of a trusted network)")
                raise ExecutorError(f"cannot start or join {where}: {exc}{hint}") from exc
            finally:
                # Ray's core installs a C-level handler that dumps a stack and aborts on SIGTERM;
                # put the process's own handlers back so SIGTERM still ends the run cleanly.
                _restore_signal_handlers(handlers)
            node = str(ray.util.get_node_ip_address())
            if local and node != LOOPBACK_NODE_ADDRESS and local_auth_mode() != "token":
                await self.close()  # check() did not see this coming: stop the open instance
                raise ExecutorError(f"the local Ray instance got the node address {node}, not "
                                    f"{LOOPBACK_NODE_ADDRESS}, so it listens on every network interface, and "
                                    "RAY_AUTH_MODE=disabled lets anyone who can reach this machine run code on "
                                    "it: unset RAY_AUTH_MODE or set RAY_AUTH_MODE=token")

    def default_workers(self) -> int:
        """One worker per CPU of the cluster."""
        return max(1, int(self._ray.cluster_resources().get("CPU", 1)))

    def spawn(self) -> Any:
        """Start one Ray actor; it is killed on :meth:`close`."""
        actor = self._actor.remote(*self._args)
        self._actors.append(actor)
        return actor

    async def ready(self, workers: Sequence[Any]) -> list[str]:
        """``host:pid`` of each worker once up; :class:`ExecutorError` when the cluster has too few CPUs or
        a worker does not start in time.
        """
        cpus = int(self._ray.cluster_resources().get("CPU", 0))
        if len(workers) > cpus:
            raise ExecutorError(f"--workers {len(workers)} needs {len(workers)} CPUs (one per worker) but the Ray "
                                f"cluster has {cpus}; use --workers {max(1, cpus)} or add nodes")
        refs = [w.ready.remote() for w in workers]
        try:
            done, waiting = await asyncio.to_thread(self._ray.wait, refs, num_returns=len(refs),
                                                    timeout=READY_TIMEOUT)
            if waiting:
                raise ExecutorError(f"{len(waiting)} of {len(refs)} Ray workers not ready after {READY_TIMEOUT:.0f} s")
            return [str(x) for x in self._ray.get(done)]
        except self._ray.exceptions.RayError as exc:
            first = str(exc).strip().splitlines()[-1] if str(exc).strip() else type(exc).__name__
            raise ExecutorError(f"a Ray worker could not start ({first}); every node needs agentlab installed "
                                f"(pip install 'agentlab[ray]') and the model reachable") from exc

    def submit(self, worker: Any, ordinal: int, case: Case) -> Any:
        """Send one case to a worker's ``run``; returns the Ray object ref."""
        return worker.run.remote(ordinal, case)

    async def wait(self, pending: Sequence[Any]) -> list[Any]:
        """The refs among ``pending`` that are done, waiting up to a second for the first one."""
        ray = self._ray
        # Block (off the event loop, so Ctrl-C/SIGTERM are seen) until one is ready, then take every ready one.
        ready, rest = await asyncio.to_thread(ray.wait, list(pending), num_returns=1, timeout=1.0)
        if ready and rest:
            more, _ = ray.wait(rest, num_returns=len(rest), timeout=0)
            ready += more
        return ready

    def result(self, pending: Any) -> CaseOutcome:
        """The case outcome; :class:`WorkerLost` when the actor or its node died, else the worker's own
        error re-raised.
        """
        exceptions = self._ray.exceptions
        try:
            return self._ray.get(pending)
        except (exceptions.RayActorError, exceptions.WorkerCrashedError, exceptions.ObjectLostError,
                exceptions.NodeDiedError, exceptions.OutOfMemoryError, exceptions.LocalRayletDiedError) as exc:
            # The process or node is gone (crash, OOM kill, lost node): the case itself did not fail.
            raise WorkerLost(str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__) from exc
        except exceptions.RayTaskError as exc:
            cause = exc.cause if isinstance(getattr(exc, "cause", None), Exception) else exc
            raise cause from exc

    def discard(self, worker: Any) -> None:
        """Kill a worker (one already gone is ignored)."""
        try:
            self._ray.kill(worker, no_restart=True)
        except Exception:  # already gone
            pass

    async def close(self) -> None:
        """Kill every worker and, when this run started the Ray instance, shut it down."""
        if self._ray is None:
            return
        if self._init is not None and not self._init.done():
            with contextlib.suppress(Exception):
                await self._init
        for actor in self._actors:
            self.discard(actor)
        self._actors.clear()
        if self._owns_ray and self._ray.is_initialized():
            await asyncio.to_thread(self._ray.shutdown)
        self._owns_ray = False


class RayExecutor(RemoteExecutor):
    """``--executor ray``: :class:`RemoteExecutor` on :class:`RayBackend`."""

    def __init__(self, address: str | None = None, *, workers: int | None = None, slots: int | None = None,
                 max_requeues: int = MAX_REQUEUES) -> None:
        self.ray_backend = RayBackend(address, local_cpus=max(os.cpu_count() or 1, workers or 0) or None)
        super().__init__(self.ray_backend, workers=workers, slots=slots, max_requeues=max_requeues, name="ray")
        #: What :meth:`check` found, for the run header (None until it ran).
        self.notes: ExecutorNotes | None = None

    def check(self) -> ExecutorNotes:
        """:meth:`RayBackend.check`, kept in :attr:`notes`: the header's lines on what the run exposes."""
        self.notes = self.ray_backend.check()
        return self.notes
