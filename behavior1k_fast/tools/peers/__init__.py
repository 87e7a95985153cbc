"""The peers the engine is measured against: the same envs and policy, stepped the way a competent user of
another library writes it. One module per family, each with the same skeleton (the sub-env a worker holds,
the collector built from those, and the batches a trainer iterates), so one peer can be read against another:

- :mod:`.gymnasium`: gymnasium's ``AsyncVectorEnv`` (chunk steps, the double buffer, the user-level
  lookahead); ``behavior1k-fast bench`` runs its rows, the time-to-train judge its double buffer.
- :mod:`.torchrl`: TorchRL's ``MultiSyncCollector``, ``MultiAsyncCollector`` and ``AsyncBatchedCollector``
  (``pip install 'behavior1k_fast[peers]'``), for the time-to-train judge.

Importing this package imports neither.
"""
