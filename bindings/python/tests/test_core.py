import array
import gzip
import math
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

import accel
from accel import _ffi

from conftest import DIGITS, SRC


# ---- loading, versions ---------------------------------------------------------------------

def test_version():
    assert accel.version() == "0.1.0"
    assert accel.version_number() == 100


def test_version_check_function():
    accel.check_version(100)
    accel.check_version(9999)
    with pytest.raises(accel.LibraryVersionError, match=r"libaccel 1\.2\.0 is loaded, this binding was written for 0\.x"):
        accel.check_version(10200)
    assert issubclass(accel.LibraryVersionError, ImportError)


def test_load_rejects_other_major():
    class Fake:
        def accel_version_number(self):
            return 20001
    with pytest.raises(accel.LibraryVersionError, match="2.0.1"):
        _ffi.load(env={"ACCEL_LIBRARY": "/x/libaccel.so"}, dlopen=lambda path: Fake())


def test_library_not_found_lists_what_was_tried(tmp_path):
    env = {"ACCEL_LIBRARY": str(tmp_path / "nope.so")}
    with pytest.raises(accel.LibraryNotFoundError) as info:
        _ffi.load(env=env)
    msg = str(info.value)
    assert "nope.so" in msg and "ACCEL_LIBRARY" in msg and "PKG_CONFIG_PATH" in msg
    assert isinstance(info.value, ImportError)
    env = {"PATH": os.environ.get("PATH", ""), "PKG_CONFIG_PATH": str(tmp_path)}
    with pytest.raises(accel.LibraryNotFoundError) as info:
        _ffi.load(env=env, dlopen=lambda p: (_ for _ in ()).throw(OSError(f"cannot open {p}")))
    msg = str(info.value)
    assert "pkg-config" in msg and "libaccel.so.0" in msg and "set ACCEL_LIBRARY" in msg


def test_pkg_config_discovery(tmp_path):
    libdir = os.path.dirname(os.environ["ACCEL_LIBRARY"])
    (tmp_path / "accel.pc").write_text(
        f"libdir={libdir}\nName: accel\nDescription: x\nVersion: 0.1.0\nLibs: -L${{libdir}} -laccel\n")
    env = {"PATH": os.environ.get("PATH", ""), "PKG_CONFIG_PATH": str(tmp_path)}
    opened = []
    _ffi.load(env=env, dlopen=lambda p: opened.append(p) or _ffi.ffi.dlopen(p))
    assert opened == [os.path.join(libdir, "libaccel.so")]


def test_import_without_library_is_lazy_and_clear(tmp_path):
    code = "import accel\ntry:\n    accel.version()\nexcept accel.LibraryNotFoundError as e:\n    print('NOTFOUND', e)\n"
    env = dict(os.environ, ACCEL_LIBRARY=str(tmp_path / "missing.so"), PYTHONPATH=SRC)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert "NOTFOUND libaccel was not found" in out.stdout, out.stderr


# ---- errors --------------------------------------------------------------------------------

def test_error_hierarchy_and_mapping():
    cases = {-1: (accel.InvalidArgumentError, ValueError), -2: (accel.InvalidStateError, accel.Error),
             -3: (accel.OutOfMemoryError, MemoryError), -4: (accel.CommunicationError, accel.Error),
             -5: (accel.TimeoutError, TimeoutError), -6: (accel.IOError, OSError),
             -7: (accel.FormatError, accel.Error), -8: (accel.UnsupportedError, accel.Error),
             -9: (accel.InternalError, accel.Error), -10: (accel.NonFiniteError, accel.Error)}
    for code, (cls, base) in cases.items():
        e = accel.error_for(code, "m")
        assert type(e) is cls and isinstance(e, base) and isinstance(e, accel.Error)
        assert e.status == code and isinstance(e.status, accel.Status) and e.message == "m"
    unknown = accel.error_for(-77, "new")
    assert type(unknown) is accel.Error and unknown.status == -77
    assert issubclass(accel.ClosedError, accel.InvalidStateError)
    assert accel.status_name(-6) == "ACCEL_ERR_IO" and accel.status_name(-77) == "ACCEL_ERR_UNKNOWN"


def test_adamw_weight_decay_inf(acc):
    model = accel.Model.mlp(acc, [4, 2])
    with pytest.raises(accel.InvalidArgumentError) as info:
        accel.AdamW(model, weight_decay=math.inf)
    assert info.value.status == accel.Status.INVALID_ARGUMENT
    assert "weight_decay" in info.value.message and info.value.message.startswith("accel_optimizer_create_adamw")


def test_invalid_options():
    with pytest.raises(accel.InvalidArgumentError, match="gradient_accumulation_steps"):
        accel.Accelerator(gradient_accumulation_steps=0)
    with pytest.raises(accel.InvalidArgumentError, match="mixed_precision"):
        accel.Accelerator(mixed_precision="fp8")
    with pytest.raises(accel.InvalidArgumentError):
        accel.Accelerator(loss_scale_init=float("nan"))


def test_mixed_precision_resolved(monkeypatch):
    monkeypatch.delenv("ACCEL_MIXED_PRECISION", raising=False)  # the default reads it
    assert accel.Precision.AUTO == 3 and accel.Precision["AUTO"] is accel.Precision.AUTO
    with accel.Accelerator(mixed_precision="auto", cpu=True, num_threads=1) as acc:
        got = acc.mixed_precision
        assert isinstance(got, accel.Precision)
        assert got in (accel.Precision.BF16, accel.Precision.NO), got  # resolved, never AUTO
    with accel.Accelerator(mixed_precision=accel.Precision.AUTO, cpu=True, num_threads=1) as acc:
        assert acc.mixed_precision == got  # the same device resolves the same way
    with accel.Accelerator(mixed_precision="bf16", cpu=True, num_threads=1) as acc:
        assert acc.mixed_precision is accel.Precision.BF16
    with accel.Accelerator(mixed_precision="fp16", cpu=True, num_threads=1) as acc:
        assert acc.mixed_precision is accel.Precision.FP16
    with accel.Accelerator(cpu=True, num_threads=1) as acc:
        assert acc.mixed_precision is accel.Precision.NO
    acc = accel.Accelerator(cpu=True, num_threads=1)
    acc.close()
    with pytest.raises(accel.ClosedError):
        acc.mixed_precision
    # accel_estimate_memory refuses AUTO (a context resolves it; an estimate has no device)
    with pytest.raises(accel.InvalidArgumentError) as info:
        accel.estimate_memory("llama-7b", mixed_precision="auto")
    assert info.value.status == accel.Status.INVALID_ARGUMENT


def test_step_before_prepare_is_invalid_state(acc):
    with pytest.raises(accel.InvalidStateError, match="accel_step"):
        acc.step()


# ---- tensors -------------------------------------------------------------------------------

def test_tensor_roundtrip_numpy():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    t = accel.tensor(a)
    assert t.shape == (3, 4) and t.dtype == accel.DType.FLOAT32 and t.ndim == 2
    assert t.numel == 12 and t.nbytes == 48 and len(t) == 3
    np.testing.assert_array_equal(t.numpy(), a)
    np.testing.assert_array_equal(np.asarray(t), a)
    np.testing.assert_array_equal(t.numpy(dtype="float64"), a.astype(np.float64))
    np.testing.assert_array_equal(t.numpy(dtype=accel.DType.INT32), a.astype(np.int32))


def test_tensor_non_contiguous_and_dtypes():
    a = np.arange(20, dtype=np.int64).reshape(4, 5)[:, ::2]
    np.testing.assert_array_equal(accel.tensor(a).numpy(), a)
    for dt in (np.float16, np.float64, np.int32, np.uint8, np.int8):
        x = np.arange(6).astype(dt)
        t = accel.tensor(x)
        assert t.numpy().dtype == dt
        np.testing.assert_array_equal(t.numpy(), x)
    assert accel.tensor(np.ones(3, np.float32), dtype="int64").numpy().tolist() == [1, 1, 1]


def test_tensor_bfloat16_reads_as_float32():
    x = np.array([1.0, 2.5, -3.0, 1 / 3], np.float32)
    t = accel.tensor(x, dtype="bf16")
    assert t.dtype == accel.DType.BFLOAT16 and t.nbytes == 8
    got = t.numpy()
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, x, rtol=1 / 128)
    assert got[3] == np.float32(0.333984375)  # rounded to 8 bits of mantissa
    with pytest.raises(accel.InvalidArgumentError, match="bfloat16"):
        t.numpy(dtype="bfloat16")


def test_tensor_from_buffers():
    t = accel.tensor(array.array("f", [1, 2, 3, 4]), shape=(2, 2))
    assert t.shape == (2, 2) and t.numpy().tolist() == [[1, 2], [3, 4]]
    raw = np.array([1.5, -2], np.float32).tobytes()
    t = accel.tensor(raw, dtype="float32")
    assert t.shape == (2,) and t.numpy().tolist() == [1.5, -2.0]
    mv = memoryview(array.array("q", [7, 8, 9]))
    assert accel.tensor(mv).dtype == accel.DType.INT64
    assert accel.tensor(bytes([1, 2, 3])).dtype == accel.DType.UINT8
    assert accel.tensor(3.5).item() == 3.5 and accel.tensor(3.5).shape == ()
    assert accel.tensor([1, 2]).dtype == accel.DType.INT64


def test_tensor_other_byte_order_is_converted():
    # README: "non-native-byte-order arrays are made contiguous first" -- and converted.
    swapped = ">" if sys.byteorder == "little" else "<"
    for name in ("f4", "f8", "f2", "i8", "i4"):
        native = np.array([[1.5, -2.0, 3.0], [4.0, 1e3, -0.5]], dtype=name)
        other = native.astype(swapped + name)
        assert other.tobytes() != native.tobytes()
        for data in (other, other[:, ::2], memoryview(other)):  # numpy, non-contiguous, a plain buffer
            t = accel.tensor(data)
            want = np.asarray(data).astype(name)
            assert t.dtype == accel.tensor(want).dtype and t.shape == want.shape
            np.testing.assert_array_equal(t.numpy(), want)
    bf = accel.tensor(np.array([1.0, -3.5], dtype=swapped + "f4"), dtype="bf16")
    np.testing.assert_array_equal(bf.numpy(), [1.0, -3.5])


def test_tensor_copy_to_and_item():
    t = accel.tensor(np.array([[1, 2], [3, 4]], np.int32))
    buf = bytearray(16)
    t.copy_to(buf)
    assert np.frombuffer(buf, np.int32).tolist() == [1, 2, 3, 4]
    out = array.array("d", [0] * 4)
    t.copy_to(out, dtype="float64")
    assert list(out) == [1, 2, 3, 4]
    with pytest.raises(accel.InvalidArgumentError, match="dst_bytes"):
        t.copy_to(bytearray(15))
    with pytest.raises(accel.InvalidArgumentError):
        t.item()
    assert accel.tensor(np.array([2.25])).item() == 2.25


def test_tensor_wrong_shapes_and_dtypes():
    with pytest.raises(accel.InvalidArgumentError, match="holds 6 elements"):
        accel.tensor(np.ones(4, np.float32), shape=(2, 3))
    with pytest.raises(accel.InvalidArgumentError, match="no accel dtype"):
        accel.tensor(np.ones(2, np.complex64))
    with pytest.raises(accel.InvalidArgumentError):
        accel.tensor(b"abc", dtype="float32")
    with pytest.raises(accel.InvalidArgumentError, match="dtype"):
        accel.tensor(np.ones(2), dtype="float128")


def test_tensor_closed():
    t = accel.tensor(np.ones(2, np.float32))
    with t:
        pass
    t.close()
    with pytest.raises(accel.ClosedError):
        t.numpy()
    assert t.closed


# ---- models, optimizers, schedulers, loaders ------------------------------------------------

def _data(n=64, seed=0):
    rng = np.random.default_rng(seed)
    return rng.random((n, 8), dtype=np.float32), rng.integers(0, 3, n)


def test_model_parameters_and_forward(acc):
    model = accel.Model.mlp(acc, [8, 16, 3])
    assert model.num_parameters == 8 * 16 + 16 + 16 * 3 + 3
    names = [n for n, _ in model.named_parameters()]
    assert names == ["layers.0.weight", "layers.0.bias", "layers.1.weight", "layers.1.bias"]
    shapes = [p.shape for p in model.parameters()]
    assert shapes == [(16, 8), (16,), (3, 16), (3,)]
    w0, b0, w1, b1 = model.parameters()
    x = np.random.default_rng(1).random((5, 8), dtype=np.float32)
    expect = np.maximum(x @ w0.T + b0, 0) @ w1.T + b1
    out = model.eval()(x)
    np.testing.assert_allclose(out.numpy(), expect, rtol=1e-5, atol=1e-5)
    assert not model.training and model.train().training
    with pytest.raises(accel.InvalidArgumentError, match="accel_model_forward"):
        model(np.ones((5, 7), np.float32))
    with pytest.raises(accel.InvalidArgumentError):
        accel.Model.mlp(acc, [8])


def test_torchscript_errors(acc, tmp_path):
    with pytest.raises(accel.IOError) as info:
        accel.Model.load_torchscript(acc, tmp_path / "missing.pt")
    assert isinstance(info.value, OSError)
    bad = tmp_path / "bad.pt"
    bad.write_text("not a module")
    with pytest.raises(accel.FormatError):
        accel.Model.load_torchscript(acc, bad)


def _setup(acc, sched="cosine", n=64, batch=8, lr=0.01):
    x, y = _data(n)
    model = accel.Model.mlp(acc, [8, 16, 3])
    opt = accel.SGD(model, lr=lr)
    loader = accel.DataLoader(acc, x, y, batch_size=batch, shuffle=True, seed=1)
    s = accel.get_cosine_schedule_with_warmup(opt, 2, 10) if sched else None
    return model, opt, loader, s


def test_four_steps_and_scheduler_values(acc):
    model, opt, loader, sched = _setup(acc)
    # any order
    sched, loader, model, opt = acc.prepare(sched, loader, model, opt)
    assert len(loader) == 8 and loader.epoch == 0
    lrs = [opt.lr]
    losses = []
    for x, y in loader:
        loss = accel.cross_entropy(model(x), y)
        losses.append(loss.item())
        acc.backward(loss)
        r = opt.step()
        sched.step()
        opt.zero_grad()
        lrs.append(opt.lr)
    assert r.optimizer_steps == 8 and r.stepped and sched.steps == 8
    assert loader.epoch == 1
    expect = [0.0, 0.005] + [0.01 * 0.5 * (1 + math.cos(math.pi * (s - 2) / 8)) for s in range(2, 9)]
    np.testing.assert_allclose(lrs, expect, atol=1e-12)
    assert sched.get_last_lr() == [lrs[-1]]
    assert all(math.isfinite(v) for v in losses)


def test_several_loaders_and_set_epoch(acc):
    model, opt, loader, _ = _setup(acc, sched=None)
    x, y = _data(20, seed=3)
    evaluation = accel.DataLoader(acc, x, batch_size=10)
    acc.prepare(model, opt, loader, evaluation)
    batches = list(evaluation)
    assert len(batches) == 2 and isinstance(batches[0], accel.Tensor) and batches[0].shape == (10, 8)
    np.testing.assert_array_equal(np.concatenate([b.numpy() for b in batches]), x)
    first = [b[1].numpy().tolist() for b in loader]
    loader.set_epoch(0)
    again = [b[1].numpy().tolist() for b in loader]
    assert first == again


def test_gradient_accumulation_and_accumulate():
    with accel.Accelerator(seed=1, num_threads=1, gradient_accumulation_steps=4) as acc:
        model, opt, loader, _ = _setup(acc, sched=None, n=40, batch=8)
        sched = accel.get_constant_schedule_with_warmup(opt)
        acc.prepare(model, opt, loader, sched)
        syncs = []
        for x, y in loader:
            with acc.accumulate(model):
                acc.backward(acc.cross_entropy(model(x), y))
                syncs.append(acc.sync_gradients)
        # 5 micro-batches: the 4th is a real step, the 5th (the epoch's last) too
        assert syncs == [False, False, False, True, True]
        assert sched.steps == 2  # accumulate() stepped at the end of every block; 2 were real
        assert opt.lr == 0.01
        w = model.parameters()[0]
        assert np.isfinite(w).all()


def test_clip_grad_norm_value(acc):
    model = accel.Model.mlp(acc, [2, 1], bias=False)
    opt = accel.SGD(model, lr=0.1)
    acc.prepare(model, opt)
    (w,) = model.parameters()
    x = np.array([[1.0, 2.0]], np.float32)
    target = np.array([[0.0]], np.float32)
    out = model(x)
    loss = accel.mse_loss(out, target)
    acc.backward(loss)
    pred = (x @ w.T).item()
    grad = 2 * pred * x[0]
    norm = acc.clip_grad_norm_(model.parameters(), max_norm=1e-3)
    assert norm == pytest.approx(float(np.linalg.norm(grad)), rel=1e-5)
    opt.step()
    (w2,) = model.parameters()
    # clipped to 1e-3: the step moves the weights by lr * 1e-3 in norm
    assert float(np.linalg.norm(w2 - w)) == pytest.approx(0.1 * 1e-3, rel=1e-3)


def test_parameter_grad_is_what_the_step_applies(acc):
    model = accel.Model.mlp(acc, [2, 1], bias=False)
    opt = accel.SGD(model, lr=0.1)
    acc.prepare(model, opt)
    with pytest.raises(accel.InvalidStateError, match="no gradients"):
        model.parameter_grad(0)
    (w,) = model.parameters()
    x = np.array([[1.0, 2.0]], np.float32)
    acc.backward(accel.mse_loss(model(x), np.array([[0.0]], np.float32)))
    g = model.parameter_grad(0).numpy()
    pred = (x @ w.T).item()
    np.testing.assert_allclose(g, 2 * pred * x, rtol=1e-6)  # d/dw (w.x)^2
    with pytest.raises(accel.InvalidArgumentError, match="out of range"):
        model.parameter_grad(1)
    opt.step()
    (w2,) = model.parameters()
    np.testing.assert_allclose(w2, w - 0.1 * g, rtol=1e-6)  # SGD applied exactly that gradient
    with pytest.raises(accel.InvalidStateError, match="no gradients"):
        model.parameter_grad(0)  # the step zeroed them


def test_fp16_loss_scale():
    with accel.Accelerator(mixed_precision="fp16", seed=1, num_threads=1, loss_scale_init=1024,
                           loss_scale_growth_interval=2) as acc:
        assert acc.loss_scale == 1024
        model, opt, loader, _ = _setup(acc, sched=None, n=16, batch=8)
        acc.prepare(model, opt, loader)
        results = []
        for x, y in loader:
            acc.backward(acc.cross_entropy(model(x), y))
            results.append(opt.step())
        assert [r.loss_scale for r in results] == [1024, 2048]  # grows after 2 good steps
        assert acc.loss_scale == 2048
    with accel.Accelerator(mixed_precision="bf16", num_threads=1) as acc:
        assert acc.loss_scale == 1.0


def test_non_finite_loss(acc):
    model = accel.Model.mlp(acc, [2, 1])
    opt = accel.SGD(model)
    acc.prepare(model, opt)
    loss = accel.mse_loss(model(np.ones((1, 2), np.float32)), np.array([[np.inf]], np.float32))
    with pytest.raises(accel.NonFiniteError):
        acc.backward(loss)


def test_losses_need_an_accelerator(acc):
    with pytest.raises(accel.InvalidArgumentError, match="accelerator="):
        accel.cross_entropy(accel.tensor(np.ones((2, 3), np.float32)), [0, 1])
    model = accel.Model.mlp(acc, [3, 3])
    logits = model(np.ones((2, 3), np.float32))
    with pytest.raises(accel.InvalidArgumentError, match="accel_loss_cross_entropy"):
        accel.cross_entropy(logits, [0, 7])
    loss = accel.cross_entropy(accel.tensor(np.zeros((2, 3), np.float32)), [0, 1], accelerator=acc)
    assert loss.item() == pytest.approx(math.log(3))


# ---- lifetimes -----------------------------------------------------------------------------

def test_close_rules():
    acc = accel.Accelerator(num_threads=1)
    model, opt, loader, sched = _setup(acc)
    spare = accel.Model.mlp(acc, [2, 2])
    with pytest.raises(accel.InvalidStateError, match="optimizer"):
        model.close()  # its optimizer is open
    spare.close()
    spare.close()  # idempotent
    with pytest.raises(accel.ClosedError, match="this Model is closed"):
        spare(np.ones((1, 2), np.float32))
    acc.prepare(model, opt, loader, sched)
    for obj in (model, opt, loader, sched):
        with pytest.raises(accel.InvalidStateError, match="close the Accelerator first"):
            obj.close()
    logits = model(np.ones((1, 8), np.float32))
    acc.close()
    acc.close()
    for call in (lambda: model(np.ones((1, 8), np.float32)), lambda: opt.lr, lambda: len(loader),
                 lambda: sched.steps, lambda: acc.process_index, lambda: acc.prepare(model),
                 lambda: accel.cross_entropy(logits, [0]), lambda: list(loader)):
        with pytest.raises(accel.ClosedError, match="closed"):
            call()
    assert logits.numpy().shape == (1, 3)  # tensors are independent of the context
    model.close()  # closing after the Accelerator is fine
    assert model.closed and acc.closed


def test_context_manager_and_gc_never_crash():
    import gc
    with accel.Accelerator(num_threads=1) as acc:
        model, opt, loader, sched = _setup(acc)
        acc.prepare(model, opt, loader, sched)
        del model, opt, loader, sched
        gc.collect()
        for x, y in acc._prepared[3]:
            break
    # garbage with cycles, dropped in arbitrary order
    for _ in range(3):
        a = accel.Accelerator(num_threads=1)
        m, o, l, s = _setup(a)
        a.prepare(m, o, l, s)
        del a, m, o, l, s
        gc.collect()


def test_del_at_interpreter_shutdown(tmp_path):
    code = ("import accel, numpy as np\n"
            "acc = accel.Accelerator(num_threads=1)\n"
            "m = accel.Model.mlp(acc, [4, 4]); o = accel.AdamW(m); l = accel.DataLoader(acc, np.ones((4, 4), np.float32), batch_size=2)\n"
            "acc.prepare(m, o, l)\n"
            "t = m(np.ones((1, 4), np.float32))\n"
            "cycle = [acc, m, o, l, t]; cycle.append(cycle)\n"
            "print('done')\n")
    out = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, PYTHONPATH=SRC),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "done", out.stderr
    assert "Exception ignored" not in out.stderr


def test_prepare_rejects_foreign_and_unknown(acc):
    with accel.Accelerator(num_threads=1) as other:
        m = accel.Model.mlp(other, [2, 2])
        with pytest.raises(accel.InvalidArgumentError, match="another Accelerator"):
            acc.prepare(m)
    with pytest.raises(TypeError):
        acc.prepare(object())


# ---- checkpoints ---------------------------------------------------------------------------

def test_save_and_load_state(tmp_path):
    def make():
        a = accel.Accelerator(seed=7, num_threads=1)
        m, o, l, s = _setup(a)
        a.prepare(m, o, l, s)
        return a, m, o, l, s

    acc, model, opt, loader, sched = make()
    for x, y in loader:
        acc.backward(acc.cross_entropy(model(x), y))
        opt.step()
    where = acc.save_state(tmp_path / "ckpt")
    assert where.endswith("ckpt") and acc.last_checkpoint == where
    saved = model.parameters()
    steps, lr = sched.steps, opt.lr
    acc.close()

    acc2, model2, opt2, loader2, sched2 = make()
    acc2.load_state(tmp_path / "ckpt")
    for a, b in zip(saved, model2.parameters()):
        np.testing.assert_array_equal(a, b)
    assert sched2.steps == steps and opt2.lr == lr and loader2.epoch == 1
    # a user's file is never overwritten
    user = tmp_path / "mine"
    user.write_text("precious")
    with pytest.raises(accel.InvalidArgumentError, match="accel_save_state"):
        acc2.save_state(user)
    assert user.read_text() == "precious"
    with pytest.raises(accel.InvalidArgumentError):
        acc2.save_state("")
    with pytest.raises((accel.IOError, accel.InvalidArgumentError)):
        acc2.load_state(tmp_path / "nothing")
    # the project's checkpoints
    acc2.set_project(tmp_path / "proj", total_limit=1)
    assert acc2.project_dir == str(tmp_path / "proj")
    for x, y in loader2:
        acc2.backward(acc2.cross_entropy(model2(x), y))
        opt2.step()
    first = acc2.save_state()
    second = acc2.save_state()
    assert first != second and os.path.isdir(second) and not os.path.exists(first)
    assert acc2.load_state() == second
    acc2.close()


def test_save_model_safetensors(acc, tmp_path):
    import json
    import struct
    model = accel.Model.mlp(acc, [3, 2])
    path = acc.save_model(model, tmp_path / "out")
    assert path == str(tmp_path / "out" / "model.safetensors")
    raw = open(path, "rb").read()
    (n,) = struct.unpack("<Q", raw[:8])
    header = json.loads(raw[8:8 + n])
    assert header["layers.0.weight"]["shape"] == [2, 3] and header["layers.0.weight"]["dtype"] == "F32"
    begin, end = header["layers.0.weight"]["data_offsets"]
    w = np.frombuffer(raw[8 + n + begin:8 + n + end], np.float32).reshape(2, 3)
    np.testing.assert_array_equal(w, model.parameters()[0])
    assert model.save(tmp_path / "w.safetensors").endswith("w.safetensors")
    with pytest.raises(accel.UnsupportedError):
        acc.save_model(model, tmp_path / "m.pt")
    user = tmp_path / "user.safetensors"
    user.write_text("mine")
    with pytest.raises(accel.InvalidArgumentError):
        acc.save_model(model, user)
    assert user.read_text() == "mine"


# ---- process utilities on one process -------------------------------------------------------

def test_single_process_utilities(acc, capfd):
    assert (acc.process_index, acc.num_processes, acc.local_process_index) == (0, 1, 0)
    assert acc.is_main_process and acc.is_local_main_process and acc.device == "cpu"
    acc.wait_for_everyone()
    assert acc.reduce(np.array([2.0, 3.0], np.float32), "mean").numpy().tolist() == [2.0, 3.0]
    acc.print("hello", 1)
    assert "hello 1" in capfd.readouterr().out
    acc.set_seed(3)
    a = accel.Model.mlp(acc, [2, 2]).parameters()[0]
    acc.set_seed(3)
    b = accel.Model.mlp(acc, [2, 2]).parameters()[0]
    np.testing.assert_array_equal(a, b)
    acc.charge_compute(0.1, "outside the simulator: a no-op")
    assert acc.unwrap_model is not None


# ---- the GIL -------------------------------------------------------------------------------

def test_gil_is_released_during_c_calls():
    """A Python thread runs while a long C call (a large forward) is in progress."""
    with accel.Accelerator(seed=1, num_threads=1) as acc:
        model = accel.Model.mlp(acc, [256, 1024, 1024, 10]).eval()
        x = accel.tensor(np.random.default_rng(0).random((8192, 256), dtype=np.float32))
        stamps = []
        stop = threading.Event()

        def ticker():
            while not stop.is_set():
                stamps.append(time.perf_counter())
                time.sleep(0.001)

        th = threading.Thread(target=ticker)
        th.start()
        time.sleep(0.02)
        t0 = time.perf_counter()
        model(x)
        t1 = time.perf_counter()
        stop.set()
        th.join()
        assert t1 - t0 > 0.05, "the forward was too short to tell"
        inside = [s for s in stamps if t0 + 0.01 < s < t1 - 0.01]
        assert len(inside) >= 5, (len(inside), t1 - t0)


# ---- threads and lifetimes (adversarial) ----------------------------------------------------

def test_close_from_another_thread_during_a_call_waits():
    """Accelerator.close() (or a tensor's close()) on another thread while a long forward runs used
    to free the context under the call (malloc(): invalid size, the process aborted)."""
    code = (
        "import accel, numpy as np, threading, time\n"
        "acc = accel.Accelerator(num_threads=1)\n"
        "m = accel.Model.mlp(acc, [256, 1024, 1024, 10]).eval()\n"
        "x = accel.tensor(np.random.default_rng(0).random((8192, 256), dtype=np.float32))\n"
        "def closer():\n"
        "    time.sleep(0.02); x.close(); acc.close()\n"
        "th = threading.Thread(target=closer); th.start()\n"
        "out = m(x)\n"
        "th.join()\n"
        "print(out.shape, x.closed, acc.closed)\n"
        "try:\n    m(np.ones((1, 256), np.float32))\nexcept accel.ClosedError as e:\n    print('closed:', e.message)\n")
    out = subprocess.run([sys.executable, "-c", code], env=dict(os.environ, PYTHONPATH=SRC),
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["(8192, 10) True True",
                                       "closed: the Accelerator this Model was made from is closed"]


def test_tensor_close_while_pinned_is_deferred():
    t = accel.tensor(np.ones(3, np.float32))
    from accel._tensor import _pin_all, _unpin_all
    h = _pin_all([t])[0]  # what every C call does around its use of the handle
    t.close()  # e.g. from another thread
    assert t.closed and t._h is h  # not destroyed under the call
    with pytest.raises(accel.ClosedError):
        t.numpy()
    _unpin_all([t])
    assert t._h is None


def test_paths_with_nul_are_refused(acc, tmp_path):
    model = accel.Model.mlp(acc, [2, 2])
    with pytest.raises(accel.InvalidArgumentError, match="NUL"):
        acc.save_model(model, str(tmp_path / "a\0b.safetensors"))
    with pytest.raises(accel.InvalidArgumentError, match="NUL"):
        accel.Model.load_torchscript(acc, "x\0y.pt")


# ---- TorchScript ---------------------------------------------------------------------------

TORCHSCRIPT = os.environ.get("ACCEL_TEST_TORCHSCRIPT")


@pytest.mark.skipif(not TORCHSCRIPT, reason="ACCEL_TEST_TORCHSCRIPT is unset: no TorchScript model file to load "
                                            "(the suite sets it to the build's digits_model.pt)")
def test_torchscript_load_forward_train_and_save(acc, tmp_path):
    model = accel.Model.load_torchscript(acc, TORCHSCRIPT)
    assert model.training and model.num_parameter_tensors > 0
    names = model.parameter_names()
    assert len(names) == model.num_parameter_tensors and all(names)
    assert sum(int(np.prod(p.shape)) for p in model.parameters()) == model.num_parameters
    x = np.random.default_rng(0).random((6, 64), dtype=np.float32)
    before = model.eval()(x).numpy()
    assert before.shape == (6, 10) and np.isfinite(before).all()
    opt = accel.SGD(model.train(), lr=0.1)
    acc.prepare(model, opt)
    acc.backward(acc.cross_entropy(model(x), np.arange(6) % 10))
    assert opt.step().stepped
    after = model.eval()(x).numpy()
    assert not np.array_equal(before, after)
    path = acc.save_model(model, tmp_path / "trained.pt")  # TorchScript with the trained weights
    with accel.Accelerator(num_threads=1) as other:
        again = accel.Model.load_torchscript(other, path).eval()
        np.testing.assert_allclose(again(x).numpy(), after, rtol=1e-6, atol=1e-6)


# ---- Accelerate's loader arguments on the Accelerator ---------------------------------------

def test_accelerator_loader_defaults(acc):
    assert (acc.split_batches, acc.even_batches) == (False, True)
    with accel.Accelerator(num_threads=1, split_batches=True, even_batches=False) as a:
        assert (a.split_batches, a.even_batches) == (True, False)
        x = np.zeros((4, 1), np.float32)
        # the loader takes the Accelerator's values unless given its own
        assert len(accel.DataLoader(a, x, batch_size=2)) == 2
        assert len(accel.DataLoader(a, x, batch_size=2, split_batches=False, even_batches=True)) == 2
