"""The web API nodes: FastAPI app factory, routes, auth, metrics and dispatch.

Run one node with ``python -m uvicorn stack.web.app:create_app --factory``.
"""

__all__: list[str] = []
