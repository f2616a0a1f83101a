"""Name checks of k8s.io/apimachinery/pkg/util/validation, with its messages
(they end up in pod events and container errors, so they must read the same)."""

from __future__ import annotations

import re

_QNAME_FMT = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_QNAME_MSG = (
    "must consist of alphanumeric characters, '-', '_' or '.', "
    "and must start and end with an alphanumeric character"
)
_QNAME_RE = re.compile(f"^{_QNAME_FMT}$")
_QNAME_MAX = 63

_LABEL_FMT = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character"
)
_LABEL_RE = re.compile(f"^{_LABEL_FMT}$")
DNS1123_LABEL_MAX = 63

_SUBDOMAIN_FMT = _LABEL_FMT + "(\\." + _LABEL_FMT + ")*"
_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, "
    "'-' or '.', and must start and end with an alphanumeric character"
)
_SUBDOMAIN_RE = re.compile(f"^{_SUBDOMAIN_FMT}$")
DNS1123_SUBDOMAIN_MAX = 253


def max_len_error(length: int) -> str:
    return f"must be no more than {length} characters"


def regex_error(msg: str, fmt: str, *examples: str) -> str:
    if not examples:
        return f"{msg} (regex used for validation is '{fmt}')"
    shown = " or ".join(f"'{e}'," for e in examples)
    return f"{msg} (e.g. {shown} regex used for validation is '{fmt}')"


def _fullmatch(pattern: re.Pattern[str], value: str) -> bool:
    # Go's `$` does not match before a trailing newline; Python's does.
    return pattern.fullmatch(value) is not None


def is_dns1123_label(value: str) -> list[str]:
    errs = []
    if len(value) > DNS1123_LABEL_MAX:
        errs.append(max_len_error(DNS1123_LABEL_MAX))
    if not _fullmatch(_LABEL_RE, value):
        if _fullmatch(_SUBDOMAIN_RE, value):
            errs.append("must not contain dots")
        else:
            errs.append(regex_error(_LABEL_MSG, _LABEL_FMT, "my-name", "123-abc"))
    return errs


def is_dns1123_subdomain(value: str) -> list[str]:
    errs = []
    if len(value) > DNS1123_SUBDOMAIN_MAX:
        errs.append(max_len_error(DNS1123_SUBDOMAIN_MAX))
    if not _fullmatch(_SUBDOMAIN_RE, value):
        errs.append(regex_error(_SUBDOMAIN_MSG, _SUBDOMAIN_FMT, "example.com"))
    return errs


def is_qualified_name(value: str) -> list[str]:
    """A label key: an optional DNS subdomain prefix and '/', then a name."""
    errs: list[str] = []
    parts = value.split("/")
    if len(parts) == 1:
        name = parts[0]
    elif len(parts) == 2:
        prefix, name = parts
        if not prefix:
            errs.append("prefix part must be non-empty")
        else:
            errs.extend("prefix part " + m for m in is_dns1123_subdomain(prefix))
    else:
        return [
            "a qualified name "
            + regex_error(_QNAME_MSG, _QNAME_FMT, "MyName", "my.name", "123-abc")
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    if not name:
        errs.append("name part must be non-empty")
    elif len(name) > _QNAME_MAX:
        errs.append("name part " + max_len_error(_QNAME_MAX))
    if not _fullmatch(_QNAME_RE, name):
        errs.append(
            "name part " + regex_error(_QNAME_MSG, _QNAME_FMT, "MyName", "my.name", "123-abc")
        )
    return errs


_REQUESTS_PREFIX = "requests."
_NATIVE_DOMAIN = "kubernetes.io/"


def is_native_resource(name: str) -> bool:
    return "/" not in name or _NATIVE_DOMAIN in name


def is_extended_resource_name(name: str) -> bool:
    """v1helper.IsExtendedResourceName: domain-qualified, outside kubernetes.io,
    and still a qualified name once quota's 'requests.' prefix is put on it."""
    if is_native_resource(name) or name.startswith(_REQUESTS_PREFIX):
        return False
    return not is_qualified_name(_REQUESTS_PREFIX + name)
