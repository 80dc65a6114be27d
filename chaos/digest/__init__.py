"""``proctor digest``: the exam digest from each web node's ``/metrics`` (``command``) and what
it reads besides (``sources``: the exam lock, CPU per component)."""
