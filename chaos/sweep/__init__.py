"""``proctor sweep``: every scenario over N seeds (``command``) and its verdict table (``table``)."""
