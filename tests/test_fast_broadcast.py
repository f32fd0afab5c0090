"""@fast_broadcast kernels: ufunc-like broadcasting, dtypes and layouts, the four loop
modes against an elementwise NumPy reference, specialisation, and every error."""
import math
import pickle
import tracemalloc

import numba
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from hypothesis.extra import numpy as hnp

import dualbcast as db
from dualbcast.kernel.prepared import CHUNK_ELEMENTS
from dualbcast import KernelCompileError


@db.fast_broadcast
def wave(x, a, b):
    return a * math.sin(x) + b * x * x


def wave_reference(x, a, b):
    """Value and the three partials, in float64, at the broadcast shape."""
    x, a, b = np.broadcast_arrays(*(np.asarray(v, np.float64) for v in (x, a, b)))
    return a * np.sin(x) + b * x * x, [a * np.cos(x) + 2 * b * x, np.sin(x), x * x]


def unbroadcast(g, shape):
    """Sum a broadcast-shape array down to ``shape`` (the reference for gradients)."""
    g = g.sum(axis=tuple(range(g.ndim - len(shape))))
    axes = tuple(d for d, n in enumerate(shape) if n == 1 and g.shape[d] != 1)
    return g.sum(axis=axes, keepdims=True).reshape(shape)


def expected_dtype(args):
    dtype = np.result_type(*args)
    return dtype if dtype.kind == "f" else np.dtype(np.float64)


# --- hypothesis: shapes x dtypes x layouts ---------------------------------------------

def _relayout(array, how):
    if array.ndim == 0:
        return array
    if how == "fortran":
        return np.asfortranarray(array)
    if how == "strided":
        return np.repeat(array, 2, axis=-1)[..., ::2]
    if how == "reversed":
        return np.flip(np.flip(array, -1).copy(), -1)
    if how == "readonly":
        array = array.copy()
        array.flags.writeable = False
    return array


@st.composite
def wave_arguments(draw):
    shapes = draw(hnp.mutually_broadcastable_shapes(num_shapes=3, min_dims=0, max_dims=3,
                                                    max_side=3))
    args = []
    for shape in shapes.input_shapes:
        dtype = draw(st.sampled_from([np.float64, np.float32, np.int64, np.bool_]))
        if dtype == np.bool_:
            elements = st.booleans()
        elif dtype == np.int64:
            elements = st.integers(-4, 4)
        else:
            elements = st.floats(-3, 3, width=np.dtype(dtype).itemsize * 8)
        array = draw(hnp.arrays(dtype, shape, elements=elements))
        array = _relayout(array, draw(st.sampled_from(
            ["c", "fortran", "strided", "reversed", "readonly"])))
        if shape == () and draw(st.booleans()):
            array = array.item()              # a Python scalar (weak in promotion)
        args.append(array)
    return args, shapes.result_shape


def _tolerance(dtype, size=1):
    return dict(rtol=2e-5, atol=2e-5 * max(size, 1)) if dtype == np.float32 else \
        dict(rtol=1e-12, atol=1e-12 * max(size, 1))


@settings(max_examples=25)   # each new shape/dtype/layout mix compiles loops
@given(wave_arguments(), st.data())
def test_all_modes_match_an_elementwise_reference(case, data):
    args, shape = case
    dtype = expected_dtype(args)
    ref_value, ref_parts = wave_reference(*args)
    tol = _tolerance(dtype)

    value = wave(*args)
    assert np.shape(value) == shape and value.dtype == dtype
    assert isinstance(value, np.ndarray) == (shape != ())
    np.testing.assert_allclose(value, ref_value, **tol)

    total = wave.sum(*args)
    assert isinstance(total, np.generic) and total.dtype == dtype
    np.testing.assert_allclose(total, ref_value.sum(), **_tolerance(dtype, ref_value.size))

    floats = [i for i, a in enumerate(args) if np.asarray(a).dtype.kind == "f"]
    if not floats:
        with pytest.raises(TypeError, match="never differentiated"):
            wave.value_and_partials(*args, wrt=0)
        return
    wrt = tuple(data.draw(st.lists(st.sampled_from(floats), min_size=1, unique=True)))

    value, parts = wave.value_and_partials(*args, wrt=wrt)
    np.testing.assert_allclose(value, ref_value, **tol)
    for i, part in zip(wrt, parts):
        assert np.shape(part) == shape and part.dtype == dtype
        np.testing.assert_allclose(part, ref_parts[i], **tol)

    total, grads = wave.sum_and_partials(*args, wrt=wrt)
    for i, grad in zip(wrt, grads):
        arg = args[i]
        own_shape, own_dtype = np.shape(arg), np.asarray(arg).dtype
        assert np.shape(grad) == own_shape and grad.dtype == own_dtype
        assert isinstance(grad, np.ndarray) == isinstance(arg, np.ndarray)
        coarsest = np.float32 if np.float32 in (dtype, own_dtype) else np.float64
        np.testing.assert_allclose(grad, unbroadcast(ref_parts[i], own_shape),
                                   **_tolerance(coarsest, ref_value.size))


# --- exact behaviours --------------------------------------------------------------------

def test_scalars_in_scalar_out_and_the_python_function_agrees():
    x, a, b = 0.7, 1.3, -0.4
    value = wave(x, a, b)
    assert type(value) is np.float64
    assert value == pytest.approx(wave.py_func(x, a, b), rel=1e-15)
    assert type(wave(np.float32(x), np.float32(a), np.float32(b))) is np.float32
    assert type(wave(np.array(x), a, b)) is np.float64          # 0-d in, scalar out
    xs = np.linspace(-2, 2, 11)
    np.testing.assert_allclose(wave(xs, a, b), [wave.py_func(v, a, b) for v in xs], rtol=1e-15)


def test_dtype_promotion_follows_numpy():
    f32 = np.ones(3, np.float32)
    assert wave(f32, 1.0, 2).dtype == np.float32                 # Python scalars are weak
    assert wave(f32, np.ones(3), 2).dtype == np.float64
    assert wave(f32, np.float64(1.0), 2).dtype == np.float64
    assert wave(np.arange(3), True, 2).dtype == np.float64        # ints and bools promote
    assert wave(np.ones(3, np.float16), 1.0, 1.0).dtype == np.float32


def test_results_never_alias_inputs_and_inputs_are_untouched():
    x = np.linspace(0, 1, 6)
    keep = x.copy()
    for out in (wave(x, 0.0, 1.0), wave(x, 1.0, 0.0), *wave.value_and_partials(x, 1.0, 1.0)[1:]):
        assert not np.shares_memory(out, x)
    np.testing.assert_array_equal(x, keep)


def test_broadcast_to_views_and_row_column_broadcasting():
    row, col = np.linspace(0, 1, 4), np.linspace(1, 2, 3)[:, None]
    x = np.broadcast_to(row, (3, 4))
    value, parts = wave.value_and_partials(x, col, 0.5, wrt=(0, 1))
    ref_value, ref_parts = wave_reference(x, col, 0.5)
    np.testing.assert_allclose(value, ref_value, rtol=1e-14)
    np.testing.assert_allclose(parts[1], ref_parts[1], rtol=1e-14)
    _, (g_row, g_col) = wave.sum_and_partials(row, col, 0.5, wrt=(0, 1))
    np.testing.assert_allclose(g_row, ref_parts[0].sum(0), rtol=1e-13)
    np.testing.assert_allclose(g_col, ref_parts[1].sum(1, keepdims=True), rtol=1e-13)


def test_empty_inputs():
    empty = np.zeros((3, 0))
    assert wave(empty, 1.0, 2.0).shape == (3, 0)
    assert wave.sum(empty, 1.0, 2.0) == 0.0
    total, (gx, ga) = wave.sum_and_partials(empty, np.ones((3, 1)), 2.0, wrt=(0, 1))
    assert total == 0.0 and gx.shape == (3, 0)
    np.testing.assert_array_equal(ga, np.zeros((3, 1)))


def test_nan_and_inf_propagate():
    value, d = wave.value_and_partials(np.array([np.nan, np.inf]), 1.0, 0.0, wrt=0)
    assert np.isnan(value).all() and np.isnan(d).all()


def test_sum_agrees_with_sum_of_map():
    x = np.random.default_rng(0).normal(size=(40, 25))
    np.testing.assert_allclose(wave.sum(x, 0.3, 1.1), wave(x, 0.3, 1.1).sum(), rtol=1e-13)


def test_keyword_arguments_and_defaults():
    @db.fast_broadcast
    def shifted(x, shift=1.0, scale=2.0):
        return scale * (x - shift)

    x = np.arange(3.0)
    np.testing.assert_array_equal(shifted(x), 2.0 * (x - 1.0))
    np.testing.assert_array_equal(shifted(x, scale=3.0), 3.0 * (x - 1.0))
    _, d = shifted.value_and_partials(x, scale=3.0, wrt=2)
    np.testing.assert_array_equal(d, x - 1.0)


def test_only_active_arguments_get_partials():
    @db.fast_broadcast
    def poly(x, c0, c1, c2, c3, c4, c5, c6, c7, c8, c9):
        return c0 + x * (c1 + x * (c2 + x * (c3 + x * (c4 + x * (
            c5 + x * (c6 + x * (c7 + x * (c8 + x * c9))))))))

    x = np.linspace(-1, 1, 7)
    coeffs = list(np.linspace(0.5, 1.5, 10))
    _, g = poly.sum_and_partials(x, *coeffs, wrt=3)
    assert g == pytest.approx(np.sum(x ** 2))
    (spec,) = [s for s in poly._specializations if s.mode == "sum_partials"]
    assert spec.n == 1                        # one partial, not ten
    assert [str(t) for t in spec.argument_types()].count("Dual(float64, 1)") == 1
    # (the loop calls the kernel with one dual: its kernel is inlined as Numba IR)
    assert poly._loop(spec).__doc__.count("_dual(") == 1


def test_specialisations_compile_once():
    @db.fast_broadcast
    def k(x, a):
        return a * x

    def compiled():
        return sum(len(sigs) for sigs in k._specializations.values())

    for _ in range(2):
        k(np.ones(5), 2.0)
        k.sum(np.ones((2, 3)), 2.0)
        k.value_and_partials(np.ones(4), 2.0, wrt=1)
        k.sum_and_partials(np.ones(4), np.ones(4), wrt=(0, 1))
        if _ == 0:
            first = compiled()
    assert compiled() == first == 4
    k(np.ones(1000), -1.0)                    # other sizes and values: same specialisation
    k.sum(np.ones((7, 9)), 5.0)
    assert compiled() == first


def test_scalar_partial_sum_allocates_nothing_of_the_broadcast_size():
    x = np.linspace(0, 1, 1_000_000)
    for _ in range(2):          # compile (the loop, then its parallel driver) untraced
        wave.sum_and_partials(x, 1.0, 2.0, wrt=(1, 2))
    tracemalloc.start()
    total, (ga, gb) = wave.sum_and_partials(x, 1.0, 2.0, wrt=(1, 2))
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    # x is 8 MB; nothing of that size is allocated: O(1) is small objects and per
    # thread a chunk of scratch for each sum (the value and the two gradients)
    scratch = db.config.threads * 3 * CHUNK_ELEMENTS * 8
    assert peak < 64 * 1024 + scratch, peak
    assert ga == pytest.approx(np.sin(x).sum()) and gb == pytest.approx((x * x).sum())


def test_kernel_returning_bool_or_int_gives_floats():
    positive = db.fast_broadcast(lambda x: x > 0)
    floor = db.fast_broadcast(lambda x: math.floor(x))
    np.testing.assert_array_equal(positive(np.array([-1.0, 2.0])), [0.0, 1.0])
    assert floor(np.array([1.5])).dtype == np.float64


def test_decorator_forms_and_options():
    plain = db.fast_broadcast(lambda x: 2 * x)
    empty = db.fast_broadcast()(lambda x: 2 * x)
    fast = db.fast_broadcast(fastmath=True)(lambda x: 2 * x)
    for k in (plain, empty, fast):
        assert k(3.0) == 6.0
        assert isinstance(k, db.FastBroadcast)
    with pytest.raises(TypeError, match="unknown options"):
        db.fast_broadcast(parallel=True)


def test_kernel_usable_inside_njit_code():
    @numba.njit
    def twice(x):
        return wave(x, 1.0, 0.0) * 2.0

    assert twice(0.5) == pytest.approx(2 * math.sin(0.5))


def test_a_kernel_called_from_njit_code_keeps_its_own_options():
    # The loops take the kernel's Numba IR into theirs; a caller with other options
    # (here Python's error model, which raises at a division by zero) calls it compiled
    # with its own (NumPy's: inf).
    reciprocal = db.fast_broadcast(lambda x: 1.0 / x)

    @numba.njit
    def caller(x):
        return reciprocal(x) + 1.0 / (x + 1.0)

    assert caller(0.0) == math.inf
    np.testing.assert_array_equal(reciprocal(np.array([0.0, 2.0])), [math.inf, 0.5])


# --- errors ---------------------------------------------------------------------------

def test_incompatible_shapes_name_all_shapes():
    with pytest.raises(ValueError, match=r"wave: .*\(3,\) \(4,\) \(2, 1\)"):
        wave(np.ones(3), np.ones(4), np.ones((2, 1)))
    with pytest.raises(ValueError, match=r"wave: .*\(3,\) \(\) \(4,\)$"):
        wave(np.ones(3), 1.0, np.ones(4))


@pytest.mark.parametrize("bad, what", [
    (np.ones(3, complex), "complex"),
    (np.array([object()]), "object"),
    ("abc", "string"),
    (np.array(["a", "b"]), "string"),
    ([[1.0, 2.0], [3.0]], "not a numeric array"),
    (np.array(["2020-01-01"], dtype="datetime64[D]"), "datetime64"),
])
def test_non_real_input_is_a_type_error(bad, what):
    with pytest.raises(TypeError, match=what):
        wave(bad, 1.0, 1.0)


def test_uncompilable_kernel_names_kernel_and_types_and_chains_numba():
    @db.fast_broadcast
    def uses_frexp(x):
        return math.frexp(x)[0]    # fine on floats, no dual rule

    assert uses_frexp(3.0) == 0.75
    with pytest.raises(KernelCompileError, match=r"'uses_frexp'.*Dual\(float64, 1\)") as info:
        uses_frexp.value_and_partials(3.0)
    assert isinstance(info.value.__cause__, numba.core.errors.NumbaError)
    assert isinstance(info.value, TypeError)
    # One line first: what the kernel used, where, and what to use instead.
    message = str(info.value)
    assert "\n" not in message
    assert "it calls frexp(Dual(float64, 1)), which has no implementation" in message
    assert "(line " in message and "return math.frexp(x)[0]" in message
    assert "a differentiated argument is a dual number" in message

    @db.fast_broadcast
    def uses_attribute(x):
        return x.no_such_attribute

    with pytest.raises(KernelCompileError, match=r"'uses_attribute'.*\(float64\)") as info:
        uses_attribute(np.ones(2))
    assert "no_such_attribute" in str(info.value).splitlines()[0]

    @db.fast_broadcast
    def uses_a_string(x):
        return len("a" + x)

    with pytest.raises(KernelCompileError, match=r"it calls add\(.*str.*float64\).*a kernel "
                                                 r"works on scalars"):
        uses_a_string(np.ones(2))


@pytest.mark.parametrize("body", [lambda x: (x, x), lambda x: np.ones(3) * x, lambda x: None])
def test_kernel_returning_a_non_scalar_is_a_type_error(body):
    kernel = db.fast_broadcast(body)
    with pytest.raises(TypeError, match="must return one scalar"):
        kernel(np.ones(2))


@pytest.mark.parametrize("wrt, error, match", [
    (3, ValueError, "out of range"), (-4, ValueError, "out of range"),
    ((0, 0), ValueError, "repeats"), ((0, -3), ValueError, "repeats"), ((), ValueError, "names no"),
    (1.5, TypeError, "wrt must be"),
])
def test_bad_wrt(wrt, error, match):
    for method in (wave.value_and_partials, wave.sum_and_partials):
        with pytest.raises(error, match=match):
            method(np.ones(2), 1.0, 1.0, wrt=wrt)


def test_differentiating_an_integer_argument_is_a_type_error():
    with pytest.raises(TypeError, match="argument 1 of dtype int64"):
        wave.value_and_partials(np.ones(2), np.arange(2), 1.0, wrt=1)


@pytest.mark.parametrize("args", [(1.0, 2.0), (1.0, 2.0, 3.0, 4.0)])
def test_wrong_argument_count(args):
    with pytest.raises(TypeError, match="wave()"):
        wave(*args)
    with pytest.raises(TypeError, match="unexpected keyword"):
        wave(1.0, 2.0, 3.0, c=1.0)


def test_kernels_must_have_fixed_parameters():
    with pytest.raises(TypeError, match="fixed list"):
        db.fast_broadcast(lambda *xs: xs[0])
    with pytest.raises(TypeError, match="decorates a function"):
        db.fast_broadcast(3.0)


# --- regressions found in review ------------------------------------------------------

@pytest.mark.parametrize("x, y", [
    (np.broadcast_to(2.0, (3,)), np.ones((4, 3))),
    (np.broadcast_to(np.arange(1.0, 4.0), (2, 3)), np.arange(24.0).reshape(4, 2, 3)),
    (np.broadcast_to(np.ones((2, 1)), (2, 1)), np.arange(6.0).reshape(3, 2, 1)),
])
def test_gradient_of_a_zero_stride_argument_that_is_also_broadcast(x, y):
    times = db.fast_broadcast(lambda x, y: x * y)
    _, g = times.sum_and_partials(x, y, wrt=0)
    assert g.shape == x.shape
    np.testing.assert_allclose(g, unbroadcast(np.broadcast_to(y, np.broadcast_shapes(
        x.shape, y.shape)), x.shape))


@pytest.mark.parametrize("bad", [None, object()])
def test_non_numeric_python_objects_are_type_errors(bad):
    with pytest.raises(TypeError, match="argument 0 has unsupported dtype object"):
        wave(bad, 1.0, 1.0)


def test_non_native_byte_order_is_accepted():
    x = np.linspace(0, 1, 4).astype(">f8")
    np.testing.assert_allclose(wave(x, 1.0, 2.0), wave(x.astype("<f8"), 1.0, 2.0))


def test_bool_wrt_is_rejected():
    with pytest.raises(TypeError, match="wrt must be"):
        wave.value_and_partials(np.ones(2), 1.0, 1.0, wrt=True)


def test_float_to_negative_int_power_at_zero_names_the_kernel():
    inverse = db.fast_broadcast(lambda x: x ** -1)
    with pytest.raises(ZeroDivisionError, match="'<lambda>'.*1.0 / x \\*\\* n"):
        inverse(np.array([1.0, 0.0]))


@db.fast_broadcast
def weighted_square(x, w):
    return w * x * x


@pytest.mark.parametrize("weights", [[1.0, 2.0, 3.0], (1.0, 2.0, 3.0), [[1.0], [3.0]], [2]])
def test_lists_and_tuples_are_arrays_in_every_mode(weights):
    x = np.array([0.5, 1.0, 2.0])
    w = np.asarray(weights, dtype=float)
    np.testing.assert_array_equal(weighted_square(x, weights), w * x * x)
    assert weighted_square.sum(x, weights) == pytest.approx(np.sum(w * x * x))
    value, partial = weighted_square.value_and_partials(x, weights, wrt=0)
    np.testing.assert_array_equal(partial, np.broadcast_to(2 * w * x, value.shape))
    total, grad_x = weighted_square.sum_and_partials(x, weights, wrt=0)
    np.testing.assert_allclose(grad_x, np.sum(np.broadcast_to(2 * w * x, value.shape),
                                              axis=tuple(range(value.ndim - 1))))
    g = db.grad(lambda x: np.sum(weighted_square(x, weights)))(x)
    np.testing.assert_allclose(g, grad_x)


@pytest.mark.parametrize("kernel, value", [
    (db.fast_broadcast(lambda x, a: a * 2.0), 6.0),     # a float that is not a dual
    (db.fast_broadcast(lambda x, a: 1), 1.0),           # an integer literal
    (db.fast_broadcast(lambda x, a: x > 100.0), 0.0),   # a bool
])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_a_result_that_does_not_depend_on_the_argument_has_zero_partials(kernel, value, dtype):
    x = np.linspace(0.0, 1.0, 5, dtype=dtype)
    np.testing.assert_array_equal(kernel(x, 3.0), np.full(5, value, dtype))
    values, partial = kernel.value_and_partials(x, 3.0, wrt=0)
    np.testing.assert_array_equal(values, np.full(5, value, dtype))
    assert partial.dtype == dtype and not partial.any()
    total, gradient = kernel.sum_and_partials(x, 3.0, wrt=0)
    assert total == 5 * value and gradient.dtype == dtype and not gradient.any()


@pytest.mark.parametrize("threads", [1, 2])
def test_sums_of_opposite_infinities_and_of_overflowing_values_are_numpys(threads):
    # The chunks' sums are added with math.fsum, which raises for inf + -inf met in
    # different chunks and for partial sums beyond the largest float; NumPy gives nan
    # and inf.  Every sum mode and grad must give NumPy's value.
    @db.fast_broadcast
    def ident(x, a):
        return a * x

    opposite = np.zeros(3 * CHUNK_ELEMENTS)
    opposite[0], opposite[-1] = np.inf, -np.inf
    huge = np.full(3 * CHUNK_ELEMENTS, 1e308)
    saved = db.config.threads
    db.config.threads = threads
    try:
        for x, want in ((opposite, np.nan), (huge, np.inf)):
            with np.errstate(all="ignore"):
                assert np.sum(x) == want or np.isnan(want) and np.isnan(np.sum(x))
            np.testing.assert_equal(ident.sum(x, 1.0), want)
            total, (gx, ga) = ident.sum_and_partials(x, 1.0, wrt=(0, 1))
            np.testing.assert_equal(total, want)
            np.testing.assert_equal(ga, want)           # d/da sums x too
            np.testing.assert_equal(gx, np.ones_like(x))
            value, grad = db.value_and_grad(lambda a: ident.sum(x, a))(1.0)
            np.testing.assert_equal((value, grad), (want, want))
    finally:
        db.config.threads = saved


@pytest.mark.parametrize("n", [1, 4095, 4097, 40_000])
def test_strided_1d_arguments_give_the_contiguous_bits_in_every_mode(n):
    """A column ``d[:, 0]`` or a reversed view is copied a chunk at a time into a
    contiguous piece inside the loop (kernel/loops.py): the same bits as a copy."""
    @db.fast_broadcast
    def strided_kernel(r, a):
        return a * math.exp(-r) + r * r

    table = np.random.default_rng(n).uniform(-1.0, 1.0, (n, 3))
    tangent = table[:, 2]
    for view in (table[:, 0], table[::-1, 1]):
        copy = np.ascontiguousarray(view)
        for call in (lambda x: strided_kernel(x, 1.5),
                     lambda x: strided_kernel.sum(x, 1.5),
                     lambda x: strided_kernel.value_and_partials(x, 1.5, wrt=(0, 1)),
                     lambda x: strided_kernel.sum_and_partials(x, 1.5, wrt=(0, 1)),
                     lambda x: strided_kernel.jvp(x, 1.5, tangents={0: tangent}),
                     lambda x: strided_kernel.sum_and_partials(x, 1.5, wrt=0,
                                                               tangents={0: x[::-1]})):
            got, want = call(view), call(copy)
            assert pickle.dumps(got) == pickle.dumps(want)


def test_result_dtype_is_the_calls_dtype_and_checks_without_running():
    """_result_dtype (what the adapters check before building lazy work) gives the dtype
    a call computes in and raises what the call would, without allocating: a float16
    stand-in of 10^7 elements is not converted."""
    import tracemalloc

    k = db.fast_broadcast(lambda x, n: x * n)
    combos = [(np.float16, np.int64), (np.float16, np.int8), (np.float16, np.float64),
              (np.float32, np.int64), (np.float32, np.float32), (np.int32, np.int8)]
    for a, b in combos:
        x, n = np.ones(3, a), np.ones(3, b)
        assert k._result_dtype(x, n) == k(x, n).dtype
    tracemalloc.start()
    try:
        k._result_dtype(np.broadcast_to(np.float16(0.0), (10 ** 7,)), 2.0)
        assert tracemalloc.get_traced_memory()[1] < 10 ** 5
    finally:
        tracemalloc.stop()
    with pytest.raises(TypeError, match="argument 1 of dtype int64"):
        k._result_dtype(np.ones(3), np.ones(3, np.int64), wrt=(0, 1))
    with pytest.raises(ValueError, match="could not be broadcast"):
        k._result_dtype(np.ones(3), np.ones(4))


def test_sums_of_kernels_whose_value_is_not_their_partials_type():
    # A sum's loop stores an element's value and its partials to scratch rows in one
    # operation (loops.store_column): the value may be a bool, an int or a float of
    # another width than the partials (a constant branch of a float32 kernel is float64).
    step = db.fast_broadcast(lambda x, a: 1.0 if x > a else 0.0)
    count = db.fast_broadcast(lambda x, a: x > a)
    scaled = db.fast_broadcast(lambda x, a: x * 2.0 if x > a else x)
    x32 = np.linspace(-1, 2, 7, dtype=np.float32)
    x64 = x32.astype(np.float64)
    half = np.float32(0.5)
    assert step.sum_and_partials(x32, half, wrt=1) == (3.0, 0.0)
    assert db.grad(lambda a: count.sum(x64, a))(0.5) == 0.0
    assert count.sum_jvp(x64, 0.5, tangents={1: 1.0}) == (3.0, 0.0)
    total, da = scaled.sum_and_partials(x32, half, wrt=1)
    assert (total, da) == (np.float32(x32.sum() + x32[x32 > half].sum()), 0.0)
    total, tangent, (dx, da), _ = scaled.sum_and_partials(
        x32, half, wrt=(0, 1), tangents={0: x32, 1: 1.0})
    np.testing.assert_array_equal(dx, np.where(x32 > half, 2.0, 1.0))
    assert db.jit(db.grad(lambda a: count.sum(x64, a) + 1.0))(0.5) == 0.0
