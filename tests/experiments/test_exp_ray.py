"""The Ray executor on a real local Ray cluster: a head node without CPUs and a separate 2-CPU worker node.

Both nodes are started by this module (``ray start``, each in its own process group) and stopped by
killing exactly those process groups: ``ray stop --force`` would also stop other users' Ray processes.
"""

from __future__ import annotations

import io
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import pytest
from exp_helpers import assert_same_values, cmdline

from moesim.experiments import run_sweep

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _pgrp(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[2])
    except (OSError, ValueError, IndexError):
        return None


def _ppid(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None


def _group_members(pgid: int) -> list[int]:
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and _pgrp(int(p.name)) == pgid]


def _start_node(args: list[str], env: dict[str, str]) -> int:
    """Run ``ray start ARGS`` in a new process group; returns the group id once the node is up."""
    proc = subprocess.Popen(["ray", "start", "--disable-usage-stats", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True, env=env)
    out, _ = proc.communicate(timeout=180)
    if proc.returncode != 0:
        _stop_group(proc.pid)
        pytest.fail(f"ray start {' '.join(args)} failed:\n{out[-2000:]}")
    return proc.pid


def _stop_group(pgid: int) -> None:
    """SIGTERM, then SIGKILL, the processes of one group this module started."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if not _group_members(pgid):
            return
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + (5 if sig == signal.SIGTERM else 15)
        while _group_members(pgid) and time.monotonic() < deadline:
            time.sleep(0.3)


@pytest.fixture(scope="module")
def ray_cluster():
    """(address, process groups) of a head (0 CPUs) + worker (2 CPUs) cluster on loopback."""
    port = _free_port()
    temp = tempfile.mkdtemp(prefix="mray", dir="/tmp")  # short: Ray's socket paths must fit 107 bytes
    env = dict(os.environ, RAY_TMPDIR=temp)
    env.pop("RAY_ADDRESS", None)
    groups: list[int] = []
    try:
        groups.append(_start_node(["--head", f"--port={port}", "--node-ip-address=127.0.0.1", "--num-cpus=0",
                                   "--include-dashboard=false", f"--temp-dir={temp}"], env))
        groups.append(_start_node([f"--address=127.0.0.1:{port}", "--node-ip-address=127.0.0.1", "--num-cpus=2"],
                                  env))
        address = f"127.0.0.1:{port}"
        ray.init(address=address, log_to_driver=False)
        try:
            deadline = time.monotonic() + 120
            while ray.cluster_resources().get("CPU", 0) < 2 and time.monotonic() < deadline:
                time.sleep(0.5)
            assert ray.cluster_resources().get("CPU", 0) == 2
        finally:
            ray.shutdown()
        yield address, groups
    finally:
        for g in reversed(groups):
            _stop_group(g)
        shutil.rmtree(temp, ignore_errors=True)


def test_ray_sweep_equals_the_local_sweep(ray_cluster, small_specs: list, reference_store: Path,
                                          tmp_path: Path) -> None:
    address, _ = ray_cluster
    summary = run_sweep(small_specs, tmp_path, executor="ray", address=address, progress="none")
    assert (summary.ran, summary.failures) == (24, ())
    assert not ray.is_initialized()  # the executor disconnected
    assert_same_values(tmp_path, reference_store)
    assert run_sweep(small_specs, tmp_path, executor="ray", address=address, progress="none").ran == 0


def test_ray_tasks_run_the_shipped_package(ray_cluster) -> None:
    from moesim.experiments.executors.ray_cluster import runtime_env

    address, _ = ray_cluster
    ray.init(address=address, runtime_env=runtime_env(), log_to_driver=False)
    try:
        where = ray.get(ray.remote(lambda: __import__("moesim").__file__).remote())
    finally:
        ray.shutdown()
    assert "py_modules_files" in where and where.endswith("moesim/__init__.py")


def _busy_workers(groups: list[int]) -> list[int]:
    """Ray worker processes of our nodes (children of our raylets, in sessions of their own) running a task."""
    pids = [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]
    return [p for p in pids if cmdline(p).startswith("ray::run_unit") and _pgrp(_ppid(p) or 0) in groups]


class _KillRayTaskOnLine(io.StringIO):
    """A progress stream that SIGKILLs a Ray worker process running one of our tasks at line ``n``."""

    def __init__(self, n: int, groups: list[int]) -> None:
        super().__init__()
        self.n, self.groups, self.lines, self.killed, self.tried = n, groups, 0, None, False

    def write(self, text: str) -> int:
        self.lines += text.count("\n")
        if self.lines >= self.n and not self.tried:
            self.tried = True
            deadline = time.monotonic() + 20
            while self.killed is None and time.monotonic() < deadline:
                busy = _busy_workers(self.groups)
                if busy:
                    self.killed = busy[0]
                    os.kill(busy[0], signal.SIGKILL)
                else:
                    time.sleep(0.05)
        return super().write(text)


def test_a_killed_ray_worker_is_retried(ray_cluster, small_specs: list, reference_store: Path,
                                        tmp_path: Path) -> None:
    address, groups = ray_cluster
    stream = _KillRayTaskOnLine(2, groups)  # the header, then the first finished run
    summary = run_sweep(small_specs, tmp_path, executor="ray", address=address, progress="plain", stream=stream)
    assert stream.killed is not None, "no Ray worker was running a task"
    assert (summary.ran, summary.failures) == (24, ())
    assert_same_values(tmp_path, reference_store)


def test_refine_runs_on_the_ray_cluster(ray_cluster, small_specs: list, tmp_path: Path) -> None:
    """`moesim refine --executor ray`: flow runs refined on fluid by the cluster's workers give the rows a local
    refine gives (2 topologies × 2 strategies of the small matrix under roce_dcqcn)."""
    from moesim.analysis.refine import refine

    address, _ = ray_cluster
    specs = [replace(s, backend="flow") for s in small_specs if s.topology in ("2", "5") and s.network == "roce_dcqcn"]
    stores = {}
    for where in ("ray", "local"):
        stores[where] = tmp_path / where
        assert run_sweep(specs, stores[where], workers=1, progress="none").ran == 4
    on_ray = refine(stores["ray"], "fluid", None, executor="ray", address=address, progress="none")
    local = refine(stores["local"], "fluid", None, workers=1, progress="none")
    assert on_ray.ran == local.ran > 0 and on_ray.failures == () and on_ray.remaining == local.remaining
    assert_same_values(stores["ray"], stores["local"])


def test_serving_step_costs_fill_on_the_ray_cluster(ray_cluster, tmp_path: Path) -> None:
    """`moesim serve`'s step costs simulated by the cluster's workers are those this process simulates."""
    from moesim.serving import Deployment, StepCache
    from moesim.serving.costs import fill, step_spec

    address, _ = ray_cluster
    (replica,) = Deployment("deepseek-v4-flash", "star:2", "TP1EP2", backend="flow").replicas()
    specs = [step_spec(replica.kind, "prefill", 24, 0), step_spec(replica.kind, "decode", 3, 512)]
    inline, _ = fill(specs, StepCache(tmp_path / "inline"))
    on_ray, report = fill(specs, StepCache(tmp_path / "ray"), executor="ray", address=address)
    assert on_ray == inline and report.simulated == 2
