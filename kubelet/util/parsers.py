"""Image references (pkg/util/parsers upstream, on the grammar of the
distribution reference library): `busybox` is `docker.io/library/busybox`,
`index.docker.io` is `docker.io`, and a name that is not a reference is an
error, never a guess."""

from __future__ import annotations

import re

DEFAULT_DOMAIN = "docker.io"
LEGACY_DEFAULT_DOMAIN = "index.docker.io"
OFFICIAL_REPO_PREFIX = "library/"
NAME_TOTAL_LENGTH_MAX = 255

_ALNUM = r"[a-z0-9]+"
_SEPARATOR = r"(?:[._]|__|[-]+)"
_PATH_COMPONENT = rf"{_ALNUM}(?:{_SEPARATOR}{_ALNUM})*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN_NAME = rf"{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*"
_IPV6 = r"\[(?:[a-fA-F0-9:]+)\]"
_DOMAIN = rf"(?:{_DOMAIN_NAME}|{_IPV6})(?::[0-9]+)?"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
_REFERENCE = re.compile(
    rf"^(?P<name>(?:{_DOMAIN}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*)"
    rf"(?::(?P<tag>{_TAG}))?(?:@(?P<digest>{_DIGEST}))?$"
)
_HEX64 = re.compile(r"^[a-f0-9]{64}$")


class ImageNameError(ValueError):
    pass


def _split_domain(name: str) -> tuple[str, str]:
    first, sep, rest = name.partition("/")
    if not sep or (
        not any(ch in first for ch in ".:") and first != "localhost" and first.lower() == first
    ):
        domain, remainder = DEFAULT_DOMAIN, name
    else:
        domain, remainder = first, rest
    if domain == LEGACY_DEFAULT_DOMAIN:
        domain = DEFAULT_DOMAIN
    if domain == DEFAULT_DOMAIN and "/" not in remainder:
        remainder = OFFICIAL_REPO_PREFIX + remainder
    return domain, remainder


def parse_normalized_named(image: str) -> tuple[str, str, str]:
    """(repository with its domain, tag, digest) of a reference as the user
    wrote it. Raises ImageNameError with the reference library's words."""
    if _HEX64.match(image):
        raise ImageNameError(
            f"invalid repository name ({image}), cannot specify 64-byte hexadecimal strings"
        )
    # The domain ends at the first '/'; tag and digest follow the last path part.
    at = image.find("@")
    base = image if at < 0 else image[:at]
    colon = base.rfind(":")
    name = base if colon <= base.rfind("/") else base[:colon]
    domain, remainder = _split_domain(name)
    if remainder.lower() != remainder:
        raise ImageNameError(
            f"invalid reference format: repository name ({remainder}) must be lowercase"
        )
    full = f"{domain}/{remainder}" + image[len(name) :]
    m = _REFERENCE.match(full)
    if m is None:
        raise ImageNameError("invalid reference format")
    if len(m.group("name")) > NAME_TOTAL_LENGTH_MAX:
        raise ImageNameError(
            f"repository name must not be more than {NAME_TOTAL_LENGTH_MAX} characters"
        )
    return m.group("name"), m.group("tag") or "", m.group("digest") or ""


def parse_image_name(image: str) -> tuple[str, str, str]:
    """ParseImageName: (repository to pull, tag, digest); `latest` when neither
    a tag nor a digest is given."""
    try:
        repo, tag, digest = parse_normalized_named(image)
    except ImageNameError as err:
        raise ImageNameError(f'couldn\'t parse image name "{image}": {err}') from None
    if not tag and not digest:
        tag = "latest"
    return repo, tag, digest
