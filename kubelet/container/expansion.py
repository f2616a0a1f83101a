"""`$(VAR)` references in env values, command, args and subPathExpr
(third_party/forked/golang/expansion and the kubecontainer helpers upstream).

`$$` is an escaped `$`; a reference the mapping does not know is written back
as `$(NAME)`; a `$(` without a closing paren, and a `$` followed by anything
else, are left as written.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from kubelet.types import Container

MappingFunc = Callable[[str], str]


def mapping_func_for(*contexts: Mapping[str, str]) -> MappingFunc:
    """Looks a name up in each context in turn; unknown names stay `$(name)`."""

    def lookup(name: str) -> str:
        for ctx in contexts:
            v = ctx.get(name)
            if v is not None:
                return v
        return f"$({name})"

    return lookup


def expand(text: str, mapping: MappingFunc) -> str:
    cursor = text.find("$")
    if cursor < 0:
        return text
    n = len(text)
    out: list[str] = []
    checkpoint = 0
    # A `$` as the last character is never an operator.
    while 0 <= cursor < n - 1:
        out.append(text[checkpoint:cursor])
        nxt = text[cursor + 1]
        if nxt == "(":
            close = text.find(")", cursor + 2)
            if close < 0:
                out.append("$(")
                checkpoint = cursor + 2
            else:
                out.append(mapping(text[cursor + 2 : close]))
                checkpoint = close + 1
        else:
            # `$$` gives one `$`; `$x` is kept as is.
            out.append("$" if nxt == "$" else "$" + nxt)
            checkpoint = cursor + 2
        cursor = text.find("$", checkpoint)
    out.append(text[checkpoint:])
    return "".join(out)


def expand_command_and_args(
    container: Container, envs: Sequence[tuple[str, str]]
) -> tuple[list[str], list[str]]:
    """The container's command and args with references to its final
    environment expanded (ExpandContainerCommandAndArgs)."""
    mapping = mapping_func_for(dict(envs))
    command = [expand(c, mapping) for c in container.get("command") or []]
    args = [expand(a, mapping) for a in container.get("args") or []]
    return command, args


def expand_subpath_expr(sub_path_expr: str, envs: Sequence[tuple[str, str]]) -> str:
    """A volumeMount's subPathExpr (ExpandContainerVolumeMounts): every reference
    must name a non-empty variable, else ValueError `missing value for A, B`."""
    env = dict(envs)
    missing: set[str] = set()

    def lookup(name: str) -> str:
        v = env.get(name, "")
        if not v:
            missing.add(name)
        return v

    expanded = expand(sub_path_expr, lookup)
    if missing:
        raise ValueError(f"missing value for {', '.join(sorted(missing))}")
    return expanded
