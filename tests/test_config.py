"""dualbcast.config's environment variables: a bad value is an error naming the
variable, raised at import (a subprocess each: they are read once, at import)."""
import os
import subprocess
import sys

import pytest


def _import_with(name, value):
    env = dict(os.environ, **{name: value})
    return subprocess.run([sys.executable, "-c", "import dualbcast as db; "
                           "print(db.config.threads, db.config.adaptive_threads, "
                           "db.config.compile_notice)"],
                          env=env, capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("name, value", [("DUALBCAST_THREADS", "two"),
                                         ("DUALBCAST_ADAPTIVE_THREADS", "maybe"),
                                         ("DUALBCAST_COMPILE_NOTICE", "abc")])
def test_a_bad_environment_value_names_its_variable(name, value):
    result = _import_with(name, value)
    assert result.returncode != 0
    assert f"the environment variable {name}={value!r} is not" in result.stderr


@pytest.mark.parametrize("name, value, printed", [
    ("DUALBCAST_THREADS", " 3 ", "3 True 2.0"),
    ("DUALBCAST_ADAPTIVE_THREADS", "Off", "False"),
    ("DUALBCAST_ADAPTIVE_THREADS", "yes", "True"),
    ("DUALBCAST_COMPILE_NOTICE", "off", "None"),
    ("DUALBCAST_COMPILE_NOTICE", "0.5", "0.5")])
def test_good_environment_values(name, value, printed):
    result = _import_with(name, value)
    assert result.returncode == 0, result.stderr
    assert printed in result.stdout
