"""Every example in README.md runs, in order, in one namespace (as a reader would)."""
import pathlib
import re

README = pathlib.Path(__file__).resolve().parent.parent / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


def test_readme_has_examples():
    assert len(BLOCKS) >= 5


def test_readme_examples_run(capsys):
    namespace = {}
    for block in BLOCKS:
        exec(compile(block, str(README), "exec"), namespace)
    printed = capsys.readouterr().out
    assert "could not be broadcast together with shapes (3,) (4,) () ()" in printed
    assert "no gradient rule for numpy.median" in printed


def test_readme_names_the_test_command_ci_runs():
    ci = (README.parent / ".ci" / "run").read_text()
    command = re.search(r'pip install -e "\.\[test\]" && (python -m pytest[^\n#]*)',
                        README.read_text()).group(1).strip()
    assert command in ci
