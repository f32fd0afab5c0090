"""Copy the newest asv results of this machine into ``docs/benchmarks/results.json``,
with each benchmark's parameter names (which asv keeps in ``benchmarks.json``) and the
versions measured, for the site's tables and plots (``docs/_ext/asv_pages.py``).

    cd asv_bench && asv run --python=same --set-commit-hash $(git rev-parse HEAD) --bench \\
        "ProgramRatios|WritingFast|EamHvpJax|RegressionHessianJax|FirstGradient|KernelRatios"
    cd .. && python docs/benchmarks/collect.py
"""
import datetime
import glob
import json
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RESULTS = os.path.join(ROOT, "asv_bench", "results")


def _versions():
    """The versions of what was measured (asv runs in this environment: --python=same)."""
    import importlib.metadata
    import platform
    found = {"Python": platform.python_version()}
    for name in ("numba", "numpy", "jax", "torch"):
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            pass
    return found


def main():
    candidates = [p for p in glob.glob(os.path.join(RESULTS, "*", "*.json"))
                  if os.path.basename(p) != "machine.json"]
    newest = max(candidates, key=os.path.getmtime)
    with open(newest) as f:
        results = json.load(f)
    with open(os.path.join(RESULTS, "benchmarks.json")) as f:
        benchmarks = json.load(f)
    results["param_names"] = {name: benchmarks[name].get("param_names", [])
                              for name in results["results"] if name in benchmarks}
    results["versions"] = _versions()
    results["date_text"] = datetime.datetime.fromtimestamp(
        results["date"] / 1000, datetime.timezone.utc).strftime("%Y-%m-%d")
    target = os.path.join(ROOT, "docs", "benchmarks", "results.json")
    with open(target, "w") as f:
        json.dump(results, f, indent=1, sort_keys=True)
    print(f"{newest} -> {target}: {len(results['results'])} benchmarks")


if __name__ == "__main__":
    main()
