"""One exec credential provider plugin and its cache (plugin/plugin.go upstream).

The kubelet writes a CredentialProviderRequest (the image; in service-account
mode also a token for the pod's service account with the plugin's audience
and the service account's chosen annotations) to the plugin's stdin, and
reads a CredentialProviderResponse of the same apiVersion from its stdout:
credentials by registry pattern, a cacheKeyType (Image, Registry, Global) and
an optional cacheDuration (0: not cached; absent: defaultCacheDuration).
Cached credentials are found by the image, then its registry, then globally,
each together with the service-account key in service-account mode. One
plugin run at a time per image (and token), however many pulls wait on it.
Every failure is logged and gives no credentials: the pull goes on without.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import aiohttp
from prometheus_client import Counter, Histogram

from kubelet.client.rest import APIClient, APIError
from kubelet.credentialprovider.config import DockerConfig, DockerConfigEntry
from kubelet.credentialprovider.keyring import urls_match
from kubelet.credentialprovider.plugin.config import (
    API_V1,
    CACHE_TYPE_TOKEN,
    CredentialProvider,
)
from kubelet.token.manager import BoundObjectRef, TokenManager, TokenRequestSpec
from kubelet.util.duration import parse_duration
from kubelet.util.logs import level_for

log = logging.getLogger(__name__)
V5 = level_for(5)

# What reading a service account or asking for its token can fail with.
_API_ERRORS = (APIError, aiohttp.ClientError, OSError, RuntimeError, ValueError)

# What concurrent asks share one plugin run by: the image, or with a service
# account token, (image, token hash, annotations).
_FlightKey = str | tuple[str, str, tuple[tuple[str, str], ...]]
GLOBAL_CACHE_KEY = "<global>"
CACHE_PURGE_INTERVAL = 15 * 60.0
EXEC_TIMEOUT = 60.0
MAX_OUTPUT = 4 << 20  # a response larger than this is refused, not buffered
MAX_STDERR = 64 << 10  # what the error message quotes of stderr
CACHE_KEY_TYPES = ("Image", "Registry", "Global")

PLUGIN_ERRORS = Counter(
    "kubelet_credential_provider_plugin_errors",
    "Number of errors from credential provider plugin",
    ["plugin_name"],
    registry=None,
)
PLUGIN_DURATION = Histogram(
    "kubelet_credential_provider_plugin_duration",
    "Duration of execution in seconds for credential provider plugin",
    ["plugin_name"],
    registry=None,
)


class PluginError(Exception):
    """A plugin run that gave no usable answer; the message says why."""


@dataclass(frozen=True)
class PodIdentity:
    """Who the image is pulled for (service-account mode)."""

    namespace: str
    name: str
    uid: str
    service_account: str


@dataclass(frozen=True)
class ServiceAccountRef:
    uid: str
    namespace: str
    name: str


class ServiceAccounts(Protocol):
    """The API calls service-account mode needs."""

    async def get(self, namespace: str, name: str) -> dict[str, Any]:
        """The ServiceAccount object; raises when it cannot be read."""
        ...

    async def token(self, pod: PodIdentity, audience: str) -> str:
        """A token for the pod's service account, bound to the pod."""
        ...


@dataclass(frozen=True)
class Response:
    cache_key_type: str
    cache_duration: float | None
    auth: dict[str, tuple[str, str]]


@dataclass
class _Entry:
    config: DockerConfig
    expires: float


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise ValueError(f'duplicate field "{k}"')
        out[k] = v
    return out


def decode_response(data: bytes, api_version: str) -> Response:
    """Strict decoding of a CredentialProviderResponse of api_version."""
    try:
        doc = json.loads(data, object_pairs_hook=_no_duplicates)
    except ValueError as err:
        raise PluginError(f"error reading GVK from response: {err}") from None
    if not isinstance(doc, dict):
        raise PluginError("error reading GVK from response: not a JSON object")
    got = str(doc.get("apiVersion") or "")
    if got != api_version:
        raise PluginError(
            "apiVersion from credential plugin response did not match expected apiVersion:"
            f"{api_version}, actual apiVersion:{got}"
        )
    try:
        return _response(doc)
    except (ValueError, TypeError, AttributeError):
        raise PluginError(
            "error decoding credential provider plugin response from stdout"
        ) from None


def _response(doc: dict[str, Any]) -> Response:
    if doc.get("kind") != "CredentialProviderResponse":
        raise ValueError("wrong kind")
    if set(doc) - {"apiVersion", "kind", "cacheKeyType", "cacheDuration", "auth"}:
        raise ValueError("unknown field")
    duration = doc.get("cacheDuration")
    auth: dict[str, tuple[str, str]] = {}
    for pattern, entry in (doc.get("auth") or {}).items():
        if set(entry) - {"username", "password"}:
            raise ValueError("unknown field")
        user, password = entry.get("username") or "", entry.get("password") or ""
        if not isinstance(user, str) or not isinstance(password, str):
            raise TypeError("username and password are strings")
        auth[str(pattern)] = (user, password)
    return Response(
        str(doc.get("cacheKeyType") or ""),
        parse_duration(duration) if duration is not None else None,
        auth,
    )


def encode_request(api_version: str, image: str, token: str, annotations: dict[str, str]) -> bytes:
    req: dict[str, Any] = {
        "kind": "CredentialProviderRequest",
        "apiVersion": api_version,
        "image": image,
    }
    # Only v1 has the service-account fields.
    if api_version == API_V1 and token:
        req["serviceAccountToken"] = token
    if api_version == API_V1 and annotations:
        req["serviceAccountAnnotations"] = annotations
    return json.dumps(req).encode()


async def _read(stream: asyncio.StreamReader, keep: int, refuse_over: bool) -> bytes:
    """Read to EOF keeping at most `keep` bytes: past that, refuse the output
    (stdout) or drop the rest (stderr). A reader that stopped early would let
    the pipe fill and the plugin block."""
    chunks, size = [], 0
    while chunk := await stream.read(65536):
        if size < keep:
            chunks.append(chunk[: keep - size])
        size += len(chunk)
        if refuse_over and size > keep:
            raise PluginError(f"plugin output larger than {keep} bytes")
    return b"".join(chunks)


@dataclass
class ExecPlugin:
    """Runs the plugin binary once per request (execPlugin upstream)."""

    name: str
    api_version: str
    bin_dir: str
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    timeout: float = EXEC_TIMEOUT

    async def run(self, image: str, token: str, annotations: dict[str, str]) -> Response:
        log.log(V5, "Getting image %s credentials from external exec plugin %s", image, self.name)
        start = time.monotonic()
        try:
            out = await self._run(
                encode_request(self.api_version, image, token, annotations), image
            )
        except PluginError:
            PLUGIN_ERRORS.labels(self.name).inc()
            raise
        finally:
            PLUGIN_DURATION.labels(self.name).observe(time.monotonic() - start)
        return decode_response(out, self.api_version)

    async def _run(self, request: bytes, image: str) -> bytes:
        # A session of its own: a plugin that leaves children behind (a shell
        # script) is killed with them, and nothing keeps our pipes open.
        proc = await asyncio.create_subprocess_exec(
            os.path.join(self.bin_dir, self.name), *self.args,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env={**os.environ, **dict(self.env)},
            start_new_session=True,
        )  # fmt: skip
        assert proc.stdin and proc.stdout and proc.stderr
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            proc.stdin.write(request)
            await proc.stdin.drain()
        proc.stdin.close()
        out_task = asyncio.ensure_future(_read(proc.stdout, MAX_OUTPUT, True))
        err_task = asyncio.ensure_future(_read(proc.stderr, MAX_STDERR, False))
        what = f"error execing credential provider plugin {self.name} for image {image}"
        try:
            async with asyncio.timeout(self.timeout):
                out, err = await asyncio.gather(out_task, err_task)
                await proc.wait()
        except (TimeoutError, PluginError) as e:
            for t in (out_task, err_task):
                t.cancel()
            await asyncio.gather(out_task, err_task, return_exceptions=True)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            # Read what is left to EOF, or the pipes never close and wait() never returns.
            await asyncio.gather(_read(proc.stdout, 0, False), _read(proc.stderr, 0, False))
            await proc.wait()
            why = "context deadline exceeded" if isinstance(e, TimeoutError) else str(e)
            raise PluginError(f"{what}: {why}") from None
        if proc.returncode != 0:
            status = (f"exit status {proc.returncode}" if proc.returncode and proc.returncode > 0
                      else f"signal: {-(proc.returncode or 0)}")  # fmt: skip
            raise PluginError(f"{what}: {status}: {err.decode(errors='replace')}")
        return out


@dataclass
class ServiceAccountMode:
    """tokenAttributes of a provider (serviceAccountProvider upstream)."""

    audience: str
    require_service_account: bool
    required_keys: tuple[str, ...]
    optional_keys: tuple[str, ...]
    cache_type: str


class _AnnotationMissing(Exception):
    pass


def parse_registry(image: str) -> str:
    return image.split("/", 1)[0]


@dataclass
class PluginProvider:
    """Credentials for the images one plugin matches, cached (pluginProvider)."""

    provider: CredentialProvider
    plugin: ExecPlugin
    sa_mode: ServiceAccountMode | None
    accounts: ServiceAccounts | None
    clock: Callable[[], float] = time.monotonic
    _cache: dict[tuple[str, tuple[Any, ...]], _Entry] = field(default_factory=dict)
    _inflight: dict[_FlightKey, asyncio.Future[Response]] = field(default_factory=dict)
    _last_purge: float = 0.0

    def matches(self, image: str) -> bool:
        return any(urls_match(m, image) for m in self.provider.match_images)

    async def provide(
        self, image: str, pod: PodIdentity | None
    ) -> tuple[DockerConfig, ServiceAccountRef | None]:
        if not self.matches(image):
            return {}, None
        token, sa_key = "", ()
        annotations: dict[str, str] = {}
        ref: ServiceAccountRef | None = None
        if self.sa_mode is not None:
            sa = pod.service_account if pod is not None else ""
            if not sa and self.sa_mode.require_service_account:
                log.log(V5, "Service account name is empty for pod %s", pod)
                return {}, None
            if pod is not None and sa:
                try:
                    token, annotations, sa_key, ref = await self._service_account(pod)
                except _AnnotationMissing as err:
                    log.log(
                        V5, "Failed to get service account data %s/%s: %s", pod.namespace, sa, err
                    )
                    return {}, None
                except _API_ERRORS as err:  # no credentials from this plugin, as upstream
                    log.error("Failed to get service account %s/%s: %s", pod.namespace, sa, err)
                    return {}, None
        cached = self._lookup(image, sa_key)
        if cached is not None:
            return cached, ref
        try:
            resp = await self._run_once(image, token, annotations)
        except PluginError as err:
            log.error(
                "Failed getting credential from external registry credential provider: %s", err
            )
            return {}, None
        config = self._answer(image, resp, token, sa_key)
        return (config, ref) if config is not None else ({}, None)

    async def _service_account(
        self, pod: PodIdentity
    ) -> tuple[str, dict[str, str], tuple[Any, ...], ServiceAccountRef]:
        assert self.sa_mode is not None and self.accounts is not None
        m = self.sa_mode
        obj = await self.accounts.get(pod.namespace, pod.service_account)
        md = obj.get("metadata") or {}
        have = md.get("annotations") or {}
        annotations = {}
        for k in m.required_keys:
            if k not in have:
                raise _AnnotationMissing(f"required annotation {k} not found")
            annotations[k] = str(have[k])
        annotations.update({k: str(have[k]) for k in m.optional_keys if k in have})
        uid = str(md.get("uid") or "")
        token = await self.accounts.token(pod, m.audience)
        sa_key: tuple[Any, ...] = (
            pod.namespace,
            pod.service_account,
            uid,
            tuple(sorted(annotations.items())),
        )
        if m.cache_type == CACHE_TYPE_TOKEN:
            sa_key += ("token", _hash(token))
        return (
            token,
            annotations,
            sa_key,
            ServiceAccountRef(uid, pod.namespace, pod.service_account),
        )

    def _lookup(self, image: str, sa_key: tuple[Any, ...]) -> DockerConfig | None:
        now = self.clock()
        if now - self._last_purge > CACHE_PURGE_INTERVAL:
            self._cache = {k: e for k, e in self._cache.items() if e.expires > now}
            self._last_purge = now
        for base in (image, parse_registry(image), GLOBAL_CACHE_KEY):
            entry = self._cache.get((base, sa_key))
            if entry is not None and entry.expires > now:
                return entry.config
        return None

    async def _run_once(self, image: str, token: str, annotations: dict[str, str]) -> Response:
        """singleflight: concurrent asks for one key share one plugin run."""
        key: _FlightKey = image
        if token or annotations:
            key = (image, _hash(token), tuple(sorted(annotations.items())))
        fut = self._inflight.get(key)
        if fut is None:
            fut = asyncio.ensure_future(self.plugin.run(image, token, annotations))
            self._inflight[key] = fut
            fut.add_done_callback(lambda f: self._done(key, f))
        return await asyncio.shield(fut)

    def _done(self, key: _FlightKey, fut: asyncio.Future[Response]) -> None:
        self._inflight.pop(key, None)
        if not fut.cancelled():
            fut.exception()  # retrieved, even when every waiter was cancelled

    def _answer(
        self, image: str, resp: Response, token: str, sa_key: tuple[Any, ...]
    ) -> DockerConfig | None:
        if token and self.sa_mode is not None and self.sa_mode.cache_type != CACHE_TYPE_TOKEN:
            if any(password == token for _u, password in resp.auth.values()):
                log.error("Credential provider plugin returned the service account token as the "
                          "password for image %r, which is not allowed when service account cache "
                          "type is not set to 'Token'", image)  # fmt: skip
                return None
        if resp.cache_key_type not in CACHE_KEY_TYPES:
            log.error("credential provider plugin did not return a valid cacheKeyType: %r",
                      resp.cache_key_type)  # fmt: skip
            return None
        base = {"Image": image, "Registry": parse_registry(image), "Global": GLOBAL_CACHE_KEY}[
            resp.cache_key_type
        ]
        config = {k: DockerConfigEntry(u, p) for k, (u, p) in resp.auth.items()}
        duration = resp.cache_duration
        if duration is None:
            duration = self.provider.default_cache_duration or 0.0
        if duration > 0:
            self._cache[(base, sa_key)] = _Entry(config, self.clock() + duration)
        return config


def _hash(data: str) -> str:
    return "sha256:" + hashlib.sha256(data.encode()).hexdigest() if data else ""


class APIServiceAccounts:
    """ServiceAccounts through the API server and the kubelet's token manager."""

    def __init__(self, client: APIClient | None, tokens: TokenManager | None) -> None:
        self.client, self.tokens = client, tokens

    async def get(self, namespace: str, name: str) -> dict[str, Any]:
        if self.client is None:
            raise RuntimeError("cannot get ServiceAccounts when kubelet is in standalone mode")
        return dict(await self.client.get(f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}"))

    async def token(self, pod: PodIdentity, audience: str) -> str:
        if self.tokens is None:
            raise RuntimeError("cannot request tokens when kubelet is in standalone mode")
        spec = TokenRequestSpec(
            audiences=(audience,), bound_object_ref=BoundObjectRef(pod.name, pod.uid)
        )
        tok = await self.tokens.get_service_account_token(pod.namespace, pod.service_account, spec)
        return tok.token
