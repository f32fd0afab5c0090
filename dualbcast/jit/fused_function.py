"""A fused program's function (:mod:`.fusion` writes its source): compiled, or loaded
from the disk cache, once per source, and called with a run's values.

``fusion(values)`` gives ``(value, cotangents by leaf)`` or None (the replay runs
instead); the function is shared by every program of the same :attr:`Fusion.key`
(:mod:`.compiled`)."""
import hashlib

import numba
import numpy as np

from ..config import config
from ..kernel.arguments import read_only_alias
from ..kernel.cache import load_loop
from ..kernel.threads import ThreadChoice, launch_threads, run_as_chosen
from ..safe_cache import guarded_njit


class Constant:
    """A kernel sum's argument that is no input: passed as it is on every run."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value


class Fusion:
    """A fused program: ``fusion(values)`` gives ``(value, cotangents by leaf)`` (None
    where no cotangent reached a leaf), or None when the replay must run instead.

    Its function (``function``, set by whoever compiles it or finds it compiled: see
    :mod:`.compiled`) is that of every program whose :attr:`key` is equal: the same
    source, calling the same objects (kernel loops, helpers)."""

    def __init__(self, source, namespace, ints, floats, kernels, leaves, *, scalar_leaves,
                 array_leaves, shared, transformed, accumulators, blocks, output_type, helpers,
                 threaded, cacheable, kernel_keys):
        self.source, self.namespace, self.kernels = source, namespace, kernels
        # The sizes and constants of this program, the function's N and K
        self.ints, self.floats = np.array(ints, np.int64), np.array(floats, np.float64)
        self.output_type = output_type
        # The helper functions to compile ((name, parallel)); the most elements a part
        # on threads loops over (0: none); whether the function may be cached on disk
        # (every kernel's code named by its file or fingerprint: ``kernel_keys``, the
        # segments' kernels')
        self.helpers, self.threaded = helpers, threaded
        self.choice = ThreadChoice()    # whether its threaded parts run on threads
        self.cacheable, self.kernel_keys = cacheable, kernel_keys
        self.function = None
        # the parameters (see fusion.Writer.fusion), in order
        self.scalar_leaves, self.array_leaves, self.shared = scalar_leaves, array_leaves, shared
        self.transformed = transformed
        self.accumulators = [shape for _, shape in accumulators]
        self.blocks = blocks
        # per leaf: -1 a scalar, else the number of its cotangent's buffer (None: none)
        numbers = {slot: n for n, (slot, _) in enumerate(accumulators)}
        self.kinds = [-1 if leaf in scalar_leaves else numbers.get(leaf)
                      for leaf in range(leaves)]
        # The source as compiled: its name (the file's) must change with anything it
        # is compiled from: the loops' files (named by their kernels' fingerprints) and
        # the numbers bound in its namespace (listed on top).
        loops = "".join(f"# _loop{k}: {prepared.source}\n"
                        for k, prepared in enumerate(kernels))
        loops += "".join(f"# kernel: {key}\n" for key in kernel_keys)
        constants = "".join(f"# {name} = {_exact(value)}\n"
                            for name, value in sorted(namespace.items())
                            if type(value) in (float, int, tuple))
        self.text = "# dualbcast: a fused replay\n" + loops + constants + source
        # What the function is: its source and the objects its namespace binds (by
        # identity: whoever keeps the key keeps them too, see .compiled).
        self.objects = tuple(value for _, value in sorted(namespace.items())
                             if type(value) not in (float, int, tuple))
        self.key = (self.text, tuple(map(id, self.objects)))

    def compile(self):
        """A new dispatcher of the fused function, compiled (or loaded from the disk
        cache) at its first call."""
        source = self.text
        name = hashlib.sha256(source.encode()).hexdigest()[:24]
        module = load_loop(source, self.namespace, "fused", name) if self.cacheable else None
        if module is None:
            exec(compile(source, "<dualbcast fused replay>", "exec"), self.namespace)
            functions, cache = self.namespace, False
        else:
            functions, cache = module.__dict__, True
        # (a module loaded before, by a program of the same source, has them compiled)
        helpers = [(name, False) for name in ("_scale_all", "_add_all", "_scaled",
                                              "_first_gradient", "_add_gradient")]
        if any(parallel for _, parallel in self.helpers):
            launch_threads()
        for name, parallel in helpers + self.helpers:
            helper = functions.get(name)
            if helper is not None and not isinstance(helper, numba.core.dispatcher.Dispatcher):
                functions[name] = guarded_njit(error_model="numpy", cache=cache, nogil=True,
                                               parallel=parallel)(helper)
        return guarded_njit(error_model="numpy", cache=cache)(functions["fused"])

    def __call__(self, values):
        if self.threaded < config.parallel_threshold or config.threads < 2:
            return self._run(values, 1)
        return run_as_chosen(self.choice, lambda: self._run(values, config.threads),
                             lambda: self._run(values, 1))

    def _run(self, values, workers):
        # (loops, not comprehensions: this is most of a small fused call's Python time)
        args = [workers, self.ints, self.floats]
        for leaf in self.scalar_leaves:
            args.append(float(values[leaf]))
        for leaf in self.array_leaves:
            array = values[leaf]
            # (read-only: the same Numba type as writeable, or the function compiles again)
            args.append(array if array.flags.writeable else read_only_alias(array))
        args += self.shared
        for inputs, prepared, positions in self.transformed:
            kernel_args = []
            for item in inputs:
                kernel_args.append(item.value if type(item) is Constant else values[item])
            operands = prepared.operands_for(kernel_args)
            for m in positions:
                args.append(operands[m])
        gradients = []
        for shape in self.accumulators:
            gradient = np.empty(shape)
            gradients.append(gradient)
            args.append(gradient if len(shape) == 1 else gradient.reshape(-1))
        for shape in self.blocks:
            args.append(np.empty(shape))
        result = self.function(*args)
        if not result[0]:
            return None
        # per leaf: None where no cotangent reached it, else its float or array
        grads = []
        for reached, found, kind in zip(result[2::2], result[3::2], self.kinds):
            grads.append(None if not reached else found if kind == -1 else gradients[kind])
        return self.output_type(result[1]), grads


def _exact(value):
    return value.hex() if type(value) is float else repr(value)
