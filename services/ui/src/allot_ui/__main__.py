"""``python -m allot_ui``: the same process as ``allot-ui``."""

from allot_ui.main import main

main()
