"""Verifying the log (``allot replay --verify``, ``allot log verify-segment``): the hash chain and its signed
checkpoints, every decision re-derived under the configuration it was recorded under, stored snapshots, and archived
segments. The command line (arguments, printing) is ``allot_cli``; the checks are here."""
