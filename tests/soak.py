"""Soak runs in a process of their own: :func:`run_soak` starts one, and the script
reads its resident memory and the ``"dualbcast"`` log's messages (compiles, for one)
with the functions here."""
import json
import logging
import os
import subprocess
import sys
import textwrap

TESTS = os.path.dirname(os.path.abspath(__file__))


def run_soak(script, **fields):
    """Run ``script`` (dedented, formatted with ``fields`` and ``tests``, this folder,
    so that it can import this module) in a new Python process; the JSON object its
    last line prints."""
    code = textwrap.dedent(script).format(tests=TESTS, **fields)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=600, cwd=TESTS)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def released():
    """Collect garbage and hand the allocator's free memory back to the system (glibc's
    ``malloc_trim``, where there is one), so that RSS measures what is in use: without
    it, a soak that allocates arrays of many sizes creeps by ~50 KB a trace that
    ``malloc_trim`` gives back."""
    import ctypes
    import gc
    gc.collect()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


def rss_mb():
    """This process's resident memory, in MiB."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024


def collected(*fragments):
    """A list that receives every message of the ``"dualbcast"`` logger (at INFO and
    above) containing one of ``fragments``."""
    messages = []

    class Collect(logging.Handler):
        def emit(self, record):
            message = record.getMessage()
            if any(fragment in message for fragment in fragments):
                messages.append(message)
    logging.getLogger("dualbcast").addHandler(Collect())
    logging.getLogger("dualbcast").setLevel(logging.INFO)
    return messages
