"""The verbatim released files under sources/ are data for the oracle, not tests."""

collect_ignore_glob = ["sources/*"]
