"""Process-level helpers every service shares: who this process is, and where it may die.

Below ``brain``, ``hands`` and ``scheduler``; imports only ``contracts``.
"""
