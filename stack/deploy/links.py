"""The link table: every consumer -> service path of the stack that a fault proxy can stand in.

Both deployments read it: the embedded stack puts a requested link behind a proxy of its
fault proxy (stack/embedded/links.py), the compose target points its containers at the proxy
(chaos/deployment/compose_links.py).
"""

from __future__ import annotations

from collections.abc import Iterable

from stack.deploy import StackError

__all__ = ["FIXED_LINKS", "LINKS_OF_ROLE", "NODE_LINKS", "UPSTREAM_OF", "WEB_WILDCARD", "known_links", "validate_links"]

FIXED_LINKS: dict[str, str] = {
    "valkey_web": "web nodes -> Valkey (PROCTOR_VALKEY_URL)",
    "valkey_workers": "RQ workers -> Valkey (PROCTOR_VALKEY_URL)",
    "valkey_relay": "relay -> Valkey (PROCTOR_VALKEY_URL)",
    "ai_provider": "workers -> AI provider (PROCTOR_AI_URL)",
    "sms_gateway": "workers -> SMS gateway (PROCTOR_SMS_URL)",
}
NODE_LINKS: dict[str, str] = {"valkey_node_1": "valkey", "valkey_node_2": "valkey_2"}
"""The Sentinel topology's links (embedded only): everyone -> one Valkey node. A node announces
its link's address, and the Sentinels monitor it there, so clients, the replica and the Sentinels
all reach the node through the proxy (stack/embedded/sentinel.py)."""
WEB_WILDCARD = "web_*"
"""HAProxy -> every web node, including the ones added by scale()."""
UPSTREAM_OF = {"valkey_web": "valkey", "valkey_workers": "valkey", "valkey_relay": "valkey",
               "ai_provider": "ai_provider", "sms_gateway": "sms_gateway"}
LINKS_OF_ROLE: dict[str, dict[str, str]] = {
    "web": {"PROCTOR_VALKEY_URL": "valkey_web"},
    "relay": {"PROCTOR_VALKEY_URL": "valkey_relay"},
    "worker": {"PROCTOR_VALKEY_URL": "valkey_workers", "PROCTOR_AI_URL": "ai_provider", "PROCTOR_SMS_URL": "sms_gateway"},
}
"""Which consumer role reaches which service through which link (the variable it reads).
The compose target points its containers at the proxy from this same table
(chaos/deployment/compose_links.py)."""
def known_links(web: int) -> list[str]:
    return [*FIXED_LINKS, *NODE_LINKS, *(f"web_{i}" for i in range(1, web + 1)), WEB_WILDCARD]


def validate_links(links: Iterable[str], web: int) -> None:
    """StackError naming the known links for an unknown one (or a web_N beyond ``web``)."""
    if isinstance(links, str):
        raise StackError(f"StackSpec.links must be a list of names, not the string {links!r}")
    unknown = [name for name in links if name not in known_links(web)]
    if unknown:
        raise StackError(f"unknown links {unknown}; known: {', '.join(known_links(web))} "
                         f"(web_N up to StackSpec.web={web}; '{WEB_WILDCARD}' also covers nodes added by scale())")
