"""README.md: it has examples (tests/test_docs.py runs them, as it runs every page's,
in order, in one namespace), and it names the commands CI runs."""
import pathlib
import re

README = pathlib.Path(__file__).resolve().parent.parent / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)


def test_readme_has_examples():
    assert len(BLOCKS) >= 4


def test_readme_names_the_test_command_ci_runs():
    ci = (README.parent / ".ci" / "run").read_text()
    command = re.search(r'pip install -e "\.\[test\]" && (python -m pytest[^\n#]*)',
                        README.read_text()).group(1).strip()
    assert command in ci


def test_readme_names_the_docs_build_ci_runs():
    ci = (README.parent / ".ci" / "run").read_text()
    command = re.search(r'pip install -e "\.\[docs\]" && (python -m sphinx[^\n#]*)',
                        README.read_text()).group(1).strip()
    assert command in ci
