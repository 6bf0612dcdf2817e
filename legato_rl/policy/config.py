"""The policy's configuration: :class:`PolicyConfig` (endpoint), :class:`Sampling`, :class:`Limits`, and TLS.

As httpx splits ``Client(timeout=Timeout(...), limits=Limits(...))``, the endpoint (URL, model, key, TLS)
lives on :class:`PolicyConfig` and the two groups of settings in values of their own, each the one place
that owns its fields and their defaults::

    PolicyConfig(
        "http://127.0.0.1:8000/v1",
        "Qwen/Qwen3-VL-8B-Instruct",
        sampling=Sampling(temperature=0.7, max_tokens=1024),
        limits=Limits(max_inflight=16, step_timeout=120.0),
    )

Everything here is checked when the object is built, before any request: a bad value is refused with
:class:`~legato_gym.errors.ConfigError` naming the field, the value and the fix.
"""

from __future__ import annotations

import numbers
import os
import re
import ssl
import urllib.parse
from collections.abc import Mapping
from dataclasses import KW_ONLY, dataclass, field
from typing import Any

from legato_gym.errors import ConfigError

__all__ = ["KEY_ENV_VAR", "MAX_REPLY_BYTES", "Limits", "PolicyConfig", "Sampling", "ssl_context"]

#: Environment variable holding the policy server's API key.
KEY_ENV_VAR = "LEGATO_POLICY_KEY"

#: Default bound on one reply's body, in bytes (``Limits.max_reply_bytes``).
MAX_REPLY_BYTES = 8 * 1024 * 1024


@dataclass(frozen=True)
class Sampling:
    """How to sample each reply: the request's sampling fields.

    Attributes:
        temperature: sampling temperature (``>= 0``; 0 is greedy).
        top_p: nucleus sampling, in ``(0, 1]``.
        max_tokens: cap on generated tokens per call.
        extra_body: further request fields sent as they are (e.g. ``{"chat_template_kwargs": {...}}``); they
            override the fields above.
    """

    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int = 2048
    extra_body: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not _is_number(self.temperature) or not 0 <= self.temperature < float("inf"):
            raise ConfigError(
                f"Sampling.temperature={self.temperature!r} must be a number >= 0 (0 is greedy; default "
                f"{_default(Sampling, 'temperature')})"
            )
        if not _is_number(self.top_p) or not 0 < self.top_p <= 1:
            raise ConfigError(
                f"Sampling.top_p={self.top_p!r} must be in (0, 1] (1 keeps every token; default "
                f"{_default(Sampling, 'top_p')})"
            )
        if not _is_int(self.max_tokens) or self.max_tokens < 1:
            raise ConfigError(
                f"Sampling.max_tokens={self.max_tokens!r} must be an integer >= 1 (generated tokens per call; "
                f"default {_default(Sampling, 'max_tokens')})"
            )
        if not isinstance(self.extra_body, Mapping):
            raise ConfigError(
                f"Sampling.extra_body={self.extra_body!r} must be a mapping of request fields, e.g. "
                '{"chat_template_kwargs": {"enable_thinking": False}}'
            )


@dataclass(frozen=True)
class Limits:
    """How much one client may ask of the servers, and how long it waits: caps, deadlines and retries.

    Attributes:
        max_inflight: cap on concurrent HTTP requests across every caller of one client (``None``: no cap).
        step_timeout: seconds one HTTP attempt may take, from sending the request to the end of the body.
            Time spent queued behind ``max_inflight`` does not count.
        retries: extra attempts after a retryable failure (timeout, connection error, 5xx, 429).
        backoff: first backoff delay in seconds; doubles each retry, with jitter.
        backoff_max: cap on one backoff delay (and on a server's ``Retry-After``).
        replica_cooldown: seconds a failing replica is avoided before it is tried again.
        max_reply_bytes: largest reply body read, in bytes; a larger reply fails its attempt with
            :class:`PolicyResponseError` (raise it if you ask for prompt logprobs).
    """

    max_inflight: int | None = None
    step_timeout: float = 60.0
    retries: int = 1
    backoff: float = 0.5
    backoff_max: float = 8.0
    replica_cooldown: float = 10.0
    max_reply_bytes: int = MAX_REPLY_BYTES

    def __post_init__(self) -> None:
        if self.max_inflight is not None and (not _is_int(self.max_inflight) or self.max_inflight < 1):
            raise ConfigError(
                f"Limits.max_inflight={self.max_inflight!r} must be an integer >= 1 (requests in flight at "
                "once), or None for no cap"
            )
        if not _is_number(self.step_timeout) or not self.step_timeout > 0:
            raise ConfigError(
                f"Limits.step_timeout={self.step_timeout!r} must be a positive number of seconds per HTTP "
                f"attempt (default {_default(Limits, 'step_timeout')})"
            )
        if not _is_int(self.retries) or self.retries < 0:
            raise ConfigError(
                f"Limits.retries={self.retries!r} must be an integer >= 0 (extra attempts after a retryable "
                f"failure; 0 for none)"
            )
        for name in ("backoff", "backoff_max", "replica_cooldown"):
            value = getattr(self, name)
            if not _is_number(value) or not value >= 0:
                raise ConfigError(
                    f"Limits.{name}={value!r} must be a number of seconds >= 0 (default {_default(Limits, name)})"
                )
        if not _is_int(self.max_reply_bytes) or self.max_reply_bytes < 1:
            raise ConfigError(
                f"Limits.max_reply_bytes={self.max_reply_bytes!r} must be an integer >= 1 (default "
                f"{MAX_REPLY_BYTES}, 8 MiB)"
            )


def _is_number(value: object) -> bool:
    return isinstance(value, numbers.Real) and not isinstance(value, bool)


def _is_int(value: object) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool)


def _default(cls: type[Any], name: str) -> object:
    """The default of field ``name`` of dataclass ``cls`` (for messages; it is stated once, on the class)."""
    return cls.__dataclass_fields__[name].default


@dataclass(frozen=True)
class PolicyConfig:
    """Where the policy is served, and how to sample from it and call it.

    Attributes:
        url: the server's OpenAI-compatible base URL (``https://host/v1``), or several replicas of one model.
        model: the served model name (``--served-model-name`` on vLLM).
        version: the policy version stamped on every record (legato never syncs weights).
        api_key: the server's key; ``None`` reads ``$LEGATO_POLICY_KEY`` when the client is built. Never
            shown in a repr.
        ca_bundle: a PEM file (or a directory of hashed certificates) to verify ``https://`` servers
            against, e.g. a private CA; default ``$SSL_CERT_FILE`` / ``$SSL_CERT_DIR``, else certifi's.
        vllm_extras: request vLLM's ``return_token_ids`` and ``return_weight_versions`` (turned off per
            replica when the server refuses them).
        sampling: how each reply is sampled (:class:`Sampling`).
        limits: caps, deadlines and retries of the calls (:class:`Limits`).

    Example:
        >>> from legato_rl.policy import Limits, PolicyConfig, Sampling
        >>> config = PolicyConfig("http://127.0.0.1:8000/v1", "my-model", sampling=Sampling(temperature=0.7),
        ...                       limits=Limits(step_timeout=120.0))
        >>> config.limits.retries, config.sampling.max_tokens
        (1, 2048)
    """

    url: str | tuple[str, ...]
    model: str
    _: KW_ONLY
    version: str | None = None
    api_key: str | None = field(default=None, repr=False, compare=False)
    ca_bundle: str | os.PathLike[str] | None = None
    vllm_extras: bool = True
    sampling: Sampling = field(default_factory=Sampling)
    limits: Limits = field(default_factory=Limits)

    def __post_init__(self) -> None:
        urls = (self.url,) if isinstance(self.url, str) else tuple(self.url)
        if not urls or not all(isinstance(u, str) and u.strip() for u in urls):
            shown = [_shown_url(u) if isinstance(u, str) else u for u in urls]
            raise ConfigError(f"PolicyConfig.url={shown!r}: give the server's base URL, e.g. http://host:8000/v1")
        cleaned = tuple(u.strip().rstrip("/") for u in urls)
        for u in cleaned:
            _check_url(u)
        if len(set(cleaned)) != len(cleaned):
            raise ConfigError(f"policy URLs {list(cleaned)!r} name the same replica twice")
        object.__setattr__(self, "url", cleaned[0] if len(cleaned) == 1 else cleaned)
        if not self.model:
            raise ConfigError("PolicyConfig.model is empty: give the served model name (vLLM --served-model-name)")
        for name, cls in (("sampling", Sampling), ("limits", Limits)):
            value = getattr(self, name)
            if not isinstance(value, cls):
                raise ConfigError(
                    f"PolicyConfig.{name}={value!r} must be a {cls.__name__}, e.g. {name}={cls.__name__}(...) "
                    f"from legato_rl.policy"
                )
        if self.ca_bundle is not None and not os.path.exists(self.ca_bundle):
            raise ConfigError(
                f"ca_bundle={os.fspath(self.ca_bundle)!r} does not exist; give a PEM file or a directory of "
                "certificates (or leave it unset to use $SSL_CERT_FILE or certifi's bundle)"
            )
        if self.api_key is not None:
            object.__setattr__(self, "api_key", _clean_key(self.api_key, "PolicyConfig.api_key"))

    @property
    def urls(self) -> tuple[str, ...]:
        """Every replica's base URL, without a trailing slash."""
        return (self.url,) if isinstance(self.url, str) else self.url

    def resolved_api_key(self) -> str | None:
        """``api_key``, else ``$LEGATO_POLICY_KEY``, else ``None``; a trailing newline stripped.

        Raises:
            ConfigError: the key holds a CR, LF or other control character, or a non-ASCII one.
        """
        if self.api_key:
            return self.api_key
        return _clean_key(os.environ.get(KEY_ENV_VAR), f"${KEY_ENV_VAR}")


_KEY_BAD = re.compile("[^\x20-\x7e]")


def _clean_key(key: str | None, source: str) -> str | None:
    """The key with trailing CR/LF removed; refuses one that cannot travel in one header line."""
    if key is None:
        return None
    key = key.rstrip("\r\n")
    if not key:
        return None
    bad = _KEY_BAD.search(key)
    if bad is not None:
        char = bad.group()
        what = "a CR or LF" if char in "\r\n" else f"the character U+{ord(char):04X}"
        raise ConfigError(
            f"{source} holds {what} at character {bad.start()} (of {len(key)}); an API key must be one line of "
            "printable ASCII. It was refused before any request, since it would inject HTTP headers; set it "
            "to the key alone (a trailing newline is fine)"
        )
    return key


def _shown_url(url: str) -> str:
    """``url`` with any userinfo and query replaced by ``***`` (for messages)."""
    shown = re.sub(r"^([a-zA-Z][a-zA-Z0-9+.-]*://)?[^/?#]*@", lambda m: (m.group(1) or "") + "***@", url)
    return re.sub(r"[?#].*\Z", "?***", shown, flags=re.DOTALL)


def _check_url(url: str) -> None:
    shown = _shown_url(url)
    if not url.startswith(("http://", "https://")):
        raise ConfigError(f"policy URL {shown!r} must start with http:// or https:// (e.g. http://{shown}/v1)")
    bad = re.search(r"[\x00-\x20\x7f]", url)
    if bad is not None:  # only the part before it is shown: what follows may be anything, a key included
        raise ConfigError(
            f"policy URL {_shown_url(url[: bad.start()]) + '...'!r} holds U+{ord(bad.group()):04X} at character "
            f"{bad.start()}; percent-encode it"
        )
    parts = urllib.parse.urlsplit(url)
    if "@" in parts.netloc:
        raise ConfigError(
            f"policy URL {shown!r} carries a user:password; legato never sends it (it would only be copied into "
            f"error messages). Remove it and put the key in ${KEY_ENV_VAR}"
        )
    if parts.query or parts.fragment or url.endswith(("?", "#")):
        raise ConfigError(
            f"policy URL {shown!r} has a query or fragment; give the /v1 base URL alone (legato appends "
            f"/chat/completions to it) and put a key in ${KEY_ENV_VAR}"
        )


def ssl_context(ca_bundle: str | os.PathLike[str] | None = None) -> ssl.SSLContext:
    """A verifying TLS context for the policy servers.

    The CAs trusted, first that applies: ``ca_bundle`` (a PEM file, or a directory of hashed certificates);
    ``$SSL_CERT_FILE`` and/or ``$SSL_CERT_DIR`` (as OpenSSL, requests and httpx honour them); certifi's
    bundle when installed; the system's.

    Raises:
        ConfigError: ``ca_bundle`` or a path the variables name does not exist or is not a certificate.
    """
    if ca_bundle is not None:
        path = os.fspath(ca_bundle)
        cafile, capath, source = (None, path, "ca_bundle") if os.path.isdir(path) else (path, None, "ca_bundle")
    else:
        cafile = os.environ.get("SSL_CERT_FILE") or None
        capath = os.environ.get("SSL_CERT_DIR") or None
        source = "$SSL_CERT_FILE" if cafile else "$SSL_CERT_DIR"
        if cafile is None and capath is None:
            try:
                import certifi
            except ImportError:  # pragma: no cover - certifi comes with most environments
                return ssl.create_default_context()
            return ssl.create_default_context(cafile=certifi.where())
    for name, value in ((source, cafile), ("$SSL_CERT_DIR", capath)):
        if value is not None and not os.path.exists(value):
            raise ConfigError(f"{name}={value!r} does not exist; point it at a PEM bundle, or unset it")
    try:
        return ssl.create_default_context(cafile=cafile, capath=capath)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"{source}: cannot load CA certificates from {cafile or capath!r} ({exc})") from exc
