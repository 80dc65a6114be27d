"""The deployment interface the harness talks to (``Deployment``) and its final read.

The embedded adapter lives in ``chaos.deployment.embedded`` and is not imported here:
it pulls in the reference stack.
"""

from chaos.deployment.base import URL_KEYS, Deployment
from chaos.deployment.final_read import FinalRead, final_read

__all__ = ["URL_KEYS", "Deployment", "FinalRead", "final_read"]
