"""dualbcast/memory.py: glibc's malloc keeps freed temporaries for the next call (no
page fault per 4 KiB of every temporary), unless the user decides otherwise.  Each case
in a process of its own (the allocator's settings are the process's)."""
import json
import os
import platform
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(platform.system() != "Linux"
                                or platform.libc_ver()[0] != "glibc",
                                reason="glibc's malloc only")

_FAULTS = textwrap.dedent("""
    import json, resource
    import numpy as np
    import dualbcast as db
    from dualbcast import memory

    def step(x):
        # a program's temporaries, 2 MiB each, freed at the end of the call
        y = np.exp(-x) * x
        return float(np.sum(y * y + x))

    x = np.random.default_rng(0).random(1 << 18)
    for _ in range(5):
        step(x)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(50):
        step(x)
    faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 50
    print(json.dumps(dict(tuned=memory.tuned, faults=faults)))
""")


def _run(**environment):
    env = {k: v for k, v in os.environ.items()
           if k not in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_",
                        "DUALBCAST_MALLOC_TUNING")}
    env.update(environment)
    done = subprocess.run([sys.executable, "-c", _FAULTS], capture_output=True, text=True,
                          env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_freed_temporaries_are_reused_without_page_faults():
    tuned = _run()
    assert tuned["tuned"] is True
    # three 2 MiB temporaries a call: ~1500 pages each call if they were fresh
    assert tuned["faults"] < 50, tuned
    untuned = _run(DUALBCAST_MALLOC_TUNING="0")
    assert untuned["tuned"] is False
    assert untuned["faults"] > 10 * max(tuned["faults"], 10), (tuned, untuned)


def test_the_users_own_malloc_settings_are_left_alone():
    assert _run(MALLOC_TRIM_THRESHOLD_="131072")["tuned"] is False
    assert _run(MALLOC_MMAP_THRESHOLD_="131072")["tuned"] is False
