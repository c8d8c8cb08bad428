"""Run records: written during an optimize, read back by `runs`, `show`, `apply` and `report`."""
