"""The chaos harness's workload: task kinds and a counting tool (``bh chaos``)."""
