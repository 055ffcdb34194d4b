"""The ``trep-edge`` command: every subcommand is a command module with ``add_parser`` and ``run``, ``--help`` lists
them all, and without torch the CLI still starts (``--help``) while a training command says which extra to install."""
from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

import pytest

from trep_edge.cli import COMMANDS, build_parser

REPO = Path(__file__).resolve().parents[1]


def _names() -> dict[str, object]:
    """Subcommand name -> the module whose ``add_parser`` declares it, each module on its own parser."""
    names = {}
    for module in COMMANDS:
        sub = argparse.ArgumentParser(prog="trep-edge").add_subparsers()
        parser = module.add_parser(sub)
        assert isinstance(parser, argparse.ArgumentParser), f"{module.__name__}.add_parser returns no parser"
        (name,) = sub.choices
        names[name] = module
    return names


def test_every_command_module_offers_add_parser_and_run_and_the_parser_runs_it():
    names = _names()
    assert len(names) == len(COMMANDS) == 12
    choices = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices
    assert list(choices) == list(names)
    for name, module in names.items():
        assert callable(module.run), f"{module.__name__} has no run(args)"
        assert choices[name].get_default("run") is module.run


def _without_torch(argv: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    script = ("import sys; sys.modules['torch'] = None; from trep_edge.cli import main; "
              f"sys.exit(main({argv!r}))")  # fmt: skip
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=tmp_path)


def test_help_lists_every_command_without_torch(tmp_path):
    done = _without_torch(["--help"], tmp_path)
    assert done.returncode == 0, done.stderr
    listed = done.stdout.split("positional arguments:")[1]
    for name in _names():
        assert f"\n    {name} " in listed or f"\n    {name}\n" in listed, f"--help does not list {name}"


@pytest.mark.parametrize("argv", [["train", "x.npy"], ["eval", "report"]])
def test_a_training_command_without_torch_names_the_extra_in_one_line(argv, tmp_path):
    done = _without_torch(argv, tmp_path)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith(f"trep-edge {argv[0]}: needs the [train] extra")
