"""The exactness check (docs/design.md, "The exactness argument"): a partitioned run against one process."""
