"""Kernels over Dask arrays (dualbcast.dask): lazy maps, tree-reduced sums and partials,
on a distributed.LocalCluster of two worker processes, against the in-memory NumPy call."""
import math
import pickle

import numpy as np
import pytest

da = pytest.importorskip("dask.array", reason="Dask not installed (the [dask] extra)")
distributed = pytest.importorskip("distributed", reason="distributed not installed (the [dask] extra)")
import dask  # noqa: E402

import dualbcast as db  # noqa: E402


@db.fast_broadcast
def leaky(x, a, c):
    if x > 0.0:
        return a * x * x + c * math.log1p(x)
    return a * (math.exp(x) - 1.0) + c


@pytest.fixture(scope="module")
def client():
    """Two worker processes (kernels travel to them pickled), started and stopped here."""
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, \
            distributed.Client(cluster) as client:
        yield client


def _data(shape, seed=0, dtype=np.float64):
    return np.random.default_rng(seed).uniform(-1.0, 2.0, shape).astype(dtype)


# (x shape and chunks, a, c): a Dask array, NumPy arrays, numbers and smaller Dask arrays
# broadcast against it
CASES = [
    (((1000,), 300), lambda: 0.5, lambda: 0.25),
    (((40, 30), (7, 11)), lambda: _data((30,), 1), lambda: 0.25),
    (((40, 30), (40, 8)), lambda: _data((40, 1), 1), lambda: da.from_array(_data((30,), 2), 13)),
    (((6, 5, 4), (2, 5, 3)), lambda: da.from_array(_data((5, 1), 1), (2, 1)), lambda: np.float64(0.1)),
    (((50,), 50), lambda: _data((50,), 1), lambda: _data((50,), 2)),
]


def _in_memory(arg):
    return arg.compute() if isinstance(arg, da.Array) else arg


@pytest.mark.parametrize("case", range(len(CASES)))
def test_map_sum_and_partials_match_in_memory(client, case):
    (shape, chunks), a, c = CASES[case]
    x_np = _data(shape)
    args = (da.from_array(x_np, chunks=chunks), a(), c())
    numpy_args = tuple(_in_memory(arg) for arg in args)
    wrt = (0, 1, 2)

    mapped = leaky(*args)
    assert isinstance(mapped, da.Array) and mapped.shape == np.broadcast_shapes(
        *map(np.shape, numpy_args))
    np.testing.assert_array_equal(mapped.compute(), leaky(*numpy_args))   # the same loop

    total = leaky.sum(*args)
    assert isinstance(total, da.Array) and total.shape == ()
    np.testing.assert_allclose(total.compute(), leaky.sum(*numpy_args), rtol=1e-12)

    value, partials = leaky.value_and_partials(*args, wrt=wrt)
    expected_value, expected_partials = leaky.value_and_partials(*numpy_args, wrt=wrt)
    got = dask.compute(value, partials)
    np.testing.assert_array_equal(got[0], expected_value)
    for p, q in zip(got[1], expected_partials):
        np.testing.assert_array_equal(p, q)

    total, gradients = leaky.sum_and_partials(*args, wrt=wrt)
    expected_total, expected_gradients = leaky.sum_and_partials(*numpy_args, wrt=wrt)
    got_total, got_gradients = dask.compute(total, gradients)
    np.testing.assert_allclose(got_total, expected_total, rtol=1e-12)
    for g, h, arg in zip(got_gradients, expected_gradients, numpy_args):
        assert np.shape(g) == np.shape(arg)
        assert np.result_type(g) == np.result_type(h)
        np.testing.assert_allclose(g, h, rtol=1e-12, atol=1e-12)


def test_float32_and_single_wrt(client):
    x_np = _data((500,), dtype=np.float32)
    x = da.from_array(x_np, chunks=128)
    total, gradient = leaky.sum_and_partials(x, 0.5, 0.25, wrt=0)
    expected_total, expected = leaky.sum_and_partials(x_np, 0.5, 0.25, wrt=0)
    assert total.dtype == np.float32 and gradient.dtype == np.float32
    np.testing.assert_allclose(total.compute(), expected_total, rtol=1e-5)
    np.testing.assert_array_equal(gradient.compute(), expected)   # blockwise: the same loop


def test_a_closure_kernel_travels_by_value(client):
    """A kernel no module holds (a closure) is pickled with its function and values."""
    scale = 3.0

    @db.fast_broadcast
    def scaled(x):
        return scale * math.sin(x)
    x_np = _data((300,))
    total, gradient = scaled.sum_and_partials(da.from_array(x_np, chunks=100), wrt=0)
    got_total, got_gradient = dask.compute(total, gradient)
    np.testing.assert_allclose(got_total, 3.0 * np.sin(x_np).sum(), rtol=1e-12)
    np.testing.assert_allclose(got_gradient, 3.0 * np.cos(x_np), rtol=1e-12)


def test_kernels_pickle_by_name_or_by_function():
    assert pickle.loads(pickle.dumps(leaky)) is leaky
    cloudpickle = pytest.importorskip("cloudpickle")
    offset = 2.0
    shifted = db.fast_broadcast(lambda x: x + offset)
    copy = cloudpickle.loads(cloudpickle.dumps(shifted))
    assert copy is not shifted and copy(1.0) == 3.0
    # a script's kernel: its __main__ is not a worker's, so it goes by value
    script = {"__name__": "__main__", "db": db}
    exec("@db.fast_broadcast\ndef doubled(x):\n    return 2.0 * x\n", script)
    assert script["doubled"].__reduce__()[0].__name__ == "_unpickled"
    assert cloudpickle.loads(cloudpickle.dumps(script["doubled"]))(1.5) == 3.0


def test_sum_and_partials_is_one_pass_over_each_block():
    """Values and gradients come from one task per block: each block of the input is
    produced once by dask.compute of both."""
    produced = []

    def block(k):
        produced.append(k)
        return _data((100,), seed=k)
    x = da.concatenate([da.from_delayed(dask.delayed(block)(k), (100,), np.float64)
                        for k in range(5)])
    total, (gx, ga) = leaky.sum_and_partials(x, 0.5, 0.25, wrt=(0, 1))
    dask.compute(total, gx, ga, scheduler="synchronous")
    assert sorted(produced) == list(range(5))
    produced.clear()
    x_np = np.concatenate([_data((100,), seed=k) for k in range(5)])
    np.testing.assert_allclose(ga.compute(scheduler="synchronous"),
                               leaky.sum_and_partials(x_np, 0.5, 0.25, wrt=1)[1], rtol=1e-12)


def test_eam_energy_value_and_gradient_over_blocks(client):
    """The EAM energy E = F(sum rho(x)) and dE/dx, lazily, against the in-memory result."""
    rho = db.fast_broadcast(lambda r: math.exp(-3.0 * (r + 1.0)))
    x_np = _data((10_000,))
    p, g = rho.sum_and_partials(da.from_array(x_np, chunks=1000), wrt=0)
    energy = p ** 2 + p ** 3 + 0.25 * p ** 4
    gradient = (2.0 * p + 3.0 * p ** 2 + p ** 3) * g
    got_energy, got_gradient = dask.compute(energy, gradient)
    P, G = rho.sum_and_partials(x_np, wrt=0)
    np.testing.assert_allclose(got_energy, P ** 2 + P ** 3 + 0.25 * P ** 4, rtol=1e-12)
    np.testing.assert_allclose(got_gradient, (2.0 * P + 3.0 * P ** 2 + P ** 3) * G, rtol=1e-12)


def test_unknown_chunk_sizes_are_refused_before_any_work():
    x = da.from_array(_data((100,)), chunks=10)
    unknown = x[x > 0]
    with pytest.raises(ValueError, match=r"argument 0 is a Dask array with unknown chunk "
                                         r"sizes.*compute_chunk_sizes"):
        leaky.sum(unknown, 0.5, 0.25)


@pytest.mark.parametrize("call, error, message", [
    (lambda x: leaky(x.astype(np.complex128), 0.5, 0.25), TypeError, "complex"),
    (lambda x: leaky.sum(x, da.ones(7), 0.25), ValueError, "could not be broadcast"),
    (lambda x: leaky.sum_and_partials(x.astype(np.int64), 0.5, 0.25, wrt=0), TypeError,
     "cannot differentiate with respect to argument 0 of dtype int64"),
    (lambda x: leaky.sum_and_partials(x, 0.5, 0.25, wrt=0, out=np.empty(100)), TypeError,
     "out= takes NumPy arrays"),
    (lambda x: leaky.jvp(x, 0.5, 0.25, tangents={0: 1.0}), TypeError, "jvp"),
    (lambda x: db.value_and_grad(lambda x: leaky.sum(x, 0.5, 0.25))(x), TypeError,
     "argument 0: it is a Dask array"),
    (lambda x: db.grad(lambda a: leaky.sum(x, a, 0.25))(0.5), TypeError,
     "inside a traced function"),
])
def test_bad_input_is_refused_before_any_work(call, error, message):
    x = da.from_array(_data((100,)), chunks=10)
    with pytest.raises(error, match=message):
        call(x)


def test_a_kernel_pickled_by_name_must_read_the_same_where_it_lands(tmp_path):
    """By name, a kernel is the module's where it is unpickled: if a global it reads was
    rebound where it was pickled, unpickling says so instead of computing with the
    module's own value (a worker would import the module afresh)."""
    import subprocess
    import sys
    (tmp_path / "scaled_kernels.py").write_text(
        "import dualbcast as db\nSCALE = 2.0\n\n@db.fast_broadcast\n"
        "def scaled(x):\n    return SCALE * x\n")
    load = ("import pickle, sys\nk = pickle.loads(sys.stdin.buffer.read())\n"
            "print(float(k.sum([1.0, 2.0])))\n")
    sys.path.insert(0, str(tmp_path))
    try:
        import scaled_kernels
        as_is = pickle.dumps(scaled_kernels.scaled)
        scaled_kernels.SCALE = 3.0
        rebound = pickle.dumps(scaled_kernels.scaled)
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("scaled_kernels", None)
    runs = [subprocess.run([sys.executable, "-c", load], input=data, capture_output=True,
                           cwd=tmp_path, timeout=300) for data in (as_is, rebound)]
    assert runs[0].returncode == 0 and runs[0].stdout.decode().strip() == "6.0"
    assert runs[1].returncode != 0
    assert b"does not read what it read where it was pickled" in runs[1].stderr
