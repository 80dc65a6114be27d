"""A Toxiproxy 2.12.0-compatible fault proxy on asyncio.

The HTTP API (``api``) manages proxies (``proxy``); each connection has two links
(``link``), each pushing data through an ordered chain of toxics (``toxics``).
``server`` is the process entry and the embedding helpers.
"""

from __future__ import annotations

from .api import VERSION, Api
from .proxy import Proxy, ProxyError
from .server import (FaultProxyServer, ThreadedFaultProxy, main, start_faultproxy_process,
                     stop_faultproxy_process)

__all__ = ["VERSION", "Api", "Proxy", "ProxyError", "FaultProxyServer", "ThreadedFaultProxy",
           "main", "start_faultproxy_process", "stop_faultproxy_process"]
