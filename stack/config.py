"""Settings of the reference stack, read once from the environment.

Every duration taken from the incident write-up is *case time*: what the seed
reports (a 10 s AI call, a 0.34 s merit computation, 8 provider calls a minute,
1-15 min backoff, a 12 h retry window). The stack runs it multiplied by
``TIME_SCALE`` so that a 12-hour story fits in a test run. Reports print both.

Mechanism timings that are not part of the story (relay poll interval, liveness
TTL, HTTP timeouts) are real seconds and are *not* scaled.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Mapping

from stack.controls import CONTROLS, Controls
from stack.paths import runs_dir
from stack.settings_schema import (SettingsError, declared, env_value, one_of, parse_env, parse_exam_window, parse_exams,
                                   parse_networks, parse_non_negative_float, parse_positive_float, parse_positive_int,
                                   parse_rate, parse_table, setting)

__all__ = [
    "ENV_NAMES",
    "LEDGER_WRITERS",
    "WORKER_MODELS",
    "WORKER_MODEL_DEFAULTS",
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


LEDGER_WRITERS = ("busy-handler", "queued")
"""How SQLite writers wait for the write lock (stack/ledger/write_queue.py). ``busy-handler`` stays the
default: the kernel queue removed the busy handler's 0.23 + k x 0.1 s sleeps, but on the loaded machine
it measured more node 503s at 100 req/s in all 5 pairs (docs/ramp.md); a quiet-machine A/B decides."""


WORKER_MODELS = ("fork", "simple")
"""How a lane worker runs a job (stack/lanes/worker.py): ``fork``, RQ's ``Worker`` (a new horse process
per job), or ``simple``, RQ's ``SimpleWorker`` (the job runs in the worker process itself)."""
WORKER_MODEL_DEFAULTS = {"merit": "simple", "ai": "simple", "sms": "simple"}
"""Chosen by measurement (docs/embedded.md, "Worker models"): the fork was most of a merit or SMS job's
CPU, and the AI worker's forks were its biggest CPU cost after the web nodes in the ramp (60 % less
AI-worker CPU without them, docs/ramp.md, 7 December 2026). A runaway job is ended by RQ's SIGALRM
timeout in the worker itself; ``fork`` stays available per lane."""


def _parse_port(name: str, raw: str) -> int:
    """0 (no listener) or a port."""
    return 0 if raw.strip() == "0" else parse_positive_int(name, raw)


@dataclass(frozen=True)
class Settings:
    """One typed view of the stack's environment: each field is declared once with its variable,
    parser and help (``stack.settings_schema.setting``); the negative controls sit apart in ``controls``."""

    time_scale: float = setting("TIME_SCALE", DEFAULT_TIME_SCALE, parse_positive_float,
        help="real seconds per case second")
    run_dir: Path = setting("PROCTOR_RUN_DIR", parse=lambda _name, raw: Path(raw), factory=lambda: runs_dir() / "adhoc",
        help="the run folder (`stack/paths.py`)")
    component: str = setting("PROCTOR_COMPONENT", "",
        help="set by the embedded runner; names connections and counter files")
    ready_file: str = setting("PROCTOR_READY_FILE", "",
        help="set by the embedded runner for a worker (its readiness file)")
    egress_host: str = setting("PROCTOR_EGRESS_HOST", "",
        help="an SMS worker's own host address (docs/egress.md); empty = the OS picks")
    log_store_token: str = setting("PROCTOR_LOG_STORE_TOKEN", "",
        help="the fake log store's read API token (docs/log-shipping.md)")
    egress_attachment: str = setting("PROCTOR_EGRESS_ATTACHMENT", "",
        help="the file naming the SMS lane's holder and the reserved address's (docs/egress.md)")
    control_url: str = setting("PROCTOR_CONTROL_URL", "",
        help="the deployment's scale executor (`POST /admin/scale`)")
    database_url: str = setting("DATABASE_URL", "",
        help="empty = SQLite ledger.db in run_dir")
    valkey_url: str = setting("PROCTOR_VALKEY_URL", "rediss://127.0.0.1:6380/0",
        help="Valkey, TLS (`rediss://`)")
    valkey_ca: str = setting("PROCTOR_VALKEY_CA", "",
        help="CA bundle for rediss://")
    valkey_user: str = setting("PROCTOR_VALKEY_USER", "",
        help="this component's Valkey ACL user (docs/security.md); empty = no AUTH")
    valkey_password: str = setting("PROCTOR_VALKEY_PASSWORD", "",
        help="its password, drawn per run")
    valkey_limiter_password: str = setting("PROCTOR_VALKEY_LIMITER_PASSWORD", "",
        help="web nodes only: the request limiter's Valkey user")
    valkey_sentinels: str = setting("PROCTOR_VALKEY_SENTINELS", "",
        help="`host:port,...` of the Sentinels: set = every client finds the primary through them (docs/valkey.md)")
    valkey_service: str = setting("PROCTOR_VALKEY_SERVICE", "proctor",
        help="the Sentinels' master name")
    valkey_sentinel_password: str = setting("PROCTOR_VALKEY_SENTINEL_PASSWORD", "",
        help="the password of the Sentinels' `discovery` user (drawn per run)")
    ai_url: str = setting("PROCTOR_AI_URL", "http://127.0.0.1:8101",
        help="the AI provider")
    sms_url: str = setting("PROCTOR_SMS_URL", "http://127.0.0.1:8102",
        help="the SMS gateway")
    token_secret: str = setting("PROCTOR_TOKEN_SECRET", "proctor-dev-secret",
        help="`proctor up` draws a random one per run")
    admin_token: str = setting("PROCTOR_ADMIN_TOKEN", "proctor-admin",
        help="`proctor up` draws a random one per run")
    roster_key: str = setting("PROCTOR_ROSTER_KEY", "",
        help="HMAC key of the access-code hashes (random per run)")
    ai_client_token: str = setting("PROCTOR_AI_CLIENT_TOKEN", "",
        help="the lanes' bearer token at the AI provider (random per run)")
    sms_client_token: str = setting("PROCTOR_SMS_CLIENT_TOKEN", "",
        help="the lanes' bearer token at the SMS gateway (random per run)")
    proxy_secret: str = setting("PROCTOR_PROXY_SECRET", "",
        help="HAProxy's proof to the nodes (random per run): only with it is X-Forwarded-For believed (docs/security.md)")
    admin_port: int = setting("PROCTOR_ADMIN_PORT", 0, _parse_port,
        help="the node's loopback admin listener (0 = none)")
    roster_size: int = setting("PROCTOR_ROSTER_SIZE", 1000, parse_positive_int,
        help="students enrolled per exam by `proctor up`")
    login_network_limit: str = setting("PROCTOR_LOGIN_NETWORK_LIMIT", "3000/minute", parse_rate,
        help="logins per client address")
    node_name: str = setting("PROCTOR_NODE_NAME", "web_1",
        help="this web node's name")
    sms_allowlist: tuple[str, ...] = setting("PROCTOR_SMS_ALLOWLIST", ("127.0.0.1/32",), parse_networks,
        help="networks the fake SMS gateway serves")
    exams: Mapping[str, int] = setting("PROCTOR_EXAMS", parse=parse_exams, factory=lambda: {"NOVA-101": 20},
        help="`CODE:QUESTIONS,...`")
    token_ttl_seconds: float = setting("PROCTOR_TOKEN_TTL", 3600.0, parse_positive_float,
        help="a session token's lifetime (real seconds)")
    relay_interval: float = setting("PROCTOR_RELAY_INTERVAL", 0.5, parse_positive_float,
        help="between relay passes (real seconds)")
    liveness_ttl: float = setting("PROCTOR_LIVENESS_TTL", 3.0, parse_positive_float,
        help="a worker's liveness key (real seconds)")
    valkey_connect_timeout: float = setting("PROCTOR_VALKEY_CONNECT_TIMEOUT", 2.0, parse_positive_float,
        help="real seconds a client waits for a new Valkey connection, TCP connect and TLS handshake together; "
             "each attempt past it is a connection timeout (docs/valkey.md)")
    max_job_attempts: int = setting("PROCTOR_MAX_JOB_ATTEMPTS", 5, parse_positive_int,
        help="enqueues of one operation before it fails for review")
    max_body_bytes: int = setting("PROCTOR_MAX_BODY_BYTES", 16384, parse_positive_int,
        help="the largest request body")
    max_header_bytes: int = setting("PROCTOR_MAX_HEADER_BYTES", 32768, parse_positive_int,
        help="request line + headers a node reads; more = 431")
    max_headers: int = setting("PROCTOR_MAX_HEADERS", 128, parse_positive_int,
        help="header fields per request; more = 431")
    max_attempts: int = setting("PROCTOR_MAX_ATTEMPTS", 1, parse_positive_int,
        help="attempts per student and exam, stored at provisioning")
    exam_window: str = setting("PROCTOR_EXAM_WINDOW", "open-ended", parse_exam_window,
        help="stated at provisioning: `open-ended`, or the window's length in seconds")
    exam_grace_seconds: float = setting("PROCTOR_EXAM_GRACE", 300.0, parse_non_negative_float,
        help="real seconds after the close an open attempt may still finish")
    max_in_flight: int = setting("PROCTOR_MAX_IN_FLIGHT", 64, parse_positive_int,
        help="requests a node serves at once; more get 503 + Retry-After")
    ledger_writers: str = setting("PROCTOR_LEDGER_WRITERS", "busy-handler", one_of(LEDGER_WRITERS),
        help="busy-handler/queued: how SQLite writers wait for the write lock (stack/ledger/write_queue.py; docs/ramp.md)")
    worker_models: Mapping[str, str] = setting("PROCTOR_WORKER_MODEL", parse=parse_table(WORKER_MODEL_DEFAULTS, WORKER_MODELS),
        factory=lambda: dict(WORKER_MODEL_DEFAULTS),
        help="LANE:MODEL,... (fork or simple): a lane's workers fork a horse per job or run jobs in-process (docs/embedded.md)")
    ai_calls_per_minute: int = setting("PROCTOR_AI_CALLS_PER_MINUTE", CASE_PROVIDER_CALLS_PER_MINUTE, parse_positive_int,
        help="the shared AI limiter (#11); high = lifted")
    controls: Controls = field(default_factory=Controls)  # the negative controls (stack/controls.py)

    def scaled(self, case_seconds: float) -> float:
        """Real seconds for a case-time duration."""
        return case_seconds * self.time_scale

    @property
    def ledger_url(self) -> str:
        if self.database_url:
            return self.database_url
        return f"sqlite:///{(self.run_dir / 'ledger.db').resolve()}"

    def with_overrides(self, **changes: object) -> "Settings":
        """These settings with some fields changed; a control's name changes ``controls``
        (``Scenario.settings`` names settings and controls alike)."""
        controls = {name: changes.pop(name) for name in list(changes) if name in CONTROLS}
        if controls:
            changes["controls"] = replace(self.controls, **controls)  # type: ignore[arg-type]
        return replace(self, **changes)  # type: ignore[arg-type]

    def to_env(self) -> dict[str, str]:
        """The environment that reproduces these settings (and controls) in a child process."""
        return {item.env: env_value(getattr(part, item.name))
                for part in (self, self.controls) for item in declared(type(part))}


ENV_NAMES: dict[str, str] = {item.name: item.env for cls in (Settings, Controls) for item in declared(cls)}
"""Field -> variable, for settings and controls alike (derived from the declarations)."""


def load_settings(environ: Mapping[str, str] | None = None) -> Settings:
    """Build Settings from ``environ`` (default ``os.environ``); bad values raise SettingsError."""
    environ = os.environ if environ is None else environ
    return Settings(**parse_env(Settings, environ), controls=Controls(**parse_env(Controls, environ)))


def insecure_secrets(settings: Settings) -> list[str]:
    """Names of the secret variables that hold a known default (or nothing); [] when the
    test-only PROCTOR_ALLOW_DEFAULT_SECRETS flag is on."""
    if settings.controls.allow_default_secrets:
        return []
    named = {"PROCTOR_TOKEN_SECRET": settings.token_secret, "PROCTOR_ADMIN_TOKEN": settings.admin_token,
             "PROCTOR_ROSTER_KEY": settings.roster_key}
    return [name for name, value in named.items() if value in KNOWN_DEFAULT_SECRETS]
