"""The web node's routers, one module per resource: ``sessions``, ``attempts``, ``answers``,
``outcomes`` and ``health`` on the public listener; ``admin``, ``lanes`` (the AI and SMS lanes'
operator API) and ``scale`` on the admin listener; ``common`` is what they share."""

__all__: list[str] = []
