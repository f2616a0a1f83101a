"""`$(VAR)` expansion: upstream's edge cases."""

from __future__ import annotations

import pytest

from kubelet.container.expansion import (
    expand,
    expand_command_and_args,
    expand_subpath_expr,
    mapping_func_for,
)

_CASES = [
    ("$(VAR_A)", "A"),  # whole string
    ("$(VAR_A)-$(VAR_A)", "A-A"),  # repeat
    ("$(VAR_A)-1", "A-1"),  # beginning
    ("___$(VAR_B)___", "___B___"),  # middle
    ("___$(VAR_C)", "___C"),  # end
    ("$(VAR_A)_$(VAR_B)_$(VAR_C)", "A_B_C"),  # compound
    ("$$(VAR_B)_$(VAR_A)", "$(VAR_B)_A"),  # escape & expand
    ("$$(VAR_A)_$$(VAR_B)", "$(VAR_A)_$(VAR_B)"),  # compound escape
    ("f000-$$VAR_A", "f000-$VAR_A"),  # mixed in escapes
    ("foo\\$(VAR_C)bar", "foo\\Cbar"),  # backslash escape ignored
    ("foo\\\\$(VAR_C)bar", "foo\\\\Cbar"),  # backslash escape ignored
    ("foo\\\\\\\\$(VAR_A)bar", "foo\\\\\\\\Abar"),  # lots of backslashes
    ("$(VAR_A$(VAR_B))", "$(VAR_A$(VAR_B))"),  # nested var references
    ("$(VAR_A$(VAR_B)", "$(VAR_A$(VAR_B)"),  # nested var references second type
    ("$(VAR_REF)", "$(VAR_A)"),  # value is a reference
    ("%%$(VAR_REF)--$(VAR_REF)%%", "%%$(VAR_A)--$(VAR_A)%%"),  # value is a reference x 2
    ("foo$(VAR_EMPTY)bar", "foobar"),  # empty var
    ("foo$(VAR_Awhoops!", "foo$(VAR_Awhoops!"),  # unterminated expression
    ("f00__(VAR_A)__", "f00__(VAR_A)__"),  # expression without operator
    ("$?_boo_$!", "$?_boo_$!"),  # shell special vars pass through
    ("$VAR_A", "$VAR_A"),  # bare operators are ignored
    ("$(VAR_DNE)", "$(VAR_DNE)"),  # undefined vars are passed through
    ("$$$$$$(BIG_MONEY)", "$$$(BIG_MONEY)"),  # multiple (even) operators, var undefined
    ("$$$$$$(VAR_A)", "$$$(VAR_A)"),  # multiple (even) operators, var defined
    ("$$$$$$$(GOOD_ODDS)", "$$$$(GOOD_ODDS)"),  # multiple (odd) operators, var undefined
    ("$$$$$$$(VAR_A)", "$$$A"),  # multiple (odd) operators, var defined
    ("$VAR_A)", "$VAR_A)"),  # missing open expression
    ("${VAR_A}", "${VAR_A}"),  # shell syntax ignored
    ("$(VAR_B)_______$(A", "B_______$(A"),  # trailing incomplete expression not consumed
    (
        "$(VAR_C)_______$(",
        "C_______$(",
    ),  # trailing incomplete expression, no content, is not consumed
    ("$(VAR_A)foobarzab$", "Afoobarzab$"),  # operator at end of input string is preserved
    ("foo-\\$(VAR_A", "foo-\\$(VAR_A"),  # shell escaped incomplete expr
    ("--$($($($($--", "--$($($($($--"),  # lots of $( in middle
    ("$($($($($--foo$(", "$($($($($--foo$("),  # lots of $( in beginning
    ("foo0--$($($($(", "foo0--$($($($("),  # lots of $( at end
    ("$(foo$$var)", "$(foo$$var)"),  # escaped operators in variable names are not escaped
    ("\n", "\n"),  # newline not expanded
    ("$£FOO", "$£FOO"),  # dollar sign followed by non-ASCII UTF-8 character
    (
        "prefix-$€-suffix",
        "prefix-$€-suffix",
    ),  # dollar sign followed by multi-byte UTF-8 character in middle
    ("$中文", "$中文"),  # dollar sign followed by Chinese character
]

_ONE = {"VAR_A": "A", "VAR_B": "B", "VAR_C": "C", "VAR_REF": "$(VAR_A)", "VAR_EMPTY": ""}


@pytest.mark.parametrize(("text", "want"), _CASES)
def test_expand_one_context(text: str, want: str) -> None:
    assert expand(text, mapping_func_for(_ONE)) == want


@pytest.mark.parametrize(("text", "want"), _CASES)
def test_expand_two_contexts(text: str, want: str) -> None:
    mapping = mapping_func_for(
        {"VAR_A": "A", "VAR_EMPTY": ""}, {"VAR_B": "B", "VAR_C": "C", "VAR_REF": "$(VAR_A)"}
    )
    assert expand(text, mapping) == want


def test_first_context_wins() -> None:
    mapping = mapping_func_for({"X": "first"}, {"X": "second", "Y": "y"})
    assert expand("$(X)/$(Y)", mapping) == "first/y"


def test_map_reference_chain() -> None:
    # Each value sees the earlier ones already expanded, as env building does.
    declared = {"FOO": "bar", "ZOO": "$(FOO)-1", "BLU": "$(ZOO)-2"}
    mapping = mapping_func_for(declared)
    for name in ("FOO", "ZOO", "BLU"):
        declared[name] = expand(declared[name], mapping)
    assert declared == {"FOO": "bar", "ZOO": "bar-1", "BLU": "bar-1-2"}


def test_command_and_args() -> None:
    container = {
        "command": ["/bin/sh", "-c", "echo $(MESSAGE) $(MISSING) $$(MESSAGE)"],
        "args": ["$(MESSAGE)", "x$(EMPTY)y"],
    }
    envs = [("MESSAGE", "hello"), ("EMPTY", "")]
    assert expand_command_and_args(container, envs) == (
        ["/bin/sh", "-c", "echo hello $(MISSING) $(MESSAGE)"],
        ["hello", "xy"],
    )
    assert expand_command_and_args({}, envs) == ([], [])


def test_subpath_expr() -> None:
    envs = [("POD_NAME", "p-1"), ("EMPTY", "")]
    assert expand_subpath_expr("logs/$(POD_NAME)", envs) == "logs/p-1"
    with pytest.raises(ValueError, match=r"^missing value for A, EMPTY, Z$"):
        expand_subpath_expr("$(Z)/$(EMPTY)/$(A)/$(POD_NAME)", envs)
