"""One pool's decision, one stage per module, in the order ``pipeline.decide_pool`` runs them.

``context`` (what every stage reads), ``jobs`` (profiling Jobs), ``table``,
``floor``, ``live``, ``scaling``, ``children``, ``outcome``; below them
the helpers the stages share: ``pools`` (which pools a deployment has),
``fingerprint`` (a pool's profile name) and ``autoscale`` (the replica
recommendation and its stabiliser). Pure: no I/O.
"""
