"""How hard the property-based tests try.  The suite (and CI) runs the quick profile;
``DUALBCAST_EXAMPLES=25 python -m pytest -q tests/test_jit_adversarial.py
tests/test_conventions.py`` runs 25 times the examples (the long profile, in the
README)."""
import os

SCALE = float(os.environ.get("DUALBCAST_EXAMPLES", "1"))


def examples(n):
    """``n`` examples in the quick profile, scaled for a longer run."""
    return max(1, round(n * SCALE))
