"""`solve --workers K`: replicas as Ray actors, the driver process the only reader and writer.

The Ray runs are real: a local Ray cluster, two replica processes, the tiny random model, each
`solve` in a subprocess (so a killed driver, Ctrl-C and the replicas' processes are real too).
Every run is compared with one in-process run of the same problems: the records must be the same
apart from ``time_s`` and line order, every id exactly once.
"""

from __future__ import annotations

import copy
import os
import re
import shlex
import signal
import subprocess
import sys
import time

import orjson
import pytest

from solve_helpers import GSM8K, ROOT, records, run_solve, tiny_flags, wait_for_answers, without_timing

ENV = {**os.environ, "HF_HUB_OFFLINE": "1"}
MATH500 = ROOT / "examples" / "math500_sample.jsonl"
# one problem at a time per replica and longer paths: a replica killed after the first answer still
# holds a problem, and a run lasts long enough to stop it midway
SLOW = ["--max-concurrent", "1", "--max-steps", "3", "--max-step-tokens", "48"]


@pytest.fixture(scope="module")
def problems(tmp_path_factory):
    """20 problems: the GSM8K and MATH-500 samples in one file."""
    path = tmp_path_factory.mktemp("input") / "problems.jsonl"
    path.write_bytes(GSM8K.read_bytes() + MATH500.read_bytes())
    return path


@pytest.fixture(scope="module")
def reference(tiny_dir, problems, tmp_path_factory):
    """Records and traces of the in-process (--workers 1) run of :func:`problems` with :data:`SLOW`."""
    out = tmp_path_factory.mktemp("reference") / "out"
    res = run_solve([str(problems), "-o", str(out), *tiny_flags(tiny_dir), *SLOW])
    assert res.exit_code == 0, res.output
    return without_timing(records(out)), _traces(out)


def _traces(out) -> dict:
    """Every trace of OUT without its clock fields (t_start, t_finish, t_submitted, t_scored)."""
    traces = {}
    for path in sorted((out / "traces").iterdir()):
        trace = orjson.loads(path.read_bytes())
        for node in trace["nodes"]:
            for key in [k for k in node if k.startswith("t_")]:
                del node[key]
        traces[path.name] = trace
    return traces


def _same_traces(got: dict, want: dict) -> None:
    """Equal trees; raw PRM scores may differ in the last float digits.

    fp32 sums depend on the torch thread count and on the batch shapes (which problems share a PRM
    call), so a replica with one core computes a step score a few ulps off the one-process run; the
    records carry scores rounded to 6 digits, and the tree (every choice, text and status) is equal.
    """
    got, want = copy.deepcopy(got), copy.deepcopy(want)
    assert got.keys() == want.keys()
    for name in want:
        g_nodes, w_nodes = got[name].pop("nodes"), want[name].pop("nodes")
        assert got[name] == want[name]
        assert len(g_nodes) == len(w_nodes)
        for g, w in zip(g_nodes, w_nodes):
            for key in ("score", "path_score"):
                g_score, w_score = g.pop(key), w.pop(key)
                assert (g_score is None) == (w_score is None), (name, g["id"], key)
                if w_score is not None:
                    assert g_score == pytest.approx(w_score, rel=1e-5, abs=1e-9), (name, g["id"], key)
            assert g == w


def _solve_cmd(*args) -> list[str]:
    return [sys.executable, "-m", "specscale_cli", "solve", *map(str, args), "--no-dashboard"]


def _replica_pids(stderr: str) -> dict[int, int]:
    """Replica index -> pid, from the 'N replicas ready: replica 0 pid 123 on host (...)' line."""
    line = next(ln for ln in stderr.splitlines() if "replicas ready:" in ln)
    return {int(i): int(pid) for i, pid in re.findall(r"replica (\d+) pid (\d+)", line)}


def _wait_for_line(proc, err_path, text: str, timeout_s: float = 600) -> str:
    """Wait until the running ``proc`` printed ``text`` on stderr; returns the stderr so far."""
    deadline = time.monotonic() + timeout_s
    while True:
        stderr = err_path.read_text()
        if text in stderr:
            return stderr
        assert proc.poll() is None, stderr
        assert time.monotonic() < deadline, f"no {text!r} in: {stderr}"
        time.sleep(0.05)


def _gone(pid: int, timeout_s: float = 60) -> bool:
    """True once process ``pid`` has exited (waits up to ``timeout_s``)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)
    return False


def _each_id_once(out, problems) -> None:
    ids = [r["id"] for r in records(out)]
    want = [orjson.loads(line)["id"] for line in problems.read_bytes().splitlines()]
    assert sorted(ids) == sorted(want), "every problem exactly once"


# ------------------------------------------------------------------ without Ray, one worker


def test_workers_without_ray_is_a_usage_error_with_the_install_hint(tiny_dir, tmp_path):
    # sys.modules['ray'] = None makes `import ray` (and find_spec) fail as if it were not installed
    code = "import sys; sys.modules['ray'] = None; from specscale_cli.main import cli; cli()"
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-c", code, "solve", str(GSM8K), "-o", str(out), "--workers", "2",
                           "--no-dashboard", *tiny_flags(tiny_dir)], cwd=ROOT, env=ENV, capture_output=True,
                          timeout=120)
    stderr = proc.stderr.decode()
    assert proc.returncode == 2, stderr
    assert "Traceback" not in stderr and "loading" not in stderr
    assert stderr.strip().splitlines()[-1] == ("Error: --workers 2 runs replicas on Ray, which is not installed: "
                                               "pip install 'specscale[ray]'")
    assert not out.exists()


@pytest.mark.slow
def test_one_worker_runs_in_process_without_importing_ray(tiny_dir, tmp_path):
    pytest.importorskip("ray")  # only meaningful where Ray could be imported
    code = ("import sys\nfrom specscale_cli.main import cli\ntry:\n    cli()\nexcept SystemExit as e:\n"
            "    print('exit', e.code, 'ray' in sys.modules)\n")
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-c", code, "solve", str(GSM8K), "-o", str(out), "--limit", "2",
                           "--no-dashboard", *tiny_flags(tiny_dir)], cwd=ROOT, env=ENV, capture_output=True,
                          timeout=300)
    assert proc.stdout.decode().split() == ["exit", "0", "False"], proc.stderr.decode()
    assert len(records(out)) == 2


def test_ray_address_needs_several_workers(tiny_dir, tmp_path):
    res = run_solve([str(GSM8K), "-o", str(tmp_path / "out"), "--ray-address", "auto"], tiny_dir)
    assert res.exit_code == 2
    assert "--ray-address needs --workers 2 or more" in res.output and "loading" not in res.output


# ------------------------------------------------------------------ two replicas (heavy: a local Ray cluster each)


@pytest.mark.slow
def test_two_workers_give_the_same_records_and_traces_as_one(tiny_dir, problems, reference, tmp_path):
    pytest.importorskip("ray")
    out = tmp_path / "out"
    proc = subprocess.run(_solve_cmd(problems, "-o", out, "--workers", 2, *tiny_flags(tiny_dir), *SLOW), cwd=ROOT,
                          env=ENV, capture_output=True, timeout=900)
    stderr = proc.stderr.decode()
    assert proc.returncode == 0, stderr
    assert without_timing(records(out)) == reference[0]
    _same_traces(_traces(out), reference[1])
    summary = orjson.loads((out / "summary.json").read_bytes())
    rows = summary["replicas"]
    assert [r["replica"] for r in rows] == [0, 1] and all(r["status"] == "running" for r in rows)
    # both replicas worked, and their figures add up to the run's
    assert all(r["problems_answered"] > 0 for r in rows)
    assert sum(r["problems_answered"] for r in rows) == summary["problems_answered"] == 20
    assert sum(r["generated_tokens"] for r in rows) == summary["generated_tokens"] > 0
    assert all("kv_blocks_used" not in r and "in_flight" not in r for r in rows)  # moment-only fields
    run_json = orjson.loads((out / "run.json").read_bytes())
    assert run_json["info"]["workers"] == 2 and run_json["models"]["max_model_len"] == 1024
    pids = _replica_pids(stderr)
    assert all(_gone(pid) for pid in pids.values()), "replicas outlive the run"


@pytest.mark.slow
def test_a_killed_replica_loses_no_problem_and_writes_none_twice(tiny_dir, problems, reference, tmp_path):
    pytest.importorskip("ray")
    out = tmp_path / "out"
    err_path = tmp_path / "stderr.txt"
    with open(err_path, "wb") as err:
        proc = subprocess.Popen(_solve_cmd(problems, "-o", out, "--workers", 2, *tiny_flags(tiny_dir), *SLOW),
                                cwd=ROOT, env=ENV, stdout=subprocess.DEVNULL, stderr=err)
        try:
            pids = _replica_pids(_wait_for_line(proc, err_path, "replicas ready:"))
            wait_for_answers(proc, out, err_path, count=1)
            os.kill(pids[0], signal.SIGKILL)
            rc = proc.wait(timeout=600)
        finally:
            if proc.poll() is None:
                proc.kill()
    stderr = err_path.read_text()
    assert rc == 0, stderr
    # the replica held a problem when it died (one in flight at a time), and it went to the other
    assert re.search(rf"note: replica 0 \(pid {pids[0]} on .*\) was lost: .*; its 1 problem\(s\) in flight go "
                     r"to the 1 other replica\(s\)", stderr), stderr
    _each_id_once(out, problems)
    assert without_timing(records(out)) == reference[0]
    _same_traces(_traces(out), reference[1])
    summary = orjson.loads((out / "summary.json").read_bytes())
    assert [r["status"] for r in summary["replicas"]] == ["lost", "running"]
    assert summary["problems_answered"] == 20


@pytest.mark.slow
def test_resume_after_the_driver_is_killed_mid_run(tiny_dir, problems, reference, tmp_path):
    pytest.importorskip("ray")
    out = tmp_path / "out"
    err_path = tmp_path / "stderr.txt"
    with open(err_path, "wb") as err:
        proc = subprocess.Popen(_solve_cmd(problems, "-o", out, "--workers", 2, *tiny_flags(tiny_dir), *SLOW),
                                cwd=ROOT, env=ENV, stdout=subprocess.DEVNULL, stderr=err)
        try:
            pids = _replica_pids(_wait_for_line(proc, err_path, "replicas ready:"))
            wait_for_answers(proc, out, err_path, count=2)
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
    # Ray's processes share the driver's fate: the replicas do not run on without it
    assert all(_gone(pid) for pid in pids.values()), "replicas outlive a killed driver"
    first = records(out)
    assert 2 <= len(first) < 20
    proc = subprocess.run(_solve_cmd(problems, "-o", out, "--workers", 2, "--resume", *tiny_flags(tiny_dir), *SLOW),
                          cwd=ROOT, env=ENV, capture_output=True, timeout=900)
    stderr = proc.stderr.decode()
    assert proc.returncode == 0, stderr
    assert f"resume: keeping the {len(first)} answers" in stderr
    _each_id_once(out, problems)
    assert without_timing(records(out)) == reference[0]
    summary = orjson.loads((out / "summary.json").read_bytes())
    assert (summary["problems_total"], summary["problems_answered"]) == (20, 20)


@pytest.mark.slow
def test_ctrl_c_stops_every_replica_and_prints_the_resume_command(tiny_dir, problems, reference, tmp_path):
    pytest.importorskip("ray")
    out = tmp_path / "out"
    err_path = tmp_path / "stderr.txt"
    with open(err_path, "wb") as err:
        proc = subprocess.Popen(_solve_cmd(problems, "-o", out, "--workers", 2, *tiny_flags(tiny_dir), *SLOW),
                                cwd=ROOT, env=ENV, stdout=subprocess.DEVNULL, stderr=err)
        try:
            pids = _replica_pids(_wait_for_line(proc, err_path, "replicas ready:"))
            wait_for_answers(proc, out, err_path, count=1)
            proc.send_signal(signal.SIGINT)
            rc = proc.wait(timeout=120)
        finally:
            if proc.poll() is None:
                proc.kill()
    stderr = err_path.read_text()
    assert rc == 130, stderr
    assert "Traceback" not in stderr and "interrupted:" in stderr
    assert all(_gone(pid, timeout_s=5) for pid in pids.values()), "a replica outlived Ctrl-C"
    first = records(out)
    summary = orjson.loads((out / "summary.json").read_bytes())
    assert summary["problems_answered"] == len(first) >= 1
    argv = shlex.split(stderr.split("To go on: ", 1)[1].splitlines()[0])
    assert argv[:4] == [sys.executable, "-m", "specscale_cli", "solve"] and argv[-1] == "--resume"
    assert "--workers" in argv and argv[argv.index("--workers") + 1] == "2"
    # the hint goes on with the run; here in one process, which must give the same records
    argv[argv.index("--workers") + 1] = "1"
    res = run_solve(argv[4:])
    assert res.exit_code == 0, res.output
    _each_id_once(out, problems)
    assert without_timing(records(out)) == reference[0]
