"""What one SpeculativeDeployment should have, pure: validation, the decision over its pools
(``decide``, each pool through ``pool.pipeline``), its status, and the requests that make
the cluster match (``plan``)."""
