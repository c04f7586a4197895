"""The Allot stack as a whole: its processors, how commands find the log and the bus, chain anchors, the read models
that read the log or rebuild a service's projection, shared by the CLI and the web view (``explain``,
``explain_node``, ``listing``, ``logtools``, ``enactment``, ``reservation_views``, ``migration_views``,
``usage_window``), and the dev stack (its supervisor, starting and stopping it from outside, its processes)."""
