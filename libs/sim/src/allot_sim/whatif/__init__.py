"""``allot what-if``: questions asked of the live state, answered in memory by the services' own decision code.

``fold`` rebuilds the deciders' projections at a log position (from a snapshot when one is usable), ``pump`` runs
hypothetical documents through them, ``answer`` reads the answer per pod, ``window`` re-decides a recorded window
under another configuration, ``render`` writes both as text lines; ``run`` ties them to the database. Nothing is
written. The CLI (``allot_cli.commands.whatif``) parses the flags and prints.
"""
