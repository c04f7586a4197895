"""The web audit view (``allot-ui``, ``allot ui``): read-only pages over the log's projections."""
