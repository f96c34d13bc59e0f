import numpy as np
import pytest

import accel
from accel._ffi import ffi


def test_process_utilities_on_four_ranks():
    def fn(acc):
        r = acc.process_index
        out = {
            "rank": (r, acc.num_processes, acc.local_process_index, acc.is_main_process, acc.is_local_main_process),
            "sum": acc.reduce(np.array([r + 1.0, 1.0], np.float32)).numpy().tolist(),
            "mean": acc.reduce(np.array([r * 2.0], np.float64), "mean").item(),
            "max": acc.reduce(np.array([r], np.int64), "max").item(),
            "bcast": acc.broadcast(np.array([r * 10, r], np.int32), from_process=2).numpy().tolist(),
            "gather": acc.gather(np.array([[r, -r]], np.int64)).numpy().tolist(),
            "pad": acc.pad_across_processes(np.full(r + 1, float(r), np.float32), dim=0, pad_index=-1).numpy().tolist(),
            "padfirst": acc.pad_across_processes(np.full((1, r + 1), 1, np.int64), dim=-1, pad_first=True).numpy().tolist(),
        }
        acc.wait_for_everyone()
        return out

    with accel.sim.run(fn, world_size=4, seed=1) as report:
        assert report.world_size == 4 and len(report.results) == 4
        assert report.predicted_seconds > 0
        assert [o.status for o in report.ranks] == [accel.Status.OK] * 4
        for r, res in enumerate(report.results):
            assert res["rank"] == (r, 4, r, r == 0, r == 0)
            assert res["sum"] == [10.0, 4.0]
            assert res["mean"] == 3.0
            assert res["max"] == 3
            assert res["bcast"] == [20, 2]
            assert res["gather"] == [[0, 0], [1, -1], [2, -2], [3, -3]]
            assert res["pad"] == [float(r)] * (r + 1) + [-1.0] * (3 - r)
            assert res["padfirst"] == [[0] * (3 - r) + [1] * (r + 1)]
    with pytest.raises(accel.ClosedError):
        report.world_size


def test_gather_for_metrics_drops_duplicates():
    x = np.arange(10, dtype=np.float32).reshape(10, 1)

    def fn(acc):
        loader = accel.DataLoader(acc, x, batch_size=4)  # 10 samples on 2 ranks: the last round wraps
        acc.prepare(loader)
        seen = []
        for batch in loader:
            seen.append(acc.gather_for_metrics(batch).numpy()[:, 0].tolist())
        return seen

    report = accel.sim.run(fn, world_size=2)
    everything = sorted(v for rnd in report.results[0] for v in rnd)
    assert everything == list(range(10))
    assert report.results[0] == report.results[1]


def test_ddp_training_keeps_ranks_in_sync():
    rng = np.random.default_rng(0)
    x = rng.random((64, 8), dtype=np.float32)
    y = rng.integers(0, 3, 64)

    def fn(acc):
        model = accel.Model.mlp(acc, [8, 16, 3])
        opt = accel.AdamW(model, lr=1e-2)
        loader = accel.DataLoader(acc, x, y, batch_size=8, shuffle=True, seed=3)
        model, opt, loader = acc.prepare(model, opt, loader)
        for xb, yb in loader:
            acc.backward(accel.cross_entropy(model(xb), yb))
            opt.step()
        return len(loader), model.parameters()[0]

    report = accel.sim.run(fn, world_size=2, strategy="ddp", seed=5)
    (n0, w0), (n1, w1) = report.results
    assert n0 == n1 == 4
    np.testing.assert_array_equal(w0, w1)


def test_rank_function_that_raises_names_the_rank():
    kept = []

    def fn(acc):
        kept.append(acc)
        if acc.process_index == 1:
            raise KeyError("no such thing")
        acc.wait_for_everyone()  # rank 0 waits for rank 1, which died

    with pytest.raises(KeyError) as info:
        accel.sim.run(fn, world_size=2, timeout=10)
    err = info.value
    assert "sim rank 1" in str(err) and "no such thing" in str(err)
    assert isinstance(err.__cause__, KeyError) and err.rank == 1
    ranks = err.report.ranks
    assert ranks[1].status == accel.Status.INTERNAL
    assert ranks[0].status == accel.Status.COMMUNICATION and "rank 1" in ranks[0].error
    # the rank's Accelerator is invalid once its function returned
    for acc in kept:
        with pytest.raises(accel.ClosedError, match="simulated rank"):
            acc.process_index


def test_accel_error_in_a_rank():
    def fn(acc):
        if acc.process_index == 0:
            accel.AdamW(accel.Model.mlp(acc, [2, 2]), lr=-1)

    with pytest.raises(accel.InvalidArgumentError) as info:
        accel.sim.run(fn, world_size=2)
    assert info.value.rank == 0 and "rank 0" in info.value.message and "lr" in info.value.message
    assert info.value.report.ranks[1].status == accel.Status.OK


def test_sim_options_and_memory_budget(tmp_path):
    with pytest.raises(accel.InvalidArgumentError, match="world_size"):
        accel.sim.run(lambda acc: None, world_size=0)
    with pytest.raises(accel.InvalidArgumentError, match="device_memory"):
        accel.sim.run(lambda acc: None, world_size=2, device_memory="0")

    def big(acc):
        accel.Model.mlp(acc, [1024, 1024, 1024])  # 8 MiB of weights

    with pytest.raises(accel.OutOfMemoryError) as info:
        accel.sim.run(big, world_size=2, device_memory="1MiB")
    assert isinstance(info.value, MemoryError)
    trace = tmp_path / "trace.json"
    report = accel.sim.run(lambda acc: acc.charge_compute(0.5, "work"), world_size=2, trace_path=trace)
    assert report.predicted_seconds >= 0.5 and trace.stat().st_size > 0


def test_fault_injection_kill():
    def fn(acc):
        for _ in range(3):
            acc.wait_for_everyone()

    with pytest.raises(accel.Error) as info:
        accel.sim.run(fn, world_size=2, faults="kill:1@collective:2", timeout=10)
    assert info.value.report.ranks[1].status != accel.Status.OK


def test_gather_for_metrics_on_a_loader_batch_drops_even_batches_duplicates():
    # 5 samples, batch 2, 2 ranks: 3 batches, so even_batches wraps around to give rank 1 a
    # second batch; gather_for_metrics must drop the duplicated rows: every sample exactly once.
    x = np.arange(5, dtype=np.float32).reshape(5, 1)
    y = np.arange(5, dtype=np.int64)

    def fn(acc):
        loader = acc.prepare(accel.DataLoader(acc, x, y, batch_size=2))
        rows, labels, sizes = [], [], []
        for xb, yb in loader:
            sizes.append(xb.shape[0])
            rows += acc.gather_for_metrics(xb).numpy()[:, 0].tolist()
            labels += acc.gather_for_metrics(yb).numpy().tolist()
        return sizes, rows, labels, acc.gather(np.array([len(loader)])).numpy().tolist()

    report = accel.sim.run(fn, world_size=2)
    (sizes0, rows0, labels0, lens), (sizes1, rows1, labels1, _) = report.results
    assert lens == [2, 2] and sizes0 == [2, 2] and sizes1 == [2, 2]  # full batches on both ranks
    assert sorted(rows0) == [0.0, 1.0, 2.0, 3.0, 4.0] and rows0 == rows1  # 8 rows yielded, 5 kept
    assert sorted(labels0) == [0, 1, 2, 3, 4] and labels0 == labels1


def test_accelerator_split_and_even_batches_reach_the_loaders():
    x = np.arange(5, dtype=np.float32).reshape(5, 1)

    def fn(acc):
        # even_batches=False from sim.run (split_batches given here)
        uneven = acc.prepare(accel.DataLoader(acc, x, batch_size=2, split_batches=False))
        split = acc.prepare(accel.DataLoader(acc, np.arange(8, dtype=np.float32).reshape(8, 1),
                                             batch_size=4, even_batches=True))  # split_batches=True
        return len(uneven), [b.numpy()[:, 0].tolist() for b in split]

    report = accel.sim.run(fn, world_size=2, even_batches=False, split_batches=True)
    (n0, s0), (n1, s1) = report.results
    assert (n0, n1) == (2, 1)  # 3 batches of 2: rank 1 gets fewer, no wrap-around
    assert s0 == [[0.0, 1.0], [4.0, 5.0]] and s1 == [[2.0, 3.0], [6.0, 7.0]]  # each batch of 4 split in 2


def test_iterable_loader_shards_the_stream_as_iterable_dataset_shard():
    # 5 samples, batch 2, 2 ranks, iterable=True: rounds of 4 samples, rank r taking slice r;
    # the last, partial round [4] is completed with the first round's samples: [4, 0, 1, 2].
    x = np.arange(5, dtype=np.float32).reshape(5, 1)
    y = np.arange(5, dtype=np.int64)

    def fn(acc):
        loader = acc.prepare(accel.DataLoader(acc, x, y, batch_size=2, iterable=True))
        batches = []
        for xb, yb in loader:
            assert xb.numpy()[:, 0].tolist() == yb.numpy().tolist()
            batches.append(yb.numpy().tolist())
        with pytest.raises(accel.InvalidArgumentError, match="shuffle must be 0 for an iterable loader"):
            accel.DataLoader(acc, x, y, batch_size=2, shuffle=True, iterable=True)
        return len(loader), batches

    report = accel.sim.run(fn, world_size=2)
    (n0, b0), (n1, b1) = report.results
    assert (n0, n1) == (2, 2)
    assert b0 == [[0, 1], [4, 0]] and b1 == [[2, 3], [1, 2]]


def test_another_ranks_accelerator_is_refused_without_waiting():
    kept = {}

    def fn(acc):
        kept[acc.process_index] = acc
        if acc.process_index == 1:
            with pytest.raises(accel.InvalidStateError, match="another simulated rank"):
                kept[0].reduce(np.ones(2, np.float32))  # rank 0 is blocked in the barrier below
        acc.wait_for_everyone()
        return acc.process_index

    report = accel.sim.run(fn, world_size=2, timeout=20)
    assert report.results == [0, 1]


def _train_with_offload(offload, **sim_kwargs):
    """A small MLP trained with AdamW on 2 simulated DDP ranks; each rank returns its weights
    before and after."""
    rng = np.random.default_rng(0)
    x = rng.random((64, 8), dtype=np.float32)
    y = rng.integers(0, 3, 64)

    def fn(acc):
        model = accel.Model.mlp(acc, [8, 16, 3])
        opt = accel.AdamW(model, lr=1e-2)
        loader = accel.DataLoader(acc, x, y, batch_size=8, shuffle=True, seed=3)
        model, opt, loader = acc.prepare(model, opt, loader)
        before = model.parameters()
        for xb, yb in loader:
            acc.backward(accel.cross_entropy(model(xb), yb))
            opt.step()
        return before, model.parameters()

    return accel.sim.run(fn, world_size=2, strategy="ddp", seed=5, offload=offload, **sim_kwargs)


def test_offload_optimizer_gives_the_same_weights_and_reports_the_host():
    with _train_with_offload("optimizer") as off, _train_with_offload(accel.Offload.NONE) as on:
        (before, w_off), (_, w_on) = off.results[0], on.results[0]
        assert len(w_off) == len(w_on) == 4
        for a, b, b0 in zip(w_off, w_on, before):
            assert a.dtype == b.dtype == np.float32 and a.shape == b.shape
            assert a.tobytes() == b.tobytes()  # bit for bit
            assert not np.array_equal(a, b0)   # and the steps moved them
        for o in off.ranks:
            assert o.status == accel.Status.OK
            assert o.host_peak_bytes > 0 and o.host_transfer_bytes > 0 and o.host_transfer_seconds > 0, o
            assert isinstance(o.host_transfer_seconds, float) and o.peak_bytes > 0
        for o in on.ranks:
            assert (o.host_peak_bytes, o.host_transfer_bytes, o.host_transfer_seconds) == (0, 0, 0.0), o
            assert o.peak_bytes > 0
        # the transfers are charged to the predicted time
        assert off.predicted_seconds > on.predicted_seconds
        assert off.rank(1) == off.ranks[1] and off.rank(0).host_peak_bytes == off.ranks[0].host_peak_bytes


def test_offload_host_memory_budget():
    with pytest.raises(accel.OutOfMemoryError) as info:
        _train_with_offload("optimizer", host_memory="1KiB")
    err = info.value
    assert "host" in err.message, err.message
    assert err.report.ranks[err.rank].status == accel.Status.OUT_OF_MEMORY
    assert "host" in err.report.ranks[err.rank].error
    # without offload nothing lives in host memory: the same budget is never reached
    with _train_with_offload("none", host_memory="1KiB") as report:
        assert all(o.host_peak_bytes == 0 for o in report.ranks)
    # a budget as device_memory's: bytes as an int, "0" refused before any rank runs
    with _train_with_offload("optimizer", host_memory=1 << 30) as report:
        assert all(0 < o.host_peak_bytes <= 1 << 30 for o in report.ranks)
    with pytest.raises(accel.InvalidArgumentError, match="host_memory"):
        accel.sim.run(lambda acc: None, world_size=2, host_memory="0")
    with pytest.raises(accel.InvalidArgumentError, match="NUL"):
        accel.sim.run(lambda acc: None, world_size=2, host_memory="1Gi\0B")


def test_offload_and_the_host_accessor_refuse_what_they_do_not_know():
    for bad in ("bogus", "cpu", 3, -1, 1.5):
        with pytest.raises(accel.InvalidArgumentError, match="offload"):
            accel.Accelerator(cpu=True, offload=bad)
        with pytest.raises(accel.InvalidArgumentError, match="offload"):
            accel.sim.run(lambda acc: None, world_size=2, offload=bad)
    # names are case-insensitive, and the enum and its int work too
    for good in ("OPTIMIZER", "none", accel.Offload.OPTIMIZER, 0, None):
        accel.Accelerator(cpu=True, offload=good).close()
    # parameter offload is ZeRO-3's
    with pytest.raises(accel.InvalidArgumentError, match="only ZeRO-3"):
        accel.Accelerator(cpu=True, offload="parameters")
    accel.Accelerator(cpu=True, offload=accel.Offload.PARAMETERS, strategy="zero3").close()
    # the library's own check, for a value the binding did not vet
    lib = accel.load_library()
    opts = ffi.new("accel_options *")
    assert lib.accel_options_init(opts, lib.ACCEL_OPTIONS_VERSION) == 0
    opts.device = lib.ACCEL_DEVICE_CPU
    opts.offload = 7
    out = ffi.new("accel_context **")
    assert lib.accel_init(opts, out) == lib.ACCEL_ERR_INVALID_ARGUMENT and out[0] == ffi.NULL
    assert "offload" in ffi.string(lib.accel_last_error(ffi.NULL)).decode()
    # a rank outside the report
    with accel.sim.run(lambda acc: None, world_size=2) as report:
        for rank in (2, -1, 2**31 - 1):
            with pytest.raises(accel.InvalidArgumentError, match="rank"):
                report.rank(rank)
            host_peak, moved, seconds = ffi.new("uint64_t *"), ffi.new("uint64_t *"), ffi.new("double *")
            assert lib.accel_sim_report_rank_host(report._p(), rank, host_peak, moved, seconds) == \
                lib.ACCEL_ERR_INVALID_ARGUMENT
            assert f"rank {rank} is not in this 2-rank report" in ffi.string(lib.accel_last_error(ffi.NULL)).decode()
        assert lib.accel_sim_report_rank_host(ffi.NULL, 0, ffi.NULL, ffi.NULL, ffi.NULL) == lib.ACCEL_ERR_INVALID_ARGUMENT
        assert lib.accel_sim_report_rank_host(report._p(), 1, ffi.NULL, ffi.NULL, ffi.NULL) == 0  # NULL outs: fine
        assert report.rank(1)[4:] == (0, 0, 0.0)
    with pytest.raises(accel.ClosedError):
        report.rank(0)
