"""torch's thread count from the cores other processes leave free: the reading, the rule, the
governor's changes, and a real run beside a process that keeps one core busy."""

from __future__ import annotations

import os
import subprocess
import sys

import orjson
import pytest

from core.cpu_load import OtherWork, ThreadGovernor, busy_jiffies, cores_for_torch

STAT = """cpu  900 10 300 5000 40 5 6 7 0 0
cpu0 100 1 50 2000 10 1 2 3 0 0
cpu1 200 2 60 2100 20 2 2 2 0 0
cpu2 600 7 190 900 10 2 2 2 0 0
intr 12345
ctxt 999
"""


def test_busy_ticks_sum_the_busy_fields_of_the_chosen_cpus():
    # user + nice + system + irq + softirq + steal; idle and iowait are not busy
    assert busy_jiffies(STAT, {0}) == 100 + 1 + 50 + 1 + 2 + 3
    assert busy_jiffies(STAT, {0, 1}) == 157 + (200 + 2 + 60 + 2 + 2 + 2)
    assert busy_jiffies(STAT, None) == 157 + 268 + (600 + 7 + 190 + 2 + 2 + 2)
    assert busy_jiffies(STAT, {5}) is None
    assert busy_jiffies("intr 1\n", None) is None


@pytest.mark.parametrize("cores, others, threads", [
    (2, 0.0, 2), (2, 0.3, 2),    # an idle machine, an editor or a shell
    (2, 0.5, 1), (2, 1.0, 1),    # one single-threaded job beside the run
    (2, 1.9, 1), (2, 3.0, 1),    # never below one thread
    (8, 2.6, 5), (8, 2.4, 6),
    (1, 0.9, 1),
])
def test_torch_gets_the_cores_other_work_leaves_free(cores, others, threads):
    assert cores_for_torch(cores, others) == threads


class FakeMachine:
    """/proc/stat text, this process's CPU seconds and a clock, all set by the test (100 ticks/s)."""

    def __init__(self):
        self.t, self.busy, self.own = 0.0, 0, 0.0

    def stat(self) -> str:
        return f"cpu  0 0 0 0 0 0 0 0\ncpu0 {self.busy} 0 0 0 0 0 0 0\n"

    def run(self, seconds: float, others_cores: float, own_cores: float) -> None:
        """``seconds`` pass with other processes using ``others_cores`` and this one ``own_cores``."""
        self.t += seconds
        self.own += own_cores * seconds
        self.busy += round((others_cores + own_cores) * seconds * 100)


@pytest.fixture
def machine(monkeypatch):
    fake = FakeMachine()
    monkeypatch.setattr("core.cpu_load._affinity", lambda: None)
    monkeypatch.setattr("os.sysconf", lambda name: 100)
    return fake


def _watch(fake: FakeMachine) -> OtherWork:
    return OtherWork(read_stat=fake.stat, clock=lambda: fake.t, own_cpu_s=lambda: fake.own)


def test_other_work_is_the_busy_time_less_this_process_own(machine):
    watch = _watch(machine)
    machine.run(2.0, others_cores=1.0, own_cores=0.8)
    assert watch.measure() == pytest.approx(1.0)
    machine.run(0.1, others_cores=0.0, own_cores=1.0)
    assert watch.measure() is None  # under the shortest window: the reading is kept
    machine.run(3.9, others_cores=0.0, own_cores=1.0)
    assert watch.measure() == pytest.approx(0.0, abs=0.01)


def _governor(machine, requested=None, cores=2):
    applied = []
    gov = ThreadGovernor(requested, _watch(machine), cores=cores, recheck_s=10.0, set_threads=applied.append,
                         get_threads=lambda: applied[-1], clock=lambda: machine.t)
    return gov, applied


def test_fixed_threads_are_applied_and_never_changed(machine, monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    gov, applied = _governor(machine, requested=2)
    machine.run(2.0, others_cores=1.0, own_cores=0.5)
    assert gov.settle() is None and applied == [2]
    machine.run(30.0, others_cores=1.0, own_cores=1.0)
    assert gov.tick() is None and gov.tick() is None and applied == [2]
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    gov, applied = _governor(machine)
    assert gov.settle() is None and applied == [1] and not gov.following


def test_the_count_follows_the_load_after_two_agreeing_readings(machine, monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    gov, applied = _governor(machine)
    machine.run(1.5, others_cores=1.0, own_cores=0.9)  # a one-thread job holds a core as the run starts
    note = gov.settle()
    assert applied == [1]
    assert note.startswith("other processes keep 1.0 of this machine's 2 cores busy, so torch runs 1 thread")
    assert "--threads N fixes it" in note
    machine.run(5.0, others_cores=0.0, own_cores=1.0)
    assert gov.tick() is None and applied == [1]  # not yet time to look again
    machine.run(5.0, others_cores=0.0, own_cores=1.0)
    assert gov.tick() is None and applied == [1]  # the job ended: a first reading says 2
    machine.run(10.0, others_cores=1.0, own_cores=1.0)
    assert gov.tick() is None and applied == [1]  # ... the next disagrees: nothing changes
    machine.run(10.0, others_cores=0.0, own_cores=1.0)
    assert gov.tick() is None
    machine.run(10.0, others_cores=0.1, own_cores=2.0)
    assert gov.tick() == "torch threads 1 -> 2: other processes keep 0.1 of 2 cores busy"
    assert applied == [1, 2] and gov.threads == 2 and gov.changes == 1


def test_an_idle_machine_keeps_one_thread_per_core_without_a_note(machine, monkeypatch):
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    gov, applied = _governor(machine, cores=4)
    machine.run(1.0, others_cores=0.2, own_cores=1.0)
    assert gov.settle() is None and applied == [4]


def test_threads_setting_reaches_torch(tiny_dir):
    import torch

    from core.settings import ModelSettings
    from core.solver import load_models

    torch.set_num_threads(2)
    load_models(ModelSettings(generator=str(tiny_dir), prm=str(tiny_dir), threads=1))
    assert torch.get_num_threads() == 1


@pytest.mark.slow
@pytest.mark.skipif(len(os.sched_getaffinity(0)) != 2, reason="the rule is checked on a 2-core machine")
def test_a_run_beside_a_busy_core_runs_one_thread_and_says_so(tiny_dir, tmp_path):
    problems = tmp_path / "p.jsonl"
    problems.write_text('{"id": "a", "problem": "1+1?", "answer": "2"}\n')
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}
    try:
        proc = subprocess.run([sys.executable, "-m", "specscale_cli", "solve", str(problems), "-o",
                               str(tmp_path / "out"), "--generator", str(tiny_dir), "--prm", str(tiny_dir), "-n", "2",
                               "-m", "2", "--max-steps", "1", "--max-step-tokens", "4", "--no-dashboard"],
                              capture_output=True, text=True, timeout=300, env=env)
    finally:
        spinner.kill()
        spinner.wait()
    assert proc.returncode == 0, proc.stderr
    assert "cores busy, so torch runs 1 thread" in proc.stderr
    summary = orjson.loads((tmp_path / "out" / "summary.json").read_bytes())
    assert summary["torch_threads"] == 1
