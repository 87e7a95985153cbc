"""Tools layer, on top of everything: the ``behavior1k-fast`` command line (``cli``) and its sub-commands
``doctor``, ``bench`` and ``validate``. Each imports its heavy dependencies only when it runs.
"""
