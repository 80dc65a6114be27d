"""Settings of the reference stack, read once from the environment.

Every duration taken from the incident write-up is *case time*: what the seed
reports (a 10 s AI call, a 0.34 s merit computation, 8 provider calls a minute,
1-15 min backoff, a 12 h retry window). The stack runs it multiplied by
``TIME_SCALE`` so that a 12-hour story fits in a test run. Reports print both.

Mechanism timings that are not part of the story (relay poll interval, liveness
TTL, HTTP timeouts) are real seconds and are *not* scaled.
"""

from __future__ import annotations

import ipaddress
import os
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Callable, Mapping

from stack.paths import runs_dir

__all__ = [
    "ANSWER_REVISION_RULES",
    "CONTROLS",
    "CASE_AI_CALL_SECONDS",
    "CASE_MERIT_COMPUTE_SECONDS",
    "CASE_SMS_CALL_SECONDS",
    "CASE_PROVIDER_CALLS_PER_MINUTE",
    "CASE_BACKOFF_MIN_SECONDS",
    "CASE_BACKOFF_MAX_SECONDS",
    "CASE_RETRY_WINDOW_SECONDS",
    "DEFAULT_TIME_SCALE",
    "KNOWN_DEFAULT_SECRETS",
    "Settings",
    "SettingsError",
    "insecure_secrets",
    "load_settings",
]

CASE_AI_CALL_SECONDS = 10.0
"""One AI narrative call in the seed: about ten seconds."""

CASE_MERIT_COMPUTE_SECONDS = 0.34
"""Merit-card recomputation in the seed: about 0.34 seconds of CPU work."""

CASE_SMS_CALL_SECONDS = 0.5
"""An SMS gateway call (not given by the seed; half a second is typical)."""

CASE_PROVIDER_CALLS_PER_MINUTE = 8
"""The shared AI provider limit of the historical lane."""

CASE_BACKOFF_MIN_SECONDS = 60.0
CASE_BACKOFF_MAX_SECONDS = 900.0
"""1-15 minute exponential backoff with jitter."""

CASE_RETRY_WINDOW_SECONDS = 12 * 3600.0
"""Retry window of up to 12 hours."""

DEFAULT_TIME_SCALE = 0.01
"""Real seconds per case second: 0.01 runs a 10 s AI call in 0.1 s."""


KNOWN_DEFAULT_SECRETS = frozenset({"", "proctor-dev-secret", "proctor-admin"})
"""Secrets anyone can read in this repository (the old defaults) or none at all. A stack
refuses them unless ``PROCTOR_ALLOW_DEFAULT_SECRETS=on``, a flag only tests set."""


class SettingsError(ValueError):
    """An environment variable holds a value the stack cannot use; names the variable."""


def _parse_bool(name: str, raw: str) -> bool:
    lowered = raw.strip().lower()
    if lowered in {"1", "true", "yes", "on"}:
        return True
    if lowered in {"0", "false", "no", "off"}:
        return False
    raise SettingsError(f"{name}={raw!r}: expected one of on/off, true/false, 1/0")


def _parse_float(name: str, raw: str, *, allow_zero: bool) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise SettingsError(f"{name}={raw!r}: expected a number") from None
    if value < 0 or (value == 0 and not allow_zero):
        raise SettingsError(f"{name}={raw!r}: must be {'0 or more' if allow_zero else 'greater than 0'}")
    return value


def _parse_positive_float(name: str, raw: str) -> float:
    return _parse_float(name, raw, allow_zero=False)


def _parse_non_negative_float(name: str, raw: str) -> float:
    return _parse_float(name, raw, allow_zero=True)


def _parse_positive_int(name: str, raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise SettingsError(f"{name}={raw!r}: expected a whole number") from None
    if value < 1:
        raise SettingsError(f"{name}={raw!r}: must be at least 1")
    return value


def _parse_networks(name: str, raw: str) -> tuple[str, ...]:
    """``127.0.0.1/32,10.0.0.0/8`` -> the networks, each checked (a bare address is a /32 or /128)."""
    networks = tuple(part.strip() for part in raw.split(",") if part.strip())
    for network in networks:
        try:
            ipaddress.ip_network(network)
        except ValueError as exc:
            raise SettingsError(f"{name}={raw!r}: {exc}") from None
    if not networks:
        raise SettingsError(f"{name}={raw!r}: name at least one network, e.g. 127.0.0.1/32")
    return networks


def _parse_rate(name: str, raw: str) -> str:
    """A limit in the ``limits`` notation: ``3000/minute``, ``50 per second``."""
    from limits import parse

    try:
        parse(raw)
    except ValueError:
        raise SettingsError(f"{name}={raw!r}: expected a rate such as 3000/minute") from None
    return raw


ANSWER_REVISION_RULES = ("highest", "last-arrival", "compacting")
"""PROCTOR_ANSWER_REVISIONS: the highest revision is current (correct), or a negative control."""
ANSWER_SINKS = ("per-answer", "group-commit", "ack-at-enqueue")
"""PROCTOR_ANSWER_SINK values: ack-at-enqueue is a negative control (stack/web/group_commit.py)."""
LEDGER_WRITERS = ("busy-handler", "queued")
"""How SQLite writers wait for the write lock (stack/ledger/write_queue.py). ``busy-handler`` stays the
default: the kernel queue removed the busy handler's 0.23 + k x 0.1 s sleeps, but on the loaded machine
it measured more node 503s at 100 req/s in all 5 pairs (docs/ramp.md); a quiet-machine A/B decides."""


def _one_of(choices: tuple[str, ...]) -> Callable[[str, str], str]:
    """A parser for a setting that names one of ``choices`` (case and surrounding blanks ignored)."""

    def parse(name: str, raw: str) -> str:
        value = raw.strip().lower()
        if value not in choices:
            raise SettingsError(f"{name}={raw!r}: expected one of {', '.join(choices)}")
        return value

    return parse


def _parse_exam_window(name: str, raw: str) -> str:
    """``open-ended`` (stated, never implied by an empty value) or the window's length in seconds."""
    value = raw.strip().lower()
    if value == "open-ended":
        return value
    try:
        seconds = float(value)
    except ValueError:
        raise SettingsError(f"{name}={raw!r}: expected open-ended or the window's length in seconds") from None
    if not seconds > 0:
        raise SettingsError(f"{name}={raw!r}: a window lasts more than 0 seconds")
    return value


def _parse_exams(name: str, raw: str) -> dict[str, int]:
    """``NOVA-101:20,NOVA-102:10`` -> {code: question count}."""
    exams: dict[str, int] = {}
    for item in filter(None, (part.strip() for part in raw.split(","))):
        code, sep, count = item.partition(":")
        if not sep or not code:
            raise SettingsError(f"{name}={raw!r}: each exam is CODE:QUESTIONS, e.g. NOVA-101:20")
        exams[code] = _parse_positive_int(name, count)
    if not exams:
        raise SettingsError(f"{name}={raw!r}: name at least one exam, e.g. NOVA-101:20")
    return exams


@dataclass(frozen=True)
class Settings:
    """One typed view of the stack's environment. Field docs name the variable."""

    time_scale: float = DEFAULT_TIME_SCALE  # TIME_SCALE
    run_dir: Path = field(default_factory=lambda: runs_dir() / "adhoc")  # PROCTOR_RUN_DIR (stack.paths rule)
    component: str = ""  # PROCTOR_COMPONENT: set by the embedded runner; names connections and counter files
    ready_file: str = ""  # PROCTOR_READY_FILE: set by the embedded runner for a worker (its readiness file)
    egress_host: str = ""  # PROCTOR_EGRESS_HOST: an SMS worker's own host address (stack/lanes/egress.py); empty = the OS picks
    log_store_token: str = ""  # PROCTOR_LOG_STORE_TOKEN: the log store's read API token (stack/logship/store.py)
    egress_attachment: str = ""  # PROCTOR_EGRESS_ATTACHMENT: the file naming the SMS lane's holder and the reserved address's
    control_url: str = ""  # PROCTOR_CONTROL_URL: the deployment's scale executor (`POST /admin/scale`)
    database_url: str = ""  # DATABASE_URL; empty = SQLite ledger.db in run_dir
    valkey_url: str = "rediss://127.0.0.1:6380/0"  # PROCTOR_VALKEY_URL
    valkey_ca: str = ""  # PROCTOR_VALKEY_CA: CA bundle for rediss://
    valkey_user: str = ""  # PROCTOR_VALKEY_USER: this component's Valkey ACL user (stack/valkey_acl.py); empty = no AUTH
    valkey_password: str = ""  # PROCTOR_VALKEY_PASSWORD: its password, drawn per run
    valkey_limiter_password: str = ""  # PROCTOR_VALKEY_LIMITER_PASSWORD: web nodes only, the request limiter's user
    valkey_sentinels: str = ""  # PROCTOR_VALKEY_SENTINELS: "host:port,..."; set = find the primary through Sentinel
    valkey_service: str = "proctor"  # PROCTOR_VALKEY_SERVICE: the Sentinel master name
    valkey_sentinel_password: str = ""  # PROCTOR_VALKEY_SENTINEL_PASSWORD: the sentinels' "discovery" user
    ai_url: str = "http://127.0.0.1:8101"  # PROCTOR_AI_URL
    sms_url: str = "http://127.0.0.1:8102"  # PROCTOR_SMS_URL
    token_secret: str = "proctor-dev-secret"  # PROCTOR_TOKEN_SECRET; `proctor up` draws a random one per run
    admin_token: str = "proctor-admin"  # PROCTOR_ADMIN_TOKEN; `proctor up` draws a random one per run
    roster_key: str = ""  # PROCTOR_ROSTER_KEY: HMAC key of the access-code hashes (random per run)
    ai_client_token: str = ""  # PROCTOR_AI_CLIENT_TOKEN: the lanes' bearer token at the AI provider (random per run)
    sms_client_token: str = ""  # PROCTOR_SMS_CLIENT_TOKEN: the lanes' bearer token at the SMS gateway (random per run)
    allow_default_secrets: bool = False  # PROCTOR_ALLOW_DEFAULT_SECRETS: test-only, accept KNOWN_DEFAULT_SECRETS
    proxy_secret: str = ""  # PROCTOR_PROXY_SECRET: HAProxy proves itself with it; only then X-Forwarded-For counts
    admin_port: int = 0  # PROCTOR_ADMIN_PORT: the node's loopback admin listener (0 = none)
    rate_limits: bool = True  # PROCTOR_RATE_LIMITS: off = no request limiter (negative control)
    roster_size: int = 1000  # PROCTOR_ROSTER_SIZE: students enrolled per exam by `proctor up`
    login_network_limit: str = "3000/minute"  # PROCTOR_LOGIN_NETWORK_LIMIT: logins per client address
    node_name: str = "web_1"  # PROCTOR_NODE_NAME
    sms_allowlist: tuple[str, ...] = ("127.0.0.1/32",)  # PROCTOR_SMS_ALLOWLIST: networks the fake SMS gateway serves
    exams: Mapping[str, int] = field(default_factory=lambda: {"NOVA-101": 20})  # PROCTOR_EXAMS
    token_ttl_seconds: float = 3600.0  # PROCTOR_TOKEN_TTL (real seconds)
    relay_interval: float = 0.5  # PROCTOR_RELAY_INTERVAL (real seconds)
    liveness_ttl: float = 3.0  # PROCTOR_LIVENESS_TTL (real seconds)
    max_job_attempts: int = 5  # PROCTOR_MAX_JOB_ATTEMPTS
    reconciler_enabled: bool = True  # PROCTOR_RECONCILER: off = negative control
    relay_mark_early: bool = False  # PROCTOR_RELAY_MARK_EARLY: on = negative control (row marked before Valkey took the job)
    sms_idempotency: bool = True  # PROCTOR_SMS_IDEMPOTENCY: off = negative control
    valkey_fresh_connections: bool = False  # PROCTOR_VALKEY_FRESH_CONNECTIONS: the seed's anti-pattern
    # PROCTOR_VALKEY_CONNECT_TIMEOUT (real seconds, a mechanism timing): how long a client waits for a new
    # Valkey connection, TCP connect and TLS handshake together (stack/valkey_client.py); past it, a timeout
    valkey_connect_timeout: float = 2.0
    max_body_bytes: int = 16384  # PROCTOR_MAX_BODY_BYTES
    max_header_bytes: int = 32768  # PROCTOR_MAX_HEADER_BYTES: request line + headers a node reads; more = 431
    max_headers: int = 128  # PROCTOR_MAX_HEADERS: header fields per request; more = 431
    max_attempts: int = 1  # PROCTOR_MAX_ATTEMPTS: attempts per student and exam, stored at provisioning
    exam_window: str = "open-ended"  # PROCTOR_EXAM_WINDOW: "open-ended", or seconds from provisioning to the close
    exam_grace_seconds: float = 300.0  # PROCTOR_EXAM_GRACE: real seconds after the close an open attempt may finish
    max_in_flight: int = 64  # PROCTOR_MAX_IN_FLIGHT: requests a node serves at once; more get 503 + Retry-After
    answer_write_behind: float = 0.0  # PROCTOR_ANSWER_WRITE_BEHIND: >0 = ack first, commit later (negative control)
    shared_lane: bool = False  # PROCTOR_SHARED_LANE: on = AI jobs join the merit queue (negative control, the seed's lane)
    answer_revisions: str = "highest"  # PROCTOR_ANSWER_REVISIONS: last-arrival/compacting = negative controls
    answer_sink: str = "per-answer"  # PROCTOR_ANSWER_SINK: per-answer/group-commit; ack-at-enqueue = negative control
    ledger_writers: str = "busy-handler"  # PROCTOR_LEDGER_WRITERS: busy-handler/queued (SQLite's write-lock wait)
    ai_calls_per_minute: int = CASE_PROVIDER_CALLS_PER_MINUTE  # PROCTOR_AI_CALLS_PER_MINUTE: the shared AI limiter (#11); high = lifted
    # The AI lane's safeguards (docs/ai-lane.md); each off is a negative control, chosen at start-up:
    ai_shared_limiter: bool = True  # PROCTOR_AI_SHARED_LIMITER: off = a limiter per worker
    ai_retry_after: bool = True  # PROCTOR_AI_RETRY_AFTER: off = a 429's Retry-After is ignored
    ai_ask_before_replay: bool = True  # PROCTOR_AI_ASK_BEFORE_REPLAY: off = replay without asking the provider

    def scaled(self, case_seconds: float) -> float:
        """Real seconds for a case-time duration."""
        return case_seconds * self.time_scale

    @property
    def ledger_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.run_dir / 'ledger.db').resolve()}"

    def with_overrides(self, **changes: object) -> "Settings":
        return replace(self, **changes)  # type: ignore[arg-type]

    def to_env(self) -> dict[str, str]:
        """The environment that reproduces these settings in a child process."""
        env = {}
        for f in fields(self):
            name = ENV_NAMES[f.name]
            value = getattr(self, f.name)
            if isinstance(value, bool):
                env[name] = "on" if value else "off"
            elif f.name == "exams":
                env[name] = ",".join(f"{code}:{count}" for code, count in value.items())
            elif isinstance(value, tuple):
                env[name] = ",".join(value)
            else:
                env[name] = str(value)
        return env


CONTROLS = frozenset({
    "rate_limits", "reconciler_enabled", "relay_mark_early", "sms_idempotency", "valkey_fresh_connections",
    "answer_write_behind", "shared_lane", "answer_revisions", "answer_sink", "ai_shared_limiter", "ai_retry_after",
    "ai_ask_before_replay",
    "allow_default_secrets",  # test-only
})
"""The negative-control switches and the test-only flag among the fields above. Production code
reads each once, at start-up, in the one function that turns it into a policy object
(tests/unit/test_boundaries.py names them and fails on a read anywhere else)."""

ENV_NAMES: dict[str, str] = {
    "time_scale": "TIME_SCALE",
    "run_dir": "PROCTOR_RUN_DIR",
    "component": "PROCTOR_COMPONENT",
    "ready_file": "PROCTOR_READY_FILE",
    "egress_host": "PROCTOR_EGRESS_HOST",
    "egress_attachment": "PROCTOR_EGRESS_ATTACHMENT",
    "log_store_token": "PROCTOR_LOG_STORE_TOKEN",
    "control_url": "PROCTOR_CONTROL_URL",
    "database_url": "DATABASE_URL",
    "valkey_url": "PROCTOR_VALKEY_URL",
    "valkey_ca": "PROCTOR_VALKEY_CA",
    "valkey_user": "PROCTOR_VALKEY_USER",
    "valkey_password": "PROCTOR_VALKEY_PASSWORD",
    "valkey_limiter_password": "PROCTOR_VALKEY_LIMITER_PASSWORD",
    "valkey_sentinels": "PROCTOR_VALKEY_SENTINELS",
    "valkey_service": "PROCTOR_VALKEY_SERVICE",
    "valkey_sentinel_password": "PROCTOR_VALKEY_SENTINEL_PASSWORD",
    "ai_url": "PROCTOR_AI_URL",
    "sms_url": "PROCTOR_SMS_URL",
    "token_secret": "PROCTOR_TOKEN_SECRET",
    "admin_token": "PROCTOR_ADMIN_TOKEN",
    "roster_key": "PROCTOR_ROSTER_KEY",
    "ai_client_token": "PROCTOR_AI_CLIENT_TOKEN",
    "sms_client_token": "PROCTOR_SMS_CLIENT_TOKEN",
    "allow_default_secrets": "PROCTOR_ALLOW_DEFAULT_SECRETS",
    "proxy_secret": "PROCTOR_PROXY_SECRET",
    "admin_port": "PROCTOR_ADMIN_PORT",
    "rate_limits": "PROCTOR_RATE_LIMITS",
    "roster_size": "PROCTOR_ROSTER_SIZE",
    "login_network_limit": "PROCTOR_LOGIN_NETWORK_LIMIT",
    "node_name": "PROCTOR_NODE_NAME",
    "sms_allowlist": "PROCTOR_SMS_ALLOWLIST",
    "exams": "PROCTOR_EXAMS",
    "token_ttl_seconds": "PROCTOR_TOKEN_TTL",
    "relay_interval": "PROCTOR_RELAY_INTERVAL",
    "liveness_ttl": "PROCTOR_LIVENESS_TTL",
    "max_job_attempts": "PROCTOR_MAX_JOB_ATTEMPTS",
    "reconciler_enabled": "PROCTOR_RECONCILER",
    "relay_mark_early": "PROCTOR_RELAY_MARK_EARLY",
    "sms_idempotency": "PROCTOR_SMS_IDEMPOTENCY",
    "valkey_fresh_connections": "PROCTOR_VALKEY_FRESH_CONNECTIONS",
    "valkey_connect_timeout": "PROCTOR_VALKEY_CONNECT_TIMEOUT",
    "max_body_bytes": "PROCTOR_MAX_BODY_BYTES",
    "max_header_bytes": "PROCTOR_MAX_HEADER_BYTES",
    "max_headers": "PROCTOR_MAX_HEADERS",
    "max_attempts": "PROCTOR_MAX_ATTEMPTS",
    "exam_window": "PROCTOR_EXAM_WINDOW",
    "exam_grace_seconds": "PROCTOR_EXAM_GRACE",
    "max_in_flight": "PROCTOR_MAX_IN_FLIGHT",
    "answer_write_behind": "PROCTOR_ANSWER_WRITE_BEHIND",
    "shared_lane": "PROCTOR_SHARED_LANE",
    "answer_revisions": "PROCTOR_ANSWER_REVISIONS",
    "answer_sink": "PROCTOR_ANSWER_SINK",
    "ledger_writers": "PROCTOR_LEDGER_WRITERS",
    "ai_calls_per_minute": "PROCTOR_AI_CALLS_PER_MINUTE",
    "ai_shared_limiter": "PROCTOR_AI_SHARED_LIMITER",
    "ai_retry_after": "PROCTOR_AI_RETRY_AFTER",
    "ai_ask_before_replay": "PROCTOR_AI_ASK_BEFORE_REPLAY",
}

_PARSERS = {
    "time_scale": _parse_positive_float,
    "token_ttl_seconds": _parse_positive_float,
    "relay_interval": _parse_positive_float,
    "liveness_ttl": _parse_positive_float,
    "max_job_attempts": _parse_positive_int,
    "max_body_bytes": _parse_positive_int,
    "max_header_bytes": _parse_positive_int,
    "max_headers": _parse_positive_int,
    "max_attempts": _parse_positive_int,
    "exam_window": _parse_exam_window,
    "exam_grace_seconds": _parse_non_negative_float,
    "max_in_flight": _parse_positive_int,
    "ai_calls_per_minute": _parse_positive_int,
    "admin_port": lambda name, raw: 0 if raw.strip() == "0" else _parse_positive_int(name, raw),
    "allow_default_secrets": _parse_bool,
    "rate_limits": _parse_bool,
    "roster_size": _parse_positive_int,
    "login_network_limit": _parse_rate,
    "sms_allowlist": _parse_networks,
    "answer_write_behind": _parse_non_negative_float,
    "answer_revisions": _one_of(ANSWER_REVISION_RULES),
    "answer_sink": _one_of(ANSWER_SINKS),
    "ledger_writers": _one_of(LEDGER_WRITERS),
    "reconciler_enabled": _parse_bool,
    "relay_mark_early": _parse_bool,
    "sms_idempotency": _parse_bool,
    "valkey_fresh_connections": _parse_bool,
    "valkey_connect_timeout": _parse_positive_float,
    "shared_lane": _parse_bool,
    "ai_shared_limiter": _parse_bool,
    "ai_retry_after": _parse_bool,
    "ai_ask_before_replay": _parse_bool,
    "exams": _parse_exams,
    "run_dir": lambda _name, raw: Path(raw),
}


def load_settings(environ: Mapping[str, str] | None = None) -> Settings:
    """Build Settings from ``environ`` (default ``os.environ``); bad values raise SettingsError."""
    environ = os.environ if environ is None else environ
    values: dict[str, object] = {}
    for attr, name in ENV_NAMES.items():
        raw = environ.get(name)
        if raw is None or raw == "" and attr != "database_url":
            continue
        parse = _PARSERS.get(attr)
        values[attr] = parse(name, raw) if parse else raw
    return Settings(**values)  # type: ignore[arg-type]


def insecure_secrets(settings: Settings) -> list[str]:
    """Names of the secret variables that hold a known default (or nothing); [] when the
    test-only PROCTOR_ALLOW_DEFAULT_SECRETS flag is on."""
    if settings.allow_default_secrets:
        return []
    named = {"PROCTOR_TOKEN_SECRET": settings.token_secret, "PROCTOR_ADMIN_TOKEN": settings.admin_token,
             "PROCTOR_ROSTER_KEY": settings.roster_key}
    return [name for name, value in named.items() if value in KNOWN_DEFAULT_SECRETS]
