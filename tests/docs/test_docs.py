"""The documentation is tested: code blocks run, generated pages are current, links resolve.

Convention: every fenced ```python block in README.md and docs/*.md runs, alone, in a fresh
interpreter with a temporary working directory and the checkout on ``PYTHONPATH``. A block
that must not run (it needs a GPU, a cluster or names defined elsewhere) is fenced as
```python no-run. A block fenced ```python examples/NAME.py is that file verbatim; the file
is what runs (the README's quick start commands run it in
``test_readme_quickstart_commands``). Shell commands are ```bash blocks.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^```([^\n]*)\n(.*?)^```$", re.M | re.S)


def _blocks(info: str) -> list[tuple[str, str]]:
    out = []
    for page in PAGES:
        if not page.is_file():
            continue
        text = page.read_text()
        for match in FENCE.finditer(text):
            if match.group(1).strip() == info:
                line = text.count("\n", 0, match.start()) + 1
                out.append((f"{page.relative_to(ROOT)}:{line}", match.group(2)))
    return out


PYTHON_BLOCKS = _blocks("python")


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return env


@pytest.mark.parametrize("where,code", PYTHON_BLOCKS, ids=[w for w, _ in PYTHON_BLOCKS])
def test_python_block_runs(where, code, tmp_path):
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=_env(), capture_output=True,
        text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, f"{where}\n{result.stdout}\n{result.stderr}"


def _readme() -> str:
    return (ROOT / "README.md").read_text()


def _fenced_after(text: str, marker: str, info: str) -> str:
    start = text.index(marker)
    match = FENCE.search(text, start)
    assert match and match.group(1).strip() == info, marker
    return match.group(2)


def test_example_blocks_are_their_files():
    blocks = []
    for page in PAGES:
        if page.is_file():
            for match in FENCE.finditer(page.read_text()):
                info = match.group(1).split()
                if info[:1] == ["python"] and info[1:2] and info[1].startswith("examples/"):
                    blocks.append((page.name, info[1], match.group(2)))
    assert ("README.md", "examples/quickstart.py") in {(p, f) for p, f, _ in blocks}
    for page, name, code in blocks:
        assert code == (ROOT / name).read_text(), f"{page}: {name} differs from the file"


def test_readme_quickstart_commands(tmp_path):
    """The README's commands as written, with 9464 taken: they print the metrics, leave no
    file behind and return once the quick start has ended (its port free again)."""
    commands = _fenced_after(_readme(), "Run it from the checkout", "bash")
    (tmp_path / "examples").symlink_to(ROOT / "examples")  # "from the checkout"
    env = _env()
    env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env["PATH"]])  # python
    with contextlib.ExitStack() as stack:
        with contextlib.suppress(OSError):  # else something else already holds 9464
            taken = stack.enter_context(socket.socket())
            taken.bind(("127.0.0.1", 9464))
            taken.listen()
        result = subprocess.run(
            ["bash", "-c", commands], cwd=tmp_path, env=env, capture_output=True, text=True,
            timeout=90,
        )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    found = {line.split("{")[0] for line in result.stdout.splitlines()}
    assert found == {"ppo_actor_update_loss_avg", "rollout_reward", "rltel_step"}, result.stdout
    assert [p.name for p in tmp_path.iterdir()] == ["examples"]


def test_readme_keeps_the_make_commands():
    text = _readme()
    assert "make demo" in text and "make test" in text


def _gen():
    """docs/gen.py, loaded by path (``docs`` here would name this test package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("rltel_docs_gen", ROOT / "docs" / "gen.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# The AReaL page runs AReaL's released code on 2 gloo ranks (85 s at load 4 here): 120 s was
# crossed twice by a clean-clone CI run at load 12-15.
@pytest.mark.timeout(600)
def test_generated_pages_are_current():
    gen = _gen()

    for path, render in gen.PAGES.items():
        assert path.read_text() == render(), f"{path.name} is stale: run python -m docs.gen"


def test_every_config_field_and_catalogue_metric_is_described():
    gen = _gen()

    gen.render_config()  # raises SystemExit naming a field without a meaning
    gen.render_metrics()  # raises SystemExit naming a catalogue metric without a definition
    field_docs = gen.config_page.FIELD_DOCS
    known = {f"{cls}.{name}" for cls, name in (key.split(".") for key in field_docs)}
    assert known == set(field_docs)


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = FENCE.sub("", page.read_text())
    return {_slug(m.group(1)) for m in re.finditer(r"^#+ (.+)$", text, re.M)}


LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def test_links_between_docs_resolve():
    broken = []
    for page in PAGES:
        if not page.is_file():
            continue
        text = FENCE.sub("", page.read_text())
        for target in LINK.findall(text):
            if re.match(r"[a-z]+://", target) or target.startswith("mailto:"):
                continue
            path, _, anchor = target.partition("#")
            dest = (page.parent / path).resolve() if path else page
            if not dest.exists():
                broken.append(f"{page.name}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                broken.append(f"{page.name}: {target} (no such heading)")
    assert not broken, "\n".join(broken)


def test_every_docs_page_is_linked_from_the_readme():
    text = _readme()
    for page in sorted((ROOT / "docs").glob("*.md")):
        assert f"(docs/{page.name})" in text, page.name


@pytest.mark.parametrize(
    ("heading", "table_name"),
    [
        ("| layer (top to bottom) |", "LAYERS"),
        ("| telemetry's layer (top to bottom) |", "TELEMETRY_LAYERS"),
    ],
)
def test_architecture_layer_tables_match_the_layer_test(heading, table_name):
    from tests import test_layers

    layers = getattr(test_layers, table_name)
    text = (ROOT / "docs" / "architecture.md").read_text()
    table = text[text.index(heading) :]
    table = table[: table.index("\n\n")]
    rows = [line.split("|") for line in table.splitlines()[2:]]
    assert [row[1].strip() for row in rows] == [name for name, _ in layers]
    folders = [tuple(f.strip(" `/").replace("/", ".") for f in row[2].split(",")) for row in rows]
    assert folders == [folders for _, folders in layers]
