"""``python -m dualbcast`` runs its gradient check and prints the results."""
import subprocess
import sys


def test_demo_runs_and_checks_its_gradient():
    result = subprocess.run([sys.executable, "-m", "dualbcast", "--n", "2000"],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "EAM energy of 2000 atoms" in result.stdout
    assert "max relative difference to the hand-written gradient" in result.stdout
    assert "with jit" in result.stdout          # (and it checked jit against eager)
