"""Tool schemas are transformers' get_json_schema; tool refs load from modules, files, TOOLS names and function
objects; every way a ref can be wrong is a one-line UserError."""

import textwrap
from enum import Enum
from typing import Literal

import pytest
from transformers.utils import get_json_schema

from tailrl.errors import UserError
from tailrl.tools import TOOLS, load_tool, load_tools
from tailrl.tools.builtin import calculator, python
from tailrl.tools.schema import resolve_tool
from tests.tools import sample_tools


class Color(Enum):
    RED = "red"
    BLUE = "blue"


def rich(name: str, count: int, ratio: float | None, tags: list[str], pair: tuple[int, str],
         mode: Literal["fast", "slow"], color: Color, extra: dict[str, int], flag: bool = False) -> str:
    """Exercise every hint get_json_schema knows.

    Args:
        name: A name.
        count: How many.
        ratio: A ratio, or nothing.
        tags: Some tags.
        pair: A number and a word.
        mode: How to run.
        color: A color.
        extra: Named numbers.
        flag: A switch (choices: [true, false])

    Returns:
        A summary.
    """
    return name


@pytest.mark.parametrize("fn", [rich, sample_tools.add, sample_tools.echo, sample_tools.async_add, calculator, python])
def test_schema_is_transformers_get_json_schema(fn):
    tool = load_tool(fn)
    assert tool.schema == get_json_schema(fn)
    assert tool.name == fn.__name__ == tool.schema["function"]["name"]


def test_refs_from_module_file_registry_and_function(tmp_path):
    path = tmp_path / "my_tools.py"
    path.write_text(textwrap.dedent('''
        def shout(text: str) -> str:
            """Shout.

            Args:
                text: What to shout.
            """
            return text.upper()
    '''))
    by_file = load_tool(f"{path}:shout")
    assert by_file.ref == f"{path}:shout" and by_file.fn("hi") == "HI"
    assert load_tool(by_file.fn).ref == f"{path.resolve()}:shout"  # a file-loaded function maps back to its file
    assert load_tool("tests.tools.sample_tools:add").ref == "tests.tools.sample_tools:add"
    assert load_tool(sample_tools.add).ref == "tests.tools.sample_tools:add"
    assert load_tool("calculator").fn is calculator and load_tool(calculator).ref == "calculator"
    assert {"calculator", "python"} <= set(TOOLS)


def _one_line_error(ref) -> str:
    with pytest.raises(UserError) as info:
        load_tool(ref)
    message = str(info.value)
    assert "\n" not in message, message
    return message


def test_spec_errors_are_one_line(tmp_path):
    assert "file not found" in _one_line_error(f"{tmp_path}/missing.py:f")
    assert "no module named 'no_such_module_xyz'" in _one_line_error("no_such_module_xyz:f")
    message = _one_line_error("tests.tools.sample_tools:nope")
    assert "has no 'nope'" in message and "add" in message  # lists what is there
    assert "unknown tool 'nope'" in _one_line_error("nope")
    assert "no docstring" in _one_line_error("tests.tools.sample_tools:no_docstring")
    assert "missing a type hint" in _one_line_error(sample_tools.no_hints)
    assert "a class is an environment" in _one_line_error("tests.tools.sample_tools:IncrementEnv")

    def local(a: int) -> int:
        """Local.

        Args:
            a: A.
        """
        return a

    assert "cannot import" in _one_line_error(local)
    broken = tmp_path / "broken.py"
    broken.write_text("import no_such_dependency_xyz\n")
    assert "loading" in _one_line_error(f"{broken}:f")


def test_a_missing_argument_description_is_one_line():
    def undocumented(a: int, b: int) -> int:
        """Add.

        Args:
            a: A.
        """
        return a + b

    undocumented.__qualname__ = "undocumented"  # as if at module level: the schema check is what fails
    undocumented.__module__ = "tests.tools.test_schema"
    with pytest.raises(UserError, match="no description for the argument 'b'") as info:
        load_tool(undocumented)
    assert "\n" not in str(info.value)


def test_duplicate_names_refused():
    with pytest.raises(UserError, match="two tools are named 'add'"):
        load_tools([sample_tools.add, "tests.tools.sample_tools:add"])


def test_resolve_tool_needs_no_schema():
    name, fn, ref = resolve_tool("tests.tools.sample_tools:no_docstring")  # what a worker does: no schema check
    assert (name, fn, ref) == ("no_docstring", sample_tools.no_docstring, "tests.tools.sample_tools:no_docstring")
