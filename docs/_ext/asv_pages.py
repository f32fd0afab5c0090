"""The benchmark tables and plots of the site, made from an asv results file.

``docs/benchmarks/results.json`` is one run of ``asv run`` over the benchmarks the
pages show, copied from ``asv_bench/results/<machine>/``: how to make it again is on
the benchmarks page.  When Sphinx starts, each table below becomes a Markdown file
and each plot a PNG in ``docs/benchmarks/_generated/``, which the pages include.  A
table whose benchmark is missing from the results fails the build.
"""
import ast
import itertools
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, os.pardir, "benchmarks", "results.json")
OUT = os.path.join(HERE, os.pardir, "benchmarks", "_generated")


class Table:
    """One benchmark's values as a table: a row per value of ``rows``, a column per
    value of ``columns``, the other parameters fixed by ``where``."""

    def __init__(self, name, benchmark, rows, columns, where=None, digits=2,
                 row_names=None, column_names=None, caption=""):
        self.name, self.benchmark = name, benchmark
        self.rows, self.columns, self.where = rows, columns, where or {}
        self.digits, self.caption = digits, caption
        self.row_names, self.column_names = row_names or {}, column_names or {}

    def cells(self, results):
        table = {}
        for params, value in results.value_table(self.benchmark):
            if all(params.get(k) == v for k, v in self.where.items()):
                table[params[self.rows], params[self.columns]] = value
        if not table:
            raise ValueError(f"asv_pages: no results for {self.benchmark} {self.where}")
        rows = list(dict.fromkeys(r for r, _ in table))
        columns = list(dict.fromkeys(c for _, c in table))
        return rows, columns, table

    def markdown(self, results):
        rows, columns, table = self.cells(results)
        head = [self.row_names.get("", self.rows)]
        head += [self.column_names.get(c, _label(c)) for c in columns]
        lines = ["| " + " | ".join(head) + " |", "|---" * len(head) + "|"]
        for row in rows:
            cells = [_format(table.get((row, c)), self.digits) for c in columns]
            lines.append(f"| {self.row_names.get(row, _label(row))} | " + " | ".join(cells)
                         + " |")
        return "\n".join(lines) + "\n"


def _label(value):
    """A parameter as a heading: 10^4 for 10000, a name as it is."""
    if isinstance(value, int) and value >= 100 and str(value).rstrip("0") == "1":
        return f"10^{len(str(value)) - 1}"
    return str(value)


def _format(value, digits):
    if value is None:
        return "–"
    if value >= 100:
        return f"{value:,.0f}"
    return f"{value:.{digits}f}"


class Results:
    """An asv results file: each benchmark's values with their parameters."""

    def __init__(self, path):
        with open(path) as f:
            self.raw = json.load(f)
        self.columns = self.raw["result_columns"]

    def value_table(self, benchmark):
        entry = self.raw["results"].get(benchmark)
        if entry is None:
            raise ValueError(f"asv_pages: {benchmark} is not in {RESULTS}")
        values = entry[self.columns.index("result")]
        params = entry[self.columns.index("params")] if "params" in self.columns else []
        names = self.raw.get("param_names", {}).get(benchmark)
        table = []
        for i, combination in enumerate(itertools.product(*params) if params else [()]):
            keys = names or [f"p{k}" for k in range(len(combination))]
            value = values[i] if isinstance(values, list) else values
            if value is not None and value == value:       # not failed, not NaN
                table.append(({k: _parse(v) for k, v in zip(keys, combination)}, value))
        return table

    @property
    def machine(self):
        params = self.raw.get("params", {})
        versions = ", ".join(f"{k} {v}" for k, v in self.raw.get("versions", {}).items())
        return (f"{params.get('cpu', '?')}, {params.get('num_cpu', '?')} CPUs, "
                f"{params.get('os', '?')}; {versions}; "
                f"commit {self.raw.get('commit_hash', '?')[:8]}, "
                f"{self.raw.get('date_text', '')}")


def _parse(text):
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text



PROGRAM_NAMES = {"": "program", "potential": "pair + three-body potential, neighbour lists",
                 "regression": "negative-binomial regression, design matrix",
                 "robust_regression": "robust (Huber) regression",
                 "phase_field": "phase field, gradient",
                 "phase_field_hvp": "phase field, Hessian-vector product",
                 "mlp": "MLP with a Swish kernel", "lj_all_pairs": "Lennard-Jones, all pairs"}

TABLES = [
    Table("programs", "bench_programs.ProgramRatios.track_ratio", rows="program",
          columns="ratio", where={"threads": "one"}, row_names=PROGRAM_NAMES,
          column_names={"jit/jax": "db.jit / JAX jit", "eager/jax": "eager / JAX jit",
                        "jit/eager": "db.jit / eager", "jit/torch": "db.jit / PyTorch",
                        "jit/numpy": "db.jit / NumPy by hand"}),
    Table("writing_fast_speedup", "bench_writing_fast.WritingFast.track_speedup",
          rows="case", columns="case"),
    Table("second_order", "bench_higher_order.EamHvpJax.track_over_jax", rows="system",
          columns="n", row_names={"": "EAM Hessian-vector product over JAX jit",
                                  "dualbcast": "eager", "dualbcast_jit": "db.jit"}),
    Table("regression_hessian", "bench_batching.RegressionHessianJax.track_ratio",
          rows="form", columns="system",
          row_names={"": "9-parameter regression Hessian over JAX jit",
                     "design_matrix": "design matrix", "nine_arguments": "nine kernel arguments"},
          column_names={"dualbcast": "eager", "dualbcast_jit": "db.jit"}),
    Table("first_gradient", "bench_first_gradient.FirstGradient.track_seconds", rows="system",
          columns="cache", column_names={"empty": "empty cache", "warm": "warm cache"},
          row_names={"": "first gradient in a fresh process, seconds",
                     "dualbcast_chain": "ten-kernel chain, `db.value_and_grad`",
                     "jax_chain": "the same chain, JAX `jit(value_and_grad)`",
                     "dualbcast_eam": "EAM energy, `db.value_and_grad`",
                     "dualbcast_eam_threads": "EAM at 10^6 on two threads",
                     "numba_eam": "EAM gradient by hand, `numba.njit`",
                     "numba_floor": "a trivial `numba.njit` function (Numba's floor)"}),
    Table("kernel_modes", "bench_kernels.KernelRatios.track_ratio_to_numba", rows="mode",
          columns="n", where={"workload": "eam_rho"},
          row_names={"": "EAM density kernel / numba.njit by hand"}),
]


def table(name, results=None):
    """Table ``name`` of :data:`TABLES` as Markdown (the README shows "programs")."""
    results = results or Results(RESULTS)
    return next(t for t in TABLES if t.name == name).markdown(results)


def writing_fast_table(results):
    """Before, after and speed-up per case, as the performance guide shows it."""
    names = {"geometry_in_kernel": "the distance computed inside the kernel",
             "kernel_sum": "`k.sum(x)` for `np.sum(k(x))`",
             "design_matrix": "a design matrix for nine kernel arguments (Hessian)",
             "jit": "`db.jit` of a staged gradient",
             "vmap": "`db.vmap(db.grad(f))` for a loop of `db.grad(f)` over examples"}
    before = results.value_table("bench_writing_fast.WritingFast.track_before_us")
    after = {p["case"]: v for p, v in
             results.value_table("bench_writing_fast.WritingFast.track_after_us")}
    lines = ["| change | before | after | speed-up |", "|---|---|---|---|"]
    for params, b in before:
        case = params["case"]
        a = after[case]
        lines.append(f"| {names.get(case, case)} | {_us(b)} | {_us(a)} | {b / a:.1f}x |")
    return "\n".join(lines) + "\n"


def _us(microseconds):
    if microseconds >= 1000:
        return f"{microseconds / 1000:.2f} ms"
    return f"{microseconds:.0f} µs"


def programs_plot(results, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    values = {(p["program"], p["threads"], p["ratio"]): v for p, v in
              results.value_table("bench_programs.ProgramRatios.track_ratio")}
    programs = [p for p in PROGRAM_NAMES if p]
    series = {"eager / JAX jit": "eager/jax", "db.jit / JAX jit": "jit/jax"}
    fig, ax = plt.subplots(figsize=(8, 3.6))
    width = 0.38
    for k, (label, ratio) in enumerate(series.items()):
        heights = [values.get((name, "one", ratio), float("nan")) for name in programs]
        ax.bar([i + (k - 0.5) * width for i in range(len(programs))], heights, width,
               label=label)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(programs)))
    ax.set_xticklabels([PROGRAM_NAMES[p].split(",")[0] for p in programs], rotation=25,
                       ha="right", fontsize=8)
    ax.set_ylabel("time / JAX jit's (lower is faster)")
    ax.set_yscale("log")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def generate(app=None):
    results = Results(RESULTS)
    os.makedirs(OUT, exist_ok=True)
    written = {}
    for table in TABLES:
        if table.name == "writing_fast_speedup":
            text = writing_fast_table(results)
        else:
            text = table.markdown(results)
        written[table.name] = text
    written["machine"] = results.machine + "\n"
    for name, text in written.items():
        path = os.path.join(OUT, f"{name}.md")
        if not os.path.exists(path) or open(path).read() != text:   # (no rebuild loop)
            with open(path, "w") as f:
                f.write(text)
    programs_plot(results, os.path.join(OUT, "programs.png"))


def setup(app):
    app.connect("builder-inited", generate)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
