"""A dropped table's unreferenced files: the mode, the listing, the phase, its report, and
the leftover check of a row gone while held."""
