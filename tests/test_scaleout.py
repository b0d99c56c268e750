"""`solve --workers K`: replicas as Ray actors, the driver process the only reader and writer.

The Ray runs are real: a local Ray cluster, two replica processes, the tiny random model, each
`solve` in a subprocess (so a killed driver, Ctrl-C and the replicas' processes are real too).
Every run is compared with one in-process run of the same problems: the records must be the same
apart from ``time_s`` and line order, every id exactly once.
"""

from __future__ import annotations

import copy
import io
import os
import re
import shlex
import signal
import subprocess
import sys
import time

import orjson
import pytest
from rich.console import Console

from solve_helpers import GSM8K, ROOT, records, run_solve, tiny_flags, wait_for_answers, without_timing
from test_dashboard import SUMMARY_KEYS

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


# ------------------------------------------------------------------ the parts, without Ray


def test_replica_exchange_hands_back_every_record_once_and_counts_its_room(tiny_dir):
    """The replica class in this process (no actor): the pull protocol and its room accounting."""
    from core.bench.scale_bench import run_in_process
    from core.distributed.replica import Replica
    from core.io.problems import Problem, read_problems
    from core.search.config import SearchConfig
    from core.settings import ModelSettings
    from core.solver import load_models

    settings = ModelSettings(generator=str(tiny_dir), prm=str(tiny_dir), gen_kv_bytes=50 << 20,
                             prm_kv_bytes=50 << 20, max_model_len=1024)
    cfg = SearchConfig(beam_size=4, beam_width=2, max_steps=2, max_step_tokens=32, step_delimiter="e")
    problems = [p for p in read_problems(GSM8K) if isinstance(p, Problem)][:5]
    # a statement far longer than the context: refused in the replica, an error record comes back
    problems.append(Problem("too-long", "seven " * 2000, "7", 99))
    rep = Replica(0, settings, cfg, "non-spec", max_concurrent=2, traces=True, threads=None, source="in.jsonl")
    info = rep.start()
    assert info["pid"] == os.getpid() and info["max_model_len"] == 1024 and info["stats"]["problems_answered"] == 0
    answers, errors, left, rooms = [], [], list(problems), []
    reply = rep.exchange([], more=True, wait_s=30)
    while len(answers) + len(errors) < len(problems):
        rooms.append(reply["room"])
        give, left = left[:reply["room"]], left[reply["room"]:]
        reply = rep.exchange(give, more=bool(left), wait_s=30)
        assert reply["failure"] is None
        answers += reply["answers"]
        errors += reply["errors"]
    assert rooms[0] == 2 and all(0 <= r <= 2 for r in rooms)
    assert rep.exchange([], more=False, wait_s=0)["room"] == 2  # everything returned: all room again
    assert [e["id"] for e in errors] == ["too-long"] and "does not fit the model context" in errors[0]["error"]["message"]
    assert errors[0]["error"]["where"].startswith("in.jsonl:99: field 'problem': ")
    assert sorted(r["id"] for r, _ in answers) == sorted(p.id for p in problems[:5])  # each once
    assert all(trace["id"] == record["id"] and trace["nodes"] for record, trace in answers)
    # the records a one-process run writes for the same problems
    want = run_in_process(load_models(settings), settings, cfg, "non-spec", problems[:5], max_concurrent=5)
    strip = lambda recs: sorted(({k: v for k, v in r.items() if k != "time_s"} for r in recs), key=lambda r: r["id"])
    assert strip([r for r, _ in answers]) == strip(want["records"])
    stats = rep.fresh_stats()
    assert (stats["problems_answered"], stats["errors"]) == (5, 1)
    assert stats["generated_tokens"] == want["generated_tokens"]
    rep.close()


def test_record_differences_name_each_field_that_differs():
    from core.bench.scale_bench import record_differences

    rec = {"id": "a", "pred": "4", "time_s": 1.0, "completions": [{"text": "x", "path_score": 0.5, "step_scores": [0.5]}]}
    other = {**rec, "time_s": 9.0, "completions": [{"text": "x", "path_score": 0.500001, "step_scores": [0.5]}]}
    assert record_differences([rec], [other]) == {"completions.path_score": 1}
    assert record_differences([rec], [{**other, "pred": "5"}]) == {"completions.path_score": 1, "pred": 1}
    assert record_differences([rec], [{**rec, "time_s": 2.0}]) == {}  # timing is not a difference
    assert record_differences([rec], [{**rec, "id": "b"}]) == {"id": 2}


def test_replica_resources_split_cores_and_need_a_gpu_each():
    from core.distributed.pool import replica_resources

    assert replica_resources(2, "cpu", 2, 2, 0) == {"num_cpus": 1.0, "num_gpus": 0, "threads": 1}
    assert replica_resources(1, "cpu", 16, 16, 0)["threads"] == 16
    three = replica_resources(3, "cpu", 2, 2, 0)  # more replicas than cores: fractions that all fit
    assert three["threads"] == 1 and 3 * three["num_cpus"] <= 2
    assert replica_resources(4, "cpu", 64, 16, 0)["num_cpus"] == 16  # no more than one node has
    assert replica_resources(8, "cuda", 64, 32, 8) == {"num_cpus": 1.0, "num_gpus": 1, "threads": None}
    with pytest.raises(ValueError, match=r"--workers 4 on --device cuda needs 4 GPUs, one per replica; the Ray "
                                         r"cluster has 2"):
        replica_resources(4, "cuda", 64, 32, 2)


def _snap(**kw):
    base = dict(problems_total=None, problems_answered=0, errors=0, graded=0, correct=0, accuracy=None, wall_s=5.0,
                eta_s=None, generated_tokens=0, tokens_per_s=0.0, tokens_per_s_now=None, engine_steps=0,
                preemptions=0, running_sequences=0, kv_blocks_used=0, kv_blocks_total=100, kv_blocks_peak=0,
                prm_kv_blocks_used=0, prm_kv_blocks_total=50, prm_kv_blocks_peak=0, prm_calls=0, prm_tasks=0,
                prm_input_tokens=0, prm_computed_tokens=0, prm_mean_batch_tasks=None, prm_mean_batch_tokens=None,
                prm_mean_batch_computed_tokens=None, flushes_by_trigger={}, pruned_by_rule={}, generation_s=0.0,
                verification_s=0.0, peak_rss_bytes=1000)
    return {**base, **kw}


def test_replica_figures_add_up_to_the_run():
    from core.distributed.figures import merge_snapshots, replica_row
    from core.metrics import final_summary
    from specscale_cli.dashboard import log_line, render_panel, summary_table

    a = _snap(problems_answered=3, generated_tokens=300, engine_steps=10, kv_blocks_used=7, kv_blocks_peak=40,
              prm_calls=2, prm_tasks=8, prm_input_tokens=800, prm_computed_tokens=200, tokens_per_s=60.0,
              flushes_by_trigger={"eager": 2}, pruned_by_rule={"top-k": 4}, generation_s=2.0, peak_rss_bytes=5000)
    b = _snap(problems_answered=1, generated_tokens=100, engine_steps=4, kv_blocks_used=1, kv_blocks_peak=9,
              prm_calls=2, prm_tasks=4, prm_input_tokens=200, prm_computed_tokens=100, tokens_per_s=20.0,
              flushes_by_trigger={"eager": 1, "idle": 1}, pruned_by_rule={"ep": 1}, generation_s=1.0,
              peak_rss_bytes=7000)
    rows = [replica_row({"replica": 0, "pid": 11, "node": "n1", "device": "cpu", "threads": 1, "status": "running"},
                        a, 2),
            replica_row({"replica": 1, "pid": 12, "node": "n2", "device": "cpu", "threads": 1, "status": "lost"},
                        b, 0)]
    counts = {"done": 5, "errors": 1, "graded": 4, "correct": 2, "correct_best": 2}
    snap = merge_snapshots([a, b], rows, counts, total=10, wall_s=4.0, tokens_per_s_now=90.0,
                           problem_times=[2.0, 2.0, 2.0, 2.0], in_flight_ages=[1.0, 1.0], slots=4,
                           driver_peak_rss=6000)
    # the driver's counts (a resumed run's kept records included), not the replicas' own
    assert (snap["problems_answered"], snap["errors"], snap["accuracy"], snap["accuracy_best"]) == (5, 1, 0.5, 0.5)
    assert (snap["generated_tokens"], snap["engine_steps"], snap["kv_blocks_used"]) == (400, 14, 8)
    assert (snap["kv_blocks_total"], snap["kv_blocks_peak"], snap["prm_calls"]) == (200, 49, 4)
    assert snap["tokens_per_s"] == 100.0 and snap["tokens_per_s_now"] == 90.0 and snap["wall_s"] == 4.0
    assert snap["prm_mean_batch_tasks"] == 3.0 and snap["prm_mean_batch_tokens"] == 250.0  # from the sums
    assert snap["flushes_by_trigger"] == {"eager": 3, "idle": 1} and snap["pruned_by_rule"] == {"ep": 1, "top-k": 4}
    assert snap["peak_rss_bytes"] == 7000 and snap["generation_s"] == 3.0
    # 4 answered in 2 s each, 2 in flight for 1 s: mean (8 + 2) / 4 = 2.5 s; 2 waiting on 4 slots
    assert snap["eta_s"] == 2.5
    assert [r["in_flight"] for r in snap["replicas"]] == [2, 0] and snap["replicas"][1]["status"] == "lost"
    summary = final_summary(snap, {"policy": "non-spec"})
    assert summary["replicas"][0] == {"replica": 0, "pid": 11, "node": "n1", "device": "cpu", "threads": 1,
                                      "status": "running", "problems_answered": 3, "errors": 0,
                                      "generated_tokens": 300, "tokens_per_s": 60.0, "wall_s": 5.0,
                                      "generation_s": 2.0, "verification_s": 0.0, "prm_calls": 2, "engine_steps": 10,
                                      "preemptions": 0, "kv_blocks_total": 100, "kv_blocks_peak": 40,
                                      "prm_kv_blocks_total": 50, "prm_kv_blocks_peak": 0, "peak_rss_bytes": 5000}
    # the dashboard: one line per replica on the panel and in log lines, and in the summary table
    full = {**_snap(), **snap, "waiting_sequences": 0, "logical_candidates": 0, "queue_tasks": 0, "queue_tokens": 0,
            "pruned_ep": 0, "cd_saved_tokens": 0, "prm_preemptions": 0, "prm_queued_s": 0.0}
    console = Console(file=io.StringIO(), width=300)
    console.print(render_panel(full, width=200))
    panel = console.file.getvalue()
    assert "replica 0" in panel and "3 answered · 2 in flight · 60.0 tok/s · KV 7/100 · PRM KV 0/50 · pid 11 on n1" \
        in panel
    assert "LOST · 1 answered" in panel
    assert "| replica 1: LOST · 1 answered · 0 in flight" in log_line(full)
    console = Console(file=io.StringIO(), width=300)
    console.print(summary_table({**full, "cancelled_by_rule": {}, "prm_mean_batch_computed_tokens": 1.0}))
    assert "lost; 1 answered, 100 tokens (20.0 tok/s), peak KV 9/100, pid 12 on n2" in console.file.getvalue()


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


def test_an_address_where_no_cluster_answers_is_a_usage_error(tiny_dir, tmp_path):
    pytest.importorskip("ray")
    import socket

    with socket.socket() as sock:  # a port nothing listens on: bound, never listening
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        out = tmp_path / "out"
        res = run_solve([str(GSM8K), "-o", str(out), "--workers", "2", "--ray-address", f"127.0.0.1:{port}"],
                        tiny_dir)
    assert res.exit_code == 2, res.output
    assert f"Error: cannot start or join the Ray cluster at 127.0.0.1:{port}: nothing answers at 127.0.0.1:{port}" \
        in res.output
    assert not out.exists()  # a run that never started leaves no folder


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
    # the one-process run's figures, and one row per replica (each with its own torch threads)
    assert set(summary) == (SUMMARY_KEYS - {"torch_threads"}) | {"replicas"}
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
    pids, rc, stderr = _two_workers_stopped(problems, out, tiny_dir, tmp_path, after_answers=1,
                                            stop=lambda proc, pids: os.kill(pids[0], signal.SIGKILL), wait_s=600)
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


def _two_workers_stopped(problems, out, tiny_dir, tmp_path, after_answers: int, stop, wait_s: float = 120):
    """Start a 2-worker solve into ``out``; once ``after_answers`` answers are written call
    ``stop(proc, replica pids by index)`` and wait up to ``wait_s`` seconds for the run to end.

    Returns (replica pids by index, exit status, stderr text).
    """
    err_path = tmp_path / "stderr.txt"
    with open(err_path, "wb") as err:
        proc = subprocess.Popen(_solve_cmd(problems, "-o", out, "--workers", 2, *tiny_flags(tiny_dir), *SLOW),
                                cwd=ROOT, env=ENV, stdout=subprocess.DEVNULL, stderr=err)
        try:
            pids = _replica_pids(_wait_for_line(proc, err_path, "replicas ready:"))
            wait_for_answers(proc, out, err_path, count=after_answers)
            stop(proc, pids)
            rc = proc.wait(timeout=wait_s)
        finally:
            if proc.poll() is None:
                proc.kill()
    return pids, rc, err_path.read_text()


@pytest.mark.slow
def test_resume_after_the_driver_is_killed_mid_run(tiny_dir, problems, reference, tmp_path):
    pytest.importorskip("ray")
    out = tmp_path / "out"
    pids, _, _ = _two_workers_stopped(problems, out, tiny_dir, tmp_path, after_answers=2,
                                   stop=lambda proc, pids: proc.send_signal(signal.SIGKILL))
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
    pids, rc, stderr = _two_workers_stopped(problems, out, tiny_dir, tmp_path, after_answers=1,
                                            stop=lambda proc, pids: proc.send_signal(signal.SIGINT))
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


# ------------------------------------------------------------------ an existing cluster (--ray-address)

_CLUSTER = """
import os, sys
os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
import ray
ray.init(num_cpus=2, object_store_memory=100 << 20, include_dashboard=False, log_to_driver=False,
         _node_ip_address="127.0.0.1")
print(ray.get_runtime_context().gcs_address, flush=True)
sys.stdin.read()  # the cluster lives until the test closes this pipe
ray.shutdown()
"""


@pytest.fixture(scope="module")
def cluster():
    """The address of a Ray cluster started for this module by a process of its own (not by `solve`)."""
    pytest.importorskip("ray")
    proc = subprocess.Popen([sys.executable, "-c", _CLUSTER], cwd=ROOT, env=ENV, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        address = proc.stdout.readline().decode().strip()
        assert address, "the cluster did not start"
        yield address, proc
    finally:
        proc.stdin.close()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()


# Ray (2.5x) gives a new cluster a token (~/.ray/auth_token) and sends it to an address given by name
# only when asked to
TOKEN_ENV = {**ENV, "RAY_AUTH_MODE": "token"}


@pytest.mark.slow
def test_ray_address_joins_a_running_cluster(tiny_dir, problems, reference, cluster, tmp_path):
    address, holder = cluster
    out = tmp_path / "out"
    proc = subprocess.run(_solve_cmd(problems, "-o", out, "--workers", 2, "--ray-address", address,
                                     *tiny_flags(tiny_dir), *SLOW), cwd=ROOT, env=TOKEN_ENV, capture_output=True,
                          timeout=900)
    stderr = proc.stderr.decode()
    assert proc.returncode == 0, stderr
    _each_id_once(out, problems)
    assert without_timing(records(out)) == reference[0]
    assert orjson.loads((out / "run.json").read_bytes())["info"]["ray_address"] == address
    # the replicas end with the run; the cluster, not this run's, goes on
    assert all(_gone(pid) for pid in _replica_pids(stderr).values())
    assert holder.poll() is None


@pytest.mark.slow
def test_bench_scale_reports_each_worker_count_on_the_same_problems(tiny_dir, cluster, tmp_path):
    address, _ = cluster
    proc = subprocess.run([sys.executable, "-m", "specscale_cli", "bench", "scale", "--workers", "1,2", "--json",
                           "--limit", "6", "--ray-address", address, "-o", str(tmp_path / "bench"),
                           *tiny_flags(tiny_dir)], cwd=ROOT, env=TOKEN_ENV, capture_output=True, timeout=900)
    assert proc.returncode == 0, proc.stderr.decode()
    result = orjson.loads(proc.stdout.decode().strip().splitlines()[-1])
    assert result == orjson.loads((tmp_path / "bench" / "results.json").read_bytes())
    one, two = result["runs"]
    assert (one["workers"], two["workers"]) == (1, 2) and one["problems"] == two["problems"] == 6
    assert one["same_records_as_one_worker"] is two["same_records_as_one_worker"] is True
    assert two["same_answers_as_one_worker"] is True and two["differences_from_one_worker"] == {}
    assert one["generated_tokens"] == two["generated_tokens"] > 0  # the same search, so the same tokens
    assert one["vs_one_worker"] == 1.0
    assert two["vs_one_worker"] == pytest.approx(two["tokens_per_s"] / one["tokens_per_s"], rel=1e-2)
    assert two["problems_per_s"] == pytest.approx(6 / two["wall_s"], rel=1e-2)
    assert two["threads_per_worker"] == 1 and one["threads_per_worker"] >= 1
