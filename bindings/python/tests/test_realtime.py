"""Real time: inference beside training through the Python binding (Accelerator.inference,
Inference.run / weights / close, Accelerator.publish_weights, Accelerator.train_micro_batches;
accel_inference_*, accel_publish_weights, accel_train_micro_batches): the copy's output is the
model's own forward bit for bit for the version it reports, a copy outlives its model and its
Accelerator, runs on another thread while the main thread trains, and train_micro_batches is the
loop of calls it replaces, bit for bit."""

import gc
import math
import os
import subprocess
import sys
import threading
import time
import weakref

import numpy as np
import pytest

import accel

from conftest import REPO, SRC

FIXTURES = os.path.join(REPO, "tests", "fixtures", "lm")
TORCHSCRIPT = os.environ.get("ACCEL_TEST_TORCHSCRIPT")


def _xs(rows=8):
    return np.sin(0.7 * np.arange(rows * 5, dtype=np.float32)).reshape(rows, 5).astype(np.float32)


def _ys(rows=8):
    return np.cos(0.3 * np.arange(rows * 3, dtype=np.float32)).reshape(rows, 3).astype(np.float32)


def _trainer(acc, lr=0.01):
    """An MLP 5 -> 16 -> 3 (tanh) with AdamW, prepared (the C tests' Trainer)."""
    model = accel.Model.mlp(acc, [5, 16, 3], activation="tanh")
    opt = accel.AdamW(model, lr=lr)
    acc.prepare(model, opt)
    return model, opt


def _step(acc, model, opt, x=None, y=None):
    """One MSE step through the binding's calls (forward, loss, backward, step)."""
    loss = accel.mse_loss(model(_xs() if x is None else x), _ys() if y is None else y)
    acc.backward(loss)
    opt.step()
    return loss.item()


def _same(a, b):
    """Bit for bit: same dtype, shape and bytes."""
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


# ---- inference copies ----------------------------------------------------------------------

def test_run_is_the_models_forward_and_sees_published_weights_only(acc):
    model, opt = _trainer(acc)
    x = _xs()
    inf = acc.inference(model)
    assert isinstance(inf, accel.Inference) and not inf.closed
    w = inf.weights
    assert isinstance(w, accel.InferenceWeights) and w.version == 1 and w.age_seconds >= 0  # created: version 1
    before = model(x).numpy()
    out = inf.run(x)
    assert isinstance(out, accel.Tensor) and _same(out.numpy(), before)  # bit for bit
    # the input kinds model(x) takes: a numpy array, a Tensor (and inf(x) is inf.run(x))
    assert _same(inf(accel.tensor(x)).numpy(), before)
    assert _same(inf.run(x[:1]).numpy(), model(x[:1]).numpy())

    _step(acc, model, opt)
    after = model(x).numpy()
    assert not _same(after, before)
    assert _same(inf.run(x).numpy(), before), "a step that was not published reached inference"
    assert inf.weights.version == 1 and inf.version == 1
    assert acc.publish_weights(model) == 2
    assert inf.weights.version == 1, "a copy changes weights only when a run starts"
    assert _same(inf.run(x).numpy(), after)
    assert inf.weights.version == 2
    assert acc.publish_weights(model) == 3  # nothing trained: the same values, a new version
    assert _same(inf.run(x).numpy(), after) and inf.version == 3

    # a second copy publishes the current weights too, and the first takes them at its next run
    _step(acc, model, opt)
    now = model(x).numpy()
    with acc.inference(model, num_threads=2) as other:
        assert other.version == 4
        assert _same(other.run(x).numpy(), now)
    assert other.closed
    assert _same(inf.run(x).numpy(), now) and inf.version == 4

    # the output is an ordinary tensor: a loss reads it, and it remembers the open Accelerator
    loss = accel.mse_loss(inf.run(x), _ys())
    assert math.isfinite(loss.item())
    inf.close()
    inf.close()  # idempotent
    assert inf.closed and repr(inf) == "<accel.Inference closed>"
    with pytest.raises(accel.ClosedError, match="this Inference is closed"):
        inf.run(x)
    with pytest.raises(accel.ClosedError):
        inf.weights


def test_publish_before_the_first_copy_counts(acc):
    model, opt = _trainer(acc)
    assert acc.publish_weights(model) == 1
    _step(acc, model, opt)
    with acc.inference(model) as inf:
        assert inf.version == 2  # the current weights, not the older publication
        assert _same(inf.run(_xs()).numpy(), model(_xs()).numpy())


def test_an_unprepared_model_in_eval_mode(acc):
    model = accel.Model.mlp(acc, [5, 7, 3], dropout=0.5).eval()
    with acc.inference(model) as inf:
        assert _same(inf.run(_xs()).numpy(), model(_xs()).numpy())  # the copy runs in evaluation mode


def test_a_copy_outlives_its_model_and_its_accelerator():
    acc = accel.Accelerator(seed=3, num_threads=1, cpu=True)
    model, opt = _trainer(acc)
    inf = acc.inference(model)
    _step(acc, model, opt)
    assert acc.publish_weights(model) == 2
    expect = model(_xs()).numpy()
    acc_ref = weakref.ref(acc)
    acc.close()
    assert model.closed and opt.closed and acc.closed
    assert not inf.closed  # closing the Accelerator does not close its copies
    out = inf.run(_xs())
    assert _same(out.numpy(), expect) and inf.weights.version == 2
    # the output of a copy whose Accelerator is closed remembers none
    with pytest.raises(accel.InvalidArgumentError, match="accelerator="):
        accel.mse_loss(out, _ys())
    with pytest.raises(accel.ClosedError):
        acc.publish_weights(model)
    # the copy keeps no reference to its Accelerator: it is collected while the copy lives
    del acc, model, opt, out
    gc.collect()
    assert acc_ref() is None
    assert _same(inf.run(_xs()).numpy(), expect) and inf.weights.version == 2
    inf.close()


def test_a_copy_is_released_by_the_garbage_collector_and_at_shutdown():
    # garbage with cycles, the Accelerator and its copies dropped together in any order
    for _ in range(3):
        acc = accel.Accelerator(num_threads=1, cpu=True)
        model, opt = _trainer(acc)
        inf = acc.inference(model)
        cycle = [acc, model, opt, inf]
        cycle.append(cycle)
        del acc, model, opt, inf, cycle
        gc.collect()
    code = ("import accel, numpy as np\n"
            "acc = accel.Accelerator(num_threads=1, cpu=True)\n"
            "m = accel.Model.mlp(acc, [4, 4]); o = accel.AdamW(m); acc.prepare(m, o)\n"
            "inf = acc.inference(m)\n"
            "t = inf.run(np.ones((1, 4), np.float32))\n"
            "cycle = [acc, m, o, inf, t]; cycle.append(cycle)\n"
            "print('done')\n")
    out = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, PYTHONPATH=SRC),
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "done", out.stderr
    assert "Exception ignored" not in out.stderr


def test_run_does_not_take_the_accelerators_lock(acc):
    """A copy is independent of its context: another thread's run finishes while this thread
    holds the Accelerator (as during a long training call)."""
    model, _ = _trainer(acc)
    inf = acc.inference(model)
    expect = model(_xs()).numpy()
    got = []
    with acc._lock:
        th = threading.Thread(target=lambda: got.append((inf.run(_xs()).numpy(), inf.weights.version)))
        th.start()
        th.join(timeout=60)
        assert not th.is_alive(), "the run waited for the Accelerator"
    assert len(got) == 1 and _same(got[0][0], expect) and got[0][1] == 1
    inf.close()


def test_runs_on_another_thread_while_this_one_trains_and_publishes(acc):
    """Every output of the reader thread is exactly the model's output for the version its run
    reports (no run saw weights being written), and the reader saw the first and last versions."""
    model, opt = _trainer(acc)
    x = _xs()
    inf = acc.inference(model)
    expected = {1: model(x).numpy()}
    seen = []
    errors = []
    started = threading.Event()
    done = threading.Event()
    count = [0]

    def reader():
        try:
            xt = accel.tensor(x)
            while not done.is_set():
                y = inf.run(xt).numpy()
                seen.append((inf.weights.version, y))
                count[0] += 1
                started.set()
        except BaseException as exc:  # reported below
            errors.append(exc)
            started.set()

    th = threading.Thread(target=reader)
    th.start()
    assert started.wait(60)
    publications = 60
    for _ in range(publications):
        _step(acc, model, opt)
        v = acc.publish_weights(model)
        expected[v] = model(x).numpy()
    runs_before = count[0]
    while count[0] < runs_before + 3 and th.is_alive():  # let the reader run on the last weights too
        time.sleep(0.001)
    done.set()
    th.join(60)
    assert not errors, errors
    versions = {}
    for v, y in seen:
        assert v in expected, v
        assert _same(y, expected[v]), f"the run of version {v} saw other weights"
        versions[v] = versions.get(v, 0) + 1
    assert 1 in versions and max(versions) == publications + 1
    assert len(expected) == publications + 1
    inf.close()


def test_an_inference_error_carries_the_message_of_the_calling_thread(acc):
    model, _ = _trainer(acc)
    inf = acc.inference(model)
    wrong = np.ones((2, 4), np.float32)
    with pytest.raises(accel.InvalidArgumentError) as info:
        inf.run(wrong)
    assert info.value.status == accel.Status.INVALID_ARGUMENT
    assert info.value.message.startswith("accel_inference_run")
    assert "the MLP expects input [batch, 5], got [2, 4]" in info.value.message
    caught = []

    def other():  # accel_last_error(NULL) is thread-local: read on the failing thread
        try:
            inf.run(wrong)
        except accel.Error as exc:
            caught.append(exc)

    th = threading.Thread(target=other)
    th.start()
    th.join(60)
    assert len(caught) == 1 and isinstance(caught[0], accel.InvalidArgumentError)
    assert "the MLP expects input [batch, 5], got [2, 4]" in caught[0].message
    inf.close()


def test_inference_errors(acc):
    model, _ = _trainer(acc)
    for bad in (0, -1, 4097):
        with pytest.raises(accel.InvalidArgumentError) as info:
            acc.inference(model, num_threads=bad)
        assert f"num_threads must be in [1, 4096], got {bad}" in info.value.message
        assert info.value.message.startswith("accel_inference_create")
    with accel.Accelerator(num_threads=1, cpu=True) as other:
        foreign = accel.Model.mlp(other, [5, 3])
        with pytest.raises(accel.InvalidArgumentError, match="pass a Model made from this Accelerator"):
            acc.inference(foreign)
        with pytest.raises(accel.InvalidArgumentError, match="pass a Model made from this Accelerator"):
            acc.publish_weights(foreign)
    with pytest.raises(accel.InvalidArgumentError):
        acc.publish_weights("model")
    with pytest.raises(TypeError):
        accel.Inference()
    spare = accel.Model.mlp(acc, [5, 3])
    spare.close()
    with pytest.raises(accel.ClosedError, match="this Model is closed"):
        acc.inference(spare)
    with pytest.raises(accel.ClosedError, match="this Model is closed"):
        acc.publish_weights(spare)


@pytest.mark.skipif(not TORCHSCRIPT, reason="ACCEL_TEST_TORCHSCRIPT is unset: no TorchScript model file to load "
                                            "(the suite sets it to the build's digits_model.pt)")
def test_torchscript_copy(acc):
    model = accel.Model.load_torchscript(acc, TORCHSCRIPT).eval()
    x = (np.arange(2 * 64, dtype=np.float32) % 17 / 16).reshape(2, 64)
    with acc.inference(model) as inf:
        assert _same(inf.run(x).numpy(), model(x).numpy())


def test_causal_lm_copy(acc):
    model = accel.Model.from_config(acc, os.path.join(FIXTURES, "llama-tiny"))
    opt = accel.AdamW(model, lr=0.05)
    acc.prepare(model, opt)
    inf = acc.inference(model)
    ids = np.array([[1, 5, 9, 2, 7, 3]], np.int64)
    out = model(input_ids=ids, labels=ids)
    acc.backward(out.loss)
    opt.step()
    assert acc.publish_weights(model) == 2
    want = model.eval()(ids).numpy()
    got = inf.run(ids).numpy()
    assert got.shape == want.shape and _same(got, want)
    assert inf.version == 2
    inf.close()


def test_copies_under_zero_on_simulated_ranks():
    """Under ZeRO every process makes the copy and publishes (the shards are gathered); the
    copies outlive the ranks' contexts."""
    x = _xs()

    def fn(acc):
        model, opt = _trainer(acc)
        inf = acc.inference(model)
        loss = accel.mse_loss(model(x), _ys())
        acc.backward(loss)
        opt.step()
        v = acc.publish_weights(model)
        want = model(x).numpy()
        return inf, v, want, inf.run(x).numpy(), inf.version

    with accel.sim.run(fn, world_size=2, strategy="zero2", seed=3) as report:
        results = report.results
    for inf, v, want, got, version in results:
        assert v == 2 and version == 2 and _same(got, want)
        assert _same(inf.run(x).numpy(), want)  # the rank's context is gone
        inf.close()
    assert _same(results[0][2], results[1][2])


# ---- train_micro_batches -------------------------------------------------------------------

def _pair(accum=2, rows=20, batch=4, targets="mse"):
    """Two Accelerators with the same seed, model, optimizer and loader, prepared."""
    xs = np.sin(0.37 * np.arange(rows * 5, dtype=np.float32)).reshape(rows, 5).astype(np.float32)
    if targets == "mse":
        ys = np.cos(0.11 * np.arange(rows * 3, dtype=np.float32)).reshape(rows, 3).astype(np.float32)
    else:
        ys = np.arange(rows, dtype=np.int64) % 3
    out = []
    for _ in range(2):
        acc = accel.Accelerator(seed=3, num_threads=1, cpu=True, gradient_accumulation_steps=accum)
        model = accel.Model.mlp(acc, [5, 16, 3], activation="tanh")
        opt = accel.AdamW(model, lr=0.01)
        loader = accel.DataLoader(acc, xs, ys, batch_size=batch, shuffle=True, seed=5)
        acc.prepare(model, opt, loader)
        out.append((acc, model, opt, loader))
    return out


def _loop(acc, model, opt, loader, n, loss_fn=accel.mse_loss):
    """n micro-batches through the calls train_micro_batches replaces: (losses, real steps)."""
    losses, steps = [], 0
    for _ in range(n):
        batch = loader.next_batch()
        if batch is None:
            break
        x, y = batch
        loss = loss_fn(model(x), y)
        acc.backward(loss)
        steps += opt.step().stepped
        losses.append(loss.item())
    return losses, steps


def _weights_equal(a, b):
    pa, pb = a.named_parameters(), b.named_parameters()
    return [n for n, _ in pa] == [n for n, _ in pb] and all(_same(x, y) for (_, x), (_, y) in zip(pa, pb))


def test_train_micro_batches_is_the_loop_of_calls():
    (a, ma, oa, la), (b, mb, ob, lb) = _pair(accum=2)
    try:
        losses, steps = _loop(a, ma, oa, la, 3)
        r = b.train_micro_batches(mb, lb, "mse", 3)
        assert isinstance(r, accel.TrainResult)
        assert (r.micro_batches, r.optimizer_steps, r.skipped_steps, r.epoch_ended) == (3, 1, 0, False)
        assert steps == 1  # after the second micro-batch (accumulation 2)
        assert r.mean_loss == sum(losses) / 3
        assert r.seconds >= 0
        assert _weights_equal(ma, mb)
        # the rest of the epoch (2 batches; the last is a real step: the end of the data), then its end
        losses, steps = _loop(a, ma, oa, la, 3)
        r = b.train_micro_batches(mb, lb, accel.Loss.MSE, max_micro_batches=10)
        assert (r.micro_batches, r.optimizer_steps, r.epoch_ended) == (2, 2, True) and steps == 2
        assert r.mean_loss == sum(losses) / 2
        assert _weights_equal(ma, mb)
        assert lb.epoch == 1 and la.epoch == 1
        # the next call starts the next epoch
        _loop(a, ma, oa, la, 1)
        r = b.train_micro_batches(mb, lb, "MSE", 1)
        assert r.micro_batches == 1 and not r.epoch_ended
        assert _weights_equal(ma, mb)
        # and what it trained reaches an inference copy once published
        inf = b.inference(mb)
        assert _same(inf.run(_xs()).numpy(), mb(_xs()).numpy())
        b.train_micro_batches(mb, lb, "mse", 2)
        b.publish_weights(mb)
        assert _same(inf.run(_xs()).numpy(), mb(_xs()).numpy()) and inf.version == 2
        inf.close()
    finally:
        a.close()
        b.close()


def test_train_micro_batches_cross_entropy_is_the_loop_of_calls():
    (a, ma, oa, la), (b, mb, ob, lb) = _pair(accum=1, rows=24, batch=6, targets="classes")
    try:
        for _ in range(3):  # 4 batches an epoch: 3 calls of 3 cross the epoch's end
            losses, _ = _loop(a, ma, oa, la, 3, accel.cross_entropy)
            r = b.train_micro_batches(mb, lb, "cross_entropy", 3)
            assert r.micro_batches == len(losses) and r.optimizer_steps == len(losses)
            assert (r.mean_loss == sum(losses) / len(losses)) if losses else math.isnan(r.mean_loss)
            assert _weights_equal(ma, mb)
    finally:
        a.close()
        b.close()


def test_train_micro_batches_stops_at_the_end_of_the_epoch(acc):
    model, opt = _trainer(acc)
    loader = accel.DataLoader(acc, _xs(12), _ys(12), batch_size=4)  # 3 batches an epoch
    r = acc.train_micro_batches(model, loader, "mse", 3)
    assert (r.micro_batches, r.epoch_ended) == (3, False) and loader.epoch == 0
    r = acc.train_micro_batches(model, loader, "mse", 5)  # nothing left: the epoch ends at once
    assert (r.micro_batches, r.optimizer_steps, r.epoch_ended) == (0, 0, True) and math.isnan(r.mean_loss)
    assert loader.epoch == 1
    r = acc.train_micro_batches(model, loader, "mse", 10)
    assert (r.micro_batches, r.epoch_ended) == (3, True) and loader.epoch == 2


def test_train_micro_batches_time_budget(acc):
    model, opt = _trainer(acc)
    loader = accel.DataLoader(acc, _xs(400), _ys(400), batch_size=4)
    r = acc.train_micro_batches(model, loader, "mse", 50, max_seconds=1e-9)
    assert r.micro_batches == 1 and r.optimizer_steps == 1  # at least one runs
    r = acc.train_micro_batches(model, loader, "mse", 7, max_seconds=60.0)
    assert r.micro_batches == 7


def test_train_micro_batches_causal_lm(acc):
    model = accel.Model.from_config(acc, os.path.join(FIXTURES, "llama-tiny"))
    opt = accel.SGD(model)
    acc.prepare(model, opt)
    tokens = (np.arange(64, dtype=np.int64) * 7) % 50
    loader = accel.DataLoader.for_lm(acc, tokens, block_size=8, batch_size=2)
    ids, labels = loader.next_batch()
    want = model(input_ids=ids, labels=labels).loss.item()
    loader.set_epoch(0)
    r = acc.train_micro_batches(model, loader, "causal_lm", 1)
    assert (r.micro_batches, r.optimizer_steps) == (1, 1)
    assert r.mean_loss == pytest.approx(want, rel=1e-6)


def test_train_micro_batches_errors(acc):
    model, opt = _trainer(acc)
    loader = accel.DataLoader(acc, _xs(), _ys(), batch_size=4)

    def refused(cls, says, *args, **kwargs):
        with pytest.raises(cls) as info:
            acc.train_micro_batches(*args, **kwargs)
        assert says in info.value.message, info.value.message
        return info.value

    e = refused(accel.InvalidArgumentError, "max_micro_batches must be >= 1, got 0", model, loader, "mse",
                max_micro_batches=0)
    assert e.status == accel.Status.INVALID_ARGUMENT and e.message.startswith("accel_train_micro_batches")
    refused(accel.InvalidArgumentError, "max_seconds must be finite and >= 0, got -1", model, loader, "mse", 1, -1.0)
    refused(accel.InvalidArgumentError, "max_seconds must be finite", model, loader, "mse", 1, math.nan)
    refused(accel.InvalidArgumentError, "ACCEL_LOSS_CAUSAL_LM needs a causal LM", model, loader, "causal_lm", 1)
    refused(accel.InvalidArgumentError, "loss must be one of mse, cross_entropy, causal_lm", model, loader, "huber", 1)
    refused(accel.InvalidArgumentError, "is no Loss", model, loader, 9, 1)
    bare = accel.DataLoader(acc, _xs(), batch_size=4)
    refused(accel.InvalidArgumentError, "the loader has no targets", model, bare, "mse", 1)
    model.eval()
    refused(accel.InvalidStateError, "evaluation mode", model, loader, "mse", 1)
    model.train()
    with accel.Accelerator(num_threads=1, cpu=True) as other:
        m = accel.Model.mlp(other, [5, 3])
        l = accel.DataLoader(other, _xs(), _ys(), batch_size=4)
        with pytest.raises(accel.InvalidStateError, match="accel_prepare has not bound this model"):
            other.train_micro_batches(m, l, "mse", 1)
        refused(accel.InvalidArgumentError, "pass a Model made from this Accelerator", m, loader, "mse", 1)
        refused(accel.InvalidArgumentError, "pass a DataLoader made from this Accelerator", model, l, "mse", 1)
    # a good call still works after the refused ones
    assert acc.train_micro_batches(model, loader, "mse", 1).micro_batches == 1
    acc.close()
    with pytest.raises(accel.ClosedError):
        acc.train_micro_batches(model, loader, "mse", 1)
    with pytest.raises(accel.ClosedError):
        acc.inference(model)
