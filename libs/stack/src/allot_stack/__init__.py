"""The Allot stack as a whole: its processors, how commands find the log and the bus, chain anchors, and the dev
stack (its supervisor, starting and stopping it from outside, its processes)."""
