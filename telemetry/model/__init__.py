"""The data model every stage shares (torch-free): points, Snapshot, errors, names."""
