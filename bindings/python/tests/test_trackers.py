"""Trackers: Accelerator.init_trackers / log / end_training (accel_tracker_options_init,
accel_init_trackers, accel_log, accel_end_training), read back from the files they write."""

import csv
import glob
import json
import math
import os
import struct
import time

import numpy as np
import pytest

import accel


def _steps():
    """(step, values) as logged: dict order kept, a NaN, a name CSV must quote, a non-ASCII name."""
    out = [(s, {"loss": 1.0 / (s + 1), "lr": 0.001 * s}) for s in range(3)]
    out.append((3, {"accuracy": math.nan, 'name, with "quotes"': -2.5, "genauigkeit/ü": 0.1}))
    return out


def _jsonl(d):
    with open(os.path.join(d, "metrics.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def _csv(d):
    with open(os.path.join(d, "metrics.csv"), newline="", encoding="utf-8") as f:
        return list(csv.reader(f))


def _same(got, want):
    if math.isnan(want):
        return got is None or (isinstance(got, float) and math.isnan(got))
    return got == want


def test_log_all_writers_reads_back(acc, tmp_path):
    log_dir = tmp_path / "runs" / "exp1"  # created where missing
    before = time.time()
    acc.init_trackers(log_dir, writers="all")
    for step, values in _steps():
        acc.log(values, step=step)
    acc.end_training()
    after = time.time()

    lines = _jsonl(log_dir)
    assert len(lines) == len(_steps())
    for line, (step, values) in zip(lines, _steps()):
        assert set(line) == {"step", "wall_time", "values"}
        assert line["step"] == step
        assert before - 1 <= line["wall_time"] <= after + 1
        assert list(line["values"]) == list(values)  # the dict's order
        for name, v in values.items():
            assert _same(line["values"][name], v), (step, name, line["values"][name])
    assert lines[3]["values"]["accuracy"] is None  # not finite: null
    times = [line["wall_time"] for line in lines]
    assert times == sorted(times)

    rows = _csv(log_dir)
    assert rows[0] == ["wall_time", "step", "name", "value"]
    want = [(s, n, v) for s, values in _steps() for n, v in values.items()]
    assert len(rows) - 1 == len(want)
    for row, (s, n, v) in zip(rows[1:], want):
        assert int(row[1]) == s and row[2] == n
        assert _same(float(row[3]), v), row
        assert before - 1 <= float(row[0]) <= after + 1

    events = glob.glob(str(log_dir / "events.out.tfevents.*"))
    assert len(events) == 1 and os.path.getsize(events[0]) > 0
    assert sorted(os.listdir(log_dir)) == sorted(["metrics.jsonl", "metrics.csv", os.path.basename(events[0])])


def test_tensorboard_reads_the_event_file(acc, tmp_path):
    ea = pytest.importorskip("tensorboard.backend.event_processing.event_accumulator",
                             reason="tensorboard is not installed (pip install './bindings/python[test]'): "
                                    "it reads the event file back")
    acc.init_trackers(tmp_path, writers=["tensorboard"])
    for step, values in _steps():
        acc.log(values, step)
    acc.end_training()
    assert os.listdir(tmp_path)[0].startswith("events.out.tfevents.") and len(os.listdir(tmp_path)) == 1
    reader = ea.EventAccumulator(str(tmp_path), size_guidance={ea.SCALARS: 0})
    reader.Reload()
    names = {n for _, values in _steps() for n in values}
    assert sorted(reader.Tags()["scalars"]) == sorted(names)
    for name in names:
        want = [(s, v) for s, values in _steps() for n, v in values.items() if n == name]
        got = [(e.step, e.value) for e in reader.Scalars(name)]
        assert len(got) == len(want)
        for (s, v), (ws, wv) in zip(got, want):
            f32 = struct.unpack("f", struct.pack("f", wv))[0]  # TensorBoard keeps a float
            assert s == ws and _same(v, f32), (name, s, v, wv)


def test_dict_order_numbers_and_tensors(acc, tmp_path):
    acc.init_trackers(tmp_path, writers="jsonl,csv")
    acc.log({"b": 1, "a": np.float32(0.5), "t": accel.tensor([2.0]), "inf": float("inf")}, 7)
    acc.end_training()
    line, = _jsonl(tmp_path)
    assert line["step"] == 7
    assert list(line["values"].items()) == [("b", 1.0), ("a", 0.5), ("t", 2.0), ("inf", None)]
    rows = _csv(tmp_path)[1:]
    assert [(r[1], r[2]) for r in rows] == [("7", "b"), ("7", "a"), ("7", "t"), ("7", "inf")]
    assert float(rows[3][3]) == math.inf
    assert sorted(os.listdir(tmp_path)) == ["metrics.csv", "metrics.jsonl"]


def test_writers_flags_and_environment(acc, tmp_path, monkeypatch):
    acc.init_trackers(tmp_path / "flags", writers=accel.LogWriter.CSV | accel.LogWriter.TENSORBOARD)
    acc.log({"x": 1.0}, 0)
    acc.end_training()
    files = sorted(os.listdir(tmp_path / "flags"))
    assert len(files) == 2 and files[0].startswith("events.out.tfevents.") and files[1] == "metrics.csv"

    monkeypatch.delenv("ACCEL_LOG_WITH", raising=False)
    acc.init_trackers(tmp_path / "default")  # writers=None: jsonl
    acc.log({"x": 1.0}, 0)
    acc.end_training()
    assert os.listdir(tmp_path / "default") == ["metrics.jsonl"]

    monkeypatch.setenv("ACCEL_LOG_WITH", "csv")
    acc.init_trackers(tmp_path / "env")  # writers=None: the environment's
    acc.log({"x": 1.0}, 0)
    acc.end_training()
    assert os.listdir(tmp_path / "env") == ["metrics.csv"]

    acc.init_trackers(tmp_path / "explicit", writers="jsonl")  # an explicit choice wins
    acc.log({"x": 1.0}, 0)
    acc.end_training()
    assert os.listdir(tmp_path / "explicit") == ["metrics.jsonl"]

    monkeypatch.setenv("ACCEL_LOG_WITH", "bogus")
    with pytest.raises(accel.InvalidArgumentError, match="bogus"):
        acc.init_trackers(tmp_path / "bad")


def test_log_before_init_and_after_end_is_invalid_state(acc, tmp_path):
    with pytest.raises(accel.InvalidStateError) as info:
        acc.log({"loss": 1.0}, 0)
    assert info.value.status == accel.Status.INVALID_STATE
    assert "accel_log" in info.value.message
    acc.end_training()  # none open: nothing to do
    acc.init_trackers(tmp_path, writers="jsonl")
    acc.log({"loss": 1.0}, 0)
    acc.end_training()
    acc.end_training()
    with pytest.raises(accel.InvalidStateError):
        acc.log({"loss": 2.0}, 1)
    assert len(_jsonl(tmp_path)) == 1


def test_repeated_init_is_invalid_state_and_reopen_appends(acc, tmp_path):
    acc.init_trackers(tmp_path, writers="all")
    acc.log({"loss": 1.0}, 0)
    with pytest.raises(accel.InvalidStateError) as info:
        acc.init_trackers(tmp_path, writers="all")
    assert info.value.status == accel.Status.INVALID_STATE
    acc.log({"loss": 0.5}, 1)  # the first ones stay open
    acc.end_training()
    acc.init_trackers(tmp_path, writers="all")  # open again: jsonl and csv appended, a new event file
    acc.log({"loss": 0.25}, 2)
    acc.end_training()
    assert [(line["step"], line["values"]["loss"]) for line in _jsonl(tmp_path)] == [(0, 1.0), (1, 0.5), (2, 0.25)]
    rows = _csv(tmp_path)
    assert rows[0] == ["wall_time", "step", "name", "value"]
    assert [(r[1], float(r[3])) for r in rows[1:] if r != rows[0]] == [("0", 1.0), ("1", 0.5), ("2", 0.25)]
    assert len(glob.glob(str(tmp_path / "events.out.tfevents.*"))) == 2


@pytest.mark.parametrize("writers", ["wandb", "jsonl,nope", ["csv", "mlflow"], [], "", True, -1, 1.5, [None]])
def test_bad_writers_are_refused_in_python(acc, tmp_path, writers):
    with pytest.raises(accel.InvalidArgumentError) as info:
        acc.init_trackers(tmp_path, writers=writers)
    assert isinstance(info.value, ValueError) and "writers" in info.value.message
    with pytest.raises(accel.InvalidStateError):  # nothing was opened
        acc.log({"x": 1.0}, 0)
    assert os.listdir(tmp_path) == []


def test_bad_arguments_are_refused_by_the_library(acc, tmp_path):
    with pytest.raises(accel.InvalidArgumentError, match="accel_init_trackers"):
        acc.init_trackers(tmp_path, writers=8)  # a bit outside the three
    (tmp_path / "file").write_text("x")
    with pytest.raises(accel.InvalidArgumentError, match="accel_init_trackers"):
        acc.init_trackers(tmp_path / "file")  # not a directory
    with pytest.raises(accel.InvalidArgumentError):
        acc.init_trackers("")
    with pytest.raises(accel.InvalidArgumentError, match="NUL"):
        acc.init_trackers(str(tmp_path) + "\0x")
    acc.init_trackers(tmp_path / "ok", writers="jsonl")
    for values, step in [({"x": 1.0}, -1), ({}, 0), ({"": 1.0}, 0)]:
        with pytest.raises(accel.InvalidArgumentError, match="accel_log"):
            acc.log(values, step)
    for values in [{"x": "abc"}, {"x": None}, {1: 2.0}, {"a\0b": 1.0}]:
        with pytest.raises(accel.InvalidArgumentError, match="log"):
            acc.log(values, 0)
    acc.log({"x": 3.0}, 0)  # still open and usable
    acc.end_training()
    line, = _jsonl(tmp_path / "ok")
    assert line["values"] == {"x": 3.0}


def test_close_flushes_and_closed_is_refused(tmp_path):
    acc = accel.Accelerator(cpu=True, num_threads=1)
    acc.init_trackers(tmp_path, writers="jsonl")
    acc.log({"loss": 1.5}, 4)
    acc.close()  # accel_destroy closes the trackers
    assert _jsonl(tmp_path)[0]["values"] == {"loss": 1.5}
    for call in (lambda: acc.init_trackers(tmp_path), lambda: acc.log({"x": 1.0}, 0), acc.end_training):
        with pytest.raises(accel.ClosedError):
            call()


def test_main_process_or_every_process_on_two_ranks(tmp_path):
    def fn(acc, all_processes, d):
        acc.init_trackers(d, writers="jsonl,csv", all_processes=all_processes)
        acc.log({"rank": float(acc.process_index)}, 1)
        with pytest.raises(accel.InvalidArgumentError):  # every process checks its arguments
            acc.log({"rank": 0.0}, -1)
        acc.end_training()
        return acc.process_index

    main_only = tmp_path / "main"
    accel.sim.run(lambda acc: fn(acc, False, main_only), world_size=2)
    assert sorted(os.listdir(main_only)) == ["metrics.csv", "metrics.jsonl"]
    assert [line["values"] for line in _jsonl(main_only)] == [{"rank": 0.0}]

    every = tmp_path / "every"
    accel.sim.run(lambda acc: fn(acc, True, every), world_size=2)
    assert sorted(os.listdir(every)) == ["process-0", "process-1"]
    for r in range(2):
        assert [line["values"] for line in _jsonl(every / f"process-{r}")] == [{"rank": float(r)}]
        assert [(row[2], float(row[3])) for row in _csv(every / f"process-{r}")[1:]] == [("rank", float(r))]
