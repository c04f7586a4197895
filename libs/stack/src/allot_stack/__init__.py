"""The Allot stack as a whole: its processors, how commands find the log and the bus, and chain anchors."""
