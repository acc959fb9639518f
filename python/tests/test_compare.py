"""The harness from Python: parity with `lachesis compare`, callables as policies, DataFrames."""

import subprocess

import numpy as np
import pandas as pd
import pytest

import lachesis

POLICIES = ["fifo/best-fit", "sjf/best-fit", "tiresias/best-fit/las-preempt"]
UNITS = dict(windows=3, window_jobs=60, loads=[0.8, 1.2], seeds=1, resamples=300)
RUNS_CSV = [
    "avg_jct_s", "min_avg_jct_s", "p50_jct_s", "p95_jct_s", "p99_jct_s", "avg_wait_s",
    "avg_bsld", "makespan_s", "gpu_alloc_rate", "frag_gpu_rate", "energy_kwh",
    "jain_fairness", "preemption_waste_gpu_h", "jobs", "finished",
]


def test_compare_matches_the_cli_on_the_same_units(trace, lachesis_bin, tmp_path):
    out = tmp_path / "cli"
    subprocess.run(
        [
            lachesis_bin, "compare", "--trace", trace, "--cluster", "3x8:V100",
            "--policies", ",".join(POLICIES), "--windows", "3", "--window-jobs", "60",
            "--load", "0.8,1.2", "--resamples", "300", "--threads", "2", "-o", str(out),
        ],
        check=True,
        capture_output=True,
    )
    cli = pd.read_csv(out / "runs.csv")
    py = lachesis.compare(POLICIES, trace, "3x8:V100", threads=2, **UNITS)
    assert list(py.runs["policy"]) == list(cli["policy"])
    assert list(py.runs["unit"]) == list(cli["unit"])
    for column in RUNS_CSV:
        np.testing.assert_allclose(py.runs[column], cli[column], rtol=1e-12, err_msg=column)
    jct = py.paired[(py.paired.metric == "avg_jct_s") & ~py.paired.baseline]
    assert set(jct.policy) == set(POLICIES[1:])
    assert (jct.ci_low <= jct.mean_diff).all() and (jct.mean_diff <= jct.ci_high).all()
    cli_table = (out / "report.md").read_text()
    assert py.verdict and py.verdict in cli_table


def test_a_python_callable_is_a_policy_on_identical_units(trace):
    calls = []

    def shortest_first(obs, mask):
        calls.append(1)
        # Prefer candidates with the least predicted remaining time; wait last.
        col = lachesis.CANDIDATE_FEATURES.index("predicted_remaining_log_min")
        scores = -obs["candidates"][:, col].astype(np.float64)
        scores[lachesis.WAIT_ACTION] = -1e9
        return scores

    c = lachesis.compare(["fifo/best-fit", shortest_first], trace, "3x8:V100", **UNITS)
    assert calls, "the callable was asked"
    assert list(c.runs.policy.unique()) == ["fifo/best-fit", "shortest_first"]
    assert (c.runs.finished == c.runs.jobs).all()
    units = c.runs.groupby("policy")[["window", "load", "seed"]].apply(
        lambda g: [tuple(r) for r in g.values]
    )
    assert units["fifo/best-fit"] == units["shortest_first"]


def test_simulate_runs_a_callable_to_the_end(trace):
    """Scores falling with the row index: the first candidate always, wait last."""
    r = lachesis.simulate(("first", lambda obs, mask: np.arange(64.0)[::-1]), trace, "3x8:V100")
    assert r.summary["finished"] == r.summary["jobs"] > 0
    assert {"job_id", "jct_s", "wait_s"} <= set(r.jobs.columns)


def test_an_exception_in_a_callable_is_raised_as_itself(trace):
    class Boom(Exception):
        pass

    def broken(obs, mask):
        raise Boom("scorer failed")

    with pytest.raises(Boom, match="scorer failed"):
        lachesis.compare(["fifo/best-fit", broken], trace, "3x8:V100", **UNITS)


def test_bad_inputs_raise_with_the_field(trace, tmp_path):
    with pytest.raises(ValueError, match="nope/best-fit"):
        lachesis.compare(["nope/best-fit"], trace, "3x8:V100", **UNITS)
    with pytest.raises(ValueError, match="baseline"):
        lachesis.compare(POLICIES, trace, "3x8:V100", baseline="x", **UNITS)
    with pytest.raises(FileNotFoundError, match="missing.csv"):
        lachesis.simulate("fifo/best-fit", str(tmp_path / "missing.csv"), "3x8:V100")
    with pytest.raises(ValueError, match="scorer"):
        lachesis.simulate(("bad", lambda o, m: [1.0, 2.0]), trace, "3x8:V100")


def test_trace_readers_return_dataframes(trace):
    df = lachesis.read_trace(trace)
    assert df.attrs["format"] == "itp"
    assert len(df) == 260
    assert {"job_id", "submit_s", "duration_s"} <= set(df.columns)
    assert (lachesis.policies().part == "ordering").any()
