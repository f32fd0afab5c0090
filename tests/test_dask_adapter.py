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


def test_a_process_unpickles_a_kernel_by_function_once_per_fingerprint():
    """Each Dask task unpickles its kernel: copies reading the same code and values are
    one kernel (compiled once per process); a copy reading another value is another."""
    cloudpickle = pytest.importorskip("cloudpickle")

    def make(offset):
        @db.fast_broadcast
        def shifted(x):
            return x + offset
        return shifted
    first, second = (cloudpickle.loads(cloudpickle.dumps(make(2.0))) for _ in range(2))
    assert first is second and first(1.0) == 3.0
    other = cloudpickle.loads(cloudpickle.dumps(make(5.0)))
    assert other is not first and other(1.0) == 6.0 and first(1.0) == 3.0


def test_workers_compile_a_by_value_kernel_once(client):
    scale = 1.5

    @db.fast_broadcast
    def scaled_exp(x):
        return scale * math.exp(-x)
    x = da.from_array(_data((2000,)), chunks=100)          # 20 tasks on 2 workers
    total, gradient = dask.compute(*scaled_exp.sum_and_partials(x, wrt=0))
    np.testing.assert_allclose(total, 1.5 * np.exp(-_data((2000,))).sum(), rtol=1e-12)

    def copies():
        import importlib
        module = importlib.import_module("dualbcast.kernel.fast_broadcast")
        return sum(key[1].endswith("scaled_exp") for key in module._UNPICKLED)
    assert set(client.run(copies).values()) <= {0, 1}


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
    # the reverse-mode core over Dask arrays: first order, eager tracing only
    (lambda x: db.jvp(lambda x: np.sum(x), (x,), (np.ones(100),)), TypeError,
     "jvp: a Dask array among the primals"),
    (lambda x: db.jvp(lambda a: leaky.sum(x, a, 0.25), (0.5,), (1.0,)), TypeError,
     "leaky: called on Dask arrays inside jvp"),
    (lambda x: db.grad(lambda a: db.grad(lambda a: leaky.sum(x, a, 0.25))(a))(0.5),
     TypeError, "inside jvp, a nested derivative or dualbcast.jit"),
    (lambda x: db.jit(db.grad(lambda x: np.sum(x)))(x), TypeError, "not by .*dualbcast.jit"),
    (lambda x: db.grad(lambda x: np.sum(x))(x.astype(np.int64)), TypeError,
     "a Dask array of dtype int64: only float arrays"),
    (lambda x: db.grad(lambda x: np.sum(x))(x[x > 0]), ValueError,
     "unknown chunk sizes .*compute_chunk_sizes"),
    (lambda x: db.grad(lambda x: 2.0 * x)(x), TypeError, "returned a Dask array of shape"),
    (lambda x: db.value_and_grad(lambda x: np.sum(x), out=np.empty(100))(x), ValueError,
     "out= takes NumPy arrays"),
    (lambda x: db.grad(lambda x: np.sum(x[np.array([1, 1, 2])]))(x), NotImplementedError,
     "indexing a traced Dask array with index arrays"),
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
    import os
    # (the dualbcast this test imported: its sources are part of the fingerprint)
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(db.__file__)))
    runs = [subprocess.run([sys.executable, "-c", load], input=data, capture_output=True,
                           cwd=tmp_path, env=env, timeout=300) for data in (as_is, rebound)]
    assert runs[0].returncode == 0 and runs[0].stdout.decode().strip() == "6.0"
    assert runs[1].returncode != 0
    assert b"does not read what it read where it was pickled" in runs[1].stderr


# ---------------------------------------------------------------- value_and_grad over Dask
# Programs of kernel maps and sums, NumPy elementwise functions and reductions, slices and
# scalar arithmetic, differentiated over Dask arrays: the results are lazy Dask arrays,
# computed with the value in one pass, equal to the same program over NumPy arrays.

@db.fast_broadcast
def density(r, beta):
    return math.exp(-beta * r * r)


PROGRAMS = {
    "eam": lambda x, a, beta: -np.sqrt(density.sum(x, beta)) + 0.01 * density.sum(x, a) ** 2,
    "elementwise": lambda x, a, beta: np.sum(np.sin(x) ** 2 * a)
                                      + np.mean(np.exp(-x * beta)) * beta,
    "kernel map": lambda x, a, beta: np.sum(leaky(x, a, 0.25) * x) / x.size + beta,
    "slices": lambda x, a, beta: np.sum((x[..., 1:] - x[..., :-1]) ** 2 * a[..., 1:]) * beta,
    "branches": lambda x, a, beta: np.sum(np.where(x > 1.0, x ** 2, np.maximum(x, 0.5) * a)
                                          + np.tanh(x * a + beta)),
    "axes": lambda x, a, beta: np.sum(np.sum(x * a, axis=-1) ** 2)
                               + np.sum(x.reshape(-1)) * beta,
    # a NumPy argument indexed (a sparse cotangent) before and after its lazy one
    "indexed": lambda x, a, beta: a[0] ** 2 * beta + np.sum(x * a) + a[-1] * a[0],
    # singular points: sqrt and log at 0 (the data has zeros), a zero cotangent meeting an
    # infinite partial (0 * log) giving 0, not nan, as in memory
    "singular": lambda x, a, beta: np.sum(np.sqrt(np.abs(x)) * a) + np.sum(0.0 * np.log(x))
                                   + beta * np.sum(np.log1p(np.abs(x))),
}


def _program_data(shape, seed=0):
    x = _data(shape, seed)
    x.flat[::7] = 0.0                   # singular points
    a = _data(shape[-1:], seed + 1)
    return x, a, 0.7


def _lazy_case(shape, chunks, program, a_is_dask, seed=0):
    x_np, a_np, beta = _program_data(shape, seed)
    x = da.from_array(x_np, chunks=chunks)
    a = da.from_array(a_np, chunks=max(1, shape[-1] // 3)) if a_is_dask else a_np
    f = db.value_and_grad(PROGRAMS[program], argnums=(0, 1, 2))
    with np.errstate(divide="ignore", invalid="ignore"):      # (log at 0)
        return f(x, a, beta), f(x_np, a_np, beta), x


def _same(got, expected):
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-300)   # nan, inf where they are


@pytest.mark.parametrize("program", sorted(PROGRAMS))
@pytest.mark.parametrize("shape, chunks, a_is_dask", [((1000,), 300, False),
                                                      ((40, 30), (7, 11), True)])
def test_value_and_grad_of_a_program_over_dask_arrays(client, program, shape, chunks, a_is_dask):
    (value, grads), (expected_value, expected_grads), x = _lazy_case(shape, chunks, program,
                                                                     a_is_dask)
    # lazy: a 0-d Dask value, Dask gradients, x's in its blocks (a gradient that the data
    # does not enter, as beta's in "kernel map", is a number)
    assert isinstance(value, da.Array) and value.shape == ()
    assert isinstance(grads[0], da.Array) and grads[0].chunks == x.chunks
    assert isinstance(grads[1], da.Array) and grads[1].shape == shape[-1:]
    assert isinstance(grads[2], da.Array) and grads[2].shape == () \
        or program in ("kernel map", "indexed")
    got_value, got_grads = dask.compute(value, grads)
    _same(got_value, expected_value)
    for got, expected in zip(got_grads, expected_grads):
        assert np.result_type(got) == np.result_type(expected)
        _same(got, expected)


def test_value_and_grad_over_dask_is_one_pass_over_each_block():
    """Tracing computes nothing; dask.compute of the value and every gradient produces
    each block of the data once (kernel sums and maps, elementwise functions, sums)."""
    produced = []

    def block(k):
        produced.append(k)
        return _program_data((100,), seed=k)[0]
    x = da.concatenate([da.from_delayed(dask.delayed(block)(k), (100,), np.float64)
                        for k in range(5)])
    a = _data((500,), 1)
    for program in ("eam", "elementwise", "kernel map", "singular"):
        value, grads = db.value_and_grad(PROGRAMS[program], argnums=(0, 1, 2))(x, a, 0.7)
        assert produced == []
        dask.compute(value, grads, scheduler="synchronous")
        assert sorted(produced) == list(range(5)), program
        produced.clear()


def test_a_numpy_argument_beside_a_dask_constant_gets_a_lazy_gradient(client):
    x_np, a_np, _ = _program_data((200,))
    x = da.from_array(x_np, chunks=64)
    f = db.value_and_grad(lambda a, beta: np.sum(leaky(x, a, beta) * np.cos(x)) + np.sum(a * a),
                          argnums=(0, 1))
    value, (ga, gbeta) = f(_data((200,), 3), 0.25)
    assert isinstance(ga, da.Array) and isinstance(gbeta, da.Array)
    expected_value, expected = db.value_and_grad(
        lambda a, beta: np.sum(leaky(x_np, a, beta) * np.cos(x_np)) + np.sum(a * a),
        argnums=(0, 1))(_data((200,), 3), 0.25)
    got_value, got = dask.compute(value, (ga, gbeta))
    _same(got_value, expected_value)
    for g, e in zip(got, expected):
        _same(g, e)


def test_vjp_of_a_dask_valued_function(client):
    x_np = _data((300,))
    out, pullback = db.vjp(lambda x: leaky(x, 0.5, 0.25) * np.sin(x), da.from_array(x_np, 100))
    cotangent = _data((300,), 5)
    (gradient,) = pullback(cotangent)
    expected_out, expected_pullback = db.vjp(lambda x: leaky(x, 0.5, 0.25) * np.sin(x), x_np)
    assert isinstance(out, da.Array) and isinstance(gradient, da.Array)
    _same(out.compute(), expected_out)
    _same(gradient.compute(), expected_pullback(cotangent)[0])


def test_float32_dask_arrays_keep_their_dtype(client):
    x_np = _data((400,), dtype=np.float32)
    f = db.value_and_grad(lambda x, beta: np.sum(np.exp(-x) * density(x, beta)), argnums=(0, 1))
    value, (gx, gbeta) = f(da.from_array(x_np, chunks=128), 0.5)
    expected_value, (ex, ebeta) = f(x_np, 0.5)
    got_value, gx, gbeta = dask.compute(value, gx, gbeta)
    assert got_value.dtype == np.float32 and gx.dtype == np.float32
    np.testing.assert_allclose(got_value, expected_value, rtol=1e-5)
    np.testing.assert_allclose(gx, ex, rtol=1e-6)
    np.testing.assert_allclose(gbeta, ebeta, rtol=1e-4)


from hypothesis import given, strategies as st  # noqa: E402


@st.composite
def _blocked(draw):
    """A shape of one or two dimensions and a chunking of it (blocks of any sizes)."""
    shape = tuple(draw(st.lists(st.integers(1, 12), min_size=1, max_size=2)))
    chunks = []
    for n in shape:
        cuts = sorted(draw(st.sets(st.integers(1, n - 1), max_size=3))) if n > 1 else []
        edges = [0, *cuts, n]
        chunks.append(tuple(b - a for a, b in zip(edges, edges[1:])))
    return shape, tuple(chunks)


@given(_blocked(), st.sampled_from(sorted(PROGRAMS)), st.booleans(), st.integers(0, 2**16))
def test_any_blocking_gives_the_in_memory_gradient(blocked, program, a_is_dask, seed):
    shape, chunks = blocked
    if program == "slices" and shape[-1] < 2:
        return
    (value, grads), (expected_value, expected_grads), _ = _lazy_case(shape, chunks, program,
                                                                     a_is_dask, seed)
    got_value, got_grads = dask.compute(value, grads, scheduler="synchronous")
    _same(got_value, expected_value)
    for got, expected in zip(got_grads, expected_grads):
        _same(got, expected)


# Found by an adversarial review: each was silently wrong, or computed the graph while
# tracing, before its fix.

def test_repeated_index_of_a_numpy_argument_with_a_lazy_cotangent_is_refused():
    """a[[0, 0]] times a Dask array: the two contributions must add up, which writing
    into lazy zeros would not (it gave 20 where 30 is right): refused instead."""
    a, b = np.array([1.0, 2.0, 3.0]), da.from_array(np.array([10.0, 20.0]), chunks=1)
    assert list(db.grad(lambda a, b: np.sum(a[[0, 0]] * b))(a, b.compute())) == [30, 0, 0]
    with pytest.raises(NotImplementedError, match="gathering operation .* no lazy gradient"):
        db.grad(lambda a, b: np.sum(a[[0, 0]] * b))(a, b)


def test_a_pullback_sees_a_dask_primal_as_it_was():
    x = da.from_array(np.array([1.0, 2.0, 3.0]), chunks=2)
    _, pullback = db.vjp(lambda a: a * a, x)
    x[0] = 100.0                        # Dask rebinds x's graph in place
    np.testing.assert_array_equal(pullback(np.ones(3))[0].compute(), [2.0, 4.0, 6.0])


def test_kernels_with_defaults_differing_beyond_their_repr_are_different_kernels():
    cloudpickle = pytest.importorskip("cloudpickle")

    def make(weight):
        @db.fast_broadcast
        def weighted(x, s=weight):
            return x * s
        return weighted
    first = cloudpickle.loads(cloudpickle.dumps(make(np.array(0.1234567891))))
    second = cloudpickle.loads(cloudpickle.dumps(make(np.array(0.1234567892))))
    assert first is not second
    assert (first(1.0), second(1.0)) == (0.1234567891, 0.1234567892)


def _computes(build):
    """How many times the graph of x is computed while ``build(x)`` runs."""
    computed = []

    def block():
        computed.append(1)
        return np.linspace(0.5, 1.5, 6)
    x = da.from_delayed(dask.delayed(block)(), (6,), np.float64).rechunk(3)
    try:
        build(x)
    except (NotImplementedError, TypeError):
        pass
    return len(computed)


@pytest.mark.parametrize("build", [
    lambda x: db.grad(lambda w, x: np.sum((w * 2.0 + 1.0) * x))(1.5, x),   # scalar records
    lambda x: db.grad(lambda w, x: np.sum((w * 0.0) * np.log(x - 0.5)))(1.5, x),
    lambda x: db.grad(lambda a: np.sum(a) * np.sum(x))(np.ones(6)),
    lambda x: db.grad(lambda a: np.sum(leaky(a, 2.0, 0.5) * x))(np.ones(6)),
    lambda x: db.vjp(np.sin, np.ones(6))[1](x),
    lambda x: db.grad(lambda x: np.sum(x @ np.ones((6, 2))))(x),           # refused
    lambda x: db.grad(lambda x: np.prod(x))(x),                            # refused
    lambda x: db.jvp(lambda a: np.sum(a * x), (np.ones(6),), (np.ones(6),)),  # refused
    lambda x: db.grad(lambda x: np.sum(np.concatenate([x, x.ravel()])))(x),
])
def test_tracing_over_dask_computes_nothing(build):
    assert _computes(build) == 0


@pytest.mark.parametrize("program, function", [
    (lambda x: np.sum(x @ np.ones((6, 2))), r"np\.matmul \(@, np\.dot\)"),
    (lambda x: np.prod(x), r"np\.prod"),
    (lambda x: np.sum(np.sort(x) * np.arange(6.0)), r"np\.sort"),
    (lambda x: np.trace(np.reshape(x, (2, 3))), r"np\.diagonal or np\.trace"),
])
def test_rules_without_a_lazy_form_name_their_function(program, function):
    x = da.from_array(np.linspace(0.5, 1.5, 6), chunks=3)
    with pytest.raises(NotImplementedError, match=rf"gradient rule of {function} computes "
                                                  rf"on NumPy arrays"):
        db.grad(program)(x)


def test_scalar_arithmetic_between_lazy_sums_is_nan_safe():
    x_np = np.array([0.0, 1.0, 2.0])
    f = lambda w, x: np.sum((w * 0.0) * np.log(x)) + w * np.sum(x)          # noqa: E731
    expected = db.grad(f)(1.5, x_np)
    got = db.grad(f)(1.5, da.from_array(x_np, chunks=2))
    assert isinstance(got, da.Array) and got.compute() == expected == 3.0
