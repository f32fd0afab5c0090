"""A fused program's function (:mod:`.fusion` and :mod:`.staged_fusion` write its
source): compiled, or loaded from the disk cache, once per source, and called with a
run's values.

A gradient program's ``fusion(values)`` gives ``(value, cotangents by leaf)`` or None
(the replay runs instead); a staged one's writes its outputs into ``values``.  The
function is shared by every program of the same :attr:`FusedCode.key`
(:mod:`.compiled`)."""
import hashlib

import numba
import numpy as np

from ..config import config
from ..kernel.arguments import read_only_alias
from ..kernel.cache import library_directory, load_loop
from ..kernel.threads import ThreadChoice, launch_threads, run_as_chosen
from ..safe_cache import guarded_njit


class Constant:
    """A kernel sum's argument that is no input: passed as it is on every run."""

    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value


class FusedCode:
    """What every fused function is, a gradient program's (:class:`Fusion`) or a staged
    one's (:class:`.staged_fusion.StagedFusion`): a source whose text names everything
    it is compiled from, compiled or loaded from the disk cache once per text, called on
    this thread or on threads as measured.

    Its function (``function``, set by whoever compiles it or finds it compiled: see
    :mod:`.compiled`) is that of every program whose :attr:`key` is equal: the same
    source, calling the same objects (kernel loops, helpers)."""

    def __init__(self, source, namespace, kernels, kernel_keys, ints, floats, helpers,
                 threaded, cacheable, title):
        self.source, self.namespace, self.kernels = source, namespace, kernels
        # The sizes and constants of this program, the function's N and K
        self.ints, self.floats = np.array(ints, np.int64), np.array(floats, np.float64)
        # The helper functions to compile ((name, parallel)); the most elements a part
        # on threads loops over (0: none); whether the function may be cached on disk
        # (every kernel's code named by its file or fingerprint: ``kernel_keys``, the
        # segments' kernels')
        self.helpers, self.threaded = helpers, threaded
        self.choice = ThreadChoice()    # whether its threaded parts run on threads
        self.cacheable, self.kernel_keys = cacheable, kernel_keys
        self._function = self._run = None
        # The source as compiled: its name (the file's) must change with anything it
        # is compiled from: the loops' files (named by their kernels' fingerprints) and
        # the numbers bound in its namespace (listed on top).
        loops = "".join(f"# _loop{k}: {prepared.source}\n"
                        for k, prepared in enumerate(kernels))
        loops += "".join(f"# kernel: {key}\n" for key in kernel_keys)
        constants = "".join(f"# {name} = {_exact(value)}\n"
                            for name, value in sorted(namespace.items())
                            if type(value) in (float, int, tuple))
        self.text = f"# dualbcast: {title}\n" + loops + constants + source
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
        module = load_loop(source, self.namespace, library_directory("fused"), name) if self.cacheable else None
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

    @property
    def function(self):
        """The compiled function (None until it is set): setting it writes the Python
        code that calls it (:meth:`_runner`)."""
        return self._function

    @function.setter
    def function(self, function):
        self._function = function
        self._run = None if function is None else self._runner(function)

    def _runner(self, function):
        """``run(values, workers)``: ``function`` called on a run's values."""
        raise NotImplementedError

    def transformed_operands(self, values, args):
        """The operands of the kernel sums computed per call (see
        :func:`.fused_kernels._operands`), appended to ``args``."""
        for inputs, prepared, positions in self.transformed:
            kernel_args = []
            for item in inputs:
                kernel_args.append(item.value if type(item) is Constant else values[item])
            operands = prepared.operands_for(kernel_args)
            for m in positions:
                args.append(operands[m])


class Fusion(FusedCode):
    """A fused gradient program: ``fusion(values)`` gives ``(value, cotangents by
    leaf)`` (None where no cotangent reached a leaf), or None when the replay must run
    instead."""

    def __init__(self, source, namespace, ints, floats, kernels, leaves, *, scalar_leaves,
                 array_leaves, shared, transformed, accumulators, blocks, output_type, helpers,
                 threaded, cacheable, kernel_keys):
        super().__init__(source, namespace, kernels, kernel_keys, ints, floats, helpers,
                         threaded, cacheable, "a fused replay")
        self.output_type = output_type
        # the parameters (see fusion.Writer.fusion), in order
        self.scalar_leaves, self.array_leaves, self.shared = scalar_leaves, array_leaves, shared
        self.transformed = transformed
        self.accumulators = [shape for _, shape in accumulators]
        self.blocks = blocks
        # per leaf: -1 a scalar, else the number of its cotangent's buffer (None: none)
        numbers = {slot: n for n, (slot, _) in enumerate(accumulators)}
        self.kinds = [-1 if leaf in scalar_leaves else numbers.get(leaf)
                      for leaf in range(leaves)]

    def _runner(self, function):
        """``run(values, workers)``: ``function`` called on a run's values, written out
        for this program's parameters (a loop over the kinds of parameter cost more
        than the call itself on a small program), its result as :meth:`__call__`
        gives it."""
        names = {"function": function, "ints": self.ints, "floats": self.floats,
                 "empty": np.empty, "read_only_alias": read_only_alias, "fusion": self,
                 "output_type": self.output_type}
        lines, params = ["def run(values, workers):"], ["workers", "ints", "floats"]
        params += [f"float(values[{leaf}])" for leaf in self.scalar_leaves]
        for k, leaf in enumerate(self.array_leaves):
            # (read-only: the same Numba type as writeable, or the function compiles again)
            lines += [f"    a{k} = values[{leaf}]", f"    if not a{k}.flags.writeable:",
                      f"        a{k} = read_only_alias(a{k})"]
            params.append(f"a{k}")
        for k, value in enumerate(self.shared):
            names[f"s{k}"] = value
            params.append(f"s{k}")
        if self.transformed:
            lines.append("    operands = []")
            lines.append("    fusion.transformed_operands(values, operands)")
            params.append("*operands")
        for k, shape in enumerate(self.accumulators):
            names[f"shape{k}"] = shape
            lines.append(f"    g{k} = empty(shape{k})")
            params.append(f"g{k}" if len(shape) == 1 else f"g{k}.reshape(-1)")
        for k, shape in enumerate(self.blocks):
            names[f"block{k}"] = shape
            params.append(f"empty(block{k})")
        lines += [f"    r = function({', '.join(params)})", "    if not r[0]:",
                  "        return None"]
        # per leaf: None where no cotangent reached it, else its float or array
        grads = []
        for n, kind in enumerate(self.kinds):
            reached, found = f"r[{2 + 2 * n}]", f"r[{3 + 2 * n}]"
            grads.append("None" if kind is None else
                         f"{found if kind == -1 else f'g{kind}'} if {reached} else None")
        lines.append(f"    return output_type(r[1]), [{', '.join(grads)}]")
        exec(compile("\n".join(lines) + "\n", "<dualbcast fused call>", "exec"), names)
        return names["run"]


def _exact(value):
    return value.hex() if type(value) is float else repr(value)
