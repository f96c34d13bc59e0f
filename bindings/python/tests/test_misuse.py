"""Misuse from Python ends in a Python exception, never a crash or a hang: copies and pickles of
every object, exceptions across processes, `from accel import *`, integers C cannot hold, use
after close, closes and calls racing from threads, another simulated rank's Accelerator, NUL
bytes in strings, wrong dtypes, shapes and argument types, exceptions raised in callbacks.

What could kill the interpreter (a double free, a use after free, a deadlock) runs in a child
process: the test checks its exit status and its output, so a crash fails one test with the
child's stderr instead of taking pytest down."""
import builtins
import concurrent.futures
import copy
import multiprocessing
import os
import pickle
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import accel

from conftest import REPO, SRC

LM_CONFIG = os.path.join(REPO, "tests", "fixtures", "lm", "gpt2-tiny", "config.json")
TOKENIZER = os.path.join(REPO, "tests", "fixtures", "tokenizers", "qwen2")
PROTOCOLS = range(pickle.HIGHEST_PROTOCOL + 1)


def run_child(code, timeout=120):
    """Runs `code` in a fresh interpreter; returns (exit status, stdout, stderr)."""
    env = dict(os.environ, PYTHONPATH=SRC, PYTHONFAULTHANDLER="1")
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True,
                          text=True, timeout=timeout)
    return proc.returncode, proc.stdout, proc.stderr


def assert_child_ok(code, timeout=120):
    rc, out, err = run_child(code, timeout)
    assert rc == 0 and out.rstrip().endswith("DONE"), f"exit status {rc}\nstdout:\n{out}\nstderr:\n{err}"
    return out


# ---- copy, deepcopy, pickle ----------------------------------------------------------------

TENSORS = [
    (np.arange(6, dtype=np.float32).reshape(2, 3), None),
    (np.arange(4, dtype=np.float16), None),
    (np.array([1.5, -2.25, 3.0], dtype=np.float32), "bfloat16"),
    (np.arange(-3, 3, dtype=np.int64).reshape(3, 2), None),
    (np.arange(5, dtype=np.int32), None),
    (np.arange(7, dtype=np.uint8), None),
    (np.array([[1e300, -1.0]], dtype=np.float64), None),
    (np.array([-128, 127], dtype=np.int8), None),
    (np.float32(2.5), None),                     # 0-d
    (np.zeros((0, 3), dtype=np.float32), None),  # no elements
]


def _raw(t):
    buf = bytearray(t.nbytes)
    t.copy_to(buf)
    return bytes(buf)


@pytest.mark.parametrize("data,dtype", TENSORS, ids=lambda v: getattr(v, "dtype", v).__str__())
def test_tensor_copies_are_independent_tensors_with_the_same_bytes(data, dtype):
    t = accel.tensor(data, dtype=dtype)
    copies = [copy.copy(t), copy.deepcopy(t)] + [pickle.loads(pickle.dumps(t, protocol=p)) for p in PROTOCOLS]
    for c in copies:
        assert type(c) is accel.Tensor and c._h != t._h
        assert (c.dtype, c.shape, _raw(c)) == (t.dtype, t.shape, _raw(t))
    t.close()  # the copies own their data
    for c in copies:
        assert c.numel == int(np.prod(c.shape)) and len(_raw(c)) == c.nbytes
        c.close()


def test_tensor_copy_keeps_its_accelerator_and_a_closed_tensor_cannot_be_copied(acc):
    model = accel.Model.mlp(acc, [3, 2])
    logits = model(np.ones((4, 3), np.float32))
    dup = copy.copy(logits)
    assert float(accel.cross_entropy(dup, np.zeros(4, np.int64)).item()) > 0  # no accelerator= needed
    logits.close()
    for f in (copy.copy, copy.deepcopy, pickle.dumps):
        with pytest.raises(accel.ClosedError):
            f(logits)
    # a tensor inside a container is copied too
    box = copy.deepcopy({"x": dup, "again": dup})
    assert box["x"] is box["again"] and box["x"]._h != dup._h


def test_unpickling_refuses_a_size_that_does_not_match():
    with accel.tensor([1.0]) as t:
        bad = t.__reduce__()[0]  # what unpickling a tensor calls
    with pytest.raises(accel.InvalidArgumentError, match="bytes are not"):
        bad(b"\0" * 7, accel.DType.FLOAT32, (2,))
    with pytest.raises(accel.InvalidArgumentError, match="bytes are not"):
        bad(b"", accel.DType.FLOAT32, (-1,))


# Pickles made when the binding was one module, accel._core (protocol 2): a pickle names the
# module of each class and function it references, so accel._core must keep resolving them.
OLD_PICKLES = {
    "tensor": b'\x80\x02caccel._core\n_tensor_from_raw\nq\x00c_codecs\nencode\nq\x01X\x13\x00\x00\x00\x00\x00'
              b'\xc3\x80?\x00\x00\x00@\x00\x00@@\x00\x00\xc2\x80\xc3\x80q\x02X\x06\x00\x00\x00latin1q\x03\x86q'
              b'\x04Rq\x05K\x00K\x02K\x02\x86q\x06\x87q\x07Rq\x08.',
    "error": b'\x80\x02caccel._core\nInvalidArgumentError\nq\x00J\xff\xff\xff\xffX\x1b\x00\x00\x00msg of '
             b'InvalidArgumentErrorq\x01\x86q\x02Rq\x03}q\x04X\x04\x00\x00\x00rankq\x05K\x03sb.',
    "closed": b'\x80\x02caccel._core\nClosedError\nq\x00X\x15\x00\x00\x00this Tensor is closedq\x01\x85q\x02Rq'
              b'\x03}q\x04b.',
    "step": b'\x80\x02caccel._core\nStepResult\nq\x00(\x88\x89\x88G?\xf0\x00\x00\x00\x00\x00\x00K\x03K\x0ctq\x01'
            b'\x81q\x02.',
    "dtype": b'\x80\x02caccel._core\nDType\nq\x00K\x02\x85q\x01Rq\x02.',
}


def test_pickles_of_the_one_module_binding_still_load():
    t = pickle.loads(OLD_PICKLES["tensor"])
    assert type(t) is accel.Tensor and t.dtype == accel.DType.FLOAT32 and t.tolist() == [[1.5, 2.0], [3.0, -4.0]]
    t.close()
    err = pickle.loads(OLD_PICKLES["error"])
    assert (type(err), err.status, err.message, err.rank) == (
        accel.InvalidArgumentError, accel.Status.INVALID_ARGUMENT, "msg of InvalidArgumentError", 3)
    closed = pickle.loads(OLD_PICKLES["closed"])
    assert type(closed) is accel.ClosedError and closed.message == "this Tensor is closed"
    assert pickle.loads(OLD_PICKLES["step"]) == accel.StepResult(True, False, True, 1.0, 3, 12)
    assert pickle.loads(OLD_PICKLES["dtype"]) is accel.DType.BFLOAT16


def test_objects_that_own_a_handle_refuse_copy_and_pickle():
    # Before: copy.copy of an Accelerator, Model, Inference or Tensor killed the process.
    out = assert_child_ok(f"""
        import copy, pickle
        import numpy as np
        import accel

        acc = accel.Accelerator(cpu=True, seed=1, num_threads=1)
        model = accel.Model.mlp(acc, [4, 8, 3])
        opt = accel.AdamW(model, lr=1e-3)
        sched = accel.get_linear_schedule_with_warmup(opt, 1, 10)
        loader = accel.DataLoader(acc, np.ones((8, 4), np.float32), np.zeros(8, np.int64), batch_size=4)
        inf = acc.inference(model)
        lm = accel.Model.from_config(acc, {LM_CONFIG!r})
        lm_opt = accel.Adafactor(lm)
        report = accel.sim.run(lambda a: a.process_index, world_size=2)
        tok = accel.Tokenizer({TOKENIZER!r})
        objects = [acc, model, opt, sched, loader, inf, lm, lm_opt, report, tok]
        ways = [copy.copy, copy.deepcopy] + [lambda o, p=p: pickle.dumps(o, protocol=p)
                                             for p in range(pickle.HIGHEST_PROTOCOL + 1)]
        for obj in objects:
            for way in ways:
                try:
                    way(obj)
                except TypeError as exc:
                    assert f"accel.{{type(obj).__name__}} cannot be copied or pickled" in str(exc), exc
                else:
                    raise SystemExit(f"{{type(obj).__name__}}: {{way}} did not raise")
            print(type(obj).__name__, "refused")
        print("hint:", copy.copy(model) if False else "")
        try:
            copy.copy(model)
        except TypeError as exc:
            print(exc)
        # the originals still work and close cleanly
        acc.prepare(model, opt, loader, sched)
        for x, y in loader:
            acc.backward(accel.cross_entropy(model(x), y))
            opt.step()
        print(inf.run(np.ones((1, 4), np.float32)).shape, report.results, tok.decode(tok.encode("ok")))
        inf.close(); report.close(); tok.close(); acc.close()
        print("DONE")
    """)
    for name in ("Accelerator", "Model", "AdamW", "Scheduler", "DataLoader", "Inference", "Adafactor",
                 "SimReport", "Tokenizer"):
        assert f"{name} refused" in out
    assert "acc.save_state(dir)" in out and "(1, 3) [0, 1] ok" in out


# ---- exceptions ----------------------------------------------------------------------------

def _errors():
    errs = [accel.error_for(code, f"message of {code}") for code in range(-10, 0)]
    errs += [accel.Error(7, "a status this binding does not know"), accel.ClosedError("this Tensor is closed")]
    return errs


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_errors_pickle_with_class_status_and_message(protocol):
    for err in _errors():
        back = pickle.loads(pickle.dumps(err, protocol=protocol))
        assert type(back) is type(err)
        assert (back.status, back.message, str(back), back.args) == (err.status, err.message, str(err), err.args)
        assert type(back.status) is type(err.status)
    io = pickle.loads(pickle.dumps(accel.error_for(-6, "cannot open x"), protocol=protocol))
    assert isinstance(io, OSError) and io.errno is None and io.strerror is None


def test_a_sim_error_pickles_with_its_rank_but_not_its_report():
    def fn(acc):
        if acc.process_index == 1:
            accel.AdamW(accel.Model.mlp(acc, [2, 2]), lr=-1)

    with pytest.raises(accel.InvalidArgumentError) as info:
        accel.sim.run(fn, world_size=2)
    back = pickle.loads(pickle.dumps(info.value))
    assert (type(back), back.status, back.message, back.rank) == (
        accel.InvalidArgumentError, accel.Status.INVALID_ARGUMENT, info.value.message, 1)
    assert not hasattr(back, "report")  # a C handle: not pickled (it stays on the original)
    info.value.report.close()


def _fail_in_child(kind):
    """Runs in a process pool's worker (spawned)."""
    import accel as child_accel
    if kind == "io":
        child_accel.read_token_file("/nonexistent/accel/tokens.bin")  # the library's IOError
    if kind == "argument":
        child_accel.Accelerator(cpu=True, seed=-1)
    raise child_accel.ClosedError("raised by hand")


@pytest.mark.parametrize("kind,cls,status,text", [
    ("io", accel.IOError, accel.Status.IO, "accel_token_file_read"),
    ("argument", accel.InvalidArgumentError, accel.Status.INVALID_ARGUMENT, "accel_options.seed"),
    ("closed", accel.ClosedError, accel.Status.INVALID_STATE, "raised by hand"),
])
def test_errors_cross_a_process_pool(kind, cls, status, text):
    ctx = multiprocessing.get_context("spawn")  # the library is loaded here: never fork it
    with concurrent.futures.ProcessPoolExecutor(max_workers=1, mp_context=ctx) as pool:
        with pytest.raises(accel.Error) as info:
            pool.submit(_fail_in_child, kind).result(timeout=120)
    assert type(info.value) is cls and info.value.status == status and text in info.value.message


def test_star_import_shadows_no_builtin():
    namespace = {}
    exec("from accel import *", namespace)
    assert not set(namespace) - {"__builtins__"} & set(dir(builtins))
    assert set(accel.__all__) <= set(dir(accel))
    # the subclasses of the builtins stay reachable as attributes (and caught as the builtins)
    assert issubclass(accel.IOError, OSError) and issubclass(accel.TimeoutError, TimeoutError)
    assert accel.IOError is accel.error_for(-6, "").__class__
    assert "IOError" not in accel.__all__ and "TimeoutError" not in accel.__all__


# ---- integers C cannot hold ----------------------------------------------------------------

def test_integers_out_of_range_are_invalid_argument_errors(acc, tmp_path):
    model = accel.Model.mlp(acc, [2, 2])
    x = np.ones((2, 2), np.float32)
    tok = accel.Tokenizer(TOKENIZER)
    sft = tmp_path / "sft.jsonl"
    sft.write_text('{"prompt": "a", "completion": "b"}\n')
    lm = accel.Model.from_config(acc, LM_CONFIG)
    ids, mask = np.ones((1, 2), np.int64), np.ones((1, 2), np.int64)
    cases = {
        "seed=-1": lambda: accel.Accelerator(cpu=True, seed=-1),
        "seed=2**64": lambda: accel.Accelerator(cpu=True, seed=2**64),
        "gradient_accumulation_steps=2**31": lambda: accel.Accelerator(cpu=True, gradient_accumulation_steps=2**31),
        "num_threads=inf": lambda: accel.Accelerator(cpu=True, num_threads=float("inf")),
        "timeout=10**400": lambda: accel.Accelerator(cpu=True, timeout=10**400),
        "bucket_bytes=-1": lambda: accel.Accelerator(cpu=True, bucket_bytes=-1),
        "set_seed(-1)": lambda: acc.set_seed(-1),
        "set_seed(nan)": lambda: acc.set_seed(float("nan")),
        "parameter(-1)": lambda: model.parameter(-1),
        "broadcast(from_process=2**40)": lambda: acc.broadcast(x, from_process=2**40),
        "pad dim=2**40": lambda: acc.pad_across_processes(x, dim=2**40),
        "layer size 2**63": lambda: accel.Model.mlp(acc, [2**63, 2]),
        "shape 2**64": lambda: accel.tensor(b"", dtype="uint8", shape=(2**64, 0)),
        "DataLoader seed=-1": lambda: accel.DataLoader(acc, x, x, seed=-1),
        "DataLoader batch_size=2**63": lambda: accel.DataLoader(acc, x, x, batch_size=2**63),
        "set_epoch(2**63)": lambda: accel.DataLoader(acc, x, x).set_epoch(2**63),
        "log step 2**64": lambda: acc.log({"a": 1.0}, step=2**64),
        "generate seed=-1": lambda: model.generate(np.zeros((1, 1), np.int64), seed=-1),
        "scheduler warmup 2**63": lambda: accel.Scheduler(accel.SGD(model), warmup_steps=2**63),
        "inference num_threads=2**31": lambda: acc.inference(model, num_threads=2**31),
        "estimate world_size=2**31": lambda: accel.estimate_memory("gpt2", world_size=2**31),
        "token_bytes=2**40": lambda: accel.write_token_file("/tmp/never", np.zeros(2, np.int64), token_bytes=2**40),
        "sim world_size=2**31": lambda: accel.sim.run(lambda a: None, world_size=2**31),
        "sim seed=-1": lambda: accel.sim.run(lambda a: None, world_size=1, seed=-1),
        "id_to_token(2**63)": lambda: tok.id_to_token(2**63),
        "is_special(-2**64)": lambda: tok.is_special(-2**64),
        "decode([2**63])": lambda: tok.decode([1, 2**63]),
        "decode(uint64 array)": lambda: tok.decode(np.array([2**64 - 1], np.uint64)),
        "encode max_length=2**63": lambda: tok.encode("a", max_length=2**63),
        "encode max_length=nan": lambda: tok.encode("a", max_length=float("nan")),
        "encode_batch pad_id=2**64": lambda: tok.encode_batch(["a"], pad_id=2**64),
        "encode_batch pad_to_multiple_of=inf": lambda: tok.encode_batch(["a"], pad_to_multiple_of=float("inf")),
        "special_id(2**40)": lambda: tok.special_id(2**40),
        "apply_chat chat_format=2**40": lambda: tok.apply_chat([("user", "a")], chat_format=2**40),
        "apply_chat chat_format=-1": lambda: tok.apply_chat([("user", "a")], chat_format=-1),
        "for_sft pad_id=2**64": lambda: accel.DataLoader.for_sft(acc, tok, sft, pad_id=2**64),
        "for_sft max_length=2**63": lambda: accel.DataLoader.for_sft(acc, tok, sft, max_length=2**63),
        "for_sft pad_to_multiple_of=-2**64": lambda: accel.DataLoader.for_sft(acc, tok, sft,
                                                                              pad_to_multiple_of=-2**64),
        "for_sft max_length=inf": lambda: accel.DataLoader.for_sft(acc, tok, sft, max_length=float("inf")),
        "for_sft batch_size=2**63": lambda: accel.DataLoader.for_sft(acc, tok, sft, batch_size=2**63),
        "for_sft seed=-1": lambda: accel.DataLoader.for_sft(acc, tok, sft, seed=-1),
        "for_sft padding_side=2**40": lambda: accel.DataLoader.for_sft(acc, tok, sft, padding_side=2**40),
        "for_lm padding_side=2**40": lambda: accel.DataLoader.for_lm(acc, np.arange(8), block_size=2,
                                                                     padding_side=2**40),
        "generate padded seed=-1": lambda: lm.generate(ids, attention_mask=mask, seed=-1),
        "generate padded max_new_tokens=2**63": lambda: lm.generate(ids, 2**63, attention_mask=mask),
        "generate padded eos_token_id=2**64": lambda: lm.generate(ids, attention_mask=mask, eos_token_id=2**64),
    }
    for name, call in cases.items():
        try:
            call()
        except accel.InvalidArgumentError as exc:
            assert "OverflowError" not in type(exc).__mro__.__repr__()
        except BaseException as exc:  # noqa: B902
            pytest.fail(f"{name}: {type(exc).__name__}: {exc}")
        else:
            pytest.fail(f"{name}: did not raise")


# ---- use after close -----------------------------------------------------------------------

def test_every_object_refuses_use_after_close():
    acc = accel.Accelerator(cpu=True, num_threads=1)
    model = accel.Model.mlp(acc, [2, 2])
    opt = accel.SGD(model)
    sched = accel.Scheduler(opt)
    loader = accel.DataLoader(acc, np.ones((2, 2), np.float32), np.zeros(2, np.int64))
    inf = acc.inference(model)
    t = accel.tensor(np.ones((1, 2), np.float32))
    report = accel.sim.run(lambda a: None, world_size=1)
    tok = accel.Tokenizer(TOKENIZER)
    acc.close()
    inf.close()
    t.close()
    report.close()
    tok.close()
    uses = [lambda: tok.encode("a"), lambda: tok.encode_batch(["a"]), lambda: tok.decode([0]),
            lambda: tok.vocab_size, lambda: tok.id_to_token(0), lambda: tok.token_to_id("a"), lambda: tok.eos_id,
            lambda: acc.process_index, lambda: model(np.ones((1, 2), np.float32)), lambda: opt.lr,
            lambda: sched.steps, lambda: len(loader), lambda: inf.run(np.ones((1, 2), np.float32)),
            lambda: t.numpy(), lambda: report.ranks, lambda: acc.backward(accel.tensor(1.0)),
            lambda: model.parameter(0), lambda: inf.weights]
    for use in uses:
        with pytest.raises(accel.ClosedError):
            use()
    for obj in (acc, model, opt, sched, loader, inf, t, report, tok):
        obj.close()  # still idempotent


def test_chat_fine_tuning_and_padded_generation_refuse_closed_objects(tmp_path):
    sft = tmp_path / "sft.jsonl"
    sft.write_text('{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}\n')
    acc = accel.Accelerator(cpu=True, num_threads=1)
    tok = accel.Tokenizer(TOKENIZER)
    loader = accel.DataLoader.for_sft(acc, tok, sft)
    lm_loader = accel.DataLoader.for_lm(acc, np.arange(1, 9), block_size=4)
    lm = accel.Model.from_config(acc, LM_CONFIG)
    ids, mask = np.ones((1, 2), np.int64), np.ones((1, 2), np.int64)
    x, _ = loader.next_batch()
    lm_loader.next_batch()
    lm_loader.close()
    with pytest.raises(accel.ClosedError, match="this DataLoader is closed"):
        lm_loader.attention_mask()
    tok.close()
    with pytest.raises(accel.ClosedError, match="this Tokenizer is closed"):
        tok.apply_chat([("user", "a")])
    with pytest.raises(accel.ClosedError, match="this Tokenizer is closed"):
        accel.DataLoader.for_sft(acc, tok, sft)  # never reaches C with a freed tokenizer
    assert loader.attention_mask().shape == x.shape  # the loader kept no reference to the tokenizer
    acc.close()
    uses = {"attention_mask": loader.attention_mask, "next_batch": loader.next_batch,
            "for_sft": lambda: accel.DataLoader.for_sft(acc, accel.Tokenizer(TOKENIZER), sft),
            "for_lm padding_side": lambda: accel.DataLoader.for_lm(acc, np.arange(8), block_size=2,
                                                                   padding_side="left"),
            "generate padded": lambda: lm.generate(ids, attention_mask=mask)}
    for name, use in uses.items():
        with pytest.raises(accel.ClosedError):
            use()
    for obj in (loader, lm_loader, lm, tok, acc):
        obj.close()  # idempotent


# ---- threads -------------------------------------------------------------------------------

def test_concurrent_closes_and_reads_from_threads():
    assert_child_ok("""
        import threading
        import numpy as np
        import accel

        for round in range(20):
            t = accel.tensor(np.arange(1000, dtype=np.float32))
            acc = accel.Accelerator(cpu=True, num_threads=1)
            model = accel.Model.mlp(acc, [4, 16, 2])
            inf = acc.inference(model)
            x = accel.tensor(np.ones((8, 4), np.float32))
            go = threading.Barrier(8)
            errors = []

            def worker(i):
                go.wait()
                try:
                    if i % 4 == 0:
                        t.close(); acc.close(); inf.close()
                    elif i % 4 == 1:
                        t.numpy(); t.item() if t.numel == 1 else t.shape
                    elif i % 4 == 2:
                        model(x); acc.sync_gradients; model.num_parameters
                    else:
                        inf.run(x)
                except accel.ClosedError:
                    pass
                except BaseException as exc:
                    errors.append(repr(exc))

            threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
            for th in threads: th.start()
            for th in threads: th.join()
            assert not errors, errors
            assert t.closed and acc.closed and inf.closed and model.closed
        print("DONE")
    """)


def test_a_tokenizer_closed_while_threads_use_it():
    # A Tokenizer is shared by threads without a lock around its calls: a close() from one of them
    # must neither free it under a running call nor let a later call reach C.
    out = assert_child_ok(f"""
        import threading
        import accel

        texts = ["close me while I am encoding 你好 🙂 " * 20] * 16
        for round in range(30):
            tok = accel.Tokenizer({TOKENIZER!r})
            want = tok.encode(texts[0])
            chat = tok.apply_chat([("user", texts[0])])
            go = threading.Barrier(8)
            errors, done = [], []

            def worker(i):
                go.wait()
                try:
                    for _ in range(20):
                        if i == 0:
                            tok.close()
                        elif i % 3 == 1:
                            assert tok.encode(texts[0]) == want
                        elif i % 3 == 2:
                            ids, mask = tok.encode_batch(texts)
                            assert tok.batch_decode(ids) == texts
                        else:
                            assert tok.decode(want) == texts[0] and tok.id_to_token(want[0])
                            assert tok.apply_chat([("user", texts[0])]) == chat
                    done.append(i)
                except accel.ClosedError:
                    done.append(i)
                except BaseException as exc:
                    errors.append(repr(exc))

            threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
            for th in threads: th.start()
            for th in threads: th.join()
            assert not errors, errors
            assert len(done) == 8 and tok.closed and tok._h is None and tok._uses == 0  # released
        # the finalizer of a tokenizer nobody closed, and of one whose results outlive it
        kept = accel.Tokenizer({TOKENIZER!r}).encode("kept", return_tensor=True)
        print(kept.tolist(), accel.Tokenizer({TOKENIZER!r}).id_to_token(1200))
        print("DONE")
    """, timeout=120)
    assert "<|im_end|>" in out


def test_concurrent_training_calls_on_one_accelerator_are_serialised():
    out = assert_child_ok("""
        import threading
        import numpy as np
        import accel

        acc = accel.Accelerator(cpu=True, seed=3, num_threads=1)
        model = accel.Model.mlp(acc, [4, 16, 3])
        opt = accel.AdamW(model, lr=1e-3)
        acc.prepare(model, opt)
        x = accel.tensor(np.random.default_rng(0).normal(size=(8, 4)).astype(np.float32))
        y = accel.tensor(np.arange(8, dtype=np.int64) % 3)
        errors = []

        def train():
            try:
                for _ in range(25):
                    acc.backward(accel.cross_entropy(model(x), y))
                    opt.step()
                    acc.clip_grad_norm_(1.0)
                    _ = acc.process_index, opt.lr, model.num_parameters
            except BaseException as exc:
                errors.append(repr(exc))

        threads = [threading.Thread(target=train) for _ in range(4)]
        for th in threads: th.start()
        for th in threads: th.join()
        assert not errors, errors
        acc.backward(accel.cross_entropy(model(x), y))
        r = opt.step()
        loss = accel.cross_entropy(model(x), y).item()
        print("micro_steps", r.micro_steps, "optimizer_steps", 0 < r.optimizer_steps <= 101, "finite", np.isfinite(loss))
        acc.close()
        print("DONE")
    """)
    assert "micro_steps 101 optimizer_steps True finite True" in out, out


def test_another_ranks_accelerator_errors_and_never_hangs():
    out = assert_child_ok("""
        import numpy as np
        import accel

        kept = {}

        def fn(acc):
            r = acc.process_index
            kept[r] = (acc, accel.Model.mlp(acc, [2, 2]))
            acc.wait_for_everyone()
            other_acc, other_model = kept[1 - r]
            for use in (lambda: other_acc.reduce(np.ones(2, np.float32)), lambda: other_acc.process_index,
                        lambda: other_model(np.ones((1, 2), np.float32)), lambda: other_acc.close(),
                        lambda: accel.SGD(other_model), lambda: other_acc.save_state("/tmp/never")):
                try:
                    use()
                except accel.InvalidStateError as exc:
                    assert "another simulated rank" in str(exc), exc
                else:
                    raise AssertionError("another rank's Accelerator was usable")
            acc.wait_for_everyone()
            return r

        report = accel.sim.run(fn, world_size=2, timeout=20)
        print(report.results)
        # once the ranks returned, their Accelerators are closed
        for acc, model in kept.values():
            for use in (lambda: acc.process_index, lambda: model.num_parameters):
                try:
                    use()
                except accel.ClosedError:
                    pass
                else:
                    raise AssertionError("a returned rank's Accelerator was usable")
        print("DONE")
    """, timeout=60)
    assert "[0, 1]" in out


# ---- NUL bytes -----------------------------------------------------------------------------

def test_nul_bytes_in_strings_are_refused_never_truncated(acc, tmp_path):
    model = accel.Model.mlp(acc, [2, 2])
    bad = str(tmp_path / "x\0y")
    calls = {
        "load_torchscript": lambda: accel.Model.load_torchscript(acc, bad),
        "from_pretrained": lambda: accel.Model.from_pretrained(acc, bad),
        "from_config": lambda: accel.Model.from_config(acc, bad),
        "save_state": lambda: acc.save_state(bad),
        "load_state": lambda: acc.load_state(bad),
        "set_project": lambda: acc.set_project(bad),
        "save_model": lambda: acc.save_model(model, bad + ".safetensors"),
        "save_pretrained": lambda: acc.save_pretrained(model, bad),
        "init_trackers": lambda: acc.init_trackers(bad),
        "print": lambda: acc.print("a\0b"),
        "charge_compute label": lambda: acc.charge_compute(0.1, "a\0b"),
        "add_lora target_modules": lambda: model.add_lora(target_modules=["q\0proj"]),
        "load_adapter": lambda: model.load_adapter(bad),
        "save_adapter": lambda: model.save_adapter(bad),
        "write_token_file": lambda: accel.write_token_file(bad, np.zeros(2, np.int64)),
        "read_token_file": lambda: accel.read_token_file(bad),
        "estimate_memory model": lambda: accel.estimate_memory("gpt2\0x"),
        "estimate_memory lora_target_modules": lambda: accel.estimate_memory("gpt2", lora_rank=2,
                                                                            lora_target_modules="q\0v"),
        "sim topology": lambda: accel.sim.run(lambda a: None, world_size=1, topology="8xH100\0x"),
        "sim faults": lambda: accel.sim.run(lambda a: None, world_size=1, faults="kill:0\0"),
        "sim device_memory": lambda: accel.sim.run(lambda a: None, world_size=1, device_memory="1GiB\0"),
        "sim trace_path": lambda: accel.sim.run(lambda a: None, world_size=1, trace_path=bad),
        "Tokenizer path": lambda: accel.Tokenizer(TOKENIZER + "\0/tokenizer.json"),
        "token_to_id": lambda: accel.Tokenizer(TOKENIZER).token_to_id("<|im_start|>\0x"),
        "apply_chat content": lambda: accel.Tokenizer(TOKENIZER).apply_chat([("user", "a\0b")]),
        "apply_chat role": lambda: accel.Tokenizer(TOKENIZER).apply_chat([{"role": "user\0", "content": "a"}]),
        "apply_chat bytes content": lambda: accel.Tokenizer(TOKENIZER).apply_chat([("user", b"a\0b")]),
        "for_sft path": lambda: accel.DataLoader.for_sft(acc, accel.Tokenizer(TOKENIZER), bad),
    }
    for name, call in calls.items():
        with pytest.raises(accel.InvalidArgumentError, match="NUL") as info:
            call()
        assert isinstance(info.value, ValueError), name
    acc.init_trackers(tmp_path / "logs")
    with pytest.raises(accel.InvalidArgumentError, match="NUL"):
        acc.log({"lo\0ss": 1.0}, step=0)
    assert sorted(os.listdir(tmp_path)) == ["logs"]  # nothing written to a truncated path


# ---- wrong dtypes and shapes ---------------------------------------------------------------

def test_wrong_dtypes_and_shapes_are_accel_errors(acc):
    model = accel.Model.mlp(acc, [4, 3])
    acc.prepare(model, accel.SGD(model))
    good = np.ones((2, 4), np.float32)
    calls = {
        "forward: wrong width": lambda: model(np.ones((2, 5), np.float32)),
        "forward: wrong rank": lambda: model(np.ones(4, np.float32)),
        "forward: int input": lambda: model(np.ones((2, 4), np.int64)),
        "cross_entropy: float targets": lambda: accel.cross_entropy(model(good), np.zeros(2, np.float32)),
        "cross_entropy: wrong batch": lambda: accel.cross_entropy(model(good), np.zeros(3, np.int64)),
        "mse_loss: shape": lambda: accel.mse_loss(model(good), np.zeros((2, 4), np.float32)),
        "backward: not a scalar": lambda: acc.backward(model(good)),
        "tensor: shape": lambda: accel.tensor(np.ones(6, np.float32), shape=(4, 2)),
        "tensor: negative dim": lambda: accel.tensor(np.ones(0, np.float32), shape=(-1, 0)),
        "tensor: unknown dtype": lambda: accel.tensor(np.ones(2, np.complex64)),
        "tensor: bad dtype name": lambda: accel.tensor(np.ones(2, np.float32), dtype="float13"),
        "tensor: odd bytes": lambda: accel.tensor(b"abc", dtype="float32"),
        "DataLoader: lengths": lambda: accel.DataLoader(acc, np.ones((3, 4), np.float32), np.zeros(2, np.int64)),
        "copy_to: size": lambda: accel.tensor(np.ones(2, np.float32)).copy_to(bytearray(7)),
        "numpy: bfloat16": lambda: accel.tensor(np.ones(2, np.float32)).numpy(dtype="bfloat16"),
    }
    for name, call in calls.items():
        try:
            call()
        except accel.InvalidArgumentError:
            pass
        except BaseException as exc:  # noqa: B902
            pytest.fail(f"{name}: {type(exc).__name__}: {exc}")
        else:
            pytest.fail(f"{name}: did not raise")


def test_wrong_tokenizer_arguments_are_accel_errors():
    tok = accel.Tokenizer(TOKENIZER)
    floats = accel.tensor(np.ones(2, np.float32))
    ids_2d = accel.tensor(np.ones((2, 2), np.int64))
    calls = {
        "encode(5)": lambda: tok.encode(5),
        "encode(None)": lambda: tok.encode(None),
        "encode([text])": lambda: tok.encode(["a"]),
        "encode truncation_side='middle'": lambda: tok.encode("a", truncation_side="middle"),
        "encode truncation_side=None": lambda: tok.encode("a", truncation_side=None),
        "encode max_length='x'": lambda: tok.encode("a", max_length="x"),
        "encode_batch(str)": lambda: tok.encode_batch("abc"),
        "encode_batch(bytes)": lambda: tok.encode_batch(b"abc"),
        "encode_batch(5)": lambda: tok.encode_batch(5),
        "encode_batch([1])": lambda: tok.encode_batch(["a", 1]),
        "encode_batch([])": lambda: tok.encode_batch([]),
        "encode_batch padding_side='top'": lambda: tok.encode_batch(["a"], padding_side="top"),
        "encode_batch padding_side=7": lambda: tok.encode_batch(["a"], padding_side=7),
        "decode(str)": lambda: tok.decode("abc"),
        "decode(None)": lambda: tok.decode(None),
        "decode([1.5])": lambda: tok.decode([1, 1.5]),
        "decode([[1]])": lambda: tok.decode([[1]]),
        "decode(float array)": lambda: tok.decode(np.ones(2, np.float32)),
        "decode(float tensor)": lambda: tok.decode(floats),
        "decode(2-D tensor)": lambda: tok.decode(ids_2d),
        "batch_decode(1-D tensor)": lambda: tok.batch_decode(accel.tensor(np.ones(2, np.int64))),
        "batch_decode(float tensor)": lambda: tok.batch_decode(accel.tensor(np.ones((1, 2), np.float32))),
        "batch_decode([1, 2])": lambda: tok.batch_decode([1, 2]),
        "batch_decode(str)": lambda: tok.batch_decode("ab"),
        "id_to_token('3')": lambda: tok.id_to_token("3"),
        "id_to_token(1.0)": lambda: tok.id_to_token(1.0),
        "is_special(None)": lambda: tok.is_special(None),
        "token_to_id(5)": lambda: tok.token_to_id(5),
        "special_id('cls')": lambda: tok.special_id("cls"),
        "special_id(9)": lambda: tok.special_id(9),
    }
    for name, call in calls.items():
        try:
            call()
        except accel.InvalidArgumentError:
            pass
        except BaseException as exc:  # noqa: B902
            pytest.fail(f"{name}: {type(exc).__name__}: {exc}")
        else:
            pytest.fail(f"{name}: did not raise")
    with pytest.raises(accel.InvalidStateError, match="already loaded"):
        tok.__init__(TOKENIZER)  # would leak or replace the handle under other threads
    assert tok.decode(tok.encode("still fine")) == "still fine"
    tok.close()


def test_wrong_chat_fine_tuning_and_generation_arguments_are_accel_errors(acc, tmp_path):
    tok = accel.Tokenizer(TOKENIZER)
    sft = tmp_path / "sft.jsonl"
    sft.write_text('{"text": "fine"}\n')
    lm = accel.Model.from_config(acc, LM_CONFIG)
    ids = np.ones((2, 3), np.int64)
    other = accel.Accelerator(cpu=True, num_threads=1)
    other_loader = accel.DataLoader.for_lm(other, np.arange(1, 13), block_size=3, batch_size=2)
    other_loader.next_batch()
    other_mask = other_loader.attention_mask()  # a tensor of another Accelerator's context
    ok = [("user", "hi")]
    calls = {
        "apply_chat(5)": lambda: tok.apply_chat(5),
        "apply_chat(None)": lambda: tok.apply_chat(None),
        "apply_chat(str)": lambda: tok.apply_chat("hello"),
        "apply_chat(bytes)": lambda: tok.apply_chat(b"hello"),
        "apply_chat(one dict)": lambda: tok.apply_chat({"role": "user", "content": "hi"}),
        "apply_chat([str])": lambda: tok.apply_chat(["hi"]),
        "apply_chat([None])": lambda: tok.apply_chat([None]),
        "apply_chat([5])": lambda: tok.apply_chat([5]),
        "apply_chat([(role,)])": lambda: tok.apply_chat([("user",)]),
        "apply_chat([(a, b, c)])": lambda: tok.apply_chat([("user", "a", "b")]),
        "apply_chat([(role, 5)])": lambda: tok.apply_chat([("user", 5)]),
        "apply_chat([(None, text)])": lambda: tok.apply_chat([(None, "a")]),
        "apply_chat([(role, None)])": lambda: tok.apply_chat([("assistant", None)]),
        "apply_chat([dict without content])": lambda: tok.apply_chat([{"role": "user"}]),
        "apply_chat([dict without role])": lambda: tok.apply_chat([{"content": "hi"}]),
        "apply_chat([dict, content list])": lambda: tok.apply_chat([{"role": "user", "content": ["a"]}]),
        "apply_chat gemma without a BOS": lambda: tok.apply_chat(ok, chat_format="gemma"),
        "apply_chat chat_format='html'": lambda: tok.apply_chat(ok, chat_format="html"),
        "apply_chat chat_format=6": lambda: tok.apply_chat(ok, chat_format=6),
        "apply_chat chat_format=None": lambda: tok.apply_chat(ok, chat_format=None),
        "apply_chat chat_format=1.0": lambda: tok.apply_chat(ok, chat_format=1.0),
        "for_sft chat_format='x'": lambda: accel.DataLoader.for_sft(acc, tok, sft, chat_format="x"),
        "for_sft chat_format=-1": lambda: accel.DataLoader.for_sft(acc, tok, sft, chat_format=-1),
        "for_sft padding_side='top'": lambda: accel.DataLoader.for_sft(acc, tok, sft, padding_side="top"),
        "for_sft padding_side=None": lambda: accel.DataLoader.for_sft(acc, tok, sft, padding_side=None),
        "for_sft max_length='x'": lambda: accel.DataLoader.for_sft(acc, tok, sft, max_length="x"),
        "for_sft path=''": lambda: accel.DataLoader.for_sft(acc, tok, ""),
        "for_sft iterable with shuffle": lambda: accel.DataLoader.for_sft(acc, tok, sft, iterable=True, shuffle=True),
        "for_lm padding_side='middle'": lambda: accel.DataLoader.for_lm(acc, np.arange(8), block_size=2,
                                                                        padding_side="middle"),
        "attention_mask of a loader of tensors": lambda: (
            lambda dl: (dl.next_batch(), dl.attention_mask()))(accel.DataLoader(acc, np.ones((2, 2), np.float32))),
        "generate attention_mask='abc'": lambda: lm.generate(ids, attention_mask="abc"),
        "generate attention_mask=object()": lambda: lm.generate(ids, attention_mask=object()),
        "generate attention_mask float": lambda: lm.generate(ids, attention_mask=np.ones((2, 3), np.float32)),
        "generate attention_mask 1-D": lambda: lm.generate(ids, attention_mask=np.ones(3, np.int64)),
        "generate attention_mask wider": lambda: lm.generate(ids, attention_mask=np.ones((2, 4), np.int64)),
        "generate attention_mask right padding": lambda: lm.generate(ids, attention_mask=np.array([[1, 1, 0]] * 2)),
        "generate attention_mask of another context": lambda: lm.generate(np.ones((2, 3), np.int64),
                                                                         attention_mask=other_mask),
        "generate padded float ids": lambda: lm.generate(np.ones((2, 3), np.float32), attention_mask=ids),
        "generate padded ids outside the vocabulary": lambda: lm.generate(ids * 10**6, attention_mask=ids),
    }
    for name, call in calls.items():
        try:
            call()
        except accel.InvalidArgumentError:
            pass
        except BaseException as exc:  # noqa: B902
            pytest.fail(f"{name}: {type(exc).__name__}: {exc}")
        else:
            pytest.fail(f"{name}: did not raise")
    # objects of the wrong kind: TypeError, as an optimizer given something that is not a Model
    for name, call in {"for_sft(tokenizer=path)": lambda: accel.DataLoader.for_sft(acc, TOKENIZER, sft),
                       "for_sft(tokenizer=None)": lambda: accel.DataLoader.for_sft(acc, None, sft),
                       "for_sft(path=5)": lambda: accel.DataLoader.for_sft(acc, tok, 5)}.items():
        with pytest.raises(TypeError):
            call()
    # the objects still work
    assert tok.apply_chat(ok).startswith("<|im_start|>user\nhi")
    assert accel.DataLoader.for_sft(acc, tok, sft).next_batch()[0].shape[0] == 1
    tok.close()
    other.close()


# ---- exceptions in callbacks (sim.run's function) ------------------------------------------

class _OddError(Exception):
    def __init__(self, a, b):  # a constructor that does not take a message
        super().__init__(a, b)


def test_python_exceptions_in_a_rank_come_back_as_python_exceptions():
    def raises(exc):
        def fn(acc):
            if acc.process_index == 1:
                raise exc
            acc.wait_for_everyone()
        return fn

    with pytest.raises(ZeroDivisionError, match="sim rank 1: ZeroDivisionError") as info:
        accel.sim.run(raises(ZeroDivisionError("boom")), world_size=2, timeout=20)
    assert str(info.value.__cause__) == "boom" and info.value.rank == 1
    with pytest.raises(accel.InternalError, match="sim rank 1: _OddError") as info:
        accel.sim.run(raises(_OddError(1, 2)), world_size=2, timeout=20)
    assert isinstance(info.value.__cause__, _OddError)
    with pytest.raises(KeyboardInterrupt, match="sim rank 1"):
        accel.sim.run(raises(KeyboardInterrupt()), world_size=2, timeout=20)


def test_an_accel_error_in_a_rank_keeps_the_ranks_own_message():
    # An error the binding raised itself (before any C call): the library only knew the status.
    def fn(acc):
        if acc.process_index == 1:
            accel.Model.mlp(acc, [2, 2], activation="nope")

    with pytest.raises(accel.InvalidArgumentError) as info:
        accel.sim.run(fn, world_size=2)
    msg = info.value.message
    assert msg == "accel_sim_run: rank 1: activation must be one of relu, gelu, tanh, sigmoid; got 'nope'", msg
    assert "ACCEL_ERR" not in msg and info.value.rank == 1
    assert isinstance(info.value.__cause__, accel.InvalidArgumentError)
    info.value.report.close()

    # ... and one from C keeps the library's message
    def fn2(acc):
        accel.AdamW(accel.Model.mlp(acc, [2, 2]), lr=-1)

    with pytest.raises(accel.InvalidArgumentError, match=r"^accel_sim_run: rank 0: accel_optimizer_create_adamw: lr"):
        accel.sim.run(fn2, world_size=2)


def test_a_crashing_callback_value_never_reaches_c():
    # fn returns something odd, raises from a finalizer, or raises SystemExit: the run ends in Python
    out = assert_child_ok("""
        import accel

        class Bad:
            def __del__(self):
                raise RuntimeError("from a finalizer")

        report = accel.sim.run(lambda acc: Bad(), world_size=2)
        report.close()
        try:
            accel.sim.run(lambda acc: (_ for _ in ()).throw(SystemExit(3)), world_size=2, timeout=20)
        except SystemExit as exc:
            print("SystemExit", exc)
        print("DONE")
    """, timeout=60)
    assert "SystemExit sim rank 0" in out
