"""The command table is the one declaration of the public surface: every front end it names has each command, made
from the table, and no front end declares a command by hand."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest
from IPython.core.interactiveshell import InteractiveShell

import hermes_nb
from hermes_nb import api, command_table, tools
from hermes_nb.cli import build_parser

PACKAGE = Path(hermes_nb.__file__).resolve().parent
FRONT_ENDS = ("__init__.py", "api.py", "tools.py", "cli.py", "notebook/magics.py")


def python_names() -> set[str]:
    """The names a command has in Python: its function's and its magic's."""
    return {command.name for command in command_table.COMMANDS} | {c.magic for c in command_table.magics() if c.magic}


def command_names() -> set[str]:
    """Every name a command has in any front end: in Python and on the command line."""
    return python_names() | {command.cli for command in command_table.subcommands() if command.cli}


def test_every_exported_command_is_a_public_name_resolving_to_its_core() -> None:
    for command in command_table.exported():
        assert command.name in hermes_nb.__all__, command.name
        assert getattr(hermes_nb, command.name) is command.core(), command.name
        assert inspect.iscoroutinefunction(command.core()), command.name
    rl_names = {name for name in hermes_nb.__all__ if name.startswith("rl_")}
    assert rl_names == {command.name for command in command_table.exported()}


def static_imports(statements: list[ast.stmt]) -> dict[str, str | None]:
    """The ``rl_*`` names these statements import, each with its module."""
    return {
        alias.name: node.module
        for node in statements
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
        if alias.name.startswith("rl_")
    }


def test_the_static_exports_import_each_command_from_the_module_the_table_names() -> None:
    tree = ast.parse((PACKAGE / "__init__.py").read_text(encoding="utf-8"))
    block = next(node for node in tree.body if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING")
    assert static_imports(block.body) == {command.name: command.module for command in command_table.exported()}


def test_the_api_module_imports_each_command_from_the_module_the_table_names() -> None:
    tree = ast.parse((PACKAGE / "api.py").read_text(encoding="utf-8"))
    assert static_imports(tree.body) == {command.name: command.module for command in command_table.exported()}


def test_the_api_module_gathers_exactly_the_exported_commands() -> None:
    gathered = {name for name in api.__all__ if name.startswith("rl_")}
    assert gathered == {command.name for command in command_table.exported()}
    for command in command_table.exported():
        assert getattr(api, command.name) is command.core(), command.name


def test_every_tool_command_is_a_tool_and_nothing_else_is() -> None:
    assert set(tools.all_tools()) == {command.name for command in command_table.tools()}
    for command in command_table.tools():
        assert getattr(tools, command.name).__name__ == command.name


def test_every_magic_command_is_a_magic_and_nothing_else_is() -> None:
    shell = InteractiveShell.instance()
    shell.run_line_magic("load_ext", "hermes_nb")
    registered = {name for name in shell.magics_manager.lsmagic()["line"] if name.startswith("rl_")}
    assert registered == {command.magic for command in command_table.magics()}


def test_every_cli_command_is_a_subcommand_and_nothing_else_is(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        build_parser().parse_args(["no-such-command"])
    offered = re.search(r"choose from (.*)\)", capsys.readouterr().err)
    assert offered is not None
    assert set(re.findall(r"'([a-z-]+)'", offered.group(1))) == {command.cli for command in command_table.subcommands()}


@pytest.mark.parametrize("command", command_table.COMMANDS, ids=lambda command: command.name)
def test_every_argument_fills_a_parameter_of_its_core(command: command_table.Command) -> None:
    parameters = inspect.signature(command.core()).parameters
    takes_keywords = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
    for argument in command.arguments:
        if argument.passed and not argument.spread:
            assert argument.param in parameters, f"{command.name}: {argument.param}"
        if argument.spread:
            assert takes_keywords, f"{command.name}: {argument.param} is spread but the core takes no **keywords"
    for param in command.magic_options:
        assert param in parameters, f"{command.name}: {param}"


@pytest.mark.parametrize("module", FRONT_ENDS)
def test_no_front_end_declares_a_command_by_hand(module: str) -> None:
    # A command's name as a string, or a function or variable named for it, would be a second declaration. (The
    # imports for type checkers are checked against the table above.)
    tree = ast.parse((PACKAGE / module).read_text(encoding="utf-8"))
    names, defined = command_names(), python_names()
    by_hand = [
        f"{module}:{node.lineno}"
        for node in ast.walk(tree)
        if (isinstance(node, ast.Constant) and node.value in names)
        or (isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name in defined)
        or (isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and node.id in defined)
    ]
    assert not by_hand, f"commands written by hand: {by_hand}"
